"""``opgraph demo train`` trains to >= 97% test accuracy with its defaults and writes a valid PNG;
the PNG renderer (``opgraph.cli._plot``) writes files any decoder accepts."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from opgraph.cli.__main__ import main
from opgraph.cli._plot import BLUE, ORANGE, Series, encode_png, line_chart, nice_ticks, read_png_size, text_mask

ROOT = Path(__file__).resolve().parents[2]


def decode_png(data: bytes) -> np.ndarray:
    """A strict decoder for the PNGs we write (8-bit RGB, filter 0): checks every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        pos += 12 + length
    assert [k for k, _ in chunks][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    w, h, depth, color, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w)
    rows = np.frombuffer(raw, np.uint8).reshape(h, 1 + 3 * w)
    assert np.all(rows[:, 0] == 0)
    return rows[:, 1:].reshape(h, w, 3)


def has_color(img: np.ndarray, color: tuple[int, int, int]) -> bool:
    return bool(np.any(np.all(img == np.array(color, np.uint8), axis=-1)))


def test_demo_train_reaches_97_percent(tmp_path: Path) -> None:
    out = tmp_path / "train.png"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "opgraph.cli", "demo", "train", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^test accuracy ([0-9.]+)% \((\d+)/(\d+)\)", r.stdout, re.MULTILINE)
    assert m, r.stdout
    assert float(m.group(1)) >= 97.0, r.stdout
    assert int(m.group(3)) == 359 and int(m.group(2)) / 359 >= 0.97
    assert "epoch  train loss" in r.stdout and f"plot saved to {out}" in r.stdout
    lines = [line for line in r.stdout.splitlines() if re.match(r"^\d+ +[0-9.]+ +[0-9.]+% +[0-9.]+%", line)]
    assert len(lines) == 15  # the default epochs, one row each
    assert "training (15 epochs of 44 steps) ... done" in r.stderr
    print(f"opgraph demo train: {m.group(1)}% in {elapsed:.1f} s")  # shown with -s; timing is not asserted
    data = out.read_bytes()
    assert read_png_size(data) == (800, 500)
    img = decode_png(data)
    assert img.shape == (500, 800, 3)
    assert has_color(img, BLUE) and has_color(img, ORANGE)  # both curves are drawn
    assert has_color(img, (255, 255, 255)) and len(np.unique(img.reshape(-1, 3), axis=0)) > 20


def test_demo_train_help_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: opgraph demo train" in out and "example:" in out and "--epochs" in out and "--out PNG" in out
    with pytest.raises(SystemExit) as e:
        main(["demo", "train", "--epochs", "0"])
    assert e.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    assert main(["demo", "train", "--device", "tpu", "--out", ""]) == 1
    assert "opgraph demo train: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "train" in capsys.readouterr().out


def test_demo_train_short_run_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "short.png"
    assert main(["demo", "train", "--device", "cpu", "--epochs", "1", "--batch", "64", "--optimizer", "sgd",
                 "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SGD(lr=0.05, momentum=0.9)" in text and "test accuracy" in text
    assert decode_png(out.read_bytes()).shape == (500, 800, 3)


# ---- the renderer ------------------------------------------------------------------------------
def test_png_round_trip() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(rgb)), rgb)
    assert read_png_size(encode_png(rgb)) == (5, 7)
    with pytest.raises(ValueError):
        encode_png(rgb.astype(np.float32))
    with pytest.raises(ValueError):
        read_png_size(b"GIF89a" + bytes(20))


@pytest.mark.parametrize("size", [(800, 500), (320, 200), (1200, 300)])
def test_line_chart_sizes(size: tuple[int, int]) -> None:
    w, h = size
    img = line_chart([Series("loss", [1, 2, 3], [2.0, 1.0, 0.5], BLUE),
                      Series("accuracy", [1, 2, 3], [50.0, 90.0, 99.0], ORANGE, right_axis=True)],
                     width=w, height=h, title="t", x_label="epoch", left_label="loss", right_label="%")
    assert img.shape == (h, w, 3) and img.dtype == np.uint8
    assert has_color(img, BLUE) and has_color(img, ORANGE)


def test_line_chart_degenerate_inputs() -> None:
    one = line_chart([Series("one point", [0], [1.0])], width=200, height=150)
    assert one.shape == (150, 200, 3)
    flat = line_chart([Series("flat", [0, 1, 2], [3.0, 3.0, float("nan")])], width=200, height=150)
    assert flat.shape == (150, 200, 3)
    with pytest.raises(ValueError):
        line_chart([])
    with pytest.raises(ValueError):
        line_chart([Series("x", [0, 1], [0, 1])], width=30, height=20)


def test_ticks_and_font() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(1, 15) == [0, 5, 10, 15]
    assert nice_ticks(90.0, 100.0) == [90.0, 92.0, 94.0, 96.0, 98.0, 100.0]
    mask = text_mask("Ag 1.5%", 2)
    assert mask.shape == (18, (6 * 7 - 1) * 2) and mask.any()
    assert not text_mask(" ").any()
