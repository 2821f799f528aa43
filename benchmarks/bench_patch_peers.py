"""3-D patches against the peers: chunkio vs TorchIO, MONAI, zarrdataset and per-patch h5py/zarr.

One data set, side by side in one run, every row in its own process with 2 DataLoader workers,
the same patch size, batch size and patch count (``--patches`` after the same untimed warm-up
batches, :data:`~benchmarks.patch_peers.WARMUP_BATCHES`: every worker started and every
recycled buffer written once):

* ``chunkio converted``: ``convert_volumes`` of the volumes (Zarr, and HDF5), read with
  ``PatchDataset(path, patch, sampler=LabelBalancedSampler(n, foreground=0.5))`` through
  ``DataLoader(ds, sampler=ds.sampler, batch_size, num_workers=2, collate_fn=chunkio.collate)``;
* ``per-patch h5py`` / ``per-patch zarr``: a ``Dataset`` slicing ``image[v, z:z+p, ...]`` and
  the label per patch (handle opened in each worker) on the same files, the same patch keys in
  chunkio's chunk-grouped order (which HDF5's own 1 MiB chunk cache profits from), and for
  h5py the same keys shuffled too (what a ``DataLoader(shuffle=True)`` over them serves);
* ``TorchIO`` (``Queue`` + ``LabelSampler``) and ``MONAI`` (``RandCropByPosNegLabeld``) on the
  same volumes as gzipped NIfTI (nibabel), half the patches centred on foreground like
  chunkio's sampler (see :mod:`benchmarks.patch_peers`);
* ``chunkio OME-Zarr in place``: ``PatchDataset(stores, patch, mask="masks/tissue")`` on one
  OME-Zarr 0.4 store per volume (Zarr v2, Blosc-LZ4, chunks ``--chunk``, a label image and a
  1/8-scale tissue mask), a shuffled ``GridSampler`` (the chunk-aligned grid zarrdataset
  draws) and a ``RandomPatchSampler``; ``zarrdataset`` on the same stores and mask;
* ``make_loader``: chunkio's converted and shuffled-grid rows again through
  ``chunkio.make_loader(ds, batch, num_workers=2)`` (the shared-memory ring);
* ``zarrdataset's patches`` (group ``ome-same``): chunkio on the very grid patches
  zarrdataset draws (those the mask covers any voxel of, :class:`CoveredGrid`; chunkio's own
  grid keeps those centred in the mask, a smaller epoch), through ``make_loader`` and the
  DataLoader, against the same zarrdataset run.

The peers run in their own venv (``make patch-peers-venv``, ``PATCH_PEERS_VENV``); without it
their rows say so. Reported per row: patches/s (wall), patches per CPU-second of the process
tree (the row's process and its workers) and read amplification = bytes decoded / bytes
delivered: chunkio's own count (a one-process pass over the same keys); for the others the
analytic figure: whole volumes decoded per load for the NIfTI peers (image and label, a load
per ``samples_per_volume`` / ``num_samples`` patches), the chunks each patch touches for the
per-patch readers and zarrdataset (an upper bound: it keeps the last box it read); for the
``make_loader`` rows also its workers' own (one reader per worker, each batch's parts read by
the worker the ring deals them to: a batch split between workers decodes shared chunks twice).

    python -m benchmarks.bench_patch_peers [--quick] [--volumes 4] [--size 256] [--patch 64]
                                           [--chunk 64] [--patches 1024] [--rounds 1]
                                           [--peer-patches N] [--json PATH]
                                           [--groups converted,ome,ome-same] [--root DIR]

The timed window is 1,024 patches by default: a training epoch reads thousands of patches,
and what a training job sees is the steady rate after start-up, which a window of a few hundred
patches (a few dozen batches) measures with a large error on this kind of machine (a row's
wall rate moved up to 2x between runs at 256). The short window stays available
(``--patches 256``) and is reported too (docs/benchmarks.md).

``--rounds R`` runs every row R times, the rows alternating within each round (chunkio's, the
per-patch readers', zarrdataset's), and reports each row's median and range over the rounds;
a row's ratio to its group's first row is the median of the per-round ratios (the rows of a
round ran side by side), with their range. TorchIO and MONAI (two orders of magnitude slower) run
once, in the first round, over ``--peer-patches`` patches (default: ``--patches``).

Each row also reports the epochs its timed patches spanned (a loader's fixed cost per epoch
weighs on a mask that leaves few patches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.patch_peers import WARMUP_BATCHES, chunks_touched, measure
from chunkio.patches import GridSampler
from chunkio.patches.masks import VolumeMask
from chunkio.patches.samplers import locality_order

__all__ = ["make_data", "run", "run_row"]

HERE = Path(__file__).resolve().parent
PEERS_VENV = Path(os.environ.get("PATCH_PEERS_VENV", "/work/venv-patchpeers"))
WORKERS = 2
BATCH = 8
#: TorchIO's ``samples_per_volume`` and MONAI's ``num_samples`` (their tutorials' order)
PER_LOAD = 4
#: the tissue mask's downsampling factor (one mask voxel per MASK_STEP^3 image voxels)
MASK_STEP = 8
QUICK = {"volumes": 2, "size": 48, "patch": 16, "chunk": 16, "patches": 32}


def _volume(size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A smooth int16 "organ" field plus noise, and labels 0/1/2 by its level (separable
    Gaussians: no ``size``^3 float temporaries per blob)."""
    axis = np.linspace(0.0, 1.0, size, dtype=np.float32)
    field = np.zeros((size,) * 3, np.float32)
    for centre in rng.uniform(0.25, 0.75, (6, 3)):
        z, y, x = (np.exp(-((axis - c) ** 2) / 0.02) for c in centre)
        field += z[:, None, None] * y[None, :, None] * x[None, None, :]
    noise = rng.normal(0, 20, field.shape).astype(np.float32)
    image = (field * 1000 + noise).astype(np.int16)
    label = (field > 0.8).astype(np.uint8) + (field > 1.2).astype(np.uint8)
    return image, label


def _write_ome(path: Path, image: np.ndarray, label: np.ndarray, chunk: int) -> None:
    """One OME-Zarr 0.4 image (Zarr v2, zarr's default Blosc-LZ4): ``0`` (c, z, y, x), a label
    image ``labels/seg`` and a 1/MASK_STEP-scale tissue mask ``masks/tissue``."""
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"
    ]
    scale = [{"type": "scale", "scale": [1.0, 1.0, 1.0, 1.0]}]
    level = {"path": "0", "coordinateTransformations": scale}
    root.attrs["multiscales"] = [
        {"version": "0.4", "name": "image", "axes": axes, "datasets": [level]}
    ]
    root.create_array("0", data=image[None], chunks=(1, chunk, chunk, chunk))
    labels = root.create_group("labels")
    labels.attrs["labels"] = ["seg"]
    seg = labels.create_group("seg")
    level = {
        "path": "0",
        "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}],
    }
    seg.attrs["multiscales"] = [
        {"version": "0.4", "name": "seg", "axes": axes[1:], "datasets": [level]}
    ]
    seg.attrs["image-label"] = {"version": "0.4", "source": {"image": "../../"}}
    seg.create_array("0", data=label, chunks=(chunk,) * 3)
    # tissue: the mask voxels whose block holds any labelled voxel, grown by one mask voxel
    s = image.shape[0] // MASK_STEP
    blocks = label.reshape(s, MASK_STEP, s, MASK_STEP, s, MASK_STEP).max(axis=(1, 3, 5)) > 0
    grown = blocks.copy()
    for ax in range(3):
        grown |= np.roll(blocks, 1, ax) | np.roll(blocks, -1, ax)
    root.create_group("masks").create_array("tissue", data=grown.astype(np.uint8))


def make_data(root: Path, *, volumes: int, size: int, chunk: int, seed: int = 0) -> dict[str, Any]:
    """Every file the rows read, under ``root``: volumes as ``.npy``, gzipped NIfTI, a chunkio
    volume dataset (Zarr and HDF5, chunks ``chunk``^3) and OME-Zarr 0.4 stores."""
    import nibabel as nib

    from chunkio import Execution, Output
    from chunkio.convert.volumes import convert_volumes

    if size % MASK_STEP:
        raise ValueError(f"size must be a multiple of {MASK_STEP}; got {size}")
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {k: [] for k in ("npy_images", "npy_labels", "nifti_images",
                                           "nifti_labels", "ome_stores")}  # fmt: skip
    for i in range(volumes):
        image, label = _volume(size, rng)
        for kind, arr in (("images", image), ("labels", label)):
            npy = root / f"{kind[:3]}{i}.npy"
            np.save(npy, arr)
            out[f"npy_{kind}"].append(str(npy))
            nii = root / f"{kind[:3]}{i}.nii.gz"
            nib.save(nib.Nifti1Image(arr, np.eye(4)), str(nii))
            out[f"nifti_{kind}"].append(str(nii))
        store = root / f"vol{i}.ome.zarr"
        _write_ome(store, image, label, chunk)
        out["ome_stores"].append(str(store))
    for fmt, suffix in (("zarr", ".zarr"), ("hdf5", ".h5")):
        out[fmt] = str(root / f"converted{suffix}")
        convert_volumes(out["npy_images"], out[fmt], labels=out["npy_labels"],
                        output=Output(chunks=chunk),
                        execution=Execution(progress=False, overwrite=True, workers=1))  # fmt: skip
    return out


# -- chunkio's rows and the per-patch readers (run in a child process each) -------------------


class PerPatch:
    """What a user writes first: a ``Dataset`` over patch keys slicing the image and label
    arrays per patch (h5py or zarr-python, the handle opened in each worker)."""

    def __init__(self, path: str, fmt: str, keys: np.ndarray, patch: int) -> None:
        self.path, self.fmt, self.keys, self.patch = path, fmt, keys, patch
        self._arrays: Any = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        if self._arrays is None:
            if self.fmt == "hdf5":
                import h5py
                import hdf5plugin  # noqa: F401  (chunkio's HDF5 chunks are LZ4: filter 32004)

                f = h5py.File(self.path, "r")
            else:
                import zarr

                f = zarr.open_group(self.path, mode="r")
            self._arrays = (f["image"], f["label"])
        v, z, y, x = (int(c) for c in self.keys[i])
        p = self.patch
        box = (v, slice(z, z + p), slice(y, y + p), slice(x, x + p))
        image, label = (np.asarray(a[box]) for a in self._arrays)
        return {"image": torch.from_numpy(image), "label": torch.from_numpy(label)}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}


class CoveredGrid(GridSampler):
    """The grid patches of which the mask covers *any* voxel: the patches zarrdataset's
    ``PatchSampler`` draws (its default ``min_area=1``), where chunkio's grid keeps those
    *centred* in the mask (fewer: 11 against 99 an epoch at 64^3 on these stores, 2 against
    28 at 128^3); in chunkio's shuffled, chunk-grouped order. The same patches as
    zarrdataset's: the rows that compare the two readers patch for patch."""

    def global_keys(self, epoch: int) -> np.ndarray:
        if getattr(self, "_covered", None) is None:
            keys = np.concatenate([self.volume_keys(v) for v in range(self.volumes.count)])
            mask = self.mask
            if mask is not None:
                hit = [_covers(mask.volumes[k[0]], k[1:], self.patch_size) for k in keys]
                keys = keys[np.asarray(hit, bool)]
            self._covered = keys
        rng = np.random.default_rng([self.seed, epoch])
        return self._covered[locality_order(self._covered, self.patch_size, self.volumes, rng)]


def _covers(mask: VolumeMask, origin: np.ndarray, patch: tuple[int, ...]) -> bool:
    """Whether a nonzero voxel of ``mask`` covers any voxel of the patch at ``origin``."""
    box = []
    for edges, o, p in zip(mask.edges, origin.tolist(), patch, strict=True):
        first = int(np.searchsorted(edges, o, side="right")) - 1
        box.append(slice(max(first, 0), int(np.searchsorted(edges, o + p, side="left"))))
    return bool(mask.values[tuple(box)].any())


def _chunkio_dataset(spec: dict[str, Any]) -> Any:
    from chunkio.patches import LabelBalancedSampler, PatchDataset, RandomPatchSampler

    patch = (spec["patch"],) * 3
    # warm-up and a margin (batches in flight): the timed pass never runs out
    n = spec["patches"] + BATCH * (WARMUP_BATCHES + 4)
    if spec["kind"] == "converted":
        sampler = LabelBalancedSampler(n, foreground=0.5, seed=0)
        return PatchDataset(spec["path"], patch, sampler=sampler)
    samplers = {
        "grid": lambda: GridSampler(shuffle=True, seed=0),
        "covered": lambda: CoveredGrid(shuffle=True, seed=0),
        "random": lambda: RandomPatchSampler(n, seed=0),
    }
    sampler = samplers[spec["sampler"]]()
    return PatchDataset(spec["ome_stores"], patch, sampler=sampler, mask="masks/tissue")


def _amplification(ds: Any, keys: np.ndarray, batch: int = BATCH) -> float:
    """Bytes decoded / delivered of one in-process pass over ``keys`` in batches."""
    before = ds.read_stats()  # the live counters: read them now
    decoded, delivered = before.bytes_decoded, before.bytes_delivered
    for start in range(0, len(keys), batch):
        ds.read_patches(keys[start : start + batch])
    after = ds.read_stats()
    return float((after.bytes_decoded - decoded) / (after.bytes_delivered - delivered))


def _deal(ranges: list[tuple[int, int]], seq: int, workers: int) -> dict[int, tuple[int, int]]:
    """The worker reading each part of the ``seq``-th batch, as the ring deals them."""
    try:
        from chunkio.transport.parts import assign
    except ImportError:  # a chunkio before parts were dealt: part w to worker w, every batch
        return {w: r for w, r in enumerate(ranges) if r[1] > r[0]}
    return assign(ranges, seq, workers)


def _worker_amplification(spec: dict[str, Any], keys: np.ndarray) -> float:
    """Bytes decoded / delivered by ``make_loader``'s ring workers over ``keys``: one reader
    per worker, in this process, each batch's parts (the loader's ``reader_rows``) read by
    the worker the ring deals them to."""
    from chunkio.patches.loading import PatchBatchSampler

    readers = [_chunkio_dataset(spec) for _ in range(WORKERS)]
    rows = PatchBatchSampler(readers[0].sampler, BATCH, rank=0, world_size=1).reader_rows
    for seq, start in enumerate(range(0, len(keys), BATCH)):
        batch = keys[start : start + BATCH]
        for w, (a, b) in _deal(list(rows(len(batch), WORKERS)), seq, WORKERS).items():
            readers[w].read_patches(batch[a:b])
    stats = [r.read_stats() for r in readers]
    return float(sum(s.bytes_decoded for s in stats) / sum(s.bytes_delivered for s in stats))


def _timed(keys: np.ndarray, batch: int = BATCH) -> np.ndarray:
    """The keys past the warm-up batches (all of them in an epoch shorter than those)."""
    warm = batch * WARMUP_BATCHES
    return keys[warm:] if len(keys) > warm else keys


def run_row(spec: dict[str, Any]) -> dict[str, Any]:
    """One chunkio or per-patch row, in this process and its 2 workers."""
    import torch
    from torch.utils.data import DataLoader

    import chunkio

    torch.set_num_threads(1)
    if spec["kind"] == "per-patch":
        keys = np.asarray(spec["keys"])
        data = PerPatch(spec["path"], spec["format"], keys, spec["patch"])
        loader = DataLoader(data, batch_size=BATCH, num_workers=WORKERS,
                            persistent_workers=True)  # fmt: skip
        result = measure(loader, spec["patches"], lambda b: len(b["image"]))
        touched = chunks_touched(_timed(keys)[:, 1:], spec["patch"], spec["chunk"])
        result["read_amplification"] = float(
            touched.mean() * spec["chunk"] ** 3 / spec["patch"] ** 3
        )
        return result
    ds = _chunkio_dataset(spec)
    # before the pass (keys() is what remains): the warm-up's and the timed ones, in order
    keys = ds.sampler.keys()[: BATCH * WARMUP_BATCHES + spec["patches"]]
    if spec.get("route") == "make_loader":  # the ring: workers read into shared memory
        loader = chunkio.make_loader(ds, BATCH, num_workers=WORKERS)
    else:
        loader = DataLoader(ds, sampler=ds.sampler, batch_size=BATCH, num_workers=WORKERS,
                            collate_fn=chunkio.collate, persistent_workers=True)  # fmt: skip
    result = measure(loader, spec["patches"], lambda b: len(b["image"]))
    close = getattr(loader, "close", None)
    if callable(close):
        close()
    if spec.get("amplify", True):  # the same keys every round: counted in the first only
        result["read_amplification"] = _amplification(_chunkio_dataset(spec), _timed(keys))
        if spec.get("route") == "make_loader":
            result["worker_amplification"] = _worker_amplification(spec, _timed(keys))
    result["keys"] = keys.tolist()
    return result


# -- the parent: builds the data, runs each row in its own process ----------------------------


def _child(cmd: list[str], timeout_s: float) -> dict[str, Any]:
    """Run one row in its own session; its last stdout line as JSON, or what went wrong (on a
    timeout, the row's process group is killed: its workers with it)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=HERE.parent, env=env, start_new_session=True) as proc:  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this row's process leads
            proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:]
        return {"error": f"exit {proc.returncode}: {' '.join(tail)[:300]}"}
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def _ours(
    spec: dict[str, Any], timeout_s: float, module: str = "benchmarks.bench_patch_peers"
) -> dict[str, Any]:
    return _child([sys.executable, "-m", module, "--child", json.dumps(spec)], timeout_s)


def _peer(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        return {"error": f"no peers venv at {PEERS_VENV} (make patch-peers-venv)"}
    return _child([str(python), str(HERE / "patch_peers.py"), json.dumps(spec)], timeout_s)


def run(*, volumes: int = 4, size: int = 256, patch: int = 64, chunk: int = 64,
        patches: int = 1024, peers: bool = True, root: str | Path | None = None,
        timeout_s: float = 900, groups: tuple[str, ...] = ("converted", "ome", "ome-same"),
        rounds: int = 1, peer_patches: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Every row on one data set; ``peers=False`` runs chunkio's and the per-patch rows only;
    ``groups``: the converted rows (with the per-patch readers, TorchIO and MONAI), the
    OME-Zarr ones (with zarrdataset), and chunkio on zarrdataset's very patches (``ome-same``).
    ``rounds``: every row that many times, alternating (TorchIO and MONAI once, over
    ``peer_patches``); each row's figures are the medians over its rounds."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    base = Path(root) if root else Path(tempfile.mkdtemp(prefix="chunkio-patch-peers-"))
    base.mkdir(parents=True, exist_ok=True)  # a --root not made yet
    try:
        started = time.perf_counter()
        made = base / f"data-{volumes}x{size}-c{chunk}.json"  # a kept root's data is reused
        if made.exists():
            data = json.loads(made.read_text())
        else:
            data = make_data(base, volumes=volumes, size=size, chunk=chunk)
            made.write_text(json.dumps(data))
        config = {"volumes": volumes, "size": size, "patch": patch, "chunk": chunk,
                  "patches": patches, "batch": BATCH, "workers": WORKERS, "dtype": "int16",
                  "warmup_batches": WARMUP_BATCHES, "rounds": rounds,
                  "peer_patches": peer_patches or patches,
                  "data_s": time.perf_counter() - started}  # fmt: skip
        common = {**data, "patch": patch, "chunk": chunk, "patches": patches, "size": size,
                  "batch": BATCH, "workers": WORKERS}  # fmt: skip
        runs: dict[tuple[str, str], list[dict[str, Any] | None]] = {}
        for rnd in range(rounds):

            def add(name: str, group: str, result: dict[str, Any], rnd: int = rnd) -> Any:
                found = runs.setdefault((name, group), [None] * rounds)
                found[rnd] = _rates(result)
                print(f"round {rnd + 1}/{rounds} {name}: {found[rnd]}", file=sys.stderr)
                return result

            each = {**common, "amplify": rnd == 0}  # the same keys: counted once
            slow = {**common, "patches": peer_patches or patches} if peers and not rnd else None
            if "converted" in groups:
                _converted_rows(each, data, slow, timeout_s, add)
            if {"ome", "ome-same"} & set(groups):
                _ome_rows(each, peers, timeout_s, add, groups)
        rows = [_aggregate(name, group, found) for (name, group), found in runs.items()]
        return {"config": config, "results": rows}
    finally:
        if not root:
            shutil.rmtree(base, ignore_errors=True)


def _converted_rows(common: dict[str, Any], data: dict[str, Any], slow: dict[str, Any] | None,
                    timeout_s: float, add: Any) -> None:  # fmt: skip
    """chunkio's converted rows, the per-patch readers on chunkio's keys, and TorchIO and
    MONAI with ``slow`` (their settings; ``None``: not this round)."""
    converted = {**common, "kind": "converted"}
    ours = add("chunkio converted (Zarr)", "converted",
                   _ours({**converted, "path": data["zarr"]}, timeout_s))  # fmt: skip
    add("chunkio converted (HDF5)", "converted",
            _ours({**converted, "path": data["hdf5"]}, timeout_s))  # fmt: skip
    ring = {**converted, "path": data["zarr"], "route": "make_loader"}
    add("chunkio converted (Zarr), make_loader", "converted", _ours(ring, timeout_s))
    ring = {**converted, "path": data["hdf5"], "route": "make_loader"}
    add("chunkio converted (HDF5), make_loader", "converted", _ours(ring, timeout_s))
    keys = ours.get("keys")
    for fmt in ("hdf5", "zarr"):
        name = f"per-patch {'h5py' if fmt == 'hdf5' else 'zarr'} (same file, same keys)"
        if keys is None:
            add(name, "converted", {"error": "chunkio's row failed: no keys"})
            continue
        spec = {
            **common,
            "kind": "per-patch",
            "path": data[fmt],
            "format": fmt,
            "keys": keys,
        }
        add(name, "converted", _ours(spec, timeout_s))
    if keys is not None:  # as DataLoader(shuffle=True) orders them: no shared chunks
        shuffled = np.asarray(keys)[np.random.default_rng(0).permutation(len(keys))]
        spec = {**common, "kind": "per-patch", "path": data["hdf5"], "format": "hdf5",
                    "keys": shuffled.tolist()}  # fmt: skip
        add("per-patch h5py (same keys, shuffled)", "converted", _ours(spec, timeout_s))
    if slow is not None:
        per = {"samples_per_volume": PER_LOAD, "num_samples": PER_LOAD}
        add("TorchIO Queue + LabelSampler (NIfTI)", "converted",
                _peer({**slow, **per, "peer": "torchio"}, timeout_s))  # fmt: skip
        add("MONAI RandCropByPosNegLabeld (NIfTI)", "converted",
                _peer({**slow, **per, "peer": "monai"}, timeout_s))  # fmt: skip


def _ome_rows(common: dict[str, Any], peers: bool, timeout_s: float, add: Any,
              groups: tuple[str, ...]) -> None:  # fmt: skip
    """chunkio's OME-Zarr rows against zarrdataset: its own grid and random patches
    (``ome``), and zarrdataset's very patches (``ome-same``: :class:`CoveredGrid`)."""
    peer: dict[str, Any] | None = None
    if "ome" in groups:
        for sampler in ("grid", "random"):
            add(f"chunkio OME-Zarr in place, mask, {sampler}", "ome",
                _ours({**common, "kind": "ome", "sampler": sampler}, timeout_s))  # fmt: skip
        add("chunkio OME-Zarr in place, mask, grid, make_loader", "ome",
            _ours({**common, "kind": "ome", "sampler": "grid", "route": "make_loader"},
                  timeout_s))  # fmt: skip
        if peers:
            peer = add("zarrdataset (same stores, mask)", "ome",
                       _peer({**common, "peer": "zarrdataset"}, timeout_s))  # fmt: skip
    if "ome-same" in groups:
        for route in ("make_loader", "DataLoader"):
            add(f"chunkio OME-Zarr in place, zarrdataset's patches, {route}", "ome-same",
                _ours({**common, "kind": "ome", "sampler": "covered", "route": route.lower()},
                      timeout_s))  # fmt: skip
        if peers:  # the same run of it as in the group above, if that ran
            found = peer or _peer({**common, "peer": "zarrdataset"}, timeout_s)
            add("zarrdataset (same stores, mask)", "ome-same", found)


def _rates(r: dict[str, Any]) -> dict[str, Any]:
    if "error" in r:
        return {"error": r["error"]}
    out = {"patches_per_s": r["patches"] / r["wall_s"],
           "patches_per_cpu_s": r["patches"] / r["cpu_s"] if r["cpu_s"] > 0 else None,
           "patches": r["patches"]}  # fmt: skip
    if "read_amplification" in r:
        out["read_amplification"] = r["read_amplification"]
    if "epochs" in r:
        out["epochs"] = r["epochs"]
    if "worker_amplification" in r:
        out["worker_amplification"] = r["worker_amplification"]
    if "version" in r:
        out["version"] = r["version"]
    return out


def _aggregate(name: str, group: str, runs: list[dict[str, Any] | None]) -> dict[str, Any]:
    """One row from its rounds (``None``: not run that round): the medians of its rates,
    their ranges, and each round's rates (``rounds``, for the paired ratios); the first
    round's error if every round failed."""
    ran = [r for r in runs if r is not None]
    ok = [r for r in ran if "error" not in r]
    row: dict[str, Any] = {"reader": name, "group": group}
    if not ok:
        return {**row, "error": ran[0]["error"] if ran else "not run"}
    for key in ("patches_per_s", "patches_per_cpu_s"):
        values = [r[key] for r in ok if r[key] is not None]
        row[key] = float(np.median(values)) if values else None
        row[f"{key}_range"] = [min(values), max(values)] if values else None
    for key in ("read_amplification", "worker_amplification", "version", "patches"):
        found = [r[key] for r in ok if key in r]
        if found:
            row[key] = found[0]
    row["epochs"] = max((r.get("epochs", 0) for r in ok), default=0)
    row["rounds"] = [
        None if r is None or "error" in r else [r["patches_per_s"], r["patches_per_cpu_s"]]
        for r in runs
    ]
    return row


def _ratio(first: dict[str, Any], row: dict[str, Any], k: int) -> tuple[float, float, float]:
    """The first row's rate over ``row``'s (``k``: 0 wall, 1 CPU): the median over the rounds
    both ran, with its range; the medians' ratio if they share none."""
    mine, theirs = first.get("rounds") or [], row.get("rounds") or []
    pairs = [(a[k], b[k]) for a, b in zip(mine, theirs, strict=False)
             if a is not None and b is not None and a[k] and b[k]]  # fmt: skip
    if pairs:
        ratios = [a / b for a, b in pairs]
        return float(np.median(ratios)), min(ratios), max(ratios)
    key = ("patches_per_s", "patches_per_cpu_s")[k]
    ratio = (first[key] or 0) / (row[key] or float("inf"))
    return ratio, ratio, ratio


def _span(row: dict[str, Any], key: str) -> str:
    if row[key] is None:  # no CPU time measured (a tiny run)
        return "-"
    text = f"{row[key]:,.1f}"
    found = row.get(f"{key}_range")
    if found and len([r for r in row.get("rounds") or [] if r is not None]) > 1:
        text += f" ({found[0]:,.0f}-{found[1]:,.0f})"
    return text


def table(result: dict[str, Any]) -> str:
    """Markdown rows, with each row's ratio to chunkio's first row of its group (wall, CPU):
    medians, and over several rounds their ranges."""
    head = "| reader | patches/s | patches/CPU-s | read amplification | chunkio x (wall, CPU) |"
    lines = [head, "|---|---|---|---|---|"]
    firsts: dict[str, dict[str, Any]] = {}
    for r in result["results"]:
        if "error" in r:
            lines.append(f"| {r['reader']} | - | - | - | {r['error']} |")
            continue
        first = firsts.setdefault(r["group"], r)
        ratio = ""
        if r is not first:
            parts = []
            for k in (0, 1):
                mid, lo, hi = _ratio(first, r, k)
                parts.append(f"{mid:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if hi > lo else ""))
            ratio = ", ".join(parts)
        name = r["reader"] + (f" {r['version']}" if "version" in r else "")
        if r.get("patches", 0) < 0.9 * result.get("config", {}).get("patches", 0):  # TorchIO
            name += f" [{r['patches']} patches]"
        amp = f"{r['read_amplification']:.2f}" if "read_amplification" in r else "-"
        if "worker_amplification" in r:
            amp += f" (its workers: {r['worker_amplification']:.2f})"
        lines.append(f"| {name} | {_span(r, 'patches_per_s')} | {_span(r, 'patches_per_cpu_s')}"
                     f" | {amp} | {ratio} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--no-peers", action="store_true", help="chunkio and per-patch rows only")
    for name, default in (("volumes", 4), ("size", 256), ("patch", 64), ("chunk", 64),
                          ("patches", 1024), ("rounds", 1)):  # fmt: skip
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--peer-patches", type=int,
                        help="TorchIO's and MONAI's patches (default: --patches)")  # fmt: skip
    parser.add_argument("--root", help="write the data here and keep it (reused if there)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per row")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--groups", default="converted,ome,ome-same",
                        help="row groups: converted, ome, ome-same (comma-separated)")  # fmt: skip
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_row(json.loads(args.child))))
        return
    sizes = {k: getattr(args, k) for k in ("volumes", "size", "patch", "chunk", "patches")}
    groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    if not groups or set(groups) - {"converted", "ome", "ome-same"}:
        parser.error(f"--groups: expected converted, ome, ome-same; got {args.groups!r}")
    if args.rounds < 1:
        parser.error(f"--rounds: expected >= 1; got {args.rounds}")
    result = run(**(QUICK if args.quick else sizes), peers=not args.no_peers, root=args.root,
                 timeout_s=args.timeout, groups=groups, rounds=args.rounds,
                 peer_patches=args.peer_patches)  # fmt: skip
    print(json.dumps(result["config"]))
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
