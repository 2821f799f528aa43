"""The mixing pool and LabelMixingWarning on a user's own store sorted by label (nothing
shuffled it when it was written): batches mix labels like a uniform shuffle with the defaults,
and the warning fires exactly when the settings make them mix worse than 90% of one."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_stores import labelled

import chunkio
from chunkio import Ordering
from chunkio.diagnose import cli
from chunkio.sampling.label_check import LabelMixingWarning

N, CLASSES, BATCH, CHUNK = 4000, 100, 64, 32
SAMPLE = 3 * 8 * 8 + 8  # bytes of one sample: image and label (the pool counts every field)


def _uniform_distinct(labels: np.ndarray) -> float:
    """Mean distinct labels per batch of a uniform random permutation."""
    order = np.random.default_rng(0).permutation(len(labels))
    batches = order[: len(order) // BATCH * BATCH].reshape(-1, BATCH)
    return float(np.mean([len(np.unique(labels[b])) for b in batches]))


def _epoch(path: Path, fields: Any, **kw: Any) -> tuple[float, bool]:
    """Mean distinct labels per full batch of an epoch, and whether the loader warned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = chunkio.make_loader(path, BATCH, fields=fields, num_workers=0, seed=0, **kw)
    warned = any(issubclass(w.category, LabelMixingWarning) for w in caught)
    with loader:
        distinct = [len(np.unique(y.numpy())) for _, y in loader][:-1]
    return float(np.mean(distinct)), warned


@pytest.mark.parametrize("store", ["h5py", "zarr v3 sharded"])
def test_a_label_sorted_users_store_mixes_like_a_uniform_shuffle(
    tmp_path: Path, store: str
) -> None:
    path, arrays, source = labelled(tmp_path, store, N, CLASSES, chunk=CHUNK)
    uniform = _uniform_distinct(source["label"])
    # a list of paths: the labels are field "labels", a name users' files give them
    fields = [arrays["image"], arrays["label"]]
    settings: dict[str, dict[str, Any]] = {
        "defaults": {},
        "pool of all the data": {"ordering": Ordering(pool_bytes=N * SAMPLE)},
        "pool of 1/16 of the data": {"ordering": Ordering(pool_bytes=N // 16 * SAMPLE)},
        "one chunk, one lane": {"ordering": Ordering(pool_bytes=CHUNK * SAMPLE, lanes=1)},
    }
    ratios = {}
    for name, kw in settings.items():
        seen, warned = _epoch(path, fields, **kw)
        ratios[name] = seen / uniform
        # the warning fires when (and only when) the loader mixes worse than 90% of uniform
        assert warned == (ratios[name] < 0.9), (name, ratios)
    print(store, {k: round(v, 3) for k, v in ratios.items()}, f"uniform {uniform:.2f}")
    assert ratios["defaults"] >= 0.9 and ratios["pool of all the data"] >= 0.9, ratios
    assert ratios["one chunk, one lane"] < 0.5, ratios  # the warning had cause


def test_the_warning_names_what_to_do_with_a_users_store(tmp_path: Path) -> None:
    path, arrays, _ = labelled(tmp_path, "zarr v2", N, CLASSES, chunk=CHUNK)
    small = {"ordering": Ordering(pool_bytes=CHUNK * SAMPLE, lanes=1)}
    fields = {"x": arrays["image"], "y": arrays["label"]}
    with pytest.raises(LabelMixingWarning, match=r"sorted by label.*pool_bytes") as caught:
        chunkio.make_loader(path, BATCH, fields=fields, num_workers=0, **small)
    # the copy it advises is a command that runs as printed and mixes the labels
    command = str(caught.value).split(": ")[-1]
    argv = shlex.split(command)
    assert argv[:4] == ["chunkio", "convert", "arrays", str(path)]
    assert cli.main([*argv[1:], "--no-progress"]) == 0
    copy = chunkio.make_loader(argv[4], BATCH, num_workers=0)  # shuffled: no warning
    assert len(copy.dataset) == N and copy.dataset.fields[:2] == ("x", "y")
    # no labels field under any name it goes by: nothing to check, no warning
    chunkio.make_loader(path, BATCH, fields={"x": arrays["image"], "c": arrays["label"]},
                        num_workers=0, **small)  # fmt: skip


def test_a_shuffled_users_store_does_not_warn_even_with_a_small_pool(tmp_path: Path) -> None:
    path, arrays, source = labelled(tmp_path, "h5py", N, CLASSES, chunk=CHUNK, sort=False)
    seen, warned = _epoch(path, [arrays["image"], arrays["label"]],
                          ordering=Ordering(pool_bytes=CHUNK * SAMPLE, lanes=1))  # fmt: skip
    assert not warned and seen >= 0.9 * _uniform_distinct(source["label"])


def test_a_native_dataset_names_its_labels_the_same_way(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"x": rng.random((N, 4), np.float32), "labels": np.repeat(np.arange(100), N // 100)}
    path = tmp_path / "native.zarr"
    chunkio.write_arrays(
        path,
        arrays,
        shuffle=False,
        output=chunkio.Output(chunks=CHUNK),
        execution=chunkio.Execution(progress=False),
    )
    with pytest.raises(LabelMixingWarning, match=r"sorted by label.*Reconvert with shuffle=True"):
        chunkio.make_loader(
            path, BATCH, num_workers=0, ordering=chunkio.Ordering(pool_bytes=CHUNK * 24, lanes=1)
        )


def test_labels_stored_as_one_chunk_do_not_make_the_store_one_chunk(tmp_path: Path) -> None:
    """zarr-python stores a label vector as one chunk; it is read whole once per process, so
    the order follows the images' chunks and a pool smaller than the store still works."""
    path, arrays, source = labelled(tmp_path, "zarr v3 sharded", N, CLASSES, chunk=CHUNK,
                                    sort=False)  # fmt: skip
    fields = {"image": arrays["image"], "label": arrays["label"]}
    # images too large to preload, labels not: as with a real store
    ds = chunkio.ChunkDataset(path, fields=fields, preload_bytes=N * 8)
    assert ds.samples_per_chunk == CHUNK  # not N: the labels' one chunk
    loader = chunkio.make_loader(
        ds,
        BATCH,
        num_workers=0,
        ordering=chunkio.Ordering(pool_bytes=N // 4 * SAMPLE),
        workers=chunkio.Workers(copy=True),
    )
    assert sorted(np.concatenate([y.numpy() for _, y in loader])) == sorted(source["label"])
