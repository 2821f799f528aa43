"""make_loader's order: the same global batches for every worker count, resumable across them,
well mixed labels, and clear errors for bad pool, seed and state arguments."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest

import chunkio
from chunkio.errors import IncompatibleStateError
from chunkio.sampling.label_check import LabelMixingWarning
from chunkio.sampling.label_metrics import uniform_distinct_labels

N, CLASSES = 1200, 20


@pytest.fixture(scope="module", params=["zarr", "h5"])
def ids_dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("order") / f"ids.{request.param}")
    arrays = {
        "sample_id": np.arange(N, dtype=np.int64),
        "x": np.arange(N * 48, dtype=np.float32).reshape(N, 3, 4, 4),
    }
    chunkio.write_arrays(path, arrays, shuffle=False, output=chunkio.Output(chunks=25))
    return path


def _epoch(loader: chunkio.ChunkLoader) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


@pytest.mark.timeout(180)
def test_global_sequence_is_the_same_for_0_1_2_3_workers(ids_dataset: str) -> None:
    runs = {}
    for workers in (0, 1, 2, 3):
        with chunkio.make_loader(
            ids_dataset,
            64,
            fields=["sample_id", "x"],
            num_workers=workers,
            seed=3,
            ordering=chunkio.Ordering(pool_bytes=8 << 10),
        ) as loader:
            assert loader.transport == ("local" if workers == 0 else "ring")
            runs[workers] = [_epoch(loader), _epoch(loader)]  # two epochs: they differ
    assert runs[0][0] != runs[0][1]
    for workers in (1, 2, 3):
        assert runs[workers] == runs[0], f"num_workers={workers} changed the order"
    assert sorted(i for b in runs[0][0] for i in b) == list(range(N))
    # the DataLoader route gives the same order too
    with chunkio.make_loader(
        ids_dataset,
        64,
        fields=["sample_id", "x"],
        num_workers=2,
        seed=3,
        ordering=chunkio.Ordering(pool_bytes=8 << 10),
        workers=chunkio.Workers(transport="dataloader"),
    ) as loader:
        assert [_epoch(loader), _epoch(loader)] == runs[0]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 3), (3, 1)])
def test_resume_onto_another_worker_count(ids_dataset: str, before: int, after: int) -> None:
    def make(workers: int) -> chunkio.ChunkLoader:
        return chunkio.make_loader(
            ids_dataset,
            50,
            fields=["sample_id", "x"],
            num_workers=workers,
            seed=1,
            ordering=chunkio.Ordering(pool_bytes=8 << 10),
        )

    with make(0) as ref_loader:
        ref_loader.set_epoch(4)
        reference = _epoch(ref_loader)
    with make(before) as first:
        first.set_epoch(4)
        got = []
        for batch in first:
            got.append(batch[0].tolist())
            if len(got) == 7:
                state = json.loads(json.dumps(first.state_dict()))
                break
    with make(after) as second:
        second.load_state_dict(state)
        second.set_epoch(4)
        rest = _epoch(second)
    assert got + rest == reference  # 0 duplicates, 0 drops


def test_bad_pool_seed_and_state_are_clear_errors(ids_dataset: str) -> None:
    with pytest.raises(
        ValueError, match=r"pool_bytes must hold at least one decoded chunk.*got 100"
    ):
        chunkio.make_loader(
            ids_dataset, 8, num_workers=0, ordering=chunkio.Ordering(pool_bytes=100)
        )
    with pytest.raises(TypeError, match=r"pool_bytes must be an int, got '1M'"):
        chunkio.make_loader(
            ids_dataset, 8, num_workers=0, ordering=chunkio.Ordering(pool_bytes="1M")
        )  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"seed must be an int, got '0'"):
        chunkio.make_loader(ids_dataset, 8, num_workers=0, seed="0")  # type: ignore[arg-type]
    a = chunkio.make_loader(ids_dataset, 8, num_workers=0)
    b = chunkio.make_loader(ids_dataset, 16, num_workers=0)
    with pytest.raises(IncompatibleStateError, match=r"global_batch_size is 16 here.*got 8"):
        b.load_state_dict(a.state_dict())


@pytest.fixture(scope="module")
def class_sorted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same 20-class labelled arrays stored class-sorted and write-time shuffled."""
    root = tmp_path_factory.mktemp("labels")
    labels = np.repeat(np.arange(CLASSES), N // CLASSES)
    image = np.random.default_rng(0).integers(0, 255, (N, 3, 8, 8), dtype=np.uint8)
    arrays = {"image": image, "label": labels}
    sorted_path, shuffled_path = str(root / "sorted.zarr"), str(root / "shuffled.zarr")
    chunkio.write_arrays(sorted_path, arrays, shuffle=False, output=chunkio.Output(chunks=60))
    chunkio.write_arrays(shuffled_path, arrays, output=chunkio.Output(chunks=60))
    return sorted_path, shuffled_path


def _distinct_labels(path: str, batch: int, **kw: object) -> float:
    with chunkio.make_loader(path, batch, fields=["image", "label"], num_workers=0, **kw) as loader:
        return float(np.mean([len(np.unique(y.numpy())) for _, y in loader][:-1]))


@pytest.mark.parametrize("batch", [64, 256])
def test_defaults_mix_labels_like_a_uniform_shuffle(
    class_sorted: tuple[str, str], batch: int
) -> None:
    """The class-sorted store (a store shuffled at write time would pass with no mixing at
    all): the default pool and lanes alone give batches within 3% of a uniform shuffle's
    distinct labels. Without the pool's jitter (lanes only) they reach 89% (batch 64) and
    94% (batch 256): the bound tells the two apart, and the order is a pure function of the
    seed, so it does not flake."""
    sorted_path, _ = class_sorted
    uniform = uniform_distinct_labels(np.full(CLASSES, N // CLASSES), batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelMixingWarning)  # the warning has its own test
        assert _distinct_labels(sorted_path, batch) >= 0.97 * uniform


def test_class_sorted_store_warns_once_with_what_to_do(class_sorted: tuple[str, str]) -> None:
    sorted_path, shuffled_path = class_sorted
    small_pool = 60 * (3 * 8 * 8 + 8)  # one chunk: batches draw from few chunks
    with pytest.warns(LabelMixingWarning, match=r"sorted by label.*shuffle=True.*pool_bytes"):
        chunkio.make_loader(
            sorted_path,
            64,
            num_workers=0,
            ordering=chunkio.Ordering(pool_bytes=small_pool, lanes=1),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: not again for the same setting
        chunkio.make_loader(
            sorted_path,
            64,
            num_workers=0,
            ordering=chunkio.Ordering(pool_bytes=small_pool, lanes=1),
        )
        chunkio.make_loader(shuffled_path, 64, num_workers=0)  # shuffled data: no warning
        # the default pool and lanes mix even a class-sorted store well enough: no warning
        chunkio.make_loader(sorted_path, 256, num_workers=0)


def test_make_loader_opens_the_store_once_and_leaves_a_given_dataset_as_it_was(
    make_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    from chunkio.backends import ReaderOptions

    path, arrays = make_dataset("zarr")
    real = ReaderOptions.open
    opened: list[Any] = []

    def counting(self: ReaderOptions, location: Any) -> Any:
        opened.append(location)
        return real(self, location)

    # every reader chunkio opens, open_reader's included, is opened by ReaderOptions.open
    monkeypatch.setattr(ReaderOptions, "open", counting)
    # a path: the reader that describes the dataset also reads its labels (the label check)
    loader = chunkio.make_loader(path, 8, num_workers=0, seed=1)
    assert len(opened) == 1
    assert sum(len(b["label"]) for b in loader) == len(arrays["label"])
    # a dataset: used through a copy; the caller's object is left exactly as it was
    ds = chunkio.ChunkDataset(path, fields=["image", "label"])
    ds.read_batch([0, 1])  # it holds a handle in this process
    state, pickled = dict(ds.__dict__), pickle.dumps(ds)
    opened.clear()
    loader = chunkio.make_loader(ds, 8, num_workers=0, seed=1)
    assert len(opened) <= 1  # the label check's read, at most
    assert ds.__dict__ == state and pickle.dumps(ds) == pickled
    assert loader.dataset is not ds and loader.dataset.reads_once and not ds.reads_once
    assert sum(len(y) for _, y in loader) == len(arrays["label"])
