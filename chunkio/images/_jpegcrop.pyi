from typing import Any

LIBJPEG_TURBO_VERSION_NUMBER: int
RGBX: int
# 1: built against the vendored headers, libjpeg-turbo bound at import (bind); 0: linked
DLOPEN: int
# the headers it was built against: "system" or "vendored"
HEADERS: str

def decode_region(
    data: Any,
    out: Any,
    gray: bool,
    denom: int,
    height: int,
    width: int,
    x0: int,
    y0: int,
    out_h: int,
    out_w: int,
    seek: bool = ...,
) -> None: ...
def add_restarts(data: Any) -> bytes: ...

# only where DLOPEN is 1 (chunkio.images.libjpeg.attach calls it)
def bind(path: str) -> None: ...
