"""chunkio datasets read from a real S3 server (moto) and an HTTP server on loopback.

chunkio fetches chunks itself by byte ranges (shard indexes once, neighbouring inner chunks in
one request); reads must equal the local ones, bit for bit, through ChunkDataset and
make_loader workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks.data import make_jpeg_folder
from chunkio import (
    ChunkDataset,
    DownloadCache,
    Execution,
    ImageOptions,
    Output,
    Workers,
    convert_images,
    make_loader,
)
from chunkio.errors import MissingChunkError
from chunkio.remote import RemoteNotFoundError
from chunkio.testing.servers import (  # noqa: F401 (pytest fixtures)
    LatencyProxy,
    S3Server,
    http_server_factory_fixture,
    latency_proxy_factory_fixture,
    require,
    s3_server_fixture,
)

require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sharded (packed) JPEG dataset and its raw twin, converted locally."""
    root = tmp_path_factory.mktemp("remote")
    src = make_jpeg_folder(root / "src", n_images=240, size=48, n_classes=4, seed=5)
    # 16 per chunk: many inner chunks per shard (by stored bytes all 240 would fit one chunk)
    convert_images(
        src,
        root / "jpeg.zarr",
        images=ImageOptions(encoding="jpeg"),
        output=Output(chunks=16),
        execution=Execution(progress=False),
    )
    convert_images(src, root / "raw.zarr", execution=Execution(progress=False))
    return root


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server, local: Path) -> str:
    s3_server.create_bucket("data")
    for name in ("jpeg.zarr", "raw.zarr"):
        s3_server.upload_dir(local / name, "data", name)
    return "data"


def _same(a: ChunkDataset, b: ChunkDataset, idx: list[int]) -> None:
    x, y = a.read_batch(idx), b.read_batch(idx)
    assert x.keys() == y.keys()
    for k in x:
        np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["jpeg.zarr", "raw.zarr"])
def test_s3_reads_equal_local_reads_with_few_requests(
    s3_server: S3Server,
    bucket: str,
    local: Path,
    latency_proxy_factory: type[LatencyProxy],
    name: str,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.0)
    options = s3_server.storage_options(endpoint_url=proxy.url)
    url = f"s3://{bucket}/{name}"
    remote = ChunkDataset(url, storage_options=options)
    here = ChunkDataset(local / name)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(here))[:64].tolist()
    _same(remote, here, idx)
    before = proxy.requests
    _same(remote, here, list(range(0, 240, 3)))  # indexes cached: only chunk data now
    if name == "jpeg.zarr":  # every field in one shard: at most one request per field
        assert proxy.requests - before <= 4, proxy.log[before:]


@pytest.mark.timeout(120)
def test_make_loader_workers_read_s3(s3_server: S3Server, bucket: str, local: Path) -> None:
    options = s3_server.storage_options()
    url = f"s3://{bucket}/jpeg.zarr"
    kw = {"fields": ("image", "label"), "shuffle": True, "seed": 3}
    # prefetch=4: the ring's worker asks for the chunks of queued batches ahead (the hint the
    # dataset's prefetch takes: test_ring_workers_fetch_queued_batches_ahead)
    workers = Workers(prefetch=4)
    with make_loader(
        url, 32, num_workers=1, storage_options=options, workers=workers, **kw
    ) as remote:
        assert remote.transport == "ring"
        got = [(x.clone(), y.clone()) for x, y in remote]
    with make_loader(str(local / "jpeg.zarr"), 32, num_workers=0, **kw) as here:
        want = [(x.clone(), y.clone()) for x, y in here]
    assert len(got) == len(want) == 8
    for (a, la), (b, lb) in zip(got, want, strict=True):
        assert torch.equal(la, lb) and torch.equal(a, b)


@pytest.mark.timeout(60)
def test_http_reads_equal_local_reads(http_server_factory, local: Path) -> None:
    server = http_server_factory(local)
    for name in ("jpeg.zarr", "raw.zarr"):
        remote = ChunkDataset(f"{server.url}/{name}")
        _same(remote, ChunkDataset(local / name), [0, 7, 100, 239])


@pytest.mark.timeout(60)
def test_a_missing_shard_or_dataset_names_the_url(
    s3_server: S3Server, bucket: str, local: Path
) -> None:
    options = s3_server.storage_options()
    client = s3_server.client()
    ds = ChunkDataset(f"s3://{bucket}/raw.zarr", fields="image", storage_options=options)
    key = next(
        o["Key"]
        for o in client.list_objects_v2(Bucket=bucket, Prefix="raw.zarr/image/c")["Contents"]
    )
    data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.delete_object(Bucket=bucket, Key=key)
    try:
        with pytest.raises(MissingChunkError, match=rf"s3://{bucket}/{key}"):
            ds.read_batch(list(range(240)))
    finally:
        client.put_object(Bucket=bucket, Key=key, Body=data)
    with pytest.raises((FileNotFoundError, RemoteNotFoundError)):
        ChunkDataset(f"s3://{bucket}/nothing.zarr", storage_options=options)


@pytest.mark.timeout(120)
def test_ring_workers_fetch_queued_batches_ahead(
    s3_server: S3Server, bucket: str, local: Path, latency_proxy_factory: type[LatencyProxy]
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.02)
    options = s3_server.storage_options(endpoint_url=proxy.url)
    idx = list(range(0, 240, 2))

    def requests_for(prefetch: bool) -> int:
        url = f"s3://{bucket}/raw.zarr"
        ds = ChunkDataset(url, fields="image", storage_options=options, preload_bytes=0)
        ds.read_batch([0])  # open it (metadata) before counting
        before = proxy.requests
        if prefetch:
            ds.prefetch(idx)  # returns at once; the chunks arrive in the background
            deadline = time.monotonic() + 10
            while proxy.requests == before and time.monotonic() < deadline:
                time.sleep(0.005)
            assert proxy.requests > before, "nothing fetched before the read"
        got = ds.read_batch(idx)["image"]
        want = ChunkDataset(local / "raw.zarr", fields="image").read_batch(idx)["image"]
        np.testing.assert_array_equal(got, want)
        return proxy.requests - before

    assert requests_for(True) == requests_for(False)  # the read used the prefetched bytes
    # a ring worker prefetching queued batches from S3: test_make_loader_workers_read_s3


@pytest.mark.timeout(120)
def test_a_download_cache_serves_later_reads_locally(
    s3_server: S3Server,
    bucket: str,
    local: Path,
    latency_proxy_factory: type[LatencyProxy],
    tmp_path: Path,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.0)
    options = s3_server.storage_options(endpoint_url=proxy.url)
    cache = tmp_path / "cache"

    def read() -> dict[str, np.ndarray]:
        ds = ChunkDataset(
            f"s3://{bucket}/raw.zarr",
            fields=("image", "label"),
            storage_options=options,
            preload_bytes=0,
            download=DownloadCache(cache, max_bytes=64 << 20),
        )
        return ds.read_batch(list(range(240)))

    first = read()
    before = proxy.requests
    again = read()  # a new process would do the same: chunks come from the cache folder
    data_requests = [r for r in proxy.log[before:] if "/c." in r[1] or "/c/" in r[1]]
    assert not data_requests, data_requests
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
    assert any(cache.iterdir())


@pytest.mark.timeout(120)
def test_the_cli_reads_a_remote_dataset(
    s3_server: S3Server, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``chunkio info --json`` and ``verify`` on a URL with --storage-options, in this process
    (``python -m chunkio`` itself, a fresh interpreter importing for seconds, is
    tests/cli/test_cli.py's)."""
    import json

    from chunkio.diagnose import cli

    options = json.dumps(s3_server.storage_options())
    url = f"s3://{bucket}/jpeg.zarr"
    assert cli.main(["info", "--json", url, "--storage-options", options]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_samples"] == 240 and info["fields"]["image"]["encoding"] == "jpeg"
    assert cli.main(["verify", "--no-progress", url, "--storage-options", options]) == 0
    assert "OK" in capsys.readouterr().out


def _damaged_copy(s3_server: S3Server, bucket: str, local: Path, prefix: str, damage: Any) -> str:
    """Upload ``local`` as ``prefix``'s dataset, replace its first object under ``prefix`` by
    ``damage(its bytes)``; that object's key."""
    client = s3_server.client()
    s3_server.upload_dir(local, bucket, prefix.split("/", 1)[0])
    key: str = client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"][0]["Key"]
    whole = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=damage(whole))
    return key


@pytest.mark.timeout(60)
def test_a_truncated_remote_shard_is_a_typed_error_naming_it(
    s3_server: S3Server, bucket: str, local: Path
) -> None:
    from chunkio.errors import ChunkReadError

    key = _damaged_copy(
        s3_server,
        bucket,
        local / "raw.zarr",
        "cut.zarr/image/c",
        lambda whole: whole[: len(whole) // 2],
    )  # its index gone
    ds = ChunkDataset(
        f"s3://{bucket}/cut.zarr",
        fields="image",
        storage_options=s3_server.storage_options(),
        preload_bytes=0,
    )
    with pytest.raises(ChunkReadError, match=rf"s3://{bucket}/{key}"):
        ds.read_batch(list(range(240)))


@pytest.mark.timeout(120)
def test_opening_costs_one_round_of_metadata_that_workers_reuse(
    s3_server: S3Server, bucket: str, latency_proxy_factory: type[LatencyProxy]
) -> None:
    """The root zarr.json and each declared array's, one GET each (no HEAD, no listing);
    a dataset pickled into a worker opens its reader without a metadata request, and reads a
    small sharded array whole in one GET (no separate index request)."""
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.0)
    options = s3_server.storage_options(endpoint_url=proxy.url)
    url = f"s3://{bucket}/jpeg.zarr"
    ds = ChunkDataset(url, fields=("image", "label"), storage_options=options)
    arrays = [a for f in ds.layout.fields for a in f.array_names()]
    opened = sorted(path.rsplit("jpeg.zarr/", 1)[1] for _, path, _ in proxy.log)
    assert [m for m, _, _ in proxy.log] == ["GET"] * (1 + len(arrays)), proxy.log
    assert opened == sorted(["zarr.json", *(f"{a}/zarr.json" for a in arrays)])

    proxy.reset_counts()
    with make_loader(ds, 60, num_workers=1, shuffle=False) as loader:
        n = sum(len(y) for _, y in loader)
    assert n == 240
    assert not [e for e in proxy.log if e[1].endswith("zarr.json")], proxy.log
    label_reads = [e for e in proxy.log if "/label/" in e[1]]
    assert label_reads and all(rng is None for _, _, rng in label_reads), label_reads


@pytest.mark.timeout(60)
def test_a_remote_location_that_is_not_a_group_is_refused(s3_server: S3Server, bucket: str) -> None:
    from chunkio.errors import DatasetNotFoundError, FormatError

    options = s3_server.storage_options()
    with pytest.raises(FormatError, match=rf"s3://{bucket}/jpeg.zarr/label.*node_type='array'"):
        ChunkDataset(f"s3://{bucket}/jpeg.zarr/label", storage_options=options)
    with pytest.raises(DatasetNotFoundError, match=rf"s3://{bucket}/none.zarr"):
        ChunkDataset(f"s3://{bucket}/none.zarr", storage_options=options)


@pytest.mark.timeout(60)
def test_a_shard_whose_index_points_past_its_end_is_named(
    s3_server: S3Server, bucket: str, local: Path
) -> None:
    import json

    from chunkio.backends.zarr.shard import shard_layout
    from chunkio.errors import CorruptChunkError

    meta = json.loads((local / "jpeg.zarr" / "label" / "zarr.json").read_text())
    layout = shard_layout(meta)
    assert layout is not None  # a small field, packed into one shard
    size = layout.index_nbytes

    def cut_body(whole: bytes) -> bytes:  # the index intact (its crc too), past the body's end
        return whole[: len(whole) // 4] + whole[-size:]

    key = _damaged_copy(s3_server, bucket, local / "jpeg.zarr", "past.zarr/label/c", cut_body)
    ds = ChunkDataset(
        f"s3://{bucket}/past.zarr", fields="label", storage_options=s3_server.storage_options()
    )
    with pytest.raises(CorruptChunkError, match=rf"s3://{bucket}/{key}.*past its end"):
        ds.read_batch(list(range(240)))


@pytest.mark.timeout(120)
def test_doctor_measures_a_remote_dataset(s3_server: S3Server, bucket: str) -> None:
    from chunkio.diagnose.doctor import run_doctor

    report = run_doctor(
        f"s3://{bucket}/jpeg.zarr",
        worker_counts=(0,),
        batch_sizes=(32,),
        batches_per_setting=3,
        storage_options=s3_server.storage_options(),
    )
    assert report.num_samples == 240 and report.samples_per_chunk == 16
    (m,) = report.measurements
    assert m.batches == 3 and m.samples_per_s > 0
