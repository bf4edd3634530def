"""Line charts rendered with NumPy into an RGB array and written as PNG with zlib (no matplotlib).

``line_chart`` draws up to two y axes (left and right), ticks with "nice" steps, curves with
anti-aliased thick lines and markers, a title and a legend, in a built-in 5x7 pixel font;
``bar_chart`` draws grouped horizontal bars in the same style; ``write_png`` stores the array as an
8-bit RGB PNG.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GRID: Color = (228, 228, 228)
AXIS: Color = (60, 60, 60)
BLUE: Color = (31, 119, 180)
ORANGE: Color = (230, 110, 14)

# 5x7 glyphs: character, then 7 rows of 5 bits as two hex digits each (bit 4 = leftmost pixel);
# the characters in DESCENDERS sit two rows lower (their last two rows hang below the baseline)
_FONT_DATA = (
    "%18190204081303 (02040808080402 )08040202020408 +0004041f040400 ,000000000c0408 -0000001f000000 "
    ".00000000000c0c /00010204081000 00e11131519110e 1040c040404040e 20e11010204081f 31f02040201110e "
    "402060a121f0202 51f101e0101110e 60608101e11110e 71f010204080808 80e11110e11110e 90e11110f01020c "
    ":000c0c000c0c00 =00001f001f0000 A0e11111f111111 B1e11111e11111e C0e11101010110e D1c12111111121c "
    "E1f10101e10101f F1f10101e101010 G0e11101711110f H1111111f111111 I0e04040404040e J0702020202120c "
    "K11121418141211 L1010101010101f M111b1515111111 N11111915131111 O0e11111111110e P1e11111e101010 "
    "Q0e11111115120d R1e11111e141211 S0f10100e01011e T1f040404040404 U1111111111110e V11111111110a04 "
    "W1111111515150a X11110a040a1111 Y11110a04040404 Z1f01020408101f _0000000000001f a00000e010f110f "
    "b1010161911111e c00000e1010110e d01010d1311110f e00000e111f100e f0609081c080808 g0f1111130d010e "
    "h10101619111111 i04000c0404040e j0200060202120c k10101214181412 l0c04040404040e m00001a15151111 "
    "n00001619111111 o00000e1111110e p1e1111111e1010 q0f1111110f0101 r00001619101010 s00000e100e011e "
    "t08081c08080906 u0000111111130d v00001111110a04 w0000111115150a x0000110a040a11 y111111110f010e "
    "z00001f0204081f"
)
GLYPH_W, GLYPH_H, DESCENT, ADVANCE = 5, 7, 2, 6
DESCENDERS = frozenset("gpqy")


def _parse_font(data: str) -> dict[str, np.ndarray]:
    font = {" ": np.zeros((GLYPH_H + DESCENT, GLYPH_W), bool)}
    for item in data.split():
        rows = [int(item[1 + 2 * i:3 + 2 * i], 16) for i in range(GLYPH_H)]
        glyph = np.array([[(r >> (GLYPH_W - 1 - c)) & 1 for c in range(GLYPH_W)] for r in rows], bool)
        cell = np.zeros((GLYPH_H + DESCENT, GLYPH_W), bool)
        offset = DESCENT if item[0] in DESCENDERS else 0
        cell[offset:offset + GLYPH_H] = glyph
        font[item[0]] = cell
    return font


FONT = _parse_font(_FONT_DATA)


def text_width(text: str, scale: int = 1) -> int:
    return max(ADVANCE * len(text) - 1, 0) * scale


def text_mask(text: str, scale: int = 1) -> np.ndarray:
    """A boolean ``(9 * scale, width)`` mask of ``text`` in the 5x7 font (baseline after row 7);
    characters the font lacks are left blank."""
    mask = np.zeros((GLYPH_H + DESCENT, text_width(text)), bool)
    for i, ch in enumerate(text):
        glyph = FONT.get(ch)
        if glyph is not None:
            mask[:, ADVANCE * i:ADVANCE * i + GLYPH_W] = glyph
    return np.kron(mask, np.ones((scale, scale), bool)).astype(bool) if scale > 1 else mask


class Canvas:
    """An RGB image (``pixels``: uint8 ``(height, width, 3)``) with a few drawing primitives."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"canvas size must be positive, got {width}x{height}")
        self.width, self.height = width, height
        self._rgb = np.empty((height, width, 3), np.float32)
        self._rgb[:] = np.asarray(background, np.float32)

    @property
    def pixels(self) -> np.ndarray:
        return np.clip(np.rint(self._rgb), 0, 255).astype(np.uint8)

    def blend(self, y0: int, x0: int, alpha: np.ndarray, color: Color) -> None:
        """Paint ``color`` with per-pixel coverage ``alpha`` (2-D, in [0, 1]) at top-left ``(x0, y0)``."""
        h, w = alpha.shape
        ya, yb, xa, xb = max(y0, 0), min(y0 + h, self.height), max(x0, 0), min(x0 + w, self.width)
        if ya >= yb or xa >= xb:
            return
        a = alpha[ya - y0:yb - y0, xa - x0:xb - x0, None].astype(np.float32)
        region = self._rgb[ya:yb, xa:xb]
        region += a * (np.asarray(color, np.float32) - region)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill the pixels ``x0 <= x < x1``, ``y0 <= y < y1``."""
        if x1 > x0 and y1 > y0:
            self.blend(y0, x0, np.ones((y1 - y0, x1 - x0), np.float32), color)

    def outline(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        self.rect(x0, y0, x1, y0 + 1, color)
        self.rect(x0, y1 - 1, x1, y1, color)
        self.rect(x0, y0, x0 + 1, y1, color)
        self.rect(x1 - 1, y0, x1, y1, color)

    def line(self, xs: Sequence[float], ys: Sequence[float], color: Color, width: float = 2.0) -> None:
        """An anti-aliased polyline through the points ``(xs[i], ys[i])`` (pixel coordinates)."""
        r = width / 2
        for (xa, ya), (xb, yb) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):  # noqa: B905 (one shorter)
            self._capsule(xa, ya, xb, yb, r, color)
        if len(xs) == 1:
            self._capsule(xs[0], ys[0], xs[0], ys[0], r, color)

    def disc(self, x: float, y: float, radius: float, color: Color) -> None:
        self._capsule(x, y, x, y, radius, color)

    def _capsule(self, xa: float, ya: float, xb: float, yb: float, r: float, color: Color) -> None:
        # coverage = clip(r + 0.5 - distance to the segment); pixel centres at integer + 0.5
        x0, x1 = math.floor(min(xa, xb) - r - 1), math.ceil(max(xa, xb) + r + 1)
        y0, y1 = math.floor(min(ya, yb) - r - 1), math.ceil(max(ya, yb) + r + 1)
        px = np.arange(x0, x1, dtype=np.float32)[None, :] + 0.5
        py = np.arange(y0, y1, dtype=np.float32)[:, None] + 0.5
        dx, dy = xb - xa, yb - ya
        length2 = dx * dx + dy * dy
        t = np.zeros(1, np.float32) if length2 == 0 else np.clip(((px - xa) * dx + (py - ya) * dy) / length2, 0, 1)
        dist = np.hypot(px - (xa + t * dx), py - (ya + t * dy))
        self.blend(y0, x0, np.clip(r + 0.5 - dist, 0.0, 1.0), color)

    def text(self, x: float, y: float, text: str, color: Color = BLACK, scale: int = 1, anchor: str = "lt",
             vertical: bool = False) -> None:
        """Draw ``text``; ``anchor`` is horizontal (l, c, r) then vertical (t: top, m: middle of the
        capitals, b: baseline) about ``(x, y)``; ``vertical`` turns it a quarter counter-clockwise
        (reading upwards), centred on ``(x, y)``."""
        mask = text_mask(text, scale)
        if vertical:
            mask = np.rot90(mask)
            h, w = mask.shape
            self.blend(int(round(y - h / 2)), int(round(x - w / 2)), mask.astype(np.float32), color)
            return
        h, w = mask.shape
        hx = {"l": 0.0, "c": w / 2, "r": float(w)}[anchor[0]]
        vy = {"t": 0.0, "m": GLYPH_H * scale / 2, "b": float(GLYPH_H * scale)}[anchor[1]]
        self.blend(int(round(y - vy)), int(round(x - hx)), mask.astype(np.float32), color)


# ---- charts ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    """One curve: ``label`` in the legend, ``x``/``y`` values, its color, and the y axis it uses."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    color: Color = BLUE
    right_axis: bool = False
    markers: bool = True


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) covering ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        lo, hi = lo - 0.5, lo + 0.5
    raw = (hi - lo) / max(target - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start, stop = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(start, stop + 1)]


def format_tick(v: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if step > 0 and abs(round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6:
        decimals += 1  # 2.5, 0.25, ...
    s = f"{v:.{decimals}f}"
    return "0" if s.strip("-0.") == "" else s


def _range(series: Sequence[Series], right: bool, fixed: tuple[float, float] | None) -> list[float]:
    if fixed is not None:
        return nice_ticks(*fixed)
    values = [float(v) for s in series if s.right_axis == right for v in s.y if math.isfinite(float(v))]
    return nice_ticks(min(values), max(values)) if values else [0.0, 1.0]


def line_chart(series: Sequence[Series], *, width: int = 800, height: int = 500, title: str = "",
               x_label: str = "", left_label: str = "", right_label: str = "",
               left_range: tuple[float, float] | None = None,
               right_range: tuple[float, float] | None = None) -> np.ndarray:
    """Render ``series`` as a line chart; returns uint8 RGB ``(height, width, 3)``.

    Series with ``right_axis=True`` use a second y axis on the right (e.g. accuracy beside loss);
    ``*_range`` fix an axis' span (rounded out to ticks), otherwise the data decide it.
    """
    if not series:
        raise ValueError("line_chart needs at least one series")
    c = Canvas(width, height)
    s = 2 if min(width, height) >= 360 else 1  # text scale
    has_right = any(sr.right_axis for sr in series)
    xs_all = [float(v) for sr in series for v in sr.x]
    x_ticks = nice_ticks(min(xs_all), max(xs_all)) if xs_all else [0.0, 1.0]
    y_left = _range(series, False, left_range)
    y_right = _range(series, True, right_range) if has_right else []
    left_text = [format_tick(v, y_left[1] - y_left[0]) for v in y_left]
    right_text = [format_tick(v, y_right[1] - y_right[0]) for v in y_right]
    label_h = (GLYPH_H + DESCENT) * s
    tick_w = max(map(len, left_text)) * ADVANCE * s
    left = 4 * s + (label_h + 6 * s if left_label else 0) + tick_w + 6 * s
    right_w = (max(map(len, right_text), default=0) * ADVANCE * s + 6 * s
               + (label_h + 6 * s if right_label else 0) + 4 * s)
    right = width - 1 - (right_w if has_right else 12 * s + text_width(format_tick(x_ticks[-1], 1), s) // 2)
    top = (label_h + 10 * s) if title else 8 * s
    bottom = height - 1 - (6 * s + label_h + (label_h + 4 * s if x_label else 0) + 4 * s)
    if right - left < 20 or bottom - top < 20:
        raise ValueError(f"chart of {width}x{height} pixels is too small")

    def sx(v: float) -> float:
        return left + (v - x_ticks[0]) / (x_ticks[-1] - x_ticks[0]) * (right - left)

    def sy(v: float, ticks: list[float]) -> float:
        return bottom - (v - ticks[0]) / (ticks[-1] - ticks[0]) * (bottom - top)

    # grid, ticks and tick labels
    for v in x_ticks:
        x = int(round(sx(v)))
        c.rect(x, top, x + 1, bottom, GRID)
        c.rect(x, bottom, x + 1, bottom + 4 * s, AXIS)
        c.text(x, bottom + 6 * s, format_tick(v, x_ticks[1] - x_ticks[0]), AXIS, s, "ct")
    for v, text in zip(y_left, left_text, strict=True):
        y = int(round(sy(v, y_left)))
        c.rect(left, y, right, y + 1, GRID)
        c.rect(left - 4 * s, y, left, y + 1, AXIS)
        c.text(left - 6 * s, y, text, AXIS, s, "rm")
    for v, text in zip(y_right, right_text, strict=True):
        y = int(round(sy(v, y_right)))
        c.rect(right, y, right + 4 * s, y + 1, AXIS)
        c.text(right + 6 * s, y, text, AXIS, s, "lm")
    c.outline(left, top, right + 1, bottom + 1, AXIS)
    # labels
    if title:
        c.text((left + right) / 2, 6 * s, title, BLACK, s, "ct")
    if x_label:
        c.text((left + right) / 2, height - 1 - 4 * s - label_h, x_label, BLACK, s, "ct")
    if left_label:
        c.text(4 * s + label_h / 2, (top + bottom) / 2, left_label, _axis_color(series, False), s, vertical=True)
    if right_label and has_right:
        c.text(width - 1 - 4 * s - label_h / 2, (top + bottom) / 2, right_label, _axis_color(series, True), s,
               vertical=True)
    # curves
    curves: list[list[tuple[float, float]]] = []
    for sr in series:
        ticks = y_right if sr.right_axis else y_left
        pts = [(sx(float(a)), sy(float(b), ticks)) for a, b in zip(sr.x, sr.y, strict=True) if math.isfinite(float(b))]
        curves.append(pts)
        if not pts:
            continue
        c.line([p[0] for p in pts], [p[1] for p in pts], sr.color, width=1.5 * s)
        if sr.markers and len(pts) <= 60:
            for px, py in pts:
                c.disc(px, py, 2.5 * s, sr.color)
    _legend(c, series, curves, (left, top, right, bottom), s)
    return c.pixels


def _axis_color(series: Sequence[Series], right: bool) -> Color:
    colors = {sr.color for sr in series if sr.right_axis == right}
    return colors.pop() if len(colors) == 1 else BLACK


def _legend(c: Canvas, series: Sequence[Series], curves: list[list[tuple[float, float]]],
            box: tuple[int, int, int, int], s: int) -> None:
    """A boxed legend (a line sample and the label per series) in the corner of the plot area, or
    the middle of its right or left edge, that the curves cross least."""
    row, sample = 12 * s, 18 * s
    w = 6 * s + sample + 6 * s + max(text_width(sr.label, s) for sr in series) + 6 * s
    h = 4 * s + row * len(series) + 2 * s
    left, top, right, bottom = box
    pad = 8 * s
    spots = [(right - pad - w, top + pad), (left + pad, top + pad), (right - pad - w, bottom - pad - h),
             (left + pad, bottom - pad - h), (right - pad - w, (top + bottom - h) // 2),
             (left + pad, (top + bottom - h) // 2)]
    samples = [p for pts in curves for p in _densify(pts, 2.0 * s)]

    def crossings(spot: tuple[int, int]) -> int:
        x0, y0 = spot
        return sum(x0 - 3 * s <= x <= x0 + w + 3 * s and y0 - 3 * s <= y <= y0 + h + 3 * s for x, y in samples)

    x0, y0 = min(spots, key=crossings)  # first of the least-crossed spots
    c.rect(x0, y0, x0 + w, y0 + h, WHITE)
    c.outline(x0, y0, x0 + w, y0 + h, AXIS)
    for i, sr in enumerate(series):
        yc = y0 + 4 * s + row * i + row / 2 - s
        c.line([x0 + 6 * s, x0 + 6 * s + sample], [yc, yc], sr.color, width=1.5 * s)
        c.text(x0 + 12 * s + sample, yc, sr.label, BLACK, s, "lm")


def _densify(pts: list[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """Points every ``step`` pixels along the polyline through ``pts``."""
    out = list(pts[:1])
    for (xa, ya), (xb, yb) in zip(pts, pts[1:]):  # noqa: B905 (one shorter)
        n = max(1, int(math.hypot(xb - xa, yb - ya) / step))
        out.extend((xa + (xb - xa) * k / n, ya + (yb - ya) * k / n) for k in range(1, n + 1))
    return out


@dataclass(frozen=True)
class Bars:
    """One bar per category (a NaN value: no bar, ``n/a`` written instead), in ``color``."""

    label: str
    values: Sequence[float]
    color: Color = BLUE


def bar_chart(categories: Sequence[str], bars: Sequence[Bars], *, width: int = 800, title: str = "",
              value_label: str = "", reference: float | None = None, reference_label: str = "",
              value_format: str = "{:.2f}") -> np.ndarray:
    """Render grouped horizontal bars (a group per category, top to bottom; a bar per ``Bars`` in
    each); returns uint8 RGB ``(height, width, 3)``, the height following from the categories.

    ``reference`` draws a vertical line at that value (e.g. 1 on a chart of speed-ups), named
    ``reference_label`` in the legend; each bar's value is written at its end in ``value_format``.
    """
    if not categories or not bars:
        raise ValueError("bar_chart needs at least one category and one series of bars")
    for b in bars:
        if len(b.values) != len(categories):
            raise ValueError(f"bars {b.label!r} have {len(b.values)} values for {len(categories)} categories")
    s = 2 if width >= 360 else 1
    label_h = (GLYPH_H + DESCENT) * s
    bar_h, gap = 10 * s, 8 * s
    band = bar_h * len(bars) + gap
    values = [float(v) for b in bars for v in b.values if math.isfinite(float(v))]
    hi = max(values + ([reference] if reference is not None else []), default=1.0)
    ticks = nice_ticks(0.0, hi if hi > 0 else 1.0)
    texts = [value_format.format(v) for v in values] + ["n/a"]
    left = 6 * s + max(text_width(cat, s) for cat in categories) + 8 * s
    right = width - 1 - 6 * s - max(text_width(t, s) for t in texts) - 4 * s
    top = (label_h + 8 * s if title else 6 * s) + label_h + 8 * s  # the title, then the legend's row
    bottom = top + band * len(categories) + gap
    height = bottom + 6 * s + label_h + (label_h + 4 * s if value_label else 0) + 6 * s
    if right - left < 40:
        raise ValueError(f"chart of width {width} is too narrow for its labels")
    c = Canvas(width, height)

    def sx(v: float) -> float:
        return left + (v - ticks[0]) / (ticks[-1] - ticks[0]) * (right - left)

    for v in ticks:
        x = int(round(sx(v)))
        c.rect(x, top, x + 1, bottom, GRID)
        c.rect(x, bottom, x + 1, bottom + 4 * s, AXIS)
        c.text(x, bottom + 6 * s, format_tick(v, ticks[1] - ticks[0]), AXIS, s, "ct")
    c.outline(left, top, right + 1, bottom + 1, AXIS)
    if reference is not None:  # under the bars and their values
        xr = int(round(sx(reference)))
        c.rect(xr - (s // 2), top, xr + 1 + (s - 1) // 2, bottom, BLACK)
    x0 = int(round(sx(0.0)))

    def value_text(x: float, y: float, text: str) -> None:  # on white, so the reference line does not cross it
        c.rect(int(x) - s, int(y - GLYPH_H * s / 2) - s, int(x) + text_width(text, s) + s,
               int(y + GLYPH_H * s / 2) + DESCENT * s, WHITE)
        c.text(x, y, text, AXIS, s, "lm")

    for i, cat in enumerate(categories):
        y = top + gap + band * i
        c.text(left - 8 * s, y + bar_h * len(bars) / 2, cat, BLACK, s, "rm")
        for j, b in enumerate(bars):
            yb, v = y + bar_h * j, float(b.values[i])
            if not math.isfinite(v):
                value_text(x0 + 4 * s, yb + bar_h / 2, "n/a")
                continue
            x1 = int(round(sx(v)))
            c.rect(x0, yb + s, x1, yb + bar_h - s, b.color)
            value_text(x1 + 4 * s, yb + bar_h / 2, value_format.format(v))
    if title:
        c.text((left + right) / 2, 6 * s, title, BLACK, s, "ct")
    if value_label:
        c.text((left + right) / 2, height - 1 - 4 * s - label_h, value_label, BLACK, s, "ct")
    # the legend: a row of swatches above the plot area
    items: list[tuple[str, Color, bool]] = [(b.label, b.color, True) for b in bars]
    if reference is not None and reference_label:
        items.append((reference_label, BLACK, False))
    x, yl = left, top - 4 * s - label_h
    for label, color, filled in items:
        if filled:
            c.rect(x, yl + s, x + 10 * s, yl + 8 * s, color)
        else:
            c.rect(x + 5 * s - (s // 2), yl - s, x + 6 * s + (s - 1) // 2, yl + 9 * s, color)
        c.text(x + 14 * s, yl, label, BLACK, s, "lt")
        x += 14 * s + text_width(label, s) + 14 * s
    return c.pixels


# ---- PNG ---------------------------------------------------------------------------------------
def encode_png(rgb: np.ndarray) -> bytes:
    """PNG bytes of a uint8 ``(height, width, 3)`` RGB image (8-bit truecolor, no interlace)."""
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"encode_png expects uint8 (height, width, 3), got {rgb.dtype} {rgb.shape}")
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1)  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8 bits, truecolor, deflate, filter 0, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
            + chunk(b"IEND", b""))


def write_png(path: str | os.PathLike[str], rgb: np.ndarray) -> None:
    """Write ``rgb`` (uint8 ``(height, width, 3)``) to ``path`` as PNG."""
    with open(path, "wb") as f:
        f.write(encode_png(rgb))


def read_png_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from PNG bytes' IHDR chunk; raises ValueError when they are not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)
