"""chunkio doctor: report structure and the data-bound / recommendation logic (not timings)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkio import Output
from chunkio.diagnose.doctor import (
    HEADROOM,
    SERIAL_FACTOR,
    DoctorReport,
    Measurement,
    PoolOption,
    _pick_pool,
    _recommend,
    main_doctor,
    run_doctor,
)
from chunkio.errors import DatasetNotFoundError

TINY = {"batches_per_setting": 3, "budget_s_per_setting": 1.0}


def _m(workers: int, batch: int, rate: float) -> Measurement:
    return Measurement(workers, batch, 10, 1.0, rate, rate / 1e3)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DoctorReport:
    from conftest import sample_arrays

    from chunkio import write_arrays

    path = tmp_path_factory.mktemp("doctor") / "tiny.zarr"
    write_arrays(path, sample_arrays(300), shuffle=False, output=Output(chunks=25))  # image, label
    return run_doctor(path, step_time=1e6, worker_counts=[0, 1], batch_sizes=[16, 32], **TINY)


@pytest.mark.timeout(120)
def test_report_structure(report: DoctorReport) -> None:
    assert report.num_samples == 300 and report.samples_per_chunk == 25
    assert report.format == "zarr"
    settings = [(m.num_workers, m.batch_size) for m in report.measurements]
    assert sorted(settings) == [(0, 16), (0, 32), (1, 16), (1, 32)]
    assert all(m.samples_per_s > 0 and 1 <= m.batches <= 3 for m in report.measurements)
    assert report.sample_nbytes == 3 * 8 * 8 + 8  # image + int64 label
    pools = [p.pool_bytes for p in report.pools]
    assert pools == sorted(set(pools)) and report.recommended_pool_bytes in pools
    assert all(p.label_ratio is not None and 0 < p.label_ratio <= 1.2 for p in report.pools)
    assert all(p.read_amplification >= 1.0 for p in report.pools)
    text = report.render()
    assert "tiny.zarr" in text and "not data-bound" in text and "num_workers=" in text
    assert "pool_bytes=" in text and "labels per batch vs uniform" in text


@pytest.mark.timeout(120)
def test_huge_step_time_is_not_data_bound(report: DoctorReport) -> None:
    assert report.step_batch_size == 32
    assert report.required_samples_per_s == pytest.approx(32 / 1e6)
    assert report.data_bound is False
    # any setting keeps up, so the fewest workers win
    assert report.recommended_workers == 0 and report.recommended_batch_size == 32


@pytest.mark.timeout(120)
def test_tiny_step_time_is_data_bound(report: DoctorReport) -> None:
    path = Path(report.path)
    short = run_doctor(path, step_time=1e-9, worker_counts=[0], batch_sizes=[16], **TINY)
    assert short.data_bound is True
    assert short.notes and "DATA-BOUND" in short.render()
    none = run_doctor(path, worker_counts=[0], batch_sizes=[16], **TINY)
    assert none.data_bound is None and none.required_samples_per_s is None
    assert "--step-time" in none.render()


@pytest.mark.timeout(120)
def test_main_doctor_returns_text(report: DoctorReport) -> None:
    text = main_doctor(report.path, step_time=1.0, worker_counts=[0], batch_sizes=[8])
    assert text.startswith("chunkio doctor:") and "samples/s" in text


def test_recommend_prefers_fewest_workers_that_keep_up() -> None:
    ms = [_m(0, 256, 1000.0), _m(1, 256, 1300.0), _m(2, 256, 2500.0), _m(2, 64, 9000.0)]
    # model consumes 1000 samples/s: 1 worker has the 1.2x headroom, 0 workers lack 20x
    assert _recommend(ms, 1000.0, 256) == (False, 1, 256, [])
    # 0 workers only when reading adds at most 1/SERIAL_FACTOR to each step
    assert _recommend(ms, 1000.0 / SERIAL_FACTOR, 256)[:2] == (False, 0)
    bound, workers, batch, notes = _recommend(ms, 2500.0 / HEADROOM * 1.01, 256)
    assert (bound, workers, batch) == (True, 2, 256)
    assert any("batch 64 reads faster" in n for n in notes)
    # without a step time: the fastest row of the table, whatever its batch size
    assert _recommend(ms, None, 256) == (None, 2, 64, [])


def test_pick_pool() -> None:
    opts = [
        PoolOption(2**20, 1.00, 0.1, 0.60),
        PoolOption(2**22, 1.05, 0.4, 0.97),
        PoolOption(2**24, 1.30, 0.8, 0.99),  # reads too much
        PoolOption(2**31, 1.02, 0.9, 1.00),  # too much memory
    ]
    assert _pick_pool(opts, data_bound=False) == 2**22
    assert _pick_pool(opts, data_bound=None) == 2**22
    assert _pick_pool(opts, data_bound=True) == 2**20
    # equal mixing: the smaller pool; no labels: chunk mixing decides
    same = [PoolOption(2**20, 1.0, 0.5, 1.0), PoolOption(2**22, 1.0, 0.9, 1.0)]
    assert _pick_pool(same, data_bound=False) == 2**20
    unlabelled = [PoolOption(2**20, 1.0, 0.5, None), PoolOption(2**22, 1.0, 0.9, None)]
    assert _pick_pool(unlabelled, data_bound=False) == 2**22


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step_time": 0.0}, "step_time"),
        ({"step_time": -1.0}, "step_time"),
        ({"worker_counts": [-1]}, "worker_counts"),
        ({"batch_sizes": [0]}, "batch_sizes"),
        ({"batch_sizes": [16], "step_batch_size": 32}, "step_batch_size"),
    ],
)
def test_bad_arguments(
    make_dataset: Callable[..., tuple[str, Any]], kwargs: dict[str, Any], match: str
) -> None:
    path, _ = make_dataset("zarr")
    with pytest.raises(ValueError, match=match):
        run_doctor(path, **kwargs)


def test_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError):
        run_doctor(tmp_path / "absent.zarr", worker_counts=[0], batch_sizes=[4])


def test_measurement_counts_dict_batches() -> None:
    from chunkio.diagnose.doctor import _batch_len

    assert _batch_len({"x": np.zeros((5, 2))}) == 5
    assert _batch_len((np.zeros(3), np.zeros(3))) == 3
    assert _batch_len(np.zeros((7, 1))) == 7
