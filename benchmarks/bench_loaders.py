"""Shuffled-epoch throughput of every way to load the same images, and the limits around them.

:func:`prepare` makes natural-image JPEGs in class folders and converts them to Zarr and HDF5
(``chunkio.convert_images`` when available, else decode + ``write_arrays``).
:func:`loader_rows` measures samples/s of chunkio's loaders and of the per-sample Datasets users
write today; :func:`limit_rows` the ceilings on the same batches (in-process NumPy gather, the
in-memory batched reader through a standard DataLoader, and the single-core decode rate x cores,
measured by decompressing the stored chunk bytes directly with numcodecs: :func:`decode_rate`);
:func:`add_limit_fractions` puts each loader against min(gather, decode x cores);
:func:`amplification` read amplification and shuffle quality. ``benchmarks.run`` puts them side
by side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch.utils.data import DataLoader

import chunkio
from benchmarks.baselines import (
    ImageFolderDataset,
    InMemoryBatchDataset,
    NaiveH5Dataset,
    NaiveZarrDataset,
)
from benchmarks.data import make_jpeg_folder
from chunkio.loader import DEFAULT_POOL_BYTES, pool_samples
from chunkio.sampling import describe_sampler
from chunkio.sampling.label_check import labels_of

__all__ = [
    "BenchData",
    "add_limit_fractions",
    "amplification",
    "cores",
    "decode_rate",
    "limit_rows",
    "loader_rows",
    "prepare",
    "stored_chunks",
]

FIELDS = ["image", "label"]
#: fast routes are timed over whole epochs for at least this long
MIN_S = 2.0


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class BenchData:
    """The benchmark dataset in every form: JPEG folder, Zarr, HDF5 and decoded arrays."""

    jpegs: Path
    zarr: str
    hdf5: str
    images: np.ndarray
    labels: np.ndarray
    convert_s: dict[str, float]
    converter: str


def _convert_images() -> Callable[..., Any] | None:
    convert = getattr(chunkio, "convert_images", None)
    if convert is None:
        try:
            from chunkio.convert.images import convert_images as convert
        except ImportError:
            return None
    return convert


def _decode_folder(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files = [(f, k) for k, c in enumerate(classes) for f in sorted((folder / c).glob("*.jpg"))]
    images = np.stack(
        [np.asarray(Image.open(f).convert("RGB")).transpose(2, 0, 1) for f, _ in files]
    )
    return images, np.array([k for _, k in files], dtype=np.int64)


def prepare(root: str | Path, *, n_images: int, workers: int) -> BenchData:
    """JPEGs under ``root/jpeg`` converted to ``root/images.zarr`` and ``root/images.h5``."""
    root = Path(root)
    jpegs = make_jpeg_folder(root / "jpeg", n_images=n_images)
    convert = _convert_images()
    paths = {"zarr": str(root / "images.zarr"), "hdf5": str(root / "images.h5")}
    seconds: dict[str, float] = {}
    decoded: tuple[np.ndarray, np.ndarray] | None = None
    for fmt, dst in paths.items():
        start = time.perf_counter()
        if convert is not None:
            execution = chunkio.Execution(workers=max(1, workers), progress=False, overwrite=True)
            convert(jpegs, dst, execution=execution)
        else:
            decoded = decoded or _decode_folder(jpegs)
            arrays = {"image": decoded[0], "label": decoded[1]}
            chunkio.write_arrays(
                dst, arrays, execution=chunkio.Execution(overwrite=True, workers=max(1, workers))
            )
        seconds[fmt] = time.perf_counter() - start
    whole = chunkio.ChunkDataset(paths["zarr"], fields=FIELDS).read_batch(np.arange(n_images))
    return BenchData(
        jpegs=jpegs,
        zarr=paths["zarr"],
        hdf5=paths["hdf5"],
        images=whole["image"],
        labels=whole["label"],
        convert_s=seconds,
        converter="convert_images" if convert is not None else "decode + write_arrays",
    )


def _batch_len(batch: Any) -> int:
    first = batch[0] if isinstance(batch, tuple | list) else batch
    return len(next(iter(first.values())) if isinstance(first, dict) else first)


def timed_rate(
    batches: Iterable[Any], *, budget_s: float, warmup: bool | int, min_s: float = 0.0
) -> float:
    """Samples/s after a warm-up, over whole passes until ``min_s`` seconds have passed (at
    least one pass), or over ``budget_s`` seconds if slower (at least two timed batches).

    ``warmup``: ``True`` runs one untimed pass (worker start-up, page cache); an int leaves
    that many first batches untimed, which slow per-sample loaders need: their first batch
    waits for a worker to assemble a whole batch alone. (Batches then arrive in bursts, one
    per worker, so a short budget slightly favours them.) ``min_s`` keeps fast loaders of
    small datasets from being timed over a few milliseconds.
    """
    skip = 0 if isinstance(warmup, bool) else warmup
    if warmup is True:
        for _ in batches:
            pass
    n = timed = 0
    start = time.perf_counter()
    while True:
        for batch in batches:
            if skip:
                skip -= 1
                start = time.perf_counter()
                continue
            n += _batch_len(batch)
            timed += 1
            if time.perf_counter() - start > budget_s and timed >= 2:
                return n / (time.perf_counter() - start)
        if time.perf_counter() - start >= min_s:
            return n / (time.perf_counter() - start)


def _row(name: str, group: str, workers: int, rate: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "group": group, "workers": workers, "samples_per_s": rate, **extra}


def _make_loader_rows(
    data: BenchData, workers: int, batch_size: int, budget_s: float, min_s: float
) -> Iterator[dict[str, Any]]:
    for fmt, path in (("zarr", data.zarr), ("hdf5", data.hdf5)):
        for transport in ("ring", "dataloader"):
            with chunkio.make_loader(
                path,
                batch_size,
                fields=FIELDS,
                num_workers=workers,
                workers=chunkio.Workers(transport=transport),
            ) as loader:
                rate = timed_rate(loader, budget_s=budget_s, warmup=True, min_s=min_s)
                route = loader.transport
            label = "default" if transport == "ring" else "transport='dataloader'"
            name = f"chunkio make_loader {fmt} ({label})"
            yield _row(name, "chunkio", workers, rate, format=fmt, route=route)


def _dataloader(ds: Any, batch_size: int, workers: int, **kw: Any) -> DataLoader[Any]:
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers, **kw)


def loader_rows(
    data: BenchData,
    *,
    workers: int,
    batch_size: int,
    budget_s: float,
    naive_budget_s: float,
    min_s: float = MIN_S,
) -> list[dict[str, Any]]:
    """Samples/s of each loader with ``workers`` processes (0: in the consuming process).

    chunkio's loaders are timed over whole epochs (at least ``min_s`` s, at most
    ``budget_s``) after a warm-up epoch; the slow ones over their first ``naive_budget_s``.
    """
    rows = list(_make_loader_rows(data, workers, batch_size, budget_s, min_s))
    for fmt, path in (("zarr", data.zarr), ("hdf5", data.hdf5)):
        ds = chunkio.ChunkDataset(path, fields=FIELDS)
        dl = _dataloader(ds, batch_size, workers, collate_fn=chunkio.collate)
        rate = timed_rate(dl, budget_s=naive_budget_s, warmup=1)
        rows.append(_row(f"DataLoader(ChunkDataset {fmt}, shuffle=True)", "chunkio", workers, rate))
    naive = (
        ("naive per-sample h5py Dataset", NaiveH5Dataset(data.hdf5)),
        ("naive per-sample zarr Dataset", NaiveZarrDataset(data.zarr)),
        ("Pillow ImageFolder Dataset (JPEG)", ImageFolderDataset(str(data.jpegs))),
    )
    for name, naive_ds in naive:
        rate = timed_rate(
            _dataloader(naive_ds, batch_size, workers), budget_s=naive_budget_s, warmup=1
        )
        rows.append(_row(name, "baseline", workers, rate))
    return rows


def _order(data: BenchData, batch_size: int, workers: int) -> list[list[int]]:
    """make_loader's batches for epoch 0 (the same for every worker count)."""
    with chunkio.make_loader(data.zarr, batch_size, num_workers=0) as loader:
        return [b.tolist() for b in loader.sampler.batches(0)]


def _gather(images: np.ndarray, labels: np.ndarray, order: list[list[int]]) -> Iterator[Any]:
    buf = np.empty((max(map(len, order)), *images.shape[1:]), images.dtype)
    for idx in order:
        index = np.asarray(idx)
        yield np.take(images, index, axis=0, out=buf[: len(index)]), labels[index]


class _Replay:
    """Re-iterable over a generator factory (``timed_rate`` iterates twice)."""

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[Any]:
        return self._make()


def stored_chunks(path: str, array: str = "image") -> tuple[list[bytes], Callable[..., Any], int]:
    """The stored bytes of every chunk of ``array`` (checksums stripped), the numcodecs decoder
    that turns one into the chunk's bytes, and a full chunk's decoded size: read straight from
    the files (Zarr chunk files; HDF5 ``read_direct_chunk``), not through zarr-python, h5py's
    filter pipeline or chunkio's reader."""
    if path.endswith((".h5", ".hdf5")):
        import h5py

        from chunkio.backends.hdf5.raw import RawChunks

        with h5py.File(path, "r") as f:
            d = f[array]
            raw = RawChunks.build(d, path, array)
            if raw is None or raw.decode is None:
                raise ValueError(f"{path}: {array!r} is not chunked with a filter chunkio decodes")
            step, zeros = d.chunks[0], (0,) * (d.ndim - 1)
            cut = 4 if raw.checksum else 0
            blobs = []
            for c in range(-(-d.shape[0] // step)):
                data = d.id.read_direct_chunk((c * step, *zeros))[1]
                blobs.append(data[: len(data) - cut])
            decode = raw.decode

            def run(blob: bytes, out: np.ndarray) -> None:
                decode(np.frombuffer(blob, np.uint8).copy(), out)  # the LZ4 frame is patched

            return blobs, run, raw.chunk_nbytes()
    import json

    from chunkio.backends.zarr.chunks import ChunkFiles
    from chunkio.backends.zarr.shard import inner_meta, inner_range, shard_layout

    meta = json.loads((Path(path) / array / "zarr.json").read_text())
    layout = shard_layout(meta)
    files = ChunkFiles.build(
        str(Path(path) / array), array, meta if layout is None else inner_meta(meta, layout)
    )
    if files is None or files.decompress is None:
        raise ValueError(f"{path}: {array!r} is not encoded as chunkio writes it")
    cut = 4 if files.checksum else 0
    n = -(-files.shape[0] // files.chunks[0])
    zeros = (0,) * (len(files.shape) - 1)
    if layout is None:
        blobs = [Path(files.path((c, *zeros))).read_bytes() for c in range(n)]
    else:  # the inner chunks of each shard (chunkio shards along the sample axis only)
        blobs = []
        for s in range(-(-n // layout.n_inner)):
            shard = Path(files.path((s, *zeros))).read_bytes()
            index = layout.parse_index(shard, where=f"{path}/{array} shard {s}")
            for i in range(min(layout.n_inner, n - s * layout.n_inner)):
                a, b = inner_range(index, i) or (0, 0)
                blobs.append(shard[a:b])
    chunk_nbytes = int(np.prod(files.chunks)) * files.dtype.itemsize
    decompress = files.decompress
    # the decoders take the stored bytes as a uint8 array (codec_table.Decode)
    stored = [np.frombuffer(b[: len(b) - cut], np.uint8) for b in blobs]
    return stored, lambda b, out: decompress(b, out), chunk_nbytes


def decode_rate(path: str, *, batch_size: int = 0) -> float:
    """Single-core samples/s of decompressing every stored chunk of the image field with
    numcodecs, from bytes already in memory into a reused buffer: the decode ceiling (no file
    read, no checksum, no gather). Best of three passes (the machine is shared).
    ``batch_size`` is unused (kept for callers of the old signature)."""
    from numcodecs import blosc

    blosc.set_nthreads(1)  # one core: "x cores" scales it
    blobs, decode, nbytes = stored_chunks(path)
    samples = chunkio.ChunkDataset(path, fields=["image"]).layout.num_samples
    out = np.empty(nbytes, np.uint8)
    hdf5 = path.endswith((".h5", ".hdf5"))
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for blob in blobs:
            decode(blob, out)
        seconds = time.perf_counter() - start
        if hdf5:  # its decoder copies each frame first (to patch it): not decode time
            copy = time.perf_counter()
            for blob in blobs:
                np.frombuffer(blob, np.uint8).copy()
            seconds -= time.perf_counter() - copy
        best = max(best, samples / seconds)
    return best


def add_limit_fractions(rows: list[dict[str, Any]], *, workers: int) -> None:
    """Give every loader row ``of_limit``: its samples/s over min(in-process gather, its
    format's decode rate x cores) (chunkio's own rows; baselines over the Zarr limit)."""
    gather = next(r for r in rows if r["name"] == "limit: in-process NumPy gather")
    decode = {
        r["name"].split()[1]: r["samples_per_s"]
        for r in rows
        if r["name"].startswith("limit:") and "decode rate" in r["name"]
    }
    for r in rows:
        if r["name"].startswith("limit:"):
            continue
        fmt = "hdf5" if "hdf5" in r["name"] or "h5py" in r["name"] else "zarr"
        limit = min(gather["samples_per_s"], decode.get(fmt, float("inf")))
        r["of_limit"] = r["samples_per_s"] / limit


def limit_rows(
    data: BenchData, *, workers: int, batch_size: int, min_s: float = MIN_S
) -> list[dict[str, Any]]:
    """The ceilings, on the chunk-aware batch order the loaders use."""
    order = _order(data, batch_size, workers)
    gather = _Replay(lambda: _gather(data.images, data.labels, order))
    rows = [
        _row(
            "limit: in-process NumPy gather",
            "limit",
            0,
            timed_rate(gather, budget_s=60, warmup=True, min_s=min_s),
        )
    ]
    dl = DataLoader(
        InMemoryBatchDataset(data.images, data.labels),
        batch_sampler=order,
        num_workers=workers,
        collate_fn=chunkio.collate,
        persistent_workers=workers > 0,
    )
    rate = timed_rate(dl, budget_s=60, warmup=True, min_s=min_s)
    rows.append(_row("limit: in-memory batched reader via DataLoader", "limit", workers, rate))
    for fmt, path in (("zarr", data.zarr), ("hdf5", data.hdf5)):
        one = decode_rate(path)
        rows.append(
            _row(
                f"limit: {fmt} decode rate x {cores()} cores",
                "limit",
                workers,
                one * cores(),
                per_core=one,
            )
        )
    return rows


def amplification(
    data: BenchData, *, workers: int, batch_size: int, pool_factors: Iterable[float]
) -> dict[str, Any]:
    """Read amplification (decoded / delivered), measured in-process through make_loader's own
    reader and modelled for ``workers`` ring workers, and what training sees (chunk and label
    mixing) for mixing pools of ``pool_factors`` x the default."""
    out: dict[str, Any] = {}
    for fmt, path in (("zarr", data.zarr), ("hdf5", data.hdf5)):
        # make_loader's order and pool, read in this process; the image field only, so
        # decoded rows / delivered rows = bytes / bytes
        # preload_bytes=0: on small sets the image field would otherwise be read whole once
        image = chunkio.ChunkDataset(path, fields=["image"], preload_bytes=0)
        with chunkio.make_loader(image, batch_size, num_workers=0) as loader:
            for _ in loader:
                pass
            stats = loader.dataset.read_stats()
        out[f"in_process_{fmt}"] = stats.rows_decoded / max(stats.samples, 1)
    ds = chunkio.ChunkDataset(data.zarr)
    sizes = ds.chunk_sizes()
    readers = max(1, workers)
    default = DEFAULT_POOL_BYTES
    out["readers"] = readers
    out["samples_per_chunk"] = int(sizes[0])
    out["default_pool_mib"] = default / 2**20
    labels = labels_of(ds.label_source())  # in storage order
    pools = []
    for factor in sorted(set(pool_factors) | {1.0}):
        pool_bytes = max(int(default * factor), ds.chunk_nbytes())
        d = describe_sampler(
            sizes,
            batch_size,
            readers=readers,
            pool=pool_samples(ds, pool_bytes, batch_size),
            labels=labels,
        )
        pools.append({"pool_mib": pool_bytes / 2**20, **d})
    out["pools"] = pools
    out["modelled_readers"] = next(p for p in pools if p["pool_mib"] == default / 2**20)[
        "read_amplification"
    ]
    return out
