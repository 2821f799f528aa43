"""Property tests: a batched read equals per-sample reads, for any data and any index list."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkio import ChunkDataset, Execution, Output, write_arrays
from chunkio.format.grid import SampleGrid
from chunkio.read.planning import plan_batch

DTYPES = st.sampled_from(["uint8", "uint16", "int32", "int64", "float32", "float64", "bool"])
_ids = itertools.count()


@st.composite
def datasets(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], int, list[int]]:
    n = draw(st.integers(1, 60))
    fields = {}
    for name in draw(
        st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)
    ):
        shape = (n, *draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)))
        fields[name] = draw(hnp.arrays(draw(DTYPES), shape))
    spc = draw(st.integers(1, n + 3))
    indices = draw(st.lists(st.integers(-n, n - 1), max_size=40))
    return fields, spc, indices


def _check(path: str, fields: dict[str, np.ndarray], indices: list[int]) -> None:
    ds = ChunkDataset(path, preload_bytes=0)
    batch = ds.__getitems__(indices)
    assert len(batch) == len(indices)
    # the batch decodes each chunk it touches once per field, nothing else (a fresh dataset:
    # nothing cached, nothing held)
    n = len(next(iter(fields.values())))
    spc = ds.layout.samples_per_chunk
    chunks = {(i % n) // spc for i in indices}
    rows = sum(min(spc, n - c * spc) for c in chunks)
    stats = ds.read_stats()
    assert set(stats.per_field) <= set(fields)
    assert {f: stats.per_field.get(f, 0) for f in fields} == dict.fromkeys(fields, len(chunks))
    assert (stats.chunks_read, stats.cache_hits) == (len(fields) * len(chunks), 0)
    assert stats.rows_decoded == len(fields) * rows
    for got, i in zip(batch, indices, strict=True):
        single = ds[i]
        for name, arr in fields.items():
            want = np.asarray(arr[i])  # compared bitwise: NaN payloads must survive too
            for value in (got[name], single[name]):
                assert value.numpy().dtype == want.dtype, name
                assert value.numpy().tobytes() == want.tobytes(), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_getitems_equals_per_sample_reads_memory(case) -> None:
    fields, spc, indices = case
    path = f"memory://prop-{next(_ids)}"
    # shuffle=False: stored row i is fields[...][i] (about reads, not the write order)
    write_arrays(
        path, fields, shuffle=False, output=Output(chunks=spc), execution=Execution(progress=False)
    )
    _check(path, fields, indices)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.sampled_from([".zarr", ".h5"]))
def test_getitems_equals_per_sample_reads_on_disk(case, suffix) -> None:
    fields, spc, indices = case
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / f"d{suffix}")
        write_arrays(
            path,
            fields,
            shuffle=False,
            output=Output(chunks=spc),
            execution=Execution(progress=False),
        )
        _check(path, fields, indices)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 500).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(1, n + 5),
            st.lists(st.integers(0, n - 1), max_size=80),
        )
    )
)
def test_plan_touches_each_chunk_once_and_locates_every_sample(args) -> None:
    n, spc, indices = args
    grid = SampleGrid(n, spc)
    plan = plan_batch(indices, grid)
    assert plan.chunks.tolist() == sorted({i // spc for i in indices})
    # simulate the pool: each chunk's rows side by side, gathered by (chunk position, offset)
    rows = [np.arange(*grid.bounds(int(c))) for c in plan.chunks]
    got = [int(rows[p][o]) for p, o in zip(plan.chunk_pos, plan.offsets, strict=True)]
    assert got == list(indices)
