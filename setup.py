"""The optional compiled parts of chunkio: partial JPEG decoding against libjpeg-turbo, the
``yuv420`` encoding's colour conversion, the sums of HDF5's fletcher32 checksum, and sparse
rows scattered into dense batches.

Everything else is in pyproject.toml. They need a C compiler only; without one the build goes
on without them (``optional=True``), chunkio computes the same pixels and checksums slower
(whole JPEG decodes with simplejpeg, numpy's yuv420 conversion, NumPy's and numcodecs'
fletcher32, NumPy's gather and scatter of sparse rows), and says so: ``chunkio --version``,
``chunkio doctor``, a warning when a crop is decoded whole.

``_jpegcrop`` finds libjpeg-turbo one of two ways, by ``CHUNKIO_JPEG``:

* ``system``: the system's headers and library (Debian: libjpeg62-turbo-dev; ``make venv``
  installs them where it can), linked at build time;
* ``vendored``: the jpeg62 headers under ``chunkio/images/_vendor/libjpeg-turbo`` (no system
  headers needed, nothing linked); the library is found at import time, Pillow's bundled
  libjpeg-turbo first (:mod:`chunkio.images.libjpeg`);
* ``auto`` (the default): ``system``, and ``vendored`` where that does not build (no headers,
  no ``libjpeg.so``): a plain ``pip install .`` gets the partial decoder either way.

A part that fails to build is left *missing*, never as the build before it: the earlier
build is removed first (:class:`BuildExt`), so chunkio falls back and ``make test`` (under
CI) fails at ``python -m chunkio.testing.compiled`` instead of testing yesterday's code.
"""

import copy
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
JPEGCROP = "chunkio.images._jpegcrop"
#: relative to setup.py, as setuptools wants paths
VENDORED = "chunkio/images/_vendor/libjpeg-turbo"
VENDORED_HEADERS = ("jpeglib.h", "jmorecfg.h", "jerror.h", "jconfig.h")
JPEG_MODES = ("auto", "system", "vendored")


class BuildExt(build_ext):
    """``build_ext`` that removes an extension's earlier build before building it.

    Otherwise an optional extension whose C source no longer compiles keeps its last good
    build twice over: in the build folder (which ``--inplace`` and editable installs then copy
    into the source tree again) and in the source tree itself.
    """

    def run(self) -> None:
        if self.inplace:  # ``build_ext --inplace`` and pip's editable installs
            for ext in self.extensions:
                _remove(os.path.join(HERE, self.get_ext_filename(self.get_ext_fullname(ext.name))))
        super().run()

    def build_extension(self, ext: Extension) -> None:
        _remove(self.get_ext_fullpath(ext.name))  # the build folder's copy
        if ext.name != JPEGCROP:
            super().build_extension(ext)
            return
        mode = os.environ.get("CHUNKIO_JPEG", "auto").strip().lower() or "auto"
        if mode not in JPEG_MODES:
            raise ValueError(f"CHUNKIO_JPEG must be one of {', '.join(JPEG_MODES)}; got {mode!r}")
        if mode != "vendored":
            try:
                super().build_extension(ext)
                return
            except Exception:  # the compiler's or linker's error (their classes vary)
                if mode == "system":
                    raise
                _say(
                    f"{JPEGCROP}: no usable system libjpeg-turbo (headers or library; the "
                    f"compiler's message is above): building against the headers vendored in "
                    f"{VENDORED}, the library found at import time (Pillow's bundled copy)"
                )
        super().build_extension(_vendored(ext))
        _say(f"{JPEGCROP}: built against the vendored libjpeg-turbo headers")


def _vendored(ext: Extension) -> Extension:
    """``ext`` compiled against the vendored headers, linking no libjpeg (bound at import).

    A copy, not a new Extension: build_ext has set private attributes on ``ext`` it reads."""
    vendored = copy.copy(ext)
    vendored.include_dirs = [VENDORED, *ext.include_dirs]  # -I: searched before the system's
    vendored.define_macros = [*ext.define_macros, ("CHUNKIO_JPEG_DLOPEN", "1")]
    vendored.libraries = [lib for lib in ext.libraries if lib != "jpeg"]
    vendored.depends = [*ext.depends, *(f"{VENDORED}/{h}" for h in VENDORED_HEADERS)]
    return vendored


def _say(text: str) -> None:
    print(f"chunkio setup.py: {text}", file=sys.stderr)


def _remove(path: str) -> None:
    if os.path.lexists(path):
        os.remove(path)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            JPEGCROP,
            sources=["chunkio/images/_jpegcrop.c"],
            depends=["chunkio/images/_jpegcrop_dl.h"],
            libraries=["jpeg"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-clobbered"],
            optional=True,
        ),
        Extension(
            "chunkio.images._yuv",
            sources=["chunkio/images/_yuv.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
        Extension(
            "chunkio.backends._fletcher",
            sources=["chunkio/backends/_fletcher.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
        Extension(
            "chunkio.read._sparse_rows",
            sources=["chunkio/read/_sparse_rows.c"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
    ],
)
