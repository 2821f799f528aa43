"""A ``pip install`` without libjpeg-turbo's headers still gets the partial JPEG decoder.

setup.py builds ``_jpegcrop`` against the system's headers where they are, else against the
vendored ones (``chunkio/images/_vendor/libjpeg-turbo``), linking no libjpeg; at import
:mod:`chunkio.images.libjpeg` binds Pillow's bundled libjpeg-turbo (or the system's). These
tests build it in a temporary folder with the system's headers hidden from the compiler, bind
it, and decode crops equal to the whole decode; where the decoder is missing, a crop read says
so once (:class:`~chunkio.images.libjpeg.RegionDecodeWarning`); ``python -m build --wheel``
makes a wheel that installs into a fresh virtual environment with the decoder active (slow).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import time
import venv
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

import chunkio
from chunkio.images import jpeg, libjpeg
from chunkio.images.libjpeg import Libjpeg, RegionDecodeWarning
from chunkio.testing.servers import unavailable
from chunkio.transforms import Compose, RandomResizedCrop

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "chunkio" / "images"

#: a compiler that cannot see libjpeg's headers: it refuses _jpegcrop.c unless the vendored
#: headers are on its command line, as a compiler on a machine without them would (the
#: system's /usr/include cannot be hidden from a compiler by flags or variables)
NO_HEADERS_CC = """#!/bin/sh
jpegcrop=no; vendored=no
for arg in "$@"; do
  case "$arg" in
    *_jpegcrop.c) jpegcrop=yes;;
    *_vendor/libjpeg-turbo) vendored=yes;;
  esac
done
if [ $jpegcrop = yes ] && [ $vendored = no ]; then
  echo "_jpegcrop.c: fatal error: jpeglib.h: No such file or directory (hidden)" >&2; exit 1
fi
exec {cc} "$@"
"""


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth colour gradients with noise: chroma that differs between neighbouring MCUs."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], axis=-1)
    return np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)


def _hidden_headers_cc(folder: Path) -> str:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        unavailable("no C compiler to build chunkio's extensions with")
    wrapper = folder / "cc-without-jpeg-headers"
    wrapper.write_text(NO_HEADERS_CC.format(cc=cc))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def _copy_jpegcrop_sources(tree: Path) -> None:
    """setup.py and what ``_jpegcrop`` is built from (``_yuv.c`` left out: not tested here,
    its optional build fails at once)."""
    (tree / "chunkio" / "images").mkdir(parents=True)
    shutil.copy(ROOT / "setup.py", tree)
    for name in ("_jpegcrop.c", "_jpegcrop_dl.h"):
        shutil.copy(IMAGES / name, tree / "chunkio" / "images")
    shutil.copytree(IMAGES / "_vendor", tree / "chunkio" / "images" / "_vendor")


def _load(path: Path) -> ModuleType:
    """The extension at ``path``, beside (not instead of) this process's own build."""
    spec = importlib.util.spec_from_file_location("built_without_headers._jpegcrop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(240)
def test_without_system_headers_the_build_binds_pillows_libjpeg(tmp_path: Path) -> None:
    """The default build (``CHUNKIO_JPEG=auto``) on a machine whose compiler finds no
    jpeglib.h: it says so, builds against the vendored headers and links no libjpeg; the
    module refuses to decode until bound, refuses libraries that are not libjpeg-turbo, then
    binds Pillow's and decodes crops equal to the whole decode, and refuses corrupt data."""
    _copy_jpegcrop_sources(tmp_path)
    env = {**os.environ, "CC": _hidden_headers_cc(tmp_path)}
    env.pop("CHUNKIO_JPEG", None)
    build = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log
    assert "jpeglib.h: No such file" in log and "no usable system libjpeg-turbo" in log, log
    assert "built against the vendored libjpeg-turbo headers" in log, log
    (built,) = (tmp_path / "chunkio" / "images").glob("_jpegcrop*.so")
    assert b"libjpeg.so" not in built.read_bytes()  # no libjpeg among the needed libraries
    module = _load(built)
    assert (module.DLOPEN, module.HEADERS, module.RGBX) == (1, "vendored", 1)

    data = jpeg.encode(_photo(67, 93, 0), 90)
    out = np.empty((20, 30, 3), np.uint8)
    with pytest.raises(RuntimeError, match="no libjpeg-turbo bound"):
        module.decode_region(data, out, False, 1, 67, 93, 5, 7, 20, 30)
    with pytest.raises(OSError, match="cannot load"):
        module.bind(str(tmp_path / "absent.so"))
    libc = ctypes.util.find_library("c")
    if libc is not None:  # loads, but is no libjpeg
        with pytest.raises(OSError, match="has no jpeg_std_error"):
            module.bind(libc)
    state = libjpeg.attach(module)
    assert state.problem is None and state.headers == "vendored", state
    if importlib.util.find_spec("PIL") is not None and "pillow.libs" in libjpeg.candidates()[0]:
        assert state.library == libjpeg.candidates()[0]  # Pillow's copy, first

    whole = jpeg.decode(data, gray=False)
    for left, top, h, w, rgbx in [
        (5, 7, 20, 30, False),
        (0, 0, 67, 93, False),
        (60, 40, 27, 33, True),
    ]:
        out = np.empty((h, w, 4 if rgbx else 3), np.uint8)
        module.decode_region(data, out, False, 1, 67, 93, left, top, h, w)
        np.testing.assert_array_equal(out[..., :3], whole[top : top + h, left : left + w])
    with pytest.raises(ValueError):  # libjpeg's error exit, through setjmp/longjmp
        module.decode_region(data[: len(data) // 2], out, False, 1, 67, 93, 60, 40, 27, 33)
    with pytest.raises(RuntimeError, match="already bound"):
        module.bind(state.library)


def test_binding_takes_the_first_library_that_loads() -> None:
    tried: list[str] = []

    def bind(path: str) -> None:
        tried.append(path)
        if path != "good":
            raise OSError(f"cannot load {path}")

    module = SimpleNamespace(DLOPEN=1, HEADERS="vendored", bind=bind)
    state = libjpeg.attach(module, ["bad", "good", "later"])
    assert (state, tried) == (Libjpeg("good", None, "vendored"), ["bad", "good"])
    assert libjpeg.attach(module, ["other"]) is state  # once per process: bind works once


def test_no_library_to_bind_is_a_problem_that_names_the_fix() -> None:
    def bind(path: str) -> None:
        raise OSError(f"cannot load {path}: no such file")

    module = SimpleNamespace(DLOPEN=1, HEADERS="vendored", bind=bind)
    state = libjpeg.attach(module, ["/x/libjpeg-1.so.62", "libjpeg.so.62"])
    assert state.library is None and state.problem is not None
    assert "cannot load /x/libjpeg-1.so.62" in state.problem
    assert "cannot load libjpeg.so.62" in state.problem and libjpeg.FIX_LIBRARY in state.problem
    assert state.describe().startswith("missing: no libjpeg-turbo")
    assert libjpeg.FIX_BUILD in str(libjpeg.attach(None).problem)
    linked = libjpeg.attach(SimpleNamespace(DLOPEN=0, HEADERS="system"))
    assert linked.problem is None and linked.describe().startswith("active (system headers")


def test_pillows_bundled_libjpeg_comes_before_the_systems() -> None:
    found = libjpeg.candidates()
    assert found[-1] == libjpeg.SYSTEM_LIBRARY
    assert all(Path(p).is_file() for p in found[:-1])
    pil = importlib.util.find_spec("PIL")
    assert pil is not None and pil.origin is not None
    bundled = Path(pil.origin).parent.parent / "pillow.libs"
    if list(bundled.glob("libjpeg*.so.62*")):  # a manylinux wheel of Pillow
        assert found[0].startswith(str(bundled.resolve()))


@pytest.fixture(scope="module")
def jpeg_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("photos") / "c0"
    src.mkdir()
    for i in range(3):
        Image.fromarray(_photo(40, 56, i)).save(src / f"{i}.jpg", quality=90)
    out = src.parent.parent / "d.zarr"
    chunkio.convert_images(
        src.parent,
        out,
        images=chunkio.ImageOptions(encoding="jpeg"),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    return out


def _crops(store: Path) -> list[Any]:
    transform = Compose([RandomResizedCrop(16)], seed=1)
    dataset = chunkio.ChunkDataset(str(store), fields="image", transform=transform)
    return list(dataset.__getitems__([0, 1, 2]))


def test_crops_decoded_whole_for_want_of_the_decoder_warn_once(
    jpeg_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = Libjpeg(None, "chunkio.images._jpegcrop is not built; fix it so")
    monkeypatch.setattr(jpeg, "LIBJPEG", missing)
    monkeypatch.setattr(jpeg, "REGION_DECODE", False)
    monkeypatch.setattr(libjpeg, "_warned", False)
    with pytest.warns(RegionDecodeWarning, match="decoded from whole images") as caught:
        _crops(jpeg_store)
    assert len(
        caught
    ) == 1 and "is missing: chunkio.images._jpegcrop is not built; fix it so" in str(
        caught[0].message
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _crops(jpeg_store)  # once per process


def test_crops_decoded_whole_by_choice_do_not_warn(
    jpeg_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CHUNKIO_JPEG_REGION=0`` (REGION_DECODE off with the decoder there): no warning."""
    monkeypatch.setattr(jpeg, "LIBJPEG", Libjpeg("linked", None, "system"))
    monkeypatch.setattr(jpeg, "REGION_DECODE", False)
    monkeypatch.setattr(libjpeg, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _crops(jpeg_store)
    assert not libjpeg._warned


def _smoke(python: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import numpy as np\n"
        "from chunkio.images import jpeg\n"
        "assert jpeg.REGION_DECODE, jpeg.LIBJPEG\n"
        "data = jpeg.encode(np.random.default_rng(0).integers(0, 255, (64, 80, 3), np.uint8), 90)\n"
        "out = np.empty((30, 40, 3), np.uint8)\n"
        "jpeg.decode_region(data, out, size=(64, 80), left=9, top=17)\n"
        "assert (out == jpeg.decode(data, gray=False)[17:47, 9:49]).all()\n"
        "print(jpeg.LIBJPEG.describe())\n"
    )
    return subprocess.run(
        [str(python), "-c", code],
        cwd=tmp_path,
        env=_outside(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _outside() -> dict[str, str]:
    """This environment without a PYTHONPATH that would import the checkout instead."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_wheel_built_without_headers_installs_with_the_decoder_active(tmp_path: Path) -> None:
    """``python -m build --wheel`` with the system's headers hidden, installed into a fresh
    virtual environment (no system site-packages; chunkio's dependencies from pip's indexes:
    torch from a wheelhouse or the network), then imported outside the checkout. 7 minutes
    on the shared 2-core development machine (2026-11-29), most of it pip installing the
    dependencies."""
    pytest.importorskip("build", reason="the dev extra's build package")
    start = time.monotonic()
    wheels = tmp_path / "dist"
    env = {**os.environ, "CC": _hidden_headers_cc(tmp_path)}
    env.pop("CHUNKIO_JPEG", None)
    made = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(wheels), str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert "built against the vendored libjpeg-turbo headers" in made.stdout + made.stderr
    (wheel,) = wheels.glob("chunkio-*.whl")
    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=True, system_site_packages=False)
    python = fresh / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(ROOT / "constraints.txt"),
            str(wheel),
        ],
        env=_outside(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0 and "No matching distribution" in install.stderr:
        unavailable(f"chunkio's dependencies cannot be installed here: {install.stderr[-500:]}")
    assert install.returncode == 0, install.stderr[-3000:]
    smoke = _smoke(python, tmp_path)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert smoke.stdout.startswith("active (vendored headers; libjpeg-turbo: ")
    assert "pillow.libs" in smoke.stdout or "libjpeg.so.62" in smoke.stdout
    print(f"wheel built, installed and smoke-tested in {time.monotonic() - start:.0f} s")
