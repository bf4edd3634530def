"""Shapes: tuples of dims, where ``None`` is a dynamic dim, and NumPy broadcasting over them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import ShapeError

Dim = int | None
Shape = tuple[Dim, ...]


def as_shape(value: Iterable[int | None] | int | None) -> Shape:
    """Normalise a user shape (a tuple, a list, a ``torch.Size``, or one int)."""
    if value is None:
        raise ShapeError("a shape is required (use None for a dynamic dimension, not for the whole shape)")
    if isinstance(value, int):
        value = (value,)
    dims: list[Dim] = []
    for d in value:
        if d is None:
            dims.append(None)
            continue
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ShapeError(f"invalid dimension {d!r} in shape {tuple(value)!r}")
        dims.append(int(d))
    return tuple(dims)


def is_static(shape: Shape) -> bool:
    return all(d is not None for d in shape)


def numel(shape: Shape) -> int | None:
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n


def format_shape(shape: Shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None:
        return b  # the dynamic dim must be 1 or b at run time
    if b is None:
        return a
    raise ShapeError(f"dimensions {a} and {b} do not broadcast")


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting; raises ``ShapeError`` naming both shapes when they do not fit."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        padded = (1,) * (rank - len(s)) + tuple(s)
        for i, d in enumerate(padded):
            try:
                out[i] = broadcast_dims(out[i], d)
            except ShapeError:
                shown = " and ".join(format_shape(x) for x in shapes)
                raise ShapeError(f"shapes {shown} do not broadcast (dimension {i - rank})") from None
    return tuple(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into ``[0, rank)``."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{what} must be an int, got {axis!r}")
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int] | int | None, rank: int, what: str = "axes") -> tuple[int, ...]:
    """Axes sorted and de-duplicated; ``None`` means all axes."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    norm = [normalize_axis(a, rank, what) for a in axes]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"{what} {tuple(axes)} repeat an axis")
    return tuple(sorted(norm))


def merge_dims(a: Dim, b: Dim, what: str = "dimensions") -> Dim:
    """Two dims that must be equal; a dynamic one takes the other's value."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    raise ShapeError(f"{what} {a} and {b} differ")


def merge_shapes(a: Shape, b: Shape, what: str = "shapes") -> Shape:
    """Two shapes that must agree dim by dim (ranks too); dynamic dims take the other's value."""
    if len(a) != len(b):
        raise ShapeError(f"{what}: ranks {len(a)} and {len(b)} differ")
    return tuple(merge_dims(x, y, f"{what} (dimension {i}):") for i, (x, y) in enumerate(zip(a, b, strict=True)))
