"""Region decode against the whole decode over every chroma sampling: the same pixels, or the
file left to the whole decode, and the same refusals (RELIABILITY rows 32 and 35).

The files come from Pillow (progressive, CMYK, restart markers per row) and from a small
baseline writer (``_jpeg_writer.py``: any sampling factors, restart intervals), since no
encoder in the venv writes 4x2, 2x4, 1x4 or 3x1. Boxes are seeded and drawn per file, scale
and output (RGB, RGBX, gray), with every edge, corner and single pixel among them.

``CHUNKIO_REGION_BOXES`` sets how many random boxes the differential test draws (default
2,000, a few seconds); the opt-in long run draws 20,000::

    pytest -m slow tests/images/test_jpeg_region_samplings.py
"""

from __future__ import annotations

import io
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from images._jpeg_writer import encode as write_jpeg
from PIL import Image

from chunkio.images import jpeg

pytestmark = pytest.mark.skipif(
    not jpeg.REGION_DECODE, reason="chunkio's libjpeg-turbo extension is not built"
)

_ONE = (1, 1)
#: (h, v) sampling factors of Y, Cb, Cr that the writer writes, by name
WRITER_SAMPLINGS: dict[str, tuple[tuple[int, int], ...]] = {
    "444": (_ONE, _ONE, _ONE),
    "422": ((2, 1), _ONE, _ONE),
    "420": ((2, 2), _ONE, _ONE),
    "440": ((1, 2), _ONE, _ONE),
    "411": ((4, 1), _ONE, _ONE),
    "4x2": ((4, 2), _ONE, _ONE),
    "2x4": ((2, 4), _ONE, _ONE),
    "1x4": ((1, 4), _ONE, _ONE),
    "4x4": ((4, 4), _ONE, _ONE),
    "3x1": ((3, 1), _ONE, _ONE),
    "2x2-all": ((2, 2), (2, 2), (2, 2)),
    "chroma-finer": (_ONE, (2, 2), _ONE),
    "440-as-2x2-2x1": ((2, 2), (2, 1), (2, 1)),
}
#: the kinds region decode takes; every other one it leaves to the whole decode
REGION_KINDS = {"444", "422", "420", "440", "411", "gray"}
SIZES = [(1, 1), (1, 37), (29, 1), (8, 8), (16, 17), (33, 47), (64, 71), (90, 61)]


def photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([x * 3 + y, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 40, (h, w, 3))).clip(0, 255).astype(np.uint8)


def _pillow(pixels: np.ndarray, mode: str, **options: Any) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, format="JPEG", quality=85, **options)
    return buf.getvalue()


def _makers() -> dict[str, Callable[[np.ndarray], bytes]]:
    makers: dict[str, Callable[[np.ndarray], bytes]] = {}
    for name, sampling in WRITER_SAMPLINGS.items():
        makers[name] = lambda p, s=sampling: write_jpeg(p, sampling=s)
        makers[f"{name}-restart"] = lambda p, s=sampling: write_jpeg(p, sampling=s, restart=2)
    makers["gray"] = lambda p: write_jpeg(p[..., 0])
    makers["gray-restart"] = lambda p: write_jpeg(p[..., 0], restart=3)
    makers["progressive"] = lambda p: _pillow(p, "RGB", subsampling=2, progressive=True)
    makers["progressive-444"] = lambda p: _pillow(p, "RGB", subsampling=0, progressive=True)
    makers["gray-progressive"] = lambda p: _pillow(p, "L", progressive=True)
    makers["restart-rows"] = lambda p: _pillow(p, "RGB", subsampling=1, restart_marker_rows=1)
    makers["cmyk"] = lambda p: _pillow(p, "CMYK")
    return makers


def _kind(name: str) -> str:
    for suffix in ("-restart", "-rows"):
        name = name.removesuffix(suffix)
    if name.startswith("progressive"):
        return "420" if name == "progressive" else "444"
    if name.startswith("gray"):
        return "gray"
    return {"restart": "422"}.get(name, name)


@pytest.fixture(scope="module")
def files() -> list[tuple[str, bytes]]:
    out = []
    for k, (name, make) in enumerate(sorted(_makers().items())):
        for j, (h, w) in enumerate(SIZES):
            out.append((name, make(photo(h, w, 7 * k + j))))
    return out


def _whole(data: bytes, gray: bool, d: int) -> np.ndarray | None:
    h, w, _ = jpeg.frame_shape(data)
    try:
        pixels = jpeg.decode(data, gray=gray, scale=(d, -(-h // d), -(-w // d)) if d > 1 else None)
    except ValueError:
        return None
    return pixels.reshape(*pixels.shape[:2], -1)


def _boxes(sh: int, sw: int, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Edges, corners, single pixels, then ``count`` random boxes: (left, top, right, bottom)."""
    boxes = [
        (0, 0, sw, sh),
        (0, 0, 1, 1),
        (sw - 1, sh - 1, sw, sh),
        (0, sh - 1, sw, sh),
        (sw - 1, 0, sw, sh),
        (0, 0, sw, 1),
        (0, 0, 1, sh),
    ]
    for _ in range(count):
        top, left = int(rng.integers(0, sh)), int(rng.integers(0, sw))
        bottom, right = int(rng.integers(top + 1, sh + 1)), int(rng.integers(left + 1, sw + 1))
        boxes.append((left, top, right, bottom))
    return boxes


def compare(files: list[tuple[str, bytes]], boxes: int, seed: int) -> Counter[str]:
    """Every file x scale x output x box, region against whole: a Counter of outcomes
    (``equal:<kind>``, ``left:<kind>``, ``refused``) and of ``DIFFERENT ...`` cases."""
    rng = np.random.default_rng(seed)
    outputs = ["rgb", "gray"] + (["rgbx"] if jpeg.REGION_RGBX else [])
    per_view = max(1, boxes // (len(files) * 4 * len(outputs)))
    seen: Counter[str] = Counter()
    for name, data in files:
        h, w, _ = jpeg.frame_shape(data)
        for want in jpeg.JPEG_SCALE_DENOMINATORS:
            d = jpeg.scaled_size(h, w, -(-h // want), -(-w // want))[0] if want > 1 else 1
            if not jpeg.exact_scale(h, w, d):
                continue  # the loader decodes these whole
            sh, sw = -(-h // d), -(-w // d)
            for output in outputs:
                gray = output == "gray"
                whole = _whole(data, gray, d)
                for left, top, right, bottom in _boxes(sh, sw, per_view, rng):
                    channels = 1 if gray else 4 if output == "rgbx" else 3
                    out = np.full((bottom - top, right - left, channels), 7, np.uint8)
                    try:
                        jpeg.decode_region(
                            data, out, size=(h, w), left=left, top=top, denominator=d
                        )
                    except NotImplementedError:
                        seen[f"left:{_kind(name)}"] += 1
                        continue
                    except ValueError as err:
                        if whole is not None:
                            seen[f"DIFFERENT verdict {name} 1/{d} {output}: {err}"] += 1
                        seen["refused"] += 1
                        continue
                    if whole is None:
                        seen[f"DIFFERENT verdict {name} 1/{d} {output}: decoded"] += 1
                        continue
                    if channels == 4:
                        if not (out[..., 3] == 255).all():
                            seen[f"DIFFERENT 4th byte {name}"] += 1
                        out = out[..., :3]
                    if np.array_equal(out, whole[top:bottom, left:right]):
                        seen[f"equal:{_kind(name)}"] += 1
                    else:
                        seen[f"DIFFERENT pixels {name} 1/{d} {output}"] += 1
    return seen


def _check(seen: Counter[str], boxes: int) -> None:
    different = {k: n for k, n in seen.items() if k.startswith("DIFFERENT")}
    assert not different, different
    equal = sum(n for k, n in seen.items() if k.startswith("equal:"))
    assert equal >= boxes // 2, seen  # the boxes were compared, not all left or refused
    decoded = {k.split(":")[1] for k in seen if k.startswith("equal:")}
    left = {k.split(":")[1] for k in seen if k.startswith("left:")}
    assert decoded == REGION_KINDS, decoded
    assert left == set(WRITER_SAMPLINGS) - REGION_KINDS | {"cmyk"}, left


def test_region_equals_whole_decode_or_leaves_the_file_to_it(
    files: list[tuple[str, bytes]],
) -> None:
    boxes = int(os.environ.get("CHUNKIO_REGION_BOXES", "2000"))
    _check(compare(files, boxes, seed=0), boxes)


@pytest.mark.slow
def test_region_equals_whole_decode_long_run(files: list[tuple[str, bytes]]) -> None:
    _check(compare(files, 20_000, seed=1), 20_000)


def test_seeking_to_restart_markers_gives_the_same_pixels(
    files: list[tuple[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With seeking on (opt-in), files with a restart marker at every iMCU row decode from
    the marker above the box: still the whole decode's pixels."""
    monkeypatch.setattr(jpeg, "SEEK", True)
    rewritten = [
        (f"{name}-rows", jpeg.add_restarts(data))
        for name, data in files
        if _kind(name) in REGION_KINDS and len(data) > 1000
    ]
    assert rewritten and all(data is not None for _, data in rewritten)
    seen = compare(rewritten, 600, seed=2)  # type: ignore[arg-type]
    assert not [k for k in seen if k.startswith("DIFFERENT")], seen


def test_whole_decode_refusals_are_the_readers_typed_error() -> None:
    """A 4x2 file in a store: the crop path leaves it to the whole-image path, which raises
    CorruptChunkError (the same as a read without a transform), never pixels."""
    from chunkio.errors import CorruptChunkError
    from chunkio.images.decoders import image_decoder
    from chunkio.read.encoded import EncodedReads
    from chunkio.transforms import Compose, RandomResizedCrop

    data = np.frombuffer(write_jpeg(photo(40, 48, 0), sampling=WRITER_SAMPLINGS["4x2"]), np.uint8)
    field = object.__new__(EncodedReads)
    field._local = threading.local()
    transform = Compose([RandomResizedCrop(16)])
    plan = transform.plan((0, 0, 0), 40, 48)
    out = np.empty((3, 16, 16), np.uint8)
    assert not field._decode_crop(data, (3, 40, 48), plan, (16, 16), transform, out)
    with pytest.raises(CorruptChunkError, match="corrupt jpeg"):
        image_decoder("jpeg").decode_into(data, np.empty((40, 48, 3), np.uint8))
