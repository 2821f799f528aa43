"""Every read engine runs the same contract suite: chunkio's Zarr engine on chunk files and on
shards, locally and from a loopback S3 server (moto, started by the session fixture), zarr-python's
general path, HDF5 raw chunk reads (local, and byte ranges from S3) and h5py, and the in-memory
reference."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chunkio.backends import Reader, open_reader
from chunkio.backends._memory import delete_memory_store
from chunkio.backends.codec_table import CODECS
from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.zarr.backend import ZarrReader
from chunkio.testing.contract import DTYPES, BackendContract
from chunkio.testing.servers import S3Server, s3_server_fixture  # noqa: F401 (pytest fixture)

_ids = itertools.count()


class TestZarrBackend(BackendContract):
    read_path = "engine"

    @pytest.fixture
    def location(self, tmp_path: Path) -> str:
        return str(tmp_path / "data.zarr")


class TestZarrShardedBackend(TestZarrBackend):
    shard_chunks = 2


def _slow_but(kept: Any, values: Any) -> list[Any]:
    return [v if v in kept else pytest.param(*v, marks=pytest.mark.slow) for v in values]


class RemoteVariants(BackendContract):
    """The contract over S3: the bytes come by range requests and are decoded by the code the
    local classes test with every dtype and codec. The default run reads one dtype and two
    codecs (one compressed, with and without checksums) remotely; ``-m slow`` reads them all."""

    @pytest.mark.parametrize(("dtype",), _slow_but({("uint16",)}, [(d,) for d in DTYPES]))
    def test_round_trip_of_chunk_ranges(self, location: Any, dtype: str) -> None:
        super().test_round_trip_of_chunk_ranges(location, dtype)

    @pytest.mark.parametrize(
        ("codec", "checksum"),
        _slow_but({("none", True), ("zstd", False)}, itertools.product(CODECS, [True, False])),
    )
    def test_every_codec_round_trips(self, location: Any, codec: str, checksum: bool) -> None:
        super().test_every_codec_round_trips(location, codec, checksum)


class TestZarrRemote(RemoteVariants, TestZarrBackend):
    """The engine reading what the writer made locally, uploaded to S3 (each open a new copy)."""

    @pytest.fixture(autouse=True)
    def _s3(self, s3_server: S3Server) -> None:
        self.s3 = s3_server

    def open(self, location: Any) -> Reader:
        url = self.s3.upload_dir(location, "contract", f"d{next(_ids)}")
        return open_reader(url, storage_options=self.s3.storage_options())


class TestZarrRemoteSharded(TestZarrRemote):
    shard_chunks = 2


class TestZarrGeneralPath(TestZarrBackend):
    read_path = "zarr-python"

    def open(self, location: Any) -> Reader:
        return ZarrReader(location, use_engine=False)


class TestZarrShardedGeneralPath(TestZarrGeneralPath):
    shard_chunks = 2


class TestHDF5Backend(BackendContract):
    read_path = "raw"

    @pytest.fixture
    def location(self, tmp_path: Path) -> str:
        return str(tmp_path / "data.h5")


class TestHDF5ThroughH5py(TestHDF5Backend):
    read_path = "h5py"

    def open(self, location: Any) -> Reader:
        return HDF5Reader(location, raw_chunks=False)


class TestHDF5Remote(RemoteVariants, TestHDF5Backend):
    """An HDF5 file on S3: h5py reads its metadata through a block-cached file object, chunks
    come as byte ranges decoded by the raw chunk path (each open a new copy)."""

    read_path = "remote raw"

    @pytest.fixture(autouse=True)
    def _s3(self, s3_server: S3Server) -> None:
        self.s3 = s3_server

    def open(self, location: Any) -> Reader:
        key = f"d{next(_ids)}.h5"
        self.s3.put("contract", key, Path(location).read_bytes())
        return open_reader(f"s3://contract/{key}", storage_options=self.s3.storage_options())


class TestMemoryBackend(BackendContract):
    read_path = "memory"

    @pytest.fixture
    def location(self) -> Iterator[str]:
        name = f"memory://contract-{next(_ids)}"
        yield name
        delete_memory_store(name)
