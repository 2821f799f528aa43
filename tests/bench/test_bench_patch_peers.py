"""``benchmarks.bench_patch_peers`` on tiny volumes: chunkio's side by default (its data, the
per-patch reader it is compared with, the amplification count, the table); the peers, which
need their own venv (``make patch-peers-venv``), under ``make soak`` (``-m slow``) and skipped
without it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

from benchmarks import bench_patch_peers as bench
from chunkio.patches import PatchDataset, RandomPatchSampler

SIZE, CHUNK, PATCH = 16, 8, 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return bench.make_data(tmp_path_factory.mktemp("patch-peers"), volumes=1, size=SIZE,
                           chunk=CHUNK)  # fmt: skip


def test_every_copy_holds_the_same_volumes(data: dict[str, Any]) -> None:
    image = np.load(data["npy_images"][0])
    label = np.load(data["npy_labels"][0])
    assert label.max() > 0  # labelled foreground for the label samplers
    assert np.array_equal(np.asarray(nib.load(data["nifti_images"][0]).dataobj), image)
    ds = PatchDataset(data["ome_stores"][0], (SIZE,) * 3, mask="masks/tissue")
    whole = ds.read_patches([[0, 0, 0, 0]])
    assert np.array_equal(whole["image"][0, 0], image)
    assert np.array_equal(whole["label"][0], label)


@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
def test_per_patch_reader_serves_chunkios_patches(data: dict[str, Any], fmt: str) -> None:
    ds = PatchDataset(data[fmt], (PATCH,) * 3, sampler=RandomPatchSampler(6, seed=1))
    keys = ds.sampler.keys()
    got = ds.read_patches(keys)
    naive = bench.PerPatch(data[fmt], fmt, keys, PATCH)
    for i in range(len(keys)):
        item = naive[i]
        assert np.array_equal(item["image"].numpy(), got["image"][i])
        assert np.array_equal(item["label"].numpy(), got["label"][i])
    # unaligned origins decode more than they deliver; one chunk-aligned patch exactly itself
    # (fresh datasets: each keeps the chunks of its last batch)
    assert bench._amplification(PatchDataset(data[fmt], (PATCH,) * 3), keys) > 1.0
    aligned = np.array([[0, CHUNK, 0, CHUNK]])
    assert bench._amplification(PatchDataset(data[fmt], (PATCH,) * 3), aligned) == 1.0


def test_table_ratios_are_chunkios_over_each_row() -> None:
    row = {"read_amplification": 1.0}
    result = {"results": [
        {"reader": "ours", "group": "g", "patches_per_s": 300.0, "patches_per_cpu_s": 100.0, **row},
        {"reader": "peer", "group": "g", "patches_per_s": 100.0, "patches_per_cpu_s": 50.0, **row},
        {"reader": "gone", "group": "g", "error": "no venv"},
    ]}  # fmt: skip
    lines = bench.table(result).splitlines()
    assert lines[3].endswith("| 3.00x, 2.00x |")
    assert "no venv" in lines[4]


def test_rounds_give_medians_ranges_and_the_median_of_paired_ratios() -> None:
    def rates(wall: float, cpu: float) -> dict[str, Any]:
        return {"patches_per_s": wall, "patches_per_cpu_s": cpu, "patches": 64,
                "read_amplification": 1.5}  # fmt: skip

    ours = bench._aggregate("ours", "g", [rates(300, 90), rates(100, 100), rates(200, 110)])
    peer = bench._aggregate("peer", "g", [rates(100, 50), rates(100, 20), rates(50, 100)])
    once = bench._aggregate("once", "g", [rates(10, 10), None, None])  # TorchIO: one round
    failed = bench._aggregate("failed", "g", [{"error": "boom"}, {"error": "boom"}, None])
    assert ours["patches_per_s"] == 200 and ours["patches_per_s_range"] == [100, 300]
    assert ours["patches_per_cpu_s"] == 100 and ours["read_amplification"] == 1.5
    assert failed == {"reader": "failed", "group": "g", "error": "boom"}
    # per round 3x, 1x, 4x: the median of those, not 200 / 100 = 2x of the medians
    assert bench._ratio(ours, peer, 0) == (3.0, 1.0, 4.0)
    assert bench._ratio(ours, once, 1) == (9.0, 9.0, 9.0)  # the one round both ran
    lines = bench.table({"config": {"patches": 64}, "results": [ours, peer, once]}).splitlines()
    assert lines[2].startswith("| ours | 200.0 (100-300) | 100.0 (90-110) | 1.50 |")
    assert lines[3].endswith("| 3.00x (1.00-4.00), 1.80x (1.10-5.00) |")
    assert lines[4].startswith("| once | 10.0 | 10.0 |")  # one round: no range


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_with_the_peers(tmp_path: Path) -> None:
    if not (bench.PEERS_VENV / "bin" / "python").exists():
        pytest.skip(f"no peers venv at {bench.PEERS_VENV} (make patch-peers-venv)")
    result = bench.run(**bench.QUICK, root=tmp_path)
    rows = {r["reader"]: r for r in result["results"]}
    assert not [name for name, r in rows.items() if "error" in r]
    assert {"torchio", "monai", "zarrdataset"} <= {name.split()[0].lower() for name in rows}
    assert all(r["patches_per_s"] > 0 and r["read_amplification"] > 0 for r in rows.values())


def test_slide_is_written_chunk_row_by_row_and_read_in_place(tmp_path: Path) -> None:
    import zarr

    from benchmarks import bench_patch_slide as slide

    size, chunk = 8 * slide.MASK_STEP, 2 * slide.MASK_STEP
    data = slide.make_slide(tmp_path / "s.ome.zarr", size=size, chunk=chunk)
    mask = slide.tissue_mask(size)
    assert 0 < data["tissue"] < 1 and data["tissue"] == mask.mean()
    stored = np.asarray(zarr.open_group(data["ome_stores"][0], mode="r")["0"])
    inside = np.repeat(np.repeat(mask, slide.MASK_STEP, 0), slide.MASK_STEP, 1)
    assert (stored[:, ~inside] == 255).all() and (stored[:, inside] < 255).any()
    ds = PatchDataset(data["ome_stores"][0], (32, 32), mask="masks/tissue",
                      sampler=RandomPatchSampler(4, seed=0))  # fmt: skip
    keys = ds.sampler.keys()
    got = ds.read_patches(keys)["image"]
    for (_, y, x), patch in zip(keys.tolist(), got, strict=True):
        assert np.array_equal(patch, stored[:, y : y + 32, x : x + 32])
        assert inside[y + 16, x + 16]  # centred in the tissue


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_slide_run_with_zarrdataset(tmp_path: Path) -> None:
    from benchmarks import bench_patch_slide as slide

    if not (bench.PEERS_VENV / "bin" / "python").exists():
        pytest.skip(f"no peers venv at {bench.PEERS_VENV} (make patch-peers-venv)")
    result = slide.run(**slide.QUICK, root=tmp_path)
    rows = result["results"]
    assert [r["reader"].split()[0] for r in rows] == ["chunkio"] * 3 + ["zarrdataset"]
    assert all("error" not in r and r["patches_per_s"] > 0 for r in rows)


def test_covered_grid_keeps_the_patches_any_mask_voxel_touches() -> None:
    from chunkio.format.volume_layout import VolumeSet
    from chunkio.patches import GridSampler
    from chunkio.patches.masks import PatchMask, mask_by_shape

    shapes = ((16, 16, 16), (16, 16, 16))
    volumes = VolumeSet(shapes=shapes, chunks=(8, 8, 8), stacked=True)
    values = np.random.default_rng(1).random((2, 4, 4, 4)) < 0.1  # 1/4 scale, sparse
    mask = PatchMask(mask_by_shape(values, shapes, "memory", "array"))
    covered = bench.CoveredGrid(shuffle=True).bind(volumes, (8, 8, 8), mask=mask)
    full = values.repeat(4, 1).repeat(4, 2).repeat(4, 3)  # the mask at the image's scale
    want = {(v, z, y, x) for v in range(2) for z, y, x in np.ndindex(2, 2, 2)
            if full[v, 8 * z : 8 * z + 8, 8 * y : 8 * y + 8, 8 * x : 8 * x + 8].any()}  # fmt: skip
    got = {(v, z // 8, y // 8, x // 8) for v, z, y, x in covered.keys().tolist()}
    assert got == want and len(covered.keys()) == len(want) < 16
    centred = GridSampler().bind(volumes, (8, 8, 8), mask=mask).keys()
    assert {tuple(k) for k in centred.tolist()} < {tuple(k) for k in covered.keys().tolist()}
