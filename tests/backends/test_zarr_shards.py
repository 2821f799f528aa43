"""Sharded Zarr v3 arrays: chunkio writes and reads shards itself, packs small chunk files into
shards before publishing, and stays readable by zarr-python at every step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkio import ChunkDataset, Execution, ImageOptions, Output, convert_images, write_arrays
from chunkio.backends import Compression, open_reader, open_writer
from chunkio.backends.codec_table import zarr_compressors
from chunkio.backends.zarr.backend import CHUNK_KEY_ENCODING
from chunkio.backends.zarr.pack import pack_arrays
from chunkio.convert import append_arrays
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import CorruptChunkError, MissingChunkError


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_shards_written_by_chunkio_are_zarr_pythons_bytes(tmp_path: Path) -> None:
    x = np.random.default_rng(0).integers(0, 255, (50, 3, 4, 4), dtype=np.uint8)
    ours = tmp_path / "ours.zarr"
    w = open_writer(str(ours))
    w.create_array(
        "x",
        shape=x.shape,
        dtype=x.dtype,
        chunks=(4, 3, 4, 4),
        compression=Compression(),
        shard_chunks=4,
    )
    w.write_block("x", 0, x[:16])  # one whole shard
    w.write_block("x", 16, x[16:])  # the rest, ending with a partial shard
    w.write_block("x", 5, x[5:7])  # not whole shards: through zarr (read-modify-write)
    w.close()
    theirs = zarr.open_group(str(tmp_path / "theirs.zarr"), mode="w").create_array(
        "x",
        shape=x.shape,
        dtype=x.dtype,
        chunks=(4, 3, 4, 4),
        shards=(16, 3, 4, 4),
        compressors=zarr_compressors(Compression()),
        fill_value=0,
        config={"write_empty_chunks": True},
        chunk_key_encoding=CHUNK_KEY_ENCODING,
    )
    theirs[:] = x
    names = sorted(p.name for p in (ours / "x").iterdir() if p.name != "zarr.json")
    assert names == ["c.0.0.0.0", "c.1.0.0.0", "c.2.0.0.0", "c.3.0.0.0"]
    for n in names:
        assert (ours / "x" / n).read_bytes() == (tmp_path / "theirs.zarr" / "x" / n).read_bytes()
    reader = open_reader(str(ours))
    out = np.empty_like(x)
    reader.read_into("x", [(0, 50)], out)
    np.testing.assert_array_equal(out, x)
    assert reader.read_path("x") == "engine"  # chunkio reads the shards, not zarr's oindex
    assert [reader.chunk_exists("x", c) for c in (0, 12, 13)] == [True, True, False]


@pytest.fixture
def packed(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    data = {
        "x": rng.integers(0, 255, (300, 8), dtype=np.uint8),
        "label": rng.integers(0, 10, 300),
    }
    dst = tmp_path / "d.zarr"
    write_arrays(dst, data, shuffle=False, output=Output(chunks=16))
    assert pack_arrays(str(dst)) == ["label", "x"]  # what convert_images does before publishing
    return dst, data


def test_small_chunk_files_are_packed_into_one_shard(packed) -> None:
    dst, data = packed
    for name in ("x", "label"):
        meta = json.loads((dst / name / "zarr.json").read_text())
        assert [c["name"] for c in meta["codecs"]] == ["sharding_indexed"]
        assert sorted(p.relative_to(dst / name).as_posix() for p in _files(dst / name)) == [
            "c/0" if name == "label" else "c/0/0",
            "zarr.json",
        ]
        np.testing.assert_array_equal(zarr.open_array(str(dst / name))[:], data[name])
    ds = ChunkDataset(dst, fields=("x", "label"), preload_bytes=0)
    x, y = ds.read_batch([5, 299, 17]).values()
    np.testing.assert_array_equal(x, data["x"][[5, 299, 17]])
    np.testing.assert_array_equal(y, data["label"][[5, 299, 17]])
    assert verify(dst).ok, verify(dst).problems


@pytest.mark.parametrize("written_as", ["chunk files", "small shards"])
def test_a_pack_killed_at_any_point_leaves_a_readable_array_and_finishes_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_as: str
) -> None:
    """Chunk files are packed, and small shards (one per conversion block) merged, into
    shards; killed at the switch, the array reads the same and the next pack finishes."""
    data = {"label": np.arange(200)}
    src = tmp_path / "src.zarr"
    write_arrays(src, data, shuffle=False, output=Output(chunks=8))
    # unpack it again: a staged dataset, as a conversion leaves it before sealing
    plain = tmp_path / "plain.zarr"
    g = zarr.open_group(str(plain), mode="w")
    g.attrs.update(dict(zarr.open_group(str(src)).attrs))
    a = g.create_array(
        "label",
        shape=(200,),
        dtype=np.int64,
        chunks=(8,),
        shards=(40,) if written_as == "small shards" else None,  # c.0 .. c.4
        compressors=zarr_compressors(Compression()),
        fill_value=0,
        chunk_key_encoding=CHUNK_KEY_ENCODING,
    )
    a[:] = data["label"]
    assert (plain / "label" / "c.4").exists()
    real_replace = os.replace

    def dies_at_the_switch(a: str, b: str) -> None:
        if str(b).endswith("zarr.json"):
            raise KeyboardInterrupt("killed")
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", dies_at_the_switch)
    with pytest.raises(KeyboardInterrupt):
        pack_arrays(str(plain))
    monkeypatch.setattr(os, "replace", real_replace)
    np.testing.assert_array_equal(zarr.open_array(str(plain / "label"))[:], data["label"])
    assert (plain / "label" / "c" / "0").exists()  # shards written, not yet switched to
    assert pack_arrays(str(plain)) == ["label"]
    np.testing.assert_array_equal(zarr.open_array(str(plain / "label"))[:], data["label"])
    # killed after the switch, before the chunk files went: they are removed next time
    (plain / "label" / "c.3").write_bytes(b"stale")
    assert pack_arrays(str(plain)) == []
    assert not (plain / "label" / "c.3").exists()


def test_damaged_shards_raise_typed_errors_naming_the_shard(packed) -> None:
    dst, _ = packed
    shard = dst / "x" / "c" / "0" / "0"
    good = shard.read_bytes()
    shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # the index checksum
    with pytest.raises(CorruptChunkError, match=r"shard 0 .*c/0/0"):
        ChunkDataset(dst, fields="x", preload_bytes=0).read_batch([0])
    assert not verify(dst).ok
    shard.write_bytes(good[: len(good) // 2])  # truncated: the index is gone
    with pytest.raises(CorruptChunkError):
        ChunkDataset(dst, fields="x", preload_bytes=0).read_batch([0])
    index = np.frombuffer(good[-(16 * 19 + 4) : -4], np.uint64).copy()
    index[2] = len(good) * 2  # an offset past the shard's end
    body = index.tobytes()
    from chunkio.backends._checksum import crc32c

    crc = crc32c(np.frombuffer(body, np.uint8)).to_bytes(4, "little")
    shard.write_bytes(good[: -(16 * 19 + 4)] + body + crc)
    with pytest.raises(CorruptChunkError, match="past its end"):
        ChunkDataset(dst, fields="x", preload_bytes=0).read_batch([0])
    shard.unlink()
    with pytest.raises(MissingChunkError):
        ChunkDataset(dst, fields="x", preload_bytes=0).read_batch([0])


def test_appending_to_a_packed_dataset(packed) -> None:
    dst, data = packed
    more = {"x": np.full((40, 8), 7, np.uint8), "label": np.arange(40)}
    append_arrays(dst, more)
    ds = ChunkDataset(dst, fields=("x", "label"), preload_bytes=0)
    assert len(ds) == 340
    got = ds.read_batch(list(range(290, 340)))
    np.testing.assert_array_equal(got["x"], np.concatenate([data["x"][290:], more["x"]]))
    np.testing.assert_array_equal(
        got["label"], np.concatenate([data["label"][290:], more["label"]])
    )
    assert verify(dst).ok


def test_an_image_conversion_is_a_few_files(tmp_path: Path) -> None:
    from benchmarks.data import make_jpeg_folder

    src = make_jpeg_folder(tmp_path / "src", n_images=300, size=64, n_classes=4, seed=2)
    for encoding in ("jpeg", "raw"):
        dst = tmp_path / f"{encoding}.zarr"
        convert_images(
            src, dst, images=ImageOptions(encoding=encoding), execution=Execution(progress=False)
        )
        ds = ChunkDataset(dst, fields=("image", "label"))
        files = _files(dst)
        small = [p for p in files if "image" not in p.relative_to(dst).parts[0]]
        # every small field (label, orig_size, path, source_index, the image index) is one
        # shard plus its zarr.json; the root has its own
        assert len(small) <= 2 * 4 + 1, sorted(map(str, small))
        if encoding == "jpeg":  # the encoded bytes too: 300 JPEGs of 64 px in one shard
            assert len(files) <= 2 * 7 + 1, sorted(map(str, files))
        else:  # raw pixels (3.6 MB, chunks of about 1 MiB): written as one shard directly
            image = [p for p in files if p.relative_to(dst).parts[0] == "image"]
            assert len(image) == 2, image
            meta = json.loads((dst / "image" / "zarr.json").read_text())
            assert meta["codecs"][0]["name"] == "sharding_indexed"
        batch = ds.read_batch([0, 150, 299])
        z = zarr.open_group(str(dst))
        np.testing.assert_array_equal(batch["label"], z["label"][[0, 150, 299]])
        assert verify(dst).ok


def test_encoded_chunks_hold_a_mib_of_jpegs_and_are_packed_into_one_shard(tmp_path: Path) -> None:
    """Chunks of an encoded field are sized by stored bytes (~1 MiB of JPEGs, not of pixels),
    and its bytes array is packed although those chunk files are not small."""
    from benchmarks.data import make_natural_folder

    src = make_natural_folder(tmp_path / "src", n_images=400, size=160, seed=1)
    dst = tmp_path / "jpeg.zarr"
    result = convert_images(
        src, dst, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    ds = ChunkDataset(dst, fields=("image", "label"))
    spans = zarr.open_group(str(dst))["image__spans"][:]
    per_chunk = float((spans[:, 1] - spans[:, 0]).mean()) * result.samples_per_chunk
    assert 0.5 * (1 << 20) <= per_chunk <= 1.5 * (1 << 20), per_chunk  # stored bytes
    assert len(ds.chunk_sizes()) >= 3
    image = [p for p in _files(dst) if p.relative_to(dst).parts[0] == "image__bytes"]
    assert len(image) == 2, image  # zarr.json and one shard
    meta = json.loads((dst / "image__bytes" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    from chunkio import read_source_paths

    z = zarr.open_group(str(dst))  # zarr-python reads the packed shard: the files, as they are
    paths = read_source_paths(dst)
    for i in (0, 7, 399):
        a, b = (int(v) for v in spans[i])
        assert z["image__bytes"][a:b].tobytes() == (src / paths[i]).read_bytes()
    assert verify(dst).ok


def test_ragged_pixels_of_an_image_folder_of_mixed_sizes_are_packed(tmp_path: Path) -> None:
    """Images of several sizes make ``image`` ragged; its values (chunks of about 1 MiB) are
    packed into one shard rather than a file per chunk, and read back exactly."""
    from PIL import Image

    rng = np.random.default_rng(3)
    src = tmp_path / "src"
    pixels = []
    for i in range(60):
        h, w = (int(v) for v in rng.integers(150, 220, size=2))
        arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)  # incompressible
        (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr).save(src / f"c{i % 3}" / f"{i:03d}.png")
        pixels.append(arr)
    dst = tmp_path / "ragged.zarr"
    convert_images(src, dst, shuffle=False, execution=Execution(progress=False))
    ds = ChunkDataset(dst, fields="image")
    assert ds.layout.field("image").kind == "ragged" and len(ds.chunk_sizes()) >= 4
    values = [p for p in _files(dst) if p.relative_to(dst).parts[0] == "image__values"]
    assert len(values) == 2, values  # zarr.json and one shard
    order = sorted(range(60), key=lambda i: (f"c{i % 3}", f"{i:03d}.png"))
    got = ds.read_batch(list(range(60)))["image"]
    for row, i in enumerate(order):
        np.testing.assert_array_equal(np.asarray(got[row]), pixels[i].transpose(2, 0, 1))
    assert verify(dst).ok


def test_ragged_values_are_written_as_shards_of_whole_groups_and_resume_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several shards of ragged values, each the values of whole sample chunks (zeros where a
    group needs fewer chunks than the fullest): written directly, never packed; a conversion
    that fails half way resumes to the same files as an uninterrupted one; zarr-python reads
    every sample at its offset."""
    from PIL import Image

    from chunkio.convert import pipeline
    from chunkio.convert.image import source as image_source_mod
    from chunkio.convert.image import write as image_write
    from chunkio.errors import SourceError

    rng = np.random.default_rng(4)
    src = tmp_path / "src"
    for i in range(48):
        h, w = (int(v) for v in rng.integers(10, 40, size=2))
        (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        Image.fromarray(arr).save(src / f"c{i % 2}" / f"{i:02d}.png")
    monkeypatch.setattr(pipeline, "DIRECT_SHARD_CHUNK_BYTES", 1)
    monkeypatch.setattr(pipeline, "SHARD_BYTES", 13_000)  # 2 chunks of ~6 kB per shard
    monkeypatch.setattr(image_write, "_BLOCK_BYTES", 1)
    # shards of values (~13 kB here) count as large, of labels (~100 B) as small: merged
    monkeypatch.setattr("chunkio.backends.zarr.pack.SMALL_CHUNK_BYTES", 4096)
    kw: dict[str, Any] = {
        "execution": Execution(workers=1, progress=False),
        "output": Output(chunks=3),
    }
    kw["shuffle"] = False  # c1/47.png, the file that fails once, is the last sample
    real = image_source_mod.load_image

    def failing(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("47.png"):
            raise SourceError(f"{path}: simulated failure")
        return real(path, *args, **kwargs)

    dst, ref = tmp_path / "resumed.zarr", tmp_path / "ref.zarr"
    monkeypatch.setattr(image_source_mod, "load_image", failing)
    with pytest.raises(SourceError, match="simulated failure"):
        convert_images(src, dst, **kw)
    monkeypatch.setattr(image_source_mod, "load_image", real)
    resumed = convert_images(src, dst, **kw)
    assert resumed.resumed_blocks >= 3 and resumed.written_blocks >= 1
    convert_images(src, ref, **kw)

    meta = json.loads((dst / "image__values" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    shards = [p for p in _files(dst / "image__values") if p.name != "zarr.json"]
    assert len(shards) >= 3, shards
    assert all(p.name.startswith("c.") for p in shards), shards  # written so, not packed (c/i)
    for small in ("label", "path", "image__offsets", "image__shapes"):  # merged into one
        names = sorted(p.relative_to(dst / small).as_posix() for p in _files(dst / small))
        assert len(names) == 2 and names[0].startswith("c/0") and names[1] == "zarr.json", names
    for p in _files(ref):
        assert (dst / p.relative_to(ref)).read_bytes() == p.read_bytes(), p

    z = zarr.open_group(str(dst))
    offsets, shapes, values = z["image__offsets"][:], z["image__shapes"][:], z["image__values"][:]
    from chunkio import read_source_paths

    for row, rel in enumerate(read_source_paths(dst)):
        want = np.asarray(Image.open(src / rel)).transpose(2, 0, 1)
        got = values[offsets[row] : offsets[row] + want.size].reshape(shapes[row])
        np.testing.assert_array_equal(got, want)
    assert verify(dst).ok


def test_encoded_bytes_are_written_as_shards_of_whole_groups_and_resume_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block writes its shard of the encoded bytes whole (just the chunks it filled),
    straight into place, never packed: several shards, ``c.<i>`` keys; a conversion that
    fails half way resumes to the same files as an uninterrupted one, in one process or two;
    zarr-python reads every JPEG back byte for byte."""
    from benchmarks.data import make_natural_folder
    from chunkio import read_source_paths
    from chunkio.convert import pipeline
    from chunkio.convert.image import source as image_source_mod
    from chunkio.convert.image import write as image_write
    from chunkio.errors import SourceError

    src = make_natural_folder(tmp_path / "src", n_images=48, size=64, seed=5)
    monkeypatch.setattr(pipeline, "DIRECT_SHARD_CHUNK_BYTES", 1)
    monkeypatch.setattr(pipeline, "SHARD_BYTES", 2 * 6 * 64 * 64 * 3)  # 2 chunks per shard
    monkeypatch.setattr(image_write, "_BLOCK_BYTES", 1)
    monkeypatch.setattr("chunkio.backends.zarr.pack.SMALL_CHUNK_BYTES", 1024)
    kw: dict[str, Any] = {"images": ImageOptions(encoding="jpeg"), "output": Output(chunks=6)}
    kw["shuffle"] = False
    real = image_source_mod.image_bytes
    last = sorted(p.name for p in src.rglob("*.jpg"))[-1]

    def failing(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(last):
            raise SourceError(f"{path}: simulated failure")
        return real(path, *args, **kwargs)

    dst, ref, two = tmp_path / "resumed.zarr", tmp_path / "ref.zarr", tmp_path / "two.zarr"
    monkeypatch.setattr(image_source_mod, "image_bytes", failing)
    with pytest.raises(SourceError, match="simulated failure"):
        convert_images(src, dst, **kw, execution=Execution(workers=1, progress=False))
    monkeypatch.setattr(image_source_mod, "image_bytes", real)
    resumed = convert_images(src, dst, **kw, execution=Execution(workers=1, progress=False))
    assert resumed.resumed_blocks >= 2 and resumed.written_blocks >= 1
    convert_images(src, ref, **kw, execution=Execution(workers=1, progress=False))
    monkeypatch.setattr("chunkio.convert.image.check.POOL_MIN_SECONDS", 0.0)
    convert_images(src, two, **kw, execution=Execution(workers=2, progress=False))

    meta = json.loads((dst / "image__bytes" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    shards = [p for p in _files(dst / "image__bytes") if p.name != "zarr.json"]
    assert len(shards) == 4, shards  # 8 sample chunks, 2 per shard
    assert all(p.name.startswith("c.") for p in shards), shards  # written so, not packed (c/i)
    for other in (dst, two):
        for p in _files(ref):
            assert (other / p.relative_to(ref)).read_bytes() == p.read_bytes(), (other, p)

    z = zarr.open_group(str(dst))
    spans = z["image__spans"][:]
    for row, rel in enumerate(read_source_paths(dst)):
        a, b = (int(v) for v in spans[row])
        assert z["image__bytes"][a:b].tobytes() == (src / rel).read_bytes()
    raw = convert_images(
        src, tmp_path / "raw.zarr", shuffle=False, execution=Execution(workers=1, progress=False)
    )
    got = ChunkDataset(dst, fields="image").read_batch(list(range(48)))["image"]
    want = ChunkDataset(raw.path, fields="image").read_batch(list(range(48)))["image"]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert verify(dst).ok
