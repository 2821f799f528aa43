"""Per-field, per-channel stats in one streaming pass (equal to NumPy's over the whole array),
of time differences too; Normalize on batches; stats that do not match the dataset; the CLI."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from weather_stores import STORES, VARS, arrays

import chunkio
from chunkio import ChunkDataset, Field, Normalize, Stats, compute_stats
from chunkio.diagnose.cli import main
from chunkio.errors import WindowError
from chunkio.transforms.stats import fit_stats


@pytest.fixture(scope="module", params=["xarray v3", "h5py", "chunkio"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return STORES[request.param](tmp_path_factory.mktemp("s"))


def _open(path: Path, fields: Any) -> ChunkDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
        return ChunkDataset(path, fields=fields)


FIELDS = [Field(list(VARS), steps=[-1, 0]), Field("level", steps=[1])]


@pytest.mark.parametrize("diff", [False, True])
def test_stats_equal_numpy_over_the_whole_array(store: Path, diff: bool) -> None:
    ds = _open(store, FIELDS)
    stats = compute_stats(ds, diff=diff)
    a = {k: (np.diff(v.astype(np.float64), axis=0) if diff else v) for k, v in arrays().items()}
    x = stats.fields["t2m_u10_v10"]
    want = [a[v].mean() for v in VARS]
    np.testing.assert_allclose(x["mean"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x["std"], [a[v].std() for v in VARS], rtol=1e-5)
    level = stats.fields["level"]  # (T, 2 levels, lat, lon): one per level
    np.testing.assert_allclose(level["mean"], a["level"].mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(level["std"], a["level"].std(axis=(0, 2, 3)), rtol=1e-5)


def test_normalize_applies_the_saved_stats_to_batches(store: Path, tmp_path: Path) -> None:
    ds = _open(store, FIELDS)
    compute_stats(ds).save(tmp_path / "stats.json")
    norm = Normalize(tmp_path / "stats.json", dataset=ds)
    loader = chunkio.make_loader(ds, 16, num_workers=0, seed=0, workers=chunkio.Workers(copy=True))
    x, y = norm(next(iter(loader)))
    loader.close()
    assert x.shape[1:] == (2, 3, 3, 4) and y.shape[1:] == (1, 2, 3, 4)
    s = Stats.load(tmp_path / "stats.json").fields["t2m_u10_v10"]
    raw = torch.as_tensor(ds.read_batch([0])["t2m_u10_v10"])
    mean = torch.tensor(s["mean"]).reshape(3, 1, 1)
    std = torch.tensor(s["std"]).reshape(3, 1, 1)
    got = norm({"t2m_u10_v10": raw})["t2m_u10_v10"]
    torch.testing.assert_close(got, (raw - mean) / std)


def test_stats_that_do_not_match_the_dataset(store: Path) -> None:
    stats = compute_stats(_open(store, FIELDS))
    with pytest.raises(WindowError, match=r"stats have field 'level'.*fields are"):
        Normalize(stats, dataset=_open(store, [Field(list(VARS), steps=[-1, 0])]))
    other = _open(store, {"t2m_u10_v10": Field(["u10", "t2m", "v10"], steps=[0]),
                          "level": Field("level", steps=[0])})  # fmt: skip
    with pytest.raises(WindowError, match=r"field 't2m_u10_v10' reads arrays \['u10'"):
        Normalize(stats, dataset=other)


def test_the_stats_command_writes_a_small_file(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    fields = [] if "native" in str(store) else ["--fields", "t2m", "level"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["stats", str(store), *fields, "--out", str(out)]) == 0
    found = Stats.load(out)
    np.testing.assert_allclose(found.fields["t2m"]["mean"], arrays()["t2m"].mean(), rtol=1e-5)
    assert out.stat().st_size < 10_000


def test_stats_of_single_variables_serve_the_fields_that_stack_them(
    store: Path, tmp_path: Path
) -> None:
    """The windows guide's recipe: ``chunkio stats --fields t2m u10 v10``, then ``Normalize``
    of a window stacking the three and of its target: each takes the variables' stats as its
    channels, as compute_stats of that dataset gives them."""
    out = tmp_path / "s.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["stats", str(store), "--fields", *VARS, "--out", str(out)]) == 0
    ds = _open(store, {"x": Field(list(VARS), steps=[-1, 0]), "y": Field(list(VARS), steps=[1])})
    norm = Normalize(out, dataset=ds)
    want = compute_stats(ds)
    for name in ("x", "y"):
        for key in ("mean", "std"):
            np.testing.assert_allclose(norm.stats.fields[name][key], want.fields[name][key])
    saved = Stats.load(out).fields
    two = _open(store, [Field(["u10", "t2m"], steps=[0])])  # in its own order of variables
    got = fit_stats(Stats.load(out), two.batch_columns()).fields["u10_t2m"]["mean"]
    assert got == [saved["u10"]["mean"], saved["t2m"]["mean"]]
    with pytest.raises(WindowError, match=r"stats have field 'v10'"):
        Normalize(out, dataset=two)  # v10 serves no field: stats of another dataset
