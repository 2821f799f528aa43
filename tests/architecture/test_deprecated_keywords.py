"""The keywords that moved into option objects still work, for one release, with a warning.

Every old keyword of ``make_loader`` and the converters: it raises a ``DeprecationWarning``
that names the new spelling and points at the caller's line, and the call that reaches the
function is the very call the new spelling makes (the function is stood in for through the
wrapper's ``__wrapped__``). A few real calls check the results too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chunkio
import chunkio.convert
from chunkio import Decoding, DownloadCache, Execution, ImageOptions, Ordering, Output, Workers

CLIENT = object()  # stands for a dask client: the stand-in function never uses it

#: (function, old keyword, a value, its new spelling)
MOVED: list[tuple[str, str, Any, dict[str, Any]]] = [
    ("make_loader", "pool_bytes", 1 << 20, {"ordering": Ordering(pool_bytes=1 << 20)}),
    ("make_loader", "lanes", 4, {"ordering": Ordering(lanes=4)}),
    ("make_loader", "rank", 1, {"ordering": Ordering(rank=1)}),
    ("make_loader", "world_size", 2, {"ordering": Ordering(world_size=2)}),
    ("make_loader", "prefetch", 3, {"workers": Workers(prefetch=3)}),
    ("make_loader", "persistent_workers", False, {"workers": Workers(persistent=False)}),
    ("make_loader", "pin_memory", False, {"workers": Workers(pin_memory=False)}),
    ("make_loader", "multiprocessing_context", "spawn", {"workers": Workers(context="spawn")}),
    ("make_loader", "timeout", 5, {"workers": Workers(timeout=5)}),
    ("make_loader", "transport", "dataloader", {"workers": Workers(transport="dataloader")}),
    ("make_loader", "copy", True, {"workers": Workers(copy=True)}),
    ("make_loader", "decode", "gpu", {"workers": Workers(decode="gpu")}),
]
for _f in ("write_arrays", "convert_arrays", "convert_images", "convert_volumes", "run_conversion"):
    MOVED += [
        (_f, "format", "hdf5", {"output": Output(format="hdf5")}),
        (_f, "compression", "zstd", {"output": Output(compression="zstd")}),
        (_f, "workers", 3, {"execution": Execution(workers=3)}),
        (_f, "client", CLIENT, {"execution": Execution(client=CLIENT)}),
        (_f, "progress", False, {"execution": Execution(progress=False)}),
        (_f, "overwrite", True, {"execution": Execution(overwrite=True)}),
    ]
for _f in ("write_arrays", "convert_arrays", "convert_images", "run_conversion"):
    MOVED += [(_f, "samples_per_chunk", 7, {"output": Output(chunks=7)})]
for _f in ("write_arrays", "convert_arrays", "convert_images"):
    MOVED += [(_f, "checksum", False, {"output": Output(checksum=False)})]
for _f in ("write_arrays", "convert_arrays", "run_conversion"):
    MOVED += [(_f, "extra", {"k": 1}, {"output": Output(extra={"k": 1})})]
for _f in ("write_arrays", "convert_arrays"):
    MOVED += [(_f, "chunk_bytes", 4096, {"output": Output(chunk_bytes=4096)})]
MOVED += [
    ("convert_volumes", "chunks", (8, 16, 16), {"output": Output(chunks=(8, 16, 16))}),
    ("convert_images", "resize", "pad", {"images": ImageOptions(resize="pad")}),
    ("convert_images", "mode", "L", {"images": ImageOptions(mode="L")}),
    ("convert_images", "max_size", 64, {"images": ImageOptions(max_size=64)}),
    ("convert_images", "encoding", "jpeg", {"images": ImageOptions(encoding="jpeg")}),
    ("convert_images", "quality", 80, {"images": ImageOptions(quality=80)}),
]

#: the positional arguments each function is called with (never used by the stand-in)
ARGS = {
    "make_loader": ("data.zarr", 8),
    "write_arrays": ("out.zarr", {"x": np.arange(4)}),
    "convert_arrays": ("in.h5", "out.zarr"),
    "convert_images": ("images", "out.zarr"),
    "convert_volumes": ("volumes", "out.zarr"),
    "run_conversion": (object(), "out.zarr"),
}


def _public(function: str) -> Any:
    """The entry point: chunkio's, or chunkio.convert's (run_conversion)."""
    return getattr(chunkio, function, None) or getattr(chunkio.convert, function)


@pytest.mark.parametrize(("function", "old", "value", "new"), MOVED)
def test_an_old_keyword_warns_and_makes_the_new_call(
    function: str, old: str, value: Any, new: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    public = _public(function)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(public, "__wrapped__", lambda *a, **kw: calls.append((a, kw)))
    (param, option), *_ = new.items()
    message = f"{function}({old}=...) is deprecated; use {param}=chunkio.{type(option).__name__}("
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as record:
        public(*ARGS[function], **{old: value})
    assert [w.filename for w in record] == [__file__]  # the caller's line
    assert len(record) == 1
    public(*ARGS[function], **new)
    assert calls[0] == calls[1], old


def test_old_keywords_update_an_option_object_given_too(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(chunkio.write_arrays, "__wrapped__", lambda *a, **kw: calls.append(kw))
    with pytest.warns(DeprecationWarning) as record:
        chunkio.write_arrays(
            "out.zarr", {}, output=Output(compression="zstd"), samples_per_chunk=4, workers=2
        )
    assert len(record) == 1  # one warning per call, naming both keywords
    assert "write_arrays(samples_per_chunk=...)" in str(record[0].message)
    assert "use execution=chunkio.Execution(workers=...)" in str(record[0].message)
    assert calls == [
        {"output": Output(compression="zstd", chunks=4), "execution": Execution(workers=2)}
    ]


def test_old_keywords_still_convert_and_load(tmp_path: Path) -> None:
    """Real calls: the old spellings give the dataset and the batches the new ones give."""
    data = {"x": np.arange(60).reshape(30, 2), "y": np.arange(30)}
    old, new = str(tmp_path / "old.zarr"), str(tmp_path / "new.zarr")
    with pytest.warns(DeprecationWarning, match="samples_per_chunk"):
        a = chunkio.write_arrays(
            old, data, samples_per_chunk=4, compression="zstd", progress=False, workers=1
        )
    b = chunkio.write_arrays(
        new,
        data,
        output=Output(chunks=4, compression="zstd"),
        execution=Execution(progress=False, workers=1),
    )
    assert (a.samples_per_chunk, a.fields) == (b.samples_per_chunk, b.fields) == (4, a.fields)
    with pytest.warns(DeprecationWarning, match="pool_bytes"):
        before = chunkio.make_loader(old, 8, num_workers=0, pool_bytes=1 << 20, lanes=2, copy=True)
    after = chunkio.make_loader(
        new,
        8,
        num_workers=0,
        ordering=Ordering(pool_bytes=1 << 20, lanes=2),
        workers=Workers(copy=True),
    )
    for x, y in zip(before, after, strict=True):
        for name in x:
            assert torch.equal(x[name], y[name]), name


def test_a_count_for_the_workers_object_is_refused_naming_num_workers(tmp_path: Path) -> None:
    path = str(tmp_path / "d.zarr")
    chunkio.write_arrays(path, {"x": np.arange(4)})
    with pytest.raises(TypeError, match=r"workers must be a chunkio\.Workers; got 4.*num_workers"):
        chunkio.make_loader(path, 2, workers=4)  # type: ignore[arg-type]


#: ChunkDataset's keywords that moved into its option objects (old keyword, value, new spelling)
DATASET_MOVED: list[tuple[str, Any, dict[str, Any]]] = [
    ("decode_threads", 2, {"decoding": Decoding(threads=2)}),
    ("channels_last", False, {"decoding": Decoding(channels_last=False)}),
    ("decode_cf", True, {"decoding": Decoding(cf=True)}),
    ("download_cache", "cache", {"download": DownloadCache("cache")}),
]


@pytest.mark.parametrize(("old", "value", "new"), DATASET_MOVED)
def test_an_old_dataset_keyword_warns_and_makes_the_new_call(
    old: str, value: Any, new: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    init = chunkio.ChunkDataset.__init__
    monkeypatch.setattr(init, "__wrapped__", lambda self, *a, **kw: calls.append(kw))
    (param, option), *_ = new.items()
    message = f"ChunkDataset({old}=...) is deprecated; use {param}=chunkio.{type(option).__name__}("
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as record:
        chunkio.ChunkDataset("data.zarr", **{old: value})
    assert [w.filename for w in record] == [__file__]  # the caller's line
    chunkio.ChunkDataset("data.zarr", **new)
    assert calls[0] == calls[1], old


def test_the_download_cache_pair_makes_one_option_object(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    init = chunkio.ChunkDataset.__init__
    monkeypatch.setattr(init, "__wrapped__", lambda self, *a, **kw: calls.append(kw))
    with pytest.warns(DeprecationWarning) as record:
        chunkio.ChunkDataset("d.zarr", download_cache="c", download_cache_bytes=5, decode_cf=True)
    assert len(record) == 1  # one warning per call, naming every keyword
    assert calls == [{"download": DownloadCache("c", max_bytes=5), "decoding": Decoding(cf=True)}]


def test_old_dataset_keywords_still_read(tmp_path: Path) -> None:
    """A real dataset: the old spellings read what the new ones read."""
    path = str(tmp_path / "d.zarr")
    chunkio.write_arrays(path, {"x": np.arange(12).reshape(6, 2)}, output=Output(chunks=2))
    with pytest.warns(DeprecationWarning, match="decode_threads"):
        old = chunkio.ChunkDataset(path, fields="x", decode_threads=2, channels_last=False)
    new = chunkio.ChunkDataset(path, fields="x", decoding=Decoding(2, channels_last=False))
    assert old.decoding == new.decoding == Decoding(threads=2, channels_last=False)
    np.testing.assert_array_equal(old.read_batch([5, 0])["x"], new.read_batch([5, 0])["x"])
