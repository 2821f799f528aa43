"""The optional compiled parts of chunkio: partial JPEG decoding against libjpeg-turbo, and the
``yuv420`` encoding's colour conversion.

Everything else is in pyproject.toml. ``_jpegcrop`` needs libjpeg-turbo's headers (Debian:
libjpeg62-turbo-dev; ``make venv`` installs them where it can); without them the build goes
on without it (``optional=True``) and chunkio decodes whole JPEGs with simplejpeg instead.
``_yuv`` needs a C compiler only; without one numpy computes the same pixels, slower.
"""

from setuptools import Extension, setup

setup(
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
    ]
)
