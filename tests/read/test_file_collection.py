"""Many files as one dataset (``ChunkDataset([path1, path2, ...])``): rows end to end,
categorical codes remapped to one category list, the order and the loader spanning files,
each process opening files lazily and keeping a bounded number open; mismatched files
refused naming the file and field."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import chunkio
from chunkio.collection.core import FileSetCore
from chunkio.errors import DatasetNotFoundError, FormatError
from chunkio.read.sparse import CSRBatch
from chunkio.transforms.image import Compose, RandomResizedCrop

ad = pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")
pd = pytest.importorskip("pandas")

#: per file: its categories (in that file's order) and its cell count
FILES = [(["B", "T", "NK"], 300), (["T", "Mono"], 170), (["NK", "B", "DC"], 241)]


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> tuple[list[str], sp.csr_matrix, np.ndarray]:
    """Three h5ad files (one AnnData Zarr store among them): the rows stacked, and each
    cell's type name."""
    root = tmp_path_factory.mktemp("collection")
    rng = np.random.default_rng(0)
    paths, mats, names, start = [], [], [], 0
    for i, (cats, n) in enumerate(FILES):
        x = sp.random(n, 25, density=0.2, format="csr", dtype=np.float32, random_state=i)
        types = rng.choice(cats, n)
        obs = pd.DataFrame(
            {
                "cell_type": pd.Categorical(types, categories=cats),
                "cell_id": np.arange(start, start + n),
            },
            index=[f"{i}_{k}" for k in range(n)],
        )
        a = ad.AnnData(X=x, obs=obs)
        if i == 1:
            path = str(root / f"part{i}.zarr")
            with ad.settings.override(zarr_write_format=3), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # anndata: "autosharding will be"
                a.write_zarr(path)
        else:
            path = str(root / f"part{i}.h5ad")
            a.write_h5ad(path, compression="gzip")
        paths.append(path)
        mats.append(x)
        names.append(types)
        start += n
    return paths, sp.vstack(mats).tocsr(), np.concatenate(names)


FIELDS = {"x": "X", "label": "obs/cell_type", "id": "obs/cell_id"}


def test_rows_end_to_end_and_categories_united(collection) -> None:
    paths, x, names = collection
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    assert len(ds) == x.shape[0] == sum(n for _, n in FILES)
    assert ds.categories("label") == ("B", "T", "NK", "Mono", "DC")
    rng = np.random.default_rng(1)
    idx = np.concatenate([[0, 299, 300, 469, 470, len(ds) - 1], rng.integers(0, len(ds), 200)])
    batch = ds.read_batch(idx)
    np.testing.assert_array_equal(batch["x"], x[idx].toarray())
    np.testing.assert_array_equal(batch["id"], idx)
    got = np.asarray(ds.categories("label"))[batch["label"]]
    np.testing.assert_array_equal(got, names[idx])
    labels = ds.labels()
    np.testing.assert_array_equal(np.asarray(ds.categories("label"))[labels], names)
    sizes = ds.chunk_sizes()
    assert sizes.sum() == len(ds)
    assert np.isin([300, 470], np.cumsum(sizes)).all()  # no chunk of the order spans two files


def test_csr_batches_span_files(collection) -> None:
    """``sparse_batches="csr"`` over several files: one CSR batch in the batch's order (the
    files' rows joined), not dense rows."""
    paths, x, _ = collection
    ds = chunkio.ChunkDataset(paths, fields=FIELDS, sparse_batches="csr")
    idx = [470, 0, 299, 300, 0, len(ds) - 1, 469, 5]
    got = ds.read_batch(idx)["x"]
    assert isinstance(got, CSRBatch) and got.shape == (len(idx), x.shape[1])
    np.testing.assert_array_equal(got.toarray(), x[idx].toarray())
    assert got.indptr[-1] == len(got.data) == x[idx].nnz
    assert ds.read_batch([])["x"].shape == (0, x.shape[1])


@pytest.mark.timeout(120)
# spawn under ``-m slow``: forkserver pickles the dataset to its workers the same way, at a
# fraction of the cost (tests/conftest.py preloads the server); spawn itself keeps default cases
# in tests/transport/test_transport.py and tests/read/test_concurrency.py
@pytest.mark.parametrize(
    "context", ["fork", "forkserver", pytest.param("spawn", marks=pytest.mark.slow)]
)
def test_loader_epoch_spans_files_over_workers(collection, context: str) -> None:
    paths, x, names = collection
    loader = chunkio.make_loader(
        paths,
        batch_size=64,
        fields=FIELDS,
        num_workers=2,
        seed=4,
        workers=chunkio.Workers(context=context),
    )
    seen, spans = [], 0
    categories = None
    for xb, label, ids in loader:
        ids = ids.numpy().copy()  # the loader reuses its batch buffers
        np.testing.assert_array_equal(xb.numpy(), x[ids].toarray())
        categories = categories or chunkio.ChunkDataset(paths, fields=FIELDS).categories("label")
        np.testing.assert_array_equal(np.asarray(categories)[label.numpy()], names[ids])
        spans += len(np.unique(np.searchsorted([300, 470], ids, side="right"))) > 1
        seen.append(ids)
    assert sorted(np.concatenate(seen).tolist()) == list(range(x.shape[0]))
    assert spans > 0  # the mixing pool draws batches from several files


def test_the_order_is_shared_across_ranks_and_resumes(collection) -> None:
    paths, _, _ = collection
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    ranks = [
        chunkio.ChunkBatchSampler(
            ds.chunk_sizes(), 32, seed=2, rank=r, world_size=3, drop_last=True
        )
        for r in range(3)
    ]
    per_rank = [np.concatenate(s.batches(0)) for s in ranks]
    everything = np.concatenate(per_rank)
    assert len(np.unique(everything)) == len(everything)  # no sample on two ranks
    sampler = chunkio.ChunkBatchSampler(ds.chunk_sizes(), 32, seed=2)
    batches = [list(b) for b in sampler]
    state = sampler.state_at(5)
    again = chunkio.ChunkBatchSampler(ds.chunk_sizes(), 32, seed=2)
    again.load_state_dict(state)
    assert [list(b) for b in again] == batches[5:]


def test_each_process_opens_files_lazily_and_keeps_a_bounded_number(collection) -> None:
    paths, x, _ = collection
    ds = chunkio.ChunkDataset(paths, fields={"x": "X"})
    core = FileSetCore(ds._files, max_open=2)
    assert core.opened == 0  # nothing opened before the first read
    out = core.read(["x"], [0, 350, 600, 1, 351])
    np.testing.assert_array_equal(out["x"], x[[0, 350, 600, 1, 351]].toarray())
    assert core.opened == 3 and len(core._open) == 2
    core.read(["x"], [5])  # file 0 was closed (least recently used): opened again
    assert core.opened == 4 and len(core._open) == 2
    assert core.stats.samples == 6
    core.close()
    clone = pickle.loads(pickle.dumps(ds))  # no handle travels with the dataset
    assert clone._local is None and len(clone) == len(ds)


def test_native_datasets_split_over_files_read_as_the_whole(tmp_path: Path) -> None:
    """Images split over two HDF5 files: the same samples, labels and field-transform draws
    (keyed by the whole dataset's index) as one file of all of them."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 255, (60, 3, 40, 40), dtype=np.uint8)
    labels = rng.integers(0, 5, 60)
    whole = str(tmp_path / "whole.h5")
    halves = [str(tmp_path / "a.h5"), str(tmp_path / "b.h5")]
    chunkio.write_arrays(whole, {"image": images, "label": labels}, shuffle=False)
    for path, part in zip(halves, (slice(0, 25), slice(25, 60)), strict=True):
        chunkio.write_arrays(path, {"image": images[part], "label": labels[part]}, shuffle=False)
    t = Compose([RandomResizedCrop(24)], field="image", seed=9)
    one = chunkio.ChunkDataset(whole, fields=["image", "label"], transform=t)
    two = chunkio.ChunkDataset(halves, fields=["image", "label"], transform=t)
    idx = [59, 0, 24, 25, 30, 3]
    a, b = one.read_batch(idx, epoch=2), two.read_batch(idx, epoch=2)
    np.testing.assert_array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(b["label"], labels[idx])
    np.testing.assert_array_equal(two.labels(), labels)


def test_files_that_differ_are_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    a, b, c = (str(tmp_path / n) for n in ("a.h5", "b.h5", "c.h5"))
    chunkio.write_arrays(a, {"x": np.zeros((10, 4), "f4"), "label": np.zeros(10, "i8")})
    chunkio.write_arrays(b, {"x": np.zeros((10, 4), "f8"), "label": np.zeros(10, "i8")})
    chunkio.write_arrays(c, {"x": np.zeros((10, 5), "f4")})
    with pytest.raises(FormatError, match=r"b.h5: field 'x' has dtype 'float64', but in .*a.h5"):
        chunkio.ChunkDataset([a, b])
    fields = r"\['x', 'source_index'\]"
    with pytest.raises(FormatError, match=rf"c.h5: holds fields {fields}, but .*a.h5 holds"):
        chunkio.ChunkDataset([a, c])
    with pytest.raises(DatasetNotFoundError, match=r"missing\.h5"):
        chunkio.ChunkDataset([a, str(tmp_path / "missing.h5")])
    with pytest.raises(FormatError, match="needs at least one"):
        chunkio.ChunkDataset([])
    with pytest.raises(FormatError, match=r"windows .* read one store"):
        chunkio.ChunkDataset([a, a], fields=chunkio.Field("x", steps=[0, 1]))


def test_h5ad_files_whose_genes_differ_are_refused(collection, tmp_path: Path) -> None:
    paths, _, _ = collection
    other = str(tmp_path / "wide.h5ad")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs = pd.DataFrame(
            {"cell_type": pd.Categorical(["B"] * 5), "cell_id": np.arange(5)},
            index=[f"w{i}" for i in range(5)],
        )
        ad.AnnData(
            X=sp.random(5, 30, density=0.3, format="csr", dtype=np.float32), obs=obs
        ).write_h5ad(other)
    with pytest.raises(FormatError, match=r"wide.h5ad: field 'x' has sample shape \(30,\)"):
        chunkio.ChunkDataset([paths[0], other], fields=FIELDS)
    assert os.path.exists(other)


def test_the_cli_reads_several_files_as_one_dataset(collection, capsys) -> None:
    from chunkio.diagnose.cli import main

    paths, _, _ = collection
    words = ["--fields", "x=X", "label=obs/cell_type"]
    assert main(["verify", *paths, *words]) == 0
    out = capsys.readouterr().out
    assert all(f"{os.path.basename(p)}:" in out for p in paths)
    assert main(["info", *paths, *words, "--json"]) == 0
    assert '"num_samples": 711' in capsys.readouterr().out


def _small_h5ad(path: Path, seed: int, density: float = 0.3) -> tuple[str, sp.csr_matrix]:
    """An uncompressed h5ad file of 40 cells (anndata's defaults: chunked X, contiguous
    codes)."""
    x = sp.random(40, 12, density=density, format="csr", dtype=np.float32, random_state=seed)
    cats = ["a", "b", "c"][seed % 3 :] + ["a", "b", "c"][: seed % 3]  # codes differ per file
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(np.resize(cats, 40), categories=cats)},
        index=[f"{seed}_{i}" for i in range(40)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's index-conversion notes
        ad.AnnData(X=x, obs=obs).write_h5ad(path)
    return str(path), x


SMALL = {"x": "X", "label": "obs/cell_type"}


def _small_label(i: int) -> str:
    """Cell ``i``'s type in files written by :func:`_small_h5ad` with seeds 0, 1, 2, ..."""
    seed, row = divmod(i, 40)
    cats = ["a", "b", "c"][seed % 3 :] + ["a", "b", "c"][: seed % 3]
    return cats[row % 3]


def test_each_process_reads_described_files_without_opening_them_in_h5py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent describes each HDF5 file once (links, checks, chunk index); a reading
    process opens it with ``os.open`` alone and reads what h5py reads."""
    import h5py

    made = [_small_h5ad(tmp_path / f"{i}.h5ad", i) for i in range(3)]
    paths, x = [p for p, _ in made], sp.vstack([m for _, m in made]).tocsr()
    ds = chunkio.ChunkDataset(paths, fields=SMALL)
    opened: list[str] = []
    real = h5py.File
    monkeypatch.setattr(h5py, "File", lambda *a, **k: opened.append(str(a[0])) or real(*a, **k))
    core = FileSetCore(pickle.loads(pickle.dumps(ds._files)))  # as a spawned worker gets it
    idx = np.array([119, 0, 40, 41, 5, 80, 39])
    got = core.read(["x", "label"], idx)
    np.testing.assert_array_equal(got["x"], x[idx].toarray())
    names = np.asarray(ds.categories("label"))[got["label"]]
    assert names.tolist() == [_small_label(int(i)) for i in idx]
    assert core.opened == 3 and opened == []
    whole = core.read(["x"], np.arange(len(ds)), once=True)["x"]  # one-chunk files, whole
    np.testing.assert_array_equal(whole, x.toarray())
    assert opened == []
    core.close()


def test_a_file_changed_after_the_dataset_was_made_is_read_as_it_is_now(tmp_path: Path) -> None:
    """A description holds while the file keeps the state it was described in: a file
    rewritten in place is read as it is now; one replaced by a file of the same cells but more
    values is refused as a file without a description is (its ``indptr`` checked in each
    process), never read by the chunk offsets of the file it was (they point into other
    arrays there)."""
    import h5py

    made = [_small_h5ad(tmp_path / f"{i}.h5ad", i) for i in range(3)]
    paths = [p for p, _ in made]
    ds = chunkio.ChunkDataset(paths, fields=SMALL)
    with h5py.File(paths[0], "r+") as f:  # in place: the same inode and size
        f["X/data"][...] = f["X/data"][...] * 3
    got = ds.read_batch(np.arange(40))["x"]
    np.testing.assert_array_equal(got, made[0][1].toarray() * 3)
    _small_h5ad(tmp_path / "1.h5ad", 1, density=0.8)  # a new file, 40 cells
    stored = made[1][1].nnz
    with pytest.raises(FormatError, match=rf"1.h5ad: .*indptr points past the {stored} stored"):
        ds.read_batch([40])


def test_a_single_h5ad_is_read_in_each_process_as_described_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file's description travels with the dataset as each of many files' does: a
    process it is pickled to reads the file without h5py, the same rows; reads in the parent
    add nothing to it; a file rewritten since is read as it is now."""
    import h5py

    path, x = _small_h5ad(tmp_path / "one.h5ad", 0)
    ds = chunkio.ChunkDataset(path, fields=SMALL)
    opened: list[str] = []
    real = h5py.File
    monkeypatch.setattr(h5py, "File", lambda *a, **k: opened.append(str(a[0])) or real(*a, **k))
    idx = np.array([39, 0, 7, 8, 20])
    got = pickle.loads(pickle.dumps(ds)).read_batch(idx)  # as a spawned worker reads it
    np.testing.assert_array_equal(got["x"], x[idx].toarray())
    names = np.asarray(ds.categories("label"))[got["label"]]
    assert names.tolist() == [_small_label(int(i)) for i in idx]
    assert opened == []
    made = len(pickle.dumps(ds))
    ds.read_batch(np.arange(40))  # reads here leave what each worker is handed as it was
    assert len(pickle.dumps(ds)) == made
    with real(path, "r+") as f:  # in place: the same inode and size
        f["X/data"][...] = f["X/data"][...] * 3
    later = pickle.loads(pickle.dumps(ds)).read_batch(idx)["x"]
    np.testing.assert_array_equal(later, x[idx].toarray() * 3)


def test_reading_in_the_parent_leaves_the_description_as_it_was_made(tmp_path: Path) -> None:
    """Each reader copies what it is handed (scratch buffers, checked checksums): reads in
    the parent add nothing to what the dataset pickles to each worker."""
    paths = [_small_h5ad(tmp_path / f"{i}.h5ad", i)[0] for i in range(2)]
    ds = chunkio.ChunkDataset(paths, fields=SMALL)
    made = len(pickle.dumps(ds))
    ds.labels(), ds.read_batch(np.arange(len(ds)))
    assert len(pickle.dumps(ds)) == made


def test_a_corrupt_chunk_in_a_described_file_is_refused_in_every_process(tmp_path: Path) -> None:
    """Workers read described files by ``pread``, without h5py: a chunk whose bytes were
    flipped before the dataset was made (its checksum kept by nobody) is a
    :class:`~chunkio.errors.CorruptChunkError` naming the file there too, with 0 and 2 workers,
    and the files around it read exactly."""
    import h5py

    from chunkio.errors import CorruptChunkError

    paths, rows = [], []
    for i in range(3):
        x = np.arange(i * 48 * 6, (i + 1) * 48 * 6, dtype=np.float32).reshape(48, 6)
        path = tmp_path / f"part{i}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=x, chunks=(8, 6), compression="gzip", fletcher32=True)
            f["y"] = np.full(48, i, np.int64)
        paths.append(str(path))
        rows.append(x)
    with h5py.File(paths[1], "r") as f:
        offset = f["x"].id.get_chunk_info(2).byte_offset  # rows 16..23 of the second file
    with open(paths[1], "r+b") as fh:
        fh.seek(offset + 5)
        byte = fh.read(1)
        fh.seek(offset + 5)
        fh.write(bytes([byte[0] ^ 0xFF]))
    ds = chunkio.ChunkDataset(paths, fields={"x": "x", "label": "y"})
    whole = np.concatenate(rows)
    core = FileSetCore(pickle.loads(pickle.dumps(ds._files)))  # as a worker gets it
    np.testing.assert_array_equal(core.read(["x"], np.array([0, 47, 100, 143]))["x"],
                                  whole[[0, 47, 100, 143]])  # fmt: skip
    with pytest.raises(CorruptChunkError, match=r"part1\.h5"):
        core.read(["x"], np.array([48 + 17]))
    core.close()
    with pytest.raises(CorruptChunkError, match=r"part1\.h5"):
        ds.read_batch([48 + 17])
    loader = chunkio.make_loader(ds, 16, num_workers=2, shuffle=False)
    with pytest.raises(CorruptChunkError, match=r"part1\.h5"), loader:
        for _ in loader:
            pass


def test_h5ad_files_and_zarr_stores_described_in_processes_read_as_described_here(
    collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of h5ad files and AnnData Zarr stores past the first few files, described in
    forked processes (:mod:`chunkio.collection.describe`): every batch as described here."""
    from chunkio.collection import describe

    if not describe.can_fork():
        pytest.skip("no fork here: files are described in this process")
    paths, x, names = collection
    listed = paths * 3  # the Zarr store among those past the first four
    here = chunkio.ChunkDataset(listed, fields=FIELDS)
    monkeypatch.setattr(describe, "POOL_PAYS_S", 0.0)
    monkeypatch.setattr(describe, "describe_processes", lambda: 2)
    pooled = chunkio.ChunkDataset(listed, fields=FIELDS)
    assert pooled._files.layout == here._files.layout
    assert pooled.categories("label") == ("B", "T", "NK", "Mono", "DC")
    rows = x.shape[0]
    idx = np.array([0, 2 * rows + 350, rows + 469, 3 * rows - 1, 2 * rows + 300, 5])
    got = pooled.read_batch(idx)
    np.testing.assert_array_equal(got["x"], here.read_batch(idx)["x"])
    np.testing.assert_array_equal(got["x"], x[idx % rows].toarray())
    np.testing.assert_array_equal(np.asarray(pooled.categories("label"))[got["label"]],
                                  names[idx % rows])  # fmt: skip
