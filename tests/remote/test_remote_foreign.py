"""Stores chunkio did not write, read in place from a loopback S3 server (moto): h5py files,
zarr-python v2 and v3 groups (sharded or not, consolidated or not), through ChunkDataset and
make_loader workers, by chunkio's own remote engines (concurrent rounds of byte ranges), with
the metadata read once in the main process and handed to the workers."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from foreign_stores import STORES, N, data, fields_of, snapshot

import chunkio
from chunkio.errors import DatasetNotFoundError, FormatError, MissingFieldError
from chunkio.testing.servers import (  # noqa: F401 (pytest fixtures)
    LatencyProxy,
    S3Server,
    latency_proxy_factory_fixture,
    require,
    s3_server_fixture,
)

require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")

BUCKET = "foreign"
#: what a Zarr reader asks before it knows an array (metadata documents)
ZARR_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, make in STORES.items():
        folder = tmp_path_factory.mktemp(name.replace(" ", "_"))
        out[name] = make(folder)
    return out


@pytest.fixture(scope="module")
def urls(s3_server: S3Server, stores: dict[str, Path]) -> dict[str, str]:
    out = {}
    for name, path in stores.items():
        prefix = name.replace(" ", "_")
        if path.is_file():
            s3_server.put(BUCKET, f"{prefix}/{path.name}", path.read_bytes())
            out[name] = f"s3://{BUCKET}/{prefix}/{path.name}"
        else:
            out[name] = s3_server.upload_dir(path, BUCKET, f"{prefix}/{path.name}")
    return out


def _proxied(s3_server: S3Server, factory: Any) -> tuple[LatencyProxy, dict[str, Any]]:
    proxy = factory(s3_server.endpoint_url, 0.0)
    return proxy, s3_server.storage_options(endpoint_url=proxy.url)


def _metadata_requests(ds: chunkio.ChunkDataset, log: list[Any]) -> list[Any]:
    """Requests in ``log`` that are not a chunk's bytes: Zarr documents; for HDF5, a HEAD or
    any range other than a stored chunk's (h5py reading the file's metadata)."""
    documents = ds.reader_options.documents
    arrays = documents.get("arrays") if isinstance(documents.get("arrays"), dict) else None
    if arrays is None:
        return [e for e in log if e[1].rsplit("/", 1)[-1] in ZARR_DOCUMENTS]
    chunks = {
        f"bytes={o}-{o + n - 1}"
        for a in arrays.values()
        if a.raw is not None
        for o, n in a.raw.index.values()
    }
    return [e for e in log if e[0] != "GET" or e[2] not in chunks]


#: one store per reader (HDF5 through the file object, Zarr v2, Zarr v3 sharded) reads through
#: loader workers by default; the consolidated and plain v3 groups under ``make soak``: what
#: their workers rely on (the documents read in the parent, none asked again) is checked for
#: them without processes by
#: :func:`test_a_copy_of_a_remote_dataset_reads_without_a_metadata_request`
DEFAULT_IN_WORKERS = ("h5py", "zarr v2", "zarr v3 sharded")
IN_WORKERS = [
    s if s in DEFAULT_IN_WORKERS else pytest.param(s, marks=pytest.mark.slow) for s in STORES
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", IN_WORKERS)
def test_make_loader_reads_a_remote_store_in_place(
    s3_server: S3Server,
    urls: dict[str, str],
    stores: dict[str, Path],
    latency_proxy_factory: Any,
    store: str,
) -> None:
    """2 workers, every sample once with its label, equal to the source arrays; chunkio's own
    engine reads every array, and the workers open without a metadata request."""
    before = snapshot(stores[store])
    proxy, options = _proxied(s3_server, latency_proxy_factory)
    ds = chunkio.ChunkDataset(urls[store], fields=fields_of(store), storage_options=options)
    assert ds.remote  # the metadata read here travels to the workers
    reader = ds._handle().reader
    assert {reader.read_path(a) for a in fields_of(store).values()} <= {"engine", "remote raw"}
    images, labels = data()
    rows = {images[i].tobytes(): i for i in range(N)}
    proxy.reset_counts()
    context = "forkserver" if store == "h5py" else None  # the documents pickled, not inherited
    seen = []
    with chunkio.make_loader(
        ds, 32, num_workers=2, seed=0, workers=chunkio.Workers(copy=True, context=context)
    ) as loader:
        for x, y in loader:
            got = [rows[im.tobytes()] for im in np.asarray(x)]
            np.testing.assert_array_equal(np.asarray(y), labels[got])  # each with its label
            seen += got
    assert sorted(seen) == list(range(N))
    assert proxy.requests > 0
    assert _metadata_requests(ds, proxy.log) == []
    assert snapshot(stores[store]) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", [s for s in STORES if s not in DEFAULT_IN_WORKERS])
def test_a_copy_of_a_remote_dataset_reads_without_a_metadata_request(
    s3_server: S3Server, urls: dict[str, str], latency_proxy_factory: Any, store: str
) -> None:
    """What a loader worker gets (a pickled copy under spawn and forkserver, the parent's
    object in a forked child: either opens its own handle from the documents the parent
    read): every sample equal to the source, and no request but chunk bytes."""
    proxy, options = _proxied(s3_server, latency_proxy_factory)
    ds = chunkio.ChunkDataset(urls[store], fields=fields_of(store), storage_options=options)
    ds.read_batch([0])  # the parent's own handle, as before a loader starts
    copy = pickle.loads(pickle.dumps(ds))
    proxy.reset_counts()
    batch = copy.read_batch(list(range(N)))
    images, labels = data()
    np.testing.assert_array_equal(batch["image"], images)
    np.testing.assert_array_equal(batch["label"], labels)
    assert proxy.requests > 0
    assert _metadata_requests(ds, proxy.log) == []


@pytest.mark.timeout(120)
def test_consolidated_metadata_is_one_request(
    s3_server: S3Server, urls: dict[str, str], latency_proxy_factory: Any
) -> None:
    proxy, options = _proxied(s3_server, latency_proxy_factory)
    chunkio.ChunkDataset(urls["zarr v3 consolidated"], fields=fields_of("zarr v3 consolidated"),
                         storage_options=options)  # fmt: skip
    assert [p.rsplit("/", 1)[-1] for _, p, _ in proxy.log] == ["zarr.json"]
    proxy.reset_counts()
    chunkio.ChunkDataset(urls["zarr v2 consolidated"], fields=fields_of("zarr v2 consolidated"),
                         storage_options=options)  # fmt: skip
    asked = sorted(p.rsplit("/", 1)[-1] for _, p, _ in proxy.log)
    assert asked == sorted(["zarr.json", ".zgroup", ".zattrs", ".zmetadata"])  # no member's


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [2, 3])
def test_a_stale_consolidation_still_reads(
    s3_server: S3Server, tmp_path: Path, version: int, latency_proxy_factory: Any
) -> None:
    """An array added after the consolidation, local and remote: fetched on its own."""
    store = f"zarr v{version} consolidated"
    path = STORES[store](tmp_path)
    group = zarr.open_group(path, mode="a", use_consolidated=False)
    group["train"].create_array("extra", shape=(N,), chunks=(100,), dtype="i4")[...] = np.arange(N)
    url = s3_server.upload_dir(path, BUCKET, f"stale{version}/{path.name}")
    proxy, options = _proxied(s3_server, latency_proxy_factory)
    fields = {"image": "train/images", "extra": "train/extra"}
    images, _ = data()
    for where, kw in ((path, {}), (url, {"storage_options": options})):
        batch = chunkio.ChunkDataset(where, fields=fields, **kw).read_batch([7, 250])
        np.testing.assert_array_equal(batch["extra"], [7, 250])
        np.testing.assert_array_equal(batch["image"], images[[7, 250]])
    fetched = [p.rsplit(f"{path.name}/", 1)[1] for _, p, _ in proxy.log]
    assert ("train/extra/zarr.json" if version == 3 else "train/extra/.zarray") in fetched
    assert "train/images/zarr.json" not in fetched and "train/images/.zarray" not in fetched


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", ["h5py", "zarr v2", "zarr v3", "zarr v3 consolidated"])
def test_without_fields_the_error_lists_the_remote_arrays(
    s3_server: S3Server, urls: dict[str, str], store: str
) -> None:
    """Listing a remote store that is not a chunkio dataset (zarr's listing, outside its own
    event loop; a consolidation's members; h5py through the file object)."""
    options = s3_server.storage_options()
    images = "images" if store == "zarr v3 sharded" else "train/images"
    with pytest.raises(FormatError, match=rf"not a chunkio dataset.*{images} \(300, 3, 8, 8\)"):
        chunkio.ChunkDataset(urls[store], storage_options=options)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", ["h5py", "zarr v2", "zarr v3", "zarr v2 consolidated"])
def test_a_missing_array_or_object_is_a_typed_error_naming_the_url(
    s3_server: S3Server, urls: dict[str, str], store: str
) -> None:
    options = s3_server.storage_options()
    url = urls[store]
    with pytest.raises(MissingFieldError, match=rf"{url}: no array 'train/nope'.*train/labels"):
        chunkio.ChunkDataset(url, fields={"image": "train/nope"}, storage_options=options)
    with pytest.raises(
        FormatError, match=rf"{url}: 'train' is a group \(attributes \[\]\), not an array"
    ) as err:
        chunkio.ChunkDataset(url, fields={"image": "train"}, storage_options=options)
    assert not isinstance(err.value, MissingFieldError)
    gone = url.replace(BUCKET, f"{BUCKET}/gone", 1)
    with pytest.raises(DatasetNotFoundError, match=gone):
        chunkio.ChunkDataset(gone, fields=fields_of(store), storage_options=options)


@pytest.mark.timeout(180)
def test_hdf5_that_chunkio_does_not_decode_is_read_by_h5py_through_the_file_object(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """Scale-offset (chunks that split samples are decoded by chunkio, as boxes): h5py reads
    it through the remote file object, in the parent (which read first) and in forked
    workers (its file closed before the fork)."""
    import h5py
    import torch.utils.data

    images, labels = data()
    path = tmp_path / "split.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(16, 3, 4, 8), compression="gzip",
                         shuffle=True)  # fmt: skip
        f.create_dataset("labels", data=labels, chunks=(50,), scaleoffset=0)
    s3_server.put(BUCKET, "split/split.h5", path.read_bytes())
    url = f"s3://{BUCKET}/split/split.h5"
    ds = chunkio.ChunkDataset(url, fields=["images", "labels"],
                              storage_options=s3_server.storage_options())  # fmt: skip
    assert ds._handle().reader.read_path("labels") == "h5py"  # scale-offset
    batch = ds.read_batch([299, 3, 150])
    np.testing.assert_array_equal(batch["images"], images[[299, 3, 150]])
    loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2,
                                         multiprocessing_context="fork")  # fmt: skip
    got = [(np.asarray(x), np.asarray(y)) for x, y in loader]
    np.testing.assert_array_equal(np.concatenate([x for x, _ in got]), images)
    np.testing.assert_array_equal(np.concatenate([y for _, y in got]), labels)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["h5py", "zarr v2 consolidated", "zarr v3 sharded"])
def test_info_verify_and_doctor_on_a_remote_store(
    s3_server: S3Server,
    urls: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: str,
) -> None:
    """The CLI on a URL with --storage-options, as on a local path: arrays listed, every chunk
    verified, doctor's measurements (on the h5py file)."""
    from chunkio.diagnose import cli

    options = ["--storage-options", json.dumps(s3_server.storage_options())]
    fields = [f"{name}={path}" for name, path in fields_of(store).items()]
    image = fields_of(store)["image"]
    assert cli.main(["info", urls[store], *options]) == 0
    listed = capsys.readouterr().out
    assert "not a chunkio dataset" in listed and image in listed
    assert cli.main(["info", urls[store], "--fields", *fields, *options]) == 0
    assert f"samples:           {N}" in capsys.readouterr().out
    assert cli.main(["verify", urls[store], "--fields", *fields, "--no-progress", *options]) == 0
    assert re.search(r": 2 arrays, \d+ chunks read: OK$", capsys.readouterr().out.strip())
    if store == "h5py":  # doctor times loaders for seconds: once is enough here
        # and on one setting (0 workers, 3 batches of 64): what is remote here is the opening
        # and the reads, which every setting shares (the settings' grid: tests/cli/test_doctor.py)
        from chunkio.diagnose import doctor

        full = doctor.run_doctor

        def one_setting(path: Any, **kw: Any) -> Any:
            kw.update(worker_counts=(0,), batch_sizes=(64,), batches_per_setting=3)
            return full(path, **kw)

        monkeypatch.setattr(doctor, "run_doctor", one_setting)
        argv = ["doctor", urls[store], "--fields", *fields, "--step-time", "0.01", *options]
        assert cli.main(argv) == 0
        assert "samples/s" in capsys.readouterr().out
