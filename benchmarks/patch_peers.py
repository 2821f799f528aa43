"""The peers' side of ``bench_patch_peers``, run in their own venv (``make patch-peers-venv``).

    python benchmarks/patch_peers.py SPEC_JSON

Each peer set up as its documentation shows a user, on the files ``bench_patch_peers`` wrote:

* ``torchio``: ``SubjectsDataset`` of ``Subject(image=ScalarImage, label=LabelMap)`` on the
  NIfTI files, ``Queue(max_length, samples_per_volume, LabelSampler(patch, "label",
  {0: 2, 1: 1, 2: 1}), num_workers=2)`` (half the patches centred on foreground) and a
  ``DataLoader(queue, batch_size, num_workers=0)``, as TorchIO's patch-training tutorial;
* ``monai``: ``Dataset(data, Compose([LoadImaged, EnsureChannelFirstd,
  RandCropByPosNegLabeld(spatial_size=patch, pos=1, neg=1, num_samples)]))`` and
  ``monai.data.DataLoader(batch_size=batch // num_samples, num_workers=2)`` (whose collate
  flattens the crops of each volume into the batch), as MONAI's 3-D segmentation tutorials;
* ``zarrdataset``: ``ZarrDataset([ImagesDatasetSpecs, LabelsDatasetSpecs,
  MasksDatasetSpecs], PatchSampler(patch), shuffle=True)`` on the OME-Zarr stores (image
  ``0``, label image ``labels/seg/0``, mask ``masks/tissue`` at 1/8 scale) and a
  ``DataLoader(num_workers=2, worker_init_fn=zarrdataset_worker_init_fn)``, as its README;
  with ``"space": "YX"``, a whole-slide image (``CYX``, no labels) and its tissue mask, as its
  WSI example.

This file imports nothing of chunkio: chunkio's rows use its :func:`measure` too, so every row
is timed the same way. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import version
from typing import Any

import numpy as np
import psutil

#: batches each row takes before its timer starts, the same for every row (peers included):
#: enough that every worker has started and served, and every buffer a loader recycles has
#: been written once: chunkio's ring has ``workers * prefetch + held + 1`` = 6 slots at 2
#: workers, a DataLoader keeps ``workers * prefetch_factor`` = 4 batches in flight. A training
#: job pays that start-up once, then reads thousands of patches an epoch; with one warm-up
#: batch a short window timed the first writes of fresh memory (page faults) of the ring, the
#: DataLoader's shared tensors and the chunk pools along with the reads
WARMUP_BATCHES = 8


def tree_cpu() -> float:
    """CPU seconds of this process and its live children (the DataLoader's workers)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:  # a worker that just exited
            pass
    return total


def _forever(loader: Iterable[Any], epochs: list[int]) -> Iterator[Any]:
    while True:
        epochs[0] += 1
        yield from loader


def measure(loader: Iterable[Any], patches: int, count: Callable[[Any], int]) -> dict[str, Any]:
    """Patches/s (wall and per CPU-second of the process tree) over ``patches`` patches after
    :data:`WARMUP_BATCHES` untimed batches; epochs restart as needed (persistent workers):
    ``epochs`` counts those begun in the timed part (a loader's fixed cost per epoch weighs
    on a small epoch: a mask that leaves few patches)."""
    begun = [0]
    batches = _forever(loader, begun)
    for _ in range(WARMUP_BATCHES):
        next(batches)
    start, cpu, n, first = time.perf_counter(), tree_cpu(), 0, begun[0]
    for batch in batches:
        n += count(batch)
        if n >= patches:
            break
    wall, cpu = time.perf_counter() - start, tree_cpu() - cpu
    return {"patches": n, "wall_s": wall, "cpu_s": cpu, "epochs": begun[0] - first}


def _torchio(spec: dict[str, Any]) -> tuple[Any, Callable[[Any], int], dict[str, Any]]:
    import torchio as tio
    from torch.utils.data import DataLoader

    subjects = [
        tio.Subject(image=tio.ScalarImage(i), label=tio.LabelMap(lab))
        for i, lab in zip(spec["nifti_images"], spec["nifti_labels"], strict=True)
    ]
    per_volume = spec["samples_per_volume"]
    sampler = tio.LabelSampler(spec["patch"], "label", {0: 2, 1: 1, 2: 1})
    queue = tio.Queue(tio.SubjectsDataset(subjects), max_length=4 * per_volume,
                      samples_per_volume=per_volume, sampler=sampler,
                      num_workers=spec["workers"])  # fmt: skip
    loader = DataLoader(queue, batch_size=spec["batch"], num_workers=0)
    return loader, lambda b: len(b["image"][tio.DATA]), {"per_load": per_volume}


def _monai(spec: dict[str, Any]) -> tuple[Any, Callable[[Any], int], dict[str, Any]]:
    from monai.data import DataLoader, Dataset
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, RandCropByPosNegLabeld

    keys = ["image", "label"]
    n = spec["num_samples"]
    transform = Compose([
        LoadImaged(keys=keys),
        EnsureChannelFirstd(keys=keys),
        RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=[spec["patch"]] * 3,
                               pos=1, neg=1, num_samples=n, image_key="image"),
    ])  # fmt: skip
    data = [{"image": i, "label": lab}
            for i, lab in zip(spec["nifti_images"], spec["nifti_labels"], strict=True)]  # fmt: skip
    ds = Dataset(data, transform)
    loader = DataLoader(ds, batch_size=max(1, spec["batch"] // n), shuffle=True,
                        num_workers=spec["workers"], persistent_workers=True)  # fmt: skip
    return loader, lambda b: len(b["image"]), {"per_load": n}


def _zarrdataset(spec: dict[str, Any]) -> tuple[Any, Callable[[Any], int], dict[str, Any]]:
    import zarrdataset as zds
    from torch.utils.data import DataLoader

    stores = spec["ome_stores"]
    space = spec.get("space", "ZYX")  # "YX": a 2-D slide, image only
    specs = [zds.ImagesDatasetSpecs(filenames=stores, data_group="0", source_axes="C" + space)]
    if space == "ZYX":
        specs.append(zds.LabelsDatasetSpecs(filenames=stores, data_group="labels/seg/0",
                                            source_axes=space))  # fmt: skip
    specs.append(zds.MasksDatasetSpecs(filenames=stores, data_group="masks/tissue",
                                       source_axes=space))  # fmt: skip
    sampler = zds.PatchSampler(patch_size=spec["patch"], spatial_axes=space)
    ds = zds.ZarrDataset(specs, patch_sampler=sampler, shuffle=True, return_positions=True)
    loader = DataLoader(ds, batch_size=spec["batch"], num_workers=spec["workers"],
                        worker_init_fn=zds.zarrdataset_worker_init_fn,
                        persistent_workers=True)  # fmt: skip
    seen: list[Any] = []

    def count(batch: Any) -> int:
        seen.append(np.asarray(batch[0]))  # (B, axes, 2) positions: the chunks each touched
        return len(batch[0])

    return loader, count, {"positions": seen}


PEERS = {"torchio": _torchio, "monai": _monai, "zarrdataset": _zarrdataset}


def chunks_touched(starts: np.ndarray, patch: int, chunk: int) -> np.ndarray:
    """Chunks of edge ``chunk`` a patch of edge ``patch`` at ``starts`` (rows) overlaps."""
    return ((starts + patch - 1) // chunk - starts // chunk + 1).prod(axis=1)


def main() -> None:
    spec = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")  # the peers' deprecation notices
    loader, count, extra = PEERS[spec["peer"]](spec)
    result = measure(loader, spec["patches"], count)
    name = spec["peer"]
    result["version"] = version(name)
    patch, size = spec["patch"], spec["size"]
    if "per_load" in extra:  # a whole NIfTI volume (image + label) decoded per load
        result["read_amplification"] = size**3 / (extra["per_load"] * patch**3)
    else:  # the chunks each patch touches (an upper bound: it keeps the last box read)
        pos = np.concatenate(extra["positions"])
        ndim = len(spec.get("space", "ZYX"))
        spatial = pos[:, -ndim:, 0]  # axes C + space: the last ones are space
        touched = chunks_touched(spatial, patch, spec["chunk"])
        result["read_amplification"] = float(touched.mean() * (spec["chunk"] / patch) ** ndim)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
