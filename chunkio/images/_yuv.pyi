from typing import Any

def to_rgb(
    src: Any,
    out: Any,
    height: int,
    width: int,
    band: int,
    first_band: int,
    top: int,
    left: int,
    out_h: int,
    out_w: int,
    /,
) -> None: ...
