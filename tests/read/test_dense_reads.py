"""Dense field reads (:mod:`chunkio.read.dense`) against a longhand model of what they decode:
which chunks each batch decodes, straight into the batch or into the cache, and what the
counters say; the preload threshold, the caller's output buffers and prefetch hints (found by
mutation testing: ``make mutate``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkio import ChunkDataset, Execution, Output, write_arrays
from chunkio.read.dense import DenseReads, PreloadedReads

_ids = itertools.count()
N, SPC = 30, 4  # the last chunk holds 2 samples


def _store(n: int = N, spc: int = SPC) -> tuple[str, dict[str, np.ndarray]]:
    arrays = {
        "x": np.arange(n * 3, dtype=np.int32).reshape(n, 3) * 5 - 7,
        "y": (np.arange(n) % 7).astype(np.int64),
    }
    path = f"memory://dense-{next(_ids)}"
    write_arrays(
        path,
        arrays,
        shuffle=False,
        output=Output(chunks=spc),
        execution=Execution(progress=False),
    )
    return path, arrays


class Model:
    """What a dense field with a cache large enough for every chunk decodes for each batch."""

    def __init__(self, n: int, spc: int) -> None:
        self.n, self.spc = n, spc
        self.cached: set[int] = set()
        self.chunks_read = self.rows_decoded = self.direct = self.hits = 0

    def size(self, c: int) -> int:
        return min(self.spc, self.n - c * self.spc)

    def read(self, indices: list[int], once: bool) -> None:
        idx = [i % self.n for i in indices]
        chunks = sorted({i // self.spc for i in idx})
        direct = []
        for c in chunks if once else []:
            size = self.size(c)
            if c in self.cached or sum(i // self.spc == c for i in idx) != size:
                continue
            first = next(k for k, i in enumerate(idx) if i // self.spc == c)
            if idx[first : first + size] == list(range(c * self.spc, c * self.spc + size)):
                direct.append(c)
        rest = [c for c in chunks if c not in direct]
        decoded = [c for c in rest if c not in self.cached]
        self.hits += len(rest) - len(decoded)
        self.cached |= set(decoded)  # direct chunks are not kept
        self.chunks_read += len(direct) + len(decoded)
        self.rows_decoded += sum(self.size(c) for c in direct + decoded)
        self.direct += len(direct)


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[list[int], bool]]:
    chunks = -(-N // SPC)
    out = []
    for _ in range(draw(st.integers(1, 5))):
        pieces: list[list[int]] = []
        for _ in range(draw(st.integers(0, 4))):
            if draw(st.booleans()):
                c = draw(st.integers(0, chunks - 1))
                run = list(range(c * SPC, min(N, (c + 1) * SPC)))
                if draw(st.booleans()):  # the run broken: out of order or with a repeat
                    run = run[::-1] if draw(st.booleans()) and len(run) > 1 else run + run[:1]
                pieces.append(run)
            else:
                pieces.append([draw(st.integers(-N, N - 1))])
        order = draw(st.permutations(range(len(pieces))))
        out.append(([i for k in order for i in pieces[k]], draw(st.booleans())))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_each_batch_decodes_what_the_model_says(steps) -> None:
    path, arrays = _store()
    ds = ChunkDataset(path, fields=["x"], cache_bytes=1 << 20, preload_bytes=0)
    model = Model(N, SPC)
    for indices, once in steps:
        got = ds.read_batch(indices, once=once)["x"]
        np.testing.assert_array_equal(got, arrays["x"][np.asarray(indices, np.int64)])
        model.read(indices, once)
        stats = ds.read_stats()
        assert (
            stats.chunks_read,
            stats.rows_decoded,
            stats.direct_chunks,
            stats.cache_hits,
            stats.per_field.get("x", 0),
        ) == (model.chunks_read, model.rows_decoded, model.direct, model.hits, model.chunks_read)
    assert ds.read_stats().batches == len(steps)
    assert ds.read_stats().samples == sum(len(i) for i, _ in steps)


def test_a_cache_smaller_than_the_reads_evicts_and_stays_exact() -> None:
    path, arrays = _store()
    ds = ChunkDataset(path, fields=["x"], preload_bytes=0)  # cache_bytes=0: a batch's chunks
    rng = np.random.default_rng(4)
    for _ in range(20):
        idx = rng.integers(0, N, size=int(rng.integers(1, 12)))
        np.testing.assert_array_equal(ds.read_batch(idx)["x"], arrays["x"][idx])


def test_the_preload_threshold_is_the_field_size() -> None:
    path, _ = _store()
    nbytes = {"x": N * 3 * 4, "y": N * 8}
    for name, size in nbytes.items():
        for preload, kind in ((size, PreloadedReads), (size - 1, DenseReads)):
            ds = ChunkDataset(path, fields=[name], preload_bytes=preload)
            ds.read_batch([0])
            assert type(ds._handle().field(name)) is kind, (name, preload)


@pytest.mark.parametrize("preload", [0, 1 << 20])
def test_reads_fill_the_callers_buffers_and_check_them(preload: int) -> None:
    path, arrays = _store()
    ds = ChunkDataset(path, fields=["x", "y"], preload_bytes=preload)
    out = {"x": np.zeros((3, 3), np.int32), "y": np.zeros(3, np.int64)}
    idx = [7, 0, 7]
    got = ds.read_batch(idx, out)
    for name in ("x", "y"):
        assert got[name] is out[name]
        np.testing.assert_array_equal(out[name], arrays[name][idx])
    for bad, what in (
        (np.zeros((2, 3), np.int32), "(2, 3) int32"),
        (np.zeros((3, 3), np.int64), "(3, 3) int64"),
    ):
        with pytest.raises(ValueError) as info:
            ds.read_batch(idx, {"x": bad})
        assert str(info.value) == (f"output buffer for field 'x' must be (3, 3) int32; got {what}")


def test_prefetch_names_the_chunks_the_cache_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _store()
    ds = ChunkDataset(path, fields=["x"], cache_bytes=1 << 20, preload_bytes=0)
    ds.read_batch([5])  # chunk 1 is held
    core = ds._handle()
    asked: list[tuple[str, list[int]]] = []
    # a reader that fetches ahead (a remote store's), as far as the dataset can tell
    monkeypatch.setattr(type(core.reader), "prefetches", property(lambda self: True))
    monkeypatch.setattr(core.reader, "prefetch", lambda a, c: asked.append((a, list(c))))
    ds.prefetch([29, 4, 0, 13, 1, 28])
    assert asked == [("x", [0, 3, 7])]  # sorted, each once, chunk 1 left out


def test_without_prefetch_support_a_hint_reads_nothing() -> None:
    path, _ = _store()
    ds = ChunkDataset(path, fields=["x"], preload_bytes=0)
    ds.prefetch([0, 9])
    stats = ds.read_stats()
    assert (stats.chunks_read, stats.batches) == (0, 0)


class Reversed:
    """A field transform of ``x``: each sample reversed plus ``seed + 100 * epoch + index``."""

    field = "x"
    seed = 3

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape

    def apply(self, image: np.ndarray, out: np.ndarray, key: tuple[int, int, int]) -> None:
        seed, epoch, index = key
        out[...] = image[::-1] + seed + 100 * epoch + index


@pytest.mark.parametrize("preload", [0, 1 << 20])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_a_field_transform_sees_each_sample_with_its_key(preload: int, cache_bytes: int) -> None:
    path, arrays = _store()
    ds = ChunkDataset(
        path, fields=["x", "y"], transform=Reversed(), preload_bytes=preload,
        cache_bytes=cache_bytes,
    )  # fmt: skip
    for epoch, idx in ((0, [9, 1, 9, 29]), (2, [4, 5, 6, 7, 0]), (1, [-1, 3])):
        got = ds.read_batch(idx, epoch=epoch)
        rows = np.asarray(idx) % N
        want = arrays["x"][rows][:, ::-1] + 3 + 100 * epoch + rows[:, None]
        np.testing.assert_array_equal(got["x"], want)
        np.testing.assert_array_equal(got["y"], arrays["y"][rows])  # not transformed
        out = {"x": np.zeros((len(idx), 3), np.int32)}
        assert ds.read_batch(idx, out, epoch=epoch)["x"] is out["x"]
        np.testing.assert_array_equal(out["x"], want)


def test_whole_chunks_go_straight_into_the_batch_only_when_they_are_one_run() -> None:
    path, arrays = _store()
    ds = ChunkDataset(path, fields=["x"], cache_bytes=1 << 20, preload_bytes=0)
    # chunk 0's four samples, but its run in the batch is 2, 3, 4, 5: gathered, not direct
    for idx in ([2, 3, 4, 5, 0, 1], [0, 1, 2, 3, 8, 9, 10, 11]):
        np.testing.assert_array_equal(ds.read_batch(idx, once=True)["x"], arrays["x"][idx])
    # chunks 0 and 1 cached by the first batch (gathered from there); chunk 2 decoded
    # straight into the second, after the cached chunk 0 was passed over
    assert ds.read_stats().direct_chunks == 1
    got = ds.read_batch([*range(4, 8), *range(12, 16)], once=True)["x"]  # cached, then direct
    np.testing.assert_array_equal(got, arrays["x"][[*range(4, 8), *range(12, 16)]])
    assert ds.read_stats().direct_chunks == 2


def test_gather_time_adds_up_batch_by_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count()
    monkeypatch.setattr("chunkio.read.dense.time.perf_counter", lambda: float(next(ticks)))
    path, _ = _store()
    ds = ChunkDataset(path, fields=["x"], cache_bytes=1 << 20, preload_bytes=0)
    for k in range(1, 5):
        ds.read_batch([k, 0, 17])
        assert ds.read_stats().gather_s == k  # one tick per gather, summed


def test_preloading_counts_its_chunks_once() -> None:
    path, _ = _store()
    ds = ChunkDataset(path, fields=["y"], preload_bytes=1 << 20)
    ds.read_batch([3, 1])
    ds.read_batch([29])
    assert ds.read_stats().chunks_read == -(-N // SPC)


def test_a_failed_decode_leaves_no_slot_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    path, arrays = _store()
    ds = ChunkDataset(path, fields=["x"], cache_bytes=1 << 20, preload_bytes=0)
    reader = ds._handle().reader
    real = reader.read_into
    calls = itertools.count()

    def flaky(*args, **kwargs):
        if next(calls) == 0:
            raise OSError("injected read failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(reader, "read_into", flaky)
    with pytest.raises(OSError, match="injected read failure"):
        ds.read_batch([5, 9])
    np.testing.assert_array_equal(ds.read_batch([9, 5])["x"], arrays["x"][[9, 5]])
    assert ds.read_stats().cache_hits == 0  # decoded again, not served from the bad slots


def test_a_prefetch_hint_to_a_reader_that_cannot_prefetch_does_nothing() -> None:
    path, _ = _store()
    ds = ChunkDataset(path, fields=["x"], preload_bytes=0)
    core = ds._handle()
    assert not core.reader.prefetches  # a local file: the default, nothing fetched ahead
    core.field("x").prefetch(np.array([0, 9]))
    assert core.stats.chunks_read == 0
