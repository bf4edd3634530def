"""A tiny fixed-width table printer for the command line (stdlib only)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                 align: str | None = None, indent: str = "") -> str:
    """Rows under ``headers`` in columns; ``align`` gives one of ``<`` ``>`` per column (text left,
    numbers right by default)."""
    cells = [[str(c) for c in row] for row in rows]
    ncol = len(headers)
    widths = [len(h) for h in headers]
    for row in cells:
        if len(row) != ncol:
            raise ValueError(f"table row has {len(row)} cells, expected {ncol}")
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if align is None:
        align = "".join(">" if rows and all(_numeric(r[i]) for r in rows) else "<" for i in range(ncol))

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(w) if a == ">" else c.ljust(w) for c, w, a in zip(row, widths, align, strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    rule = indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])


def _numeric(v: object) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, str) and _is_number(v))


def _is_number(s: str) -> bool:
    try:
        float(s.rstrip("x%"))
    except ValueError:
        return False
    return True
