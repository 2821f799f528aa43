"""Which libjpeg-turbo chunkio's partial JPEG decoder uses, and a warning where it has none.

The decoder, :mod:`chunkio.images._jpegcrop` (``setup.py``), reaches libjpeg-turbo one of two
ways. Built against the system's headers, it is linked to the system's library and
:func:`attach` only says so. Built against the jpeg62 headers vendored in
``chunkio/images/_vendor/libjpeg-turbo`` (no system headers, or ``CHUNKIO_JPEG=vendored``), it
links no libjpeg: :func:`attach` binds one at import time, the first of :func:`candidates` that
loads and takes the build's structures. Pillow's bundled copy comes first: Pillow is a
dependency, its wheels carry libjpeg-turbo with the jpeg62 ABI (under a file name with a hash
that changes between releases, hence the search by pattern), and Pillow loads it anyway; then
the system's ``libjpeg.so.62``.

Where there is no decoder (not built: no C compiler; or no library to bind), readers decode
JPEG crops from whole images: the same pixels, slower. :func:`warn_whole_crop` says so once
per process, with the fix; ``chunkio --version``, ``chunkio doctor`` and
``python -m chunkio.testing.compiled`` report it.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import caller_stacklevel

__all__ = ["Libjpeg", "RegionDecodeWarning", "attach", "candidates", "warn_whole_crop"]

#: how to get the decoder built: it needs a C compiler only (the headers are vendored)
FIX_BUILD = (
    "install a C compiler (Debian: apt-get install gcc) and reinstall chunkio from source "
    "(in its checkout: pip install --force-reinstall --no-deps .)"
)
#: how to get a library it can bind
FIX_LIBRARY = (
    "reinstall Pillow from its wheel, which carries libjpeg-turbo "
    "(pip install --force-reinstall --no-deps --only-binary pillow pillow), or install the "
    "system's (Debian: apt-get install libjpeg62-turbo)"
)
#: Pillow's bundled libjpeg-turbo: (folder relative to PIL's package folder, file pattern)
PILLOW_COPIES = (("../pillow.libs", "libjpeg*.so.62*"), (".dylibs", "libjpeg.62*.dylib"))
#: the system's, by the name the dynamic loader looks up
SYSTEM_LIBRARY = "libjpeg.62.dylib" if sys.platform == "darwin" else "libjpeg.so.62"


@dataclass(frozen=True)
class Libjpeg:
    """Where the partial JPEG decoder's libjpeg-turbo comes from, or why there is none."""

    #: the library in use: a path, or how it was linked; None without a decoder
    library: str | None
    #: why crops are decoded from whole images, with the fix; None with a decoder
    problem: str | None = None
    #: the headers the decoder was built against: "system", "vendored" ("" when not built)
    headers: str = ""

    def describe(self) -> str:
        """One line: ``region decoder active (...)`` or ``missing: <problem>``."""
        if self.problem is not None:
            return f"missing: {self.problem}"
        return f"active ({self.headers} headers; libjpeg-turbo: {self.library})"


def candidates() -> list[str]:
    """The libraries :func:`attach` tries, in order: Pillow's bundled libjpeg-turbo (any
    found), then the system's by name."""
    found: list[str] = []
    spec = importlib.util.find_spec("PIL")
    if spec is not None and spec.origin is not None:
        package = Path(spec.origin).parent
        for folder, pattern in PILLOW_COPIES:
            found += sorted(str(p.resolve()) for p in (package / folder).glob(pattern))
    return [*found, SYSTEM_LIBRARY]


def attach(module: Any, paths: list[str] | None = None) -> Libjpeg:
    """The decoder ``module`` (``None``: not built) made ready: bound to the first of
    ``paths`` (default :func:`candidates`) that loads, where its build resolves the library
    at import time. Never raises: what went wrong is the result's ``problem``."""
    if module is None:
        return Libjpeg(None, f"chunkio.images._jpegcrop is not built; {FIX_BUILD}")
    headers = str(getattr(module, "HEADERS", "system"))
    if not getattr(module, "DLOPEN", 0):
        return Libjpeg("the system's, linked at build time", None, headers)
    known: Libjpeg | None = getattr(module, "_chunkio_libjpeg", None)
    if known is not None:  # bind works once per process: this module's earlier answer
        return known
    refusals = []
    state = None
    for path in candidates() if paths is None else paths:
        try:
            module.bind(path)
        except OSError as err:  # absent, not libjpeg-turbo, another ABI
            refusals.append(str(err))
            continue
        state = Libjpeg(path, None, headers)
        break
    if state is None:
        tried = "; ".join(refusals) or "no candidates"
        problem = f"no libjpeg-turbo with the jpeg62 ABI could be loaded ({tried}); {FIX_LIBRARY}"
        state = Libjpeg(None, problem, headers)
    module._chunkio_libjpeg = state
    return state


class RegionDecodeWarning(UserWarning):
    """JPEG crops are decoded from whole images: chunkio's partial decoder is missing.

    The pixels are the same; decoding is slower (~15% of an epoch of cropped photos). Issued
    once per process by :func:`warn_whole_crop`, with the fix."""


#: whether this process has warned
_warned = False


def warn_whole_crop(state: Libjpeg) -> None:
    """A :class:`RegionDecodeWarning`, once per process, where ``state`` has no decoder (not
    where it has one that a caller turned off: ``CHUNKIO_JPEG_REGION=0``, other decoders)."""
    global _warned
    if state.problem is None or _warned:
        return
    _warned = True
    warnings.warn(
        f"JPEG crops are decoded from whole images (the same pixels, slower): the partial "
        f"decoder is {state.describe()}",
        RegionDecodeWarning,
        stacklevel=caller_stacklevel(),  # the user's line that read the batch
    )
