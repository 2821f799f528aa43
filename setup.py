"""The optional compiled parts of chunkio: partial JPEG decoding against libjpeg-turbo, and the
``yuv420`` encoding's colour conversion.

Everything else is in pyproject.toml. ``_jpegcrop`` needs libjpeg-turbo's headers (Debian:
libjpeg62-turbo-dev; ``make venv`` installs them where it can); without them the build goes
on without it (``optional=True``) and chunkio decodes whole JPEGs with simplejpeg instead.
``_yuv`` needs a C compiler only; without one numpy computes the same pixels, slower.

A part that fails to build is left *missing*, never as the build before it: the earlier
build is removed first (:class:`BuildExt`), so chunkio falls back and ``make test`` (under
CI) fails at ``python -m chunkio.testing.compiled`` instead of testing yesterday's code.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


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
        super().build_extension(ext)


def _remove(path: str) -> None:
    if os.path.lexists(path):
        os.remove(path)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "chunkio.images._jpegcrop",
            sources=["chunkio/images/_jpegcrop.c"],
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
    ],
)
