from typing import Any

def dense(
    out: Any,
    n_rows: int,
    n_cols: int,
    itemsize: int,
    add_kind: int,
    data: Any,
    data_slots: Any,
    data_base: int,
    data_step: int,
    indices: Any,
    index_size: int,
    index_slots: Any,
    index_base: int,
    index_step: int,
    rows: Any,
    starts: Any,
    counts: Any,
    /,
) -> bool | tuple[int, int] | None: ...
