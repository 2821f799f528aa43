"""The optional compiled part of chunkio: partial JPEG decoding against libjpeg-turbo.

Everything else is in pyproject.toml. The extension needs libjpeg-turbo's headers (Debian:
libjpeg62-turbo-dev; ``make venv`` installs them where it can); without them the build goes
on without it (``optional=True``) and chunkio decodes whole JPEGs with simplejpeg instead.
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
        )
    ]
)
