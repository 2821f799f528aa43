"""Shared fixtures: small real datasets on disk in both formats."""

from __future__ import annotations

import multiprocessing
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkio import Execution, Output
from chunkio.backends.codec_table import DEFAULT_CODEC

#: the run ends with the number of skipped tests grouped by reason; the chunkio errors the
#: bad-input tests make are held to the message bound (tests/support/message_limit.py); the
#: DataLoader iterators a test leaves running are shut down at its end (loader_shutdown.py)
pytest_plugins = ["chunkio.testing.skips", "message_limit", "loader_shutdown"]

#: forkserver workers fork from a server that has already imported these, as the convert pool's
#: warm-up does (``convert/engine/processes.py`` adds its modules while the server is not yet
#: running): each loader worker then starts in milliseconds instead of importing torch for
#: seconds. The dataset is still pickled to the worker and its handles opened there, which is
#: what the forkserver cases test; one spawn case per concern still imports everything afresh.
multiprocessing.set_forkserver_preload(
    [
        "__main__",
        "torch",
        "torch.utils.data",
        "chunkio",
        "chunkio.loader",
        "chunkio.transport",
        "h5py",
        "zarr",
    ]
)

FORMATS = ["zarr", "hdf5"]
SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}


def sample_arrays(n: int = 200, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Images whose pixels encode their index, labels = index % 7."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 255, size=(n, 3, 8, 8), dtype=np.uint8)
    image[:, 0, 0, 0] = np.arange(n) % 256
    image[:, 0, 0, 1] = np.arange(n) // 256
    return {"image": image, "label": (np.arange(n) % 7).astype(np.int64)}


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., tuple[str, dict[str, np.ndarray]]]:
    """Write arrays with ``write_arrays``; returns (path, arrays).

    Stored in the given order (``shuffle=False``) unless a test asks otherwise: the tests using
    this fixture compare stored row ``i`` with ``arrays[...][i]`` and are about reading, not
    about the write-time shuffle (``tests/convert/test_write_shuffle.py`` covers that).
    """
    from chunkio import write_arrays

    counter = iter(range(10**6))

    def make(
        fmt: str,
        arrays: dict[str, np.ndarray] | None = None,
        *,
        samples_per_chunk: int = 16,
        compression: Any = DEFAULT_CODEC,
        **kw: Any,
    ) -> tuple[str, dict[str, np.ndarray]]:
        arrays = sample_arrays() if arrays is None else arrays
        path = str(tmp_path / f"ds{next(counter)}{SUFFIX[fmt]}")
        kw.setdefault("shuffle", False)
        write_arrays(
            path,
            arrays,
            **kw,
            output=Output(chunks=samples_per_chunk, compression=compression),
            execution=Execution(progress=False),
        )
        return path, arrays

    return make


def source_array(
    kind: str,
    data: np.ndarray,
    tmp_path: Path,
    name: str,
    *,
    dask_rows: int,
    stored_rows: int | None = None,
) -> Any:
    """``data`` as a numpy, dask, h5py or zarr array, the inputs ``write_arrays`` takes.

    ``dask_rows`` rows per dask chunk; ``stored_rows`` rows per h5py/zarr chunk (``None``:
    the library's default layout).
    """
    if kind == "numpy":
        return data
    if kind == "dask":
        import dask.array as da

        return da.from_array(data, chunks=(dask_rows, *data.shape[1:]))
    chunks = None if stored_rows is None else (stored_rows, *data.shape[1:])
    if kind == "h5py":
        import h5py

        path = tmp_path / f"in-{name}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset(name, data=data, chunks=chunks)
        return h5py.File(path, "r")[name]
    import zarr

    z = zarr.create_array(
        tmp_path / f"in-{name}.zarr",
        shape=data.shape,
        dtype=data.dtype,
        **({} if chunks is None else {"chunks": chunks}),
    )
    z[:] = data
    return z


def zarr_chunk_file(path: str | Path, field: str, *coords: int) -> Path:
    """The file of chunk ``coords`` of Zarr array ``field`` (any default key separator); of a
    sharded array, the shard that holds it.

    ``coords`` may stop early: missing trailing coordinates are 0 (sample-axis chunks).
    """
    import json

    from chunkio.backends.zarr.shard import shard_layout

    meta = json.loads(Path(path, field, "zarr.json").read_text())
    layout = shard_layout(meta)
    if layout is not None:
        coords = tuple(c // g for c, g in zip(coords, layout.grid, strict=False))
    ndim = len(meta["shape"])
    sep = (meta["chunk_key_encoding"].get("configuration") or {}).get("separator", "/")
    key = sep.join(["c", *map(str, (*coords, *(0 for _ in range(ndim - len(coords)))))])
    return Path(path, field, *key.split("/"))


@pytest.fixture
def recorded_dask() -> tuple[Any, list[int]]:
    """A lazy dask array ``(100, 10)`` int32 (``arange + 1``) in chunks of 10 rows, and the
    list its blocks append their lengths to when computed: how a conversion computes it."""
    import dask.array as da

    seen: list[int] = []

    def record(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        seen.append(len(block))
        return block + 1

    base = da.from_array(np.arange(1000, dtype=np.int32).reshape(100, 10), chunks=(10, 10))
    return base.map_blocks(record, dtype=np.int32, meta=np.empty((0, 0), np.int32)), seen


# -- single-cell files made by anndata (tests/support/anndata_files.py), once per session -----
try:
    import anndata_files as af
except ImportError:  # a plain script imports helpers from here with only tests/ on its path
    af = None
# Each fixture is an :class:`anndata_files.SingleCell`: ``.path`` / ``.paths``, ``.x_field``,
# the expected matrix ``.x`` (scipy CSR, or an ndarray for the dense one), the expected
# ``.obs`` and ``.labels`` (category name per cell). Tests must leave the files as they are
# (they are shared by the session); copy one first to change it. Here rather than in
# tests/singlecell/conftest.py: a second module named conftest would shadow this one for the
# tests that import helpers from it.


@pytest.fixture(scope="session")
def sc_root(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")
    return tmp_path_factory.mktemp("singlecell")


@pytest.fixture(scope="session")
def pbmc_legacy(sc_root) -> af.SingleCell:
    """(a) scanpy's file as shipped: ``raw.X`` an ``h5sparse_format: csr`` group."""
    return af.legacy(sc_root)


@pytest.fixture(scope="session")
def pbmc_h5ad(sc_root) -> af.SingleCell:
    """(b) modern h5ad, X ``csr_matrix``."""
    return af.h5ad(sc_root)


@pytest.fixture(scope="session")
def pbmc_zarr_v2(sc_root) -> af.SingleCell:
    """(c) AnnData Zarr v2."""
    return af.zarr_store(sc_root, 2)


@pytest.fixture(scope="session")
def pbmc_zarr_v3(sc_root) -> af.SingleCell:
    """(d) AnnData Zarr v3."""
    return af.zarr_store(sc_root, 3)


@pytest.fixture(scope="session")
def pbmc_zarr_sharded(sc_root) -> af.SingleCell:
    """(e) AnnData Zarr v3 sharded as annbatch writes it."""
    return af.zarr_sharded(sc_root)


@pytest.fixture(scope="session")
def pbmc_csc(sc_root) -> af.SingleCell:
    """(f) X ``csc_matrix`` (to be refused)."""
    return af.csc(sc_root)


@pytest.fixture(scope="session")
def pbmc_split(sc_root) -> af.SingleCell:
    """(g) three h5ad files, categories differing in order and subset."""
    return af.split(sc_root)


@pytest.fixture(scope="session")
def pbmc_dense(sc_root) -> af.SingleCell:
    """(h) X a dense array."""
    return af.dense(sc_root)


@pytest.fixture(params=af.CSR_FIXTURES if af is not None else ())
def pbmc_csr(request: pytest.FixtureRequest) -> af.SingleCell:
    """Each CSR layout in turn."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that stands for a claimer of a shared stack's block (killed after)."""
    live = subprocess.Popen(["sleep", "120"])
    yield live
    live.kill()
    live.wait()
