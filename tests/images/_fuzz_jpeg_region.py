"""Fuzz chunkio's partial JPEG decode with byte mutations of valid JPEGs (run as a script).

Run by ``test_jpeg_region.py`` in a subprocess, so that a crash in compiled code ends this
process, not the test run. For every mutant and box (Hypothesis draws both):

- the extension returns, raises ValueError, or NotImplementedError (a file it leaves to the
  full decode), nothing else, and never crashes;
- one verdict: where it raises ValueError the full decode raises too, and where it decodes
  the full decode does too;
- where both decode, the box's pixels are equal (RGB, or RGBX's first three bytes).

Seeds: Pillow's files (4:2:0, 4:4:4, progressive 4:2:2, restart markers, gray), one with a
restart marker at every iMCU row, and the test writer's 4:1:1 and 4x2 (which the extension
leaves to the full decode, as simplejpeg refuses it; a mutated sampling byte makes others).

    python tests/images/_fuzz_jpeg_region.py [examples]
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np


def main(examples: int) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from PIL import Image

    from chunkio.images import jpeg

    sys.path.insert(0, str(Path(__file__).parent))
    from _jpeg_writer import encode as write_jpeg

    rng = np.random.default_rng(0)
    seeds = []
    for opts, mode in (
        ({"subsampling": 2}, "RGB"),
        ({"subsampling": 0}, "RGB"),
        ({"subsampling": 1, "progressive": True}, "RGB"),
        ({"subsampling": 2, "restart_marker_blocks": 2}, "RGB"),
        ({}, "L"),
    ):
        y, x = np.mgrid[:48, :64]
        base = np.stack([x * 4, y * 5, x + y], -1) + rng.integers(0, 30, (48, 64, 3))
        im = Image.fromarray(base.clip(0, 255).astype(np.uint8)).convert(mode)
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=85, **opts)
        seeds.append(buf.getvalue())
        if opts.get("subsampling") == 2 and not opts.get("restart_marker_blocks"):
            rewritten = jpeg.add_restarts(buf.getvalue())  # restart markers at every row
            if rewritten is not None:
                seeds.append(rewritten)
    for sampling, restart in ((((4, 1), (1, 1), (1, 1)), 3), (((4, 2), (1, 1), (1, 1)), 0)):
        pixels = base[:40, :56].clip(0, 255).astype(np.uint8)
        seeds.append(write_jpeg(pixels, sampling=sampling, restart=restart))

    mutation = st.tuples(
        st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
        st.integers(0, 1 << 30),
        st.integers(0, 255),
    )

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.sampled_from(range(len(seeds))),
        st.lists(mutation, min_size=1, max_size=4),
        st.integers(0, 63),
        st.integers(0, 47),
        st.integers(1, 64),
        st.integers(1, 48),
        st.sampled_from(jpeg.JPEG_SCALE_DENOMINATORS),
        st.booleans(),
    )
    def check(
        k: int,
        mutations: list[tuple[str, int, int]],
        left: int,
        top: int,
        bw: int,
        bh: int,
        d: int,
        gray: bool,
    ) -> None:
        data = bytearray(seeds[k])
        for kind, where, value in mutations:
            if not data:
                break
            at = where % max(1, len(data))
            if kind == "flip":
                data[at] ^= 1 << (value % 8)
            elif kind == "set":
                data[at] = value
            elif kind == "cut":
                del data[at:]
            elif kind == "insert":
                data[at:at] = bytes([value])
            else:
                del data[at : at + 1 + value % 16]
        blob = bytes(data)
        try:
            h, w, _ = jpeg.frame_shape(blob)
        except ValueError:
            h, w = 48, 64
        if h * w > 4096 * 4096:
            return  # a mutated header naming a huge image (the loader passes the stored size)
        d = jpeg.scaled_size(h, w, -(-h // d), -(-w // d))[0]  # as a loader picks it
        sh, sw = -(-h // d), -(-w // d)
        left, top = min(left, sw - 1), min(top, sh - 1)
        bw, bh = min(bw, sw - left), min(bh, sh - top)
        # colour boxes alternate between RGB and RGBX (the loader's resize input)
        rgbx = not gray and (left + top) % 2 == 1
        out = np.empty((bh, bw, 1 if gray else 4 if rgbx else 3), np.uint8)
        try:
            jpeg.decode_region(blob, out, size=(h, w), left=left, top=top, denominator=d)
            got: np.ndarray | None = out
        except ValueError:
            got = None
        except NotImplementedError:
            return  # left to the full decode, whose verdict is the reader's
        if got is not None and rgbx:
            assert (got[..., 3] == 255).all(), "RGBX's fourth byte is not 255"
            got = got[..., :3]
        try:
            whole = jpeg.decode(blob, gray=gray, scale=(d, sh, sw) if d > 1 else None)
            expected: np.ndarray | None = whole.reshape(*whole.shape[:2], -1)
        except ValueError:
            expected = None
        if got is None:
            assert expected is None, "the region decode raised where the full decode did not"
        else:
            assert expected is not None, "the region decode decoded what the full decode refuses"
            box = expected[top : top + bh, left : left + bw]
            assert np.array_equal(got, box), "region pixels differ from the full decode's"

    check()
    print(f"{examples} examples: no crash, errors and pixels agree")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
