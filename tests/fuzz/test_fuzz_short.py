"""The short fixed-seed fuzz run (RELIABILITY rows 7, 28, 29, 33, 34, 35), and the harness's own
checks: a crash and a hang are told apart, mutations replay from their seed, the checksums it
recomputes are the ones zarr-python and HDF5 verify, and the bad-input page is its table.

The run makes one case per kind of store (:data:`fuzz_stores.KINDS`), each read in fresh
processes with 0 and 2 workers, and with and without the compiled decoders; a kind fails on a
crash, hang, wrong or untyped verdict, a split between its reads, or a typed error outside its
row of ``docs/reference/bad-input.md``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_child import in_child
from fuzz_expect import BY_OP, allowed, markdown
from fuzz_mutate import OPS, plan
from fuzz_recode import crc32c, fletcher32
from fuzz_run import BAD
from fuzz_stores import KINDS

ROOT = Path(__file__).resolve().parents[2]
SEED = 7
CASES = len(KINDS)  # one per kind (round robin)

#: Kinds whose fixed-seed case fails on today's code, with the reason (the one place to edit:
#: an entry whose fix lands makes its test pass, which strict xfail reports as a failure).
#: Empty since the decode contract (chunks that decode short were read as heap memory).
KNOWN: dict[str, str] = {}


#: the whole run, in one subprocess: about a minute on an idle 2-core machine (stores made,
#: 20 cases, up to 4 fresh reading processes each), several where other jobs share the cores
RUN_SECONDS = 900
pytestmark = pytest.mark.timeout(RUN_SECONDS + 60)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's records by kind, or ``{"error": why}`` (each test then fails at once,
    instead of running the whole fuzz again)."""
    out = tmp_path_factory.mktemp("fuzz")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, str(ROOT / "tests/fuzz/fuzz_run.py"), "--cases", str(CASES),
               "--seed", str(SEED), "--out", str(out), "--timeout", "120"]  # fmt: skip
    try:
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                              capture_output=True, text=True, timeout=RUN_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired as err:
        return {"error": f"the short fuzz run took over {RUN_SECONDS} s: {err}"}
    results = out / "results.jsonl"
    lines = results.read_text().splitlines() if results.exists() else []
    if len(lines) != CASES:
        tail = done.stdout[-3000:] + done.stderr[-3000:]
        return {"error": f"{len(lines)} of {CASES} cases ran:\n{tail}"}
    by_kind: dict[str, Any] = {}
    for r in map(json.loads, lines):
        by_kind.setdefault(r["kind"], []).append(r)
    return by_kind


def _kinds() -> list[Any]:
    return [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=KNOWN[k])) if k in KNOWN else k
        for k in KINDS
    ]


@pytest.mark.parametrize("kind", _kinds())
def test_each_kind_reads_exactly_or_raises_its_typed_error(
    short_run: dict[str, Any], kind: str
) -> None:
    assert "error" not in short_run, short_run.get("error")
    records = short_run[kind]
    bad = [r for r in records if r["verdict"] in (*BAD, "harness") or r.get("split")]
    assert not bad, "\n".join(
        f"{r['id']} {r['verdict']}{' split' if r.get('split') else ''} {r.get('mutation')}: "
        + "; ".join(
            f"{m}={v['verdict']} {v.get('error', '')} {v.get('message', '')[-200:]}"
            f"{v.get('differs', '')}"
            for m, v in r.get("modes", {}).items()
        )
        + f"\n  {r.get('repro', '')}"
        for r in bad
    )
    outside = [
        f"{r['id']} {r['mutation']['op']}: {m} raised {v['error']}"
        for r in records
        for m, v in r["modes"].items()
        if v["verdict"] == "typed" and not allowed(r["mutation"]["op"], v["error"])
    ]
    assert not outside, f"typed errors outside their row of the bad-input page: {outside}"


# -- the harness ---------------------------------------------------------------------------


def test_a_crash_a_hang_an_error_and_a_result_are_told_apart() -> None:
    def segfault() -> None:
        faulthandler.disable()  # pytest's handler would print the child's stack
        os.kill(os.getpid(), signal.SIGSEGV)

    assert in_child(segfault, 10) == ("crash", signal.SIGSEGV)
    started = time.monotonic()
    assert in_child(lambda: time.sleep(30), 0.5) == ("hang", None)
    assert time.monotonic() - started < 10
    status, value = in_child(lambda: [][1], 10)
    assert status == "done" and value["raised"]["type"] == "builtins.IndexError"
    assert not value["raised"]["typed"]
    assert in_child(lambda: {"rows": 3}, 10) == ("done", {"rows": 3})


def test_a_case_replays_from_its_seed(tmp_path: Path) -> None:
    import h5py
    import zarr

    store = tmp_path / "s.zarr"
    zarr.create_array(store, shape=(20, 3), chunks=(5, 3), dtype="i8")[...] = np.arange(60).reshape(
        20, 3
    )
    h5 = tmp_path / "s.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=np.arange(60).reshape(20, 3), chunks=(5, 3), compression="gzip")
    for root, layout in ((store, "zarr"), (h5, "h5")):
        drawn = [plan(np.random.default_rng([3, i]), root, layout) for i in range(30)]
        again = [plan(np.random.default_rng([3, i]), root, layout) for i in range(30)]
        assert drawn == again
        assert {m["op"] for m in drawn} <= set(OPS[layout])


def test_the_recomputed_checksums_are_the_ones_readers_verify(tmp_path: Path) -> None:
    import h5py
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec

    store = tmp_path / "c.zarr"
    a = zarr.create_array(
        store,
        shape=(8,),
        chunks=(8,),
        dtype="i4",
        serializer=BytesCodec(),
        compressors=[Crc32cCodec()],
        filters=None,
    )
    a[...] = np.arange(8)
    raw_zarr = (store / "c" / "0").read_bytes()
    assert len(raw_zarr) == 36 and crc32c(raw_zarr[:-4]) == raw_zarr[-4:]
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(7, dtype="u1"), chunks=(7,), fletcher32=True)
    with h5py.File(path, "r") as f:
        _, raw = f["x"].id.read_direct_chunk((0,))
    assert fletcher32(bytes(raw[:-4])) == bytes(raw[-4:])  # odd length: the padded word
    assert crc32c(b"123456789") == (0xE3069283).to_bytes(4, "little")  # the standard check value


def test_the_bad_input_page_is_the_table_and_covers_every_mutation() -> None:
    page = (ROOT / "docs/reference/bad-input.md").read_text()
    table = page.split("<!-- fuzz-table -->\n", 1)[1].split("<!-- /fuzz-table -->", 1)[0]
    assert table == markdown(), "regenerate: python tests/fuzz/fuzz_expect.py"
    assert set(BY_OP) == {op for ops in OPS.values() for op in ops}
