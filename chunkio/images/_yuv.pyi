from typing import Any

class Corrupt(ValueError): ...

def decode_box(
    data: Any,
    scratch: Any,
    out: Any,
    top: int,
    left: int,
    out_h: int,
    out_w: int,
    out_channels: int,
    /,
) -> int: ...
def set_lz4(address: int, /) -> None: ...
def rgbx_to_rgb(src: Any, dst: Any, h: int, w: int, flip: bool, planar: bool, /) -> None: ...
