from typing import Any

LIBJPEG_TURBO_VERSION_NUMBER: int
RGBX: int

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
