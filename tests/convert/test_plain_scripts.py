"""Conversions started from plain scripts: no main guard, worker pools, SIGKILL, progress.

Under spawn and forkserver CPython re-runs the caller's script in every child; conversion
workers must not (see :mod:`chunkio.convert.engine.processes`), or a script without
``if __name__ == "__main__":`` converts again in each worker and the pool breaks. Workers
must also exit with the converting process (RELIABILITY row 10: no orphans), and each
progress bar must print its final line once.

The pools are forced on small inputs the documented way: ``workers=2`` and, for images,
``image_check.POOL_MIN_SECONDS = 0.0`` set by the script before converting. Spawn is chosen
by the script with ``multiprocessing.set_start_method("spawn", force=True)``, which chunkio
honours (it never forks).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image
from test_convert_core import (
    SlowSource,
    assert_same_dataset,
    read_all,
    staging_of,
    wait_for_manifest,
)
from test_convert_volumes import _case_files, _same_dataset
from tqdm.auto import tqdm

from chunkio import Execution, Output
from chunkio.convert import run_conversion, write_arrays
from chunkio.convert.images import convert_images
from chunkio.convert.volumes import convert_volumes

#: this folder (test_convert_core), tests/ (conftest, which test_convert_core imports) and
#: tests/support (slow_sources: what the pools' workers unpickle)
TESTS = [
    str(Path(__file__).resolve().parent),
    str(Path(__file__).resolve().parents[1]),
    str(Path(__file__).resolve().parents[1] / "support"),
]
#: every process a script starts inherits this variable: how leftovers are found
MARKER = "CHUNKIO_PLAIN_SCRIPT_RUN"
#: the photos converted; the image script lowers ``images._WARM_UP_FILES`` (1,000) to this, so
#: that its conversion warms the forkserver up without converting a thousand files twice
PHOTOS = 60

PRELUDE = f"""\
import json
import multiprocessing
import sys

sys.path[:0] = {TESTS!r}
from chunkio.convert.engine import processes
from chunkio.convert.image import check as image_check

if sys.argv[1] != "default":
    multiprocessing.set_start_method(sys.argv[1], force=True)
image_check.POOL_MIN_SECONDS = 0.0  # pools even for small folders

POOLS = []  # the start method of every pool the conversion opens
_init = processes.WorkerProcesses.__init__


def _counting_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    POOLS.append(self.start_method)


processes.WorkerProcesses.__init__ = _counting_init
print("start", flush=True)
"""

EPILOGUE = """
print("pools", json.dumps(POOLS))
print("done")
"""

IMAGES = f"""
import chunkio
from chunkio.convert import images

images._WARM_UP_FILES = {PHOTOS}  # the forkserver warm-up, as for 1,000 files and more
chunkio.convert_images(sys.argv[2], sys.argv[3], size=16, execution=chunkio.Execution(workers=2))
"""

ARRAYS = """
import numpy as np
from chunkio import Execution, Output, write_arrays

rng = np.random.default_rng(0)
data = {"x": rng.integers(0, 255, (300, 3, 4), dtype=np.uint8), "y": np.arange(300)}
write_arrays(sys.argv[3], data, output=Output(chunks=10), execution=Execution(workers=2))
"""

VOLUMES = """
from chunkio import Execution, Output
from chunkio.convert.volumes import convert_volumes

n = len(sys.argv[2:]) // 2
img, lab = sys.argv[2 : 2 + n], sys.argv[2 + n : -1]
convert_volumes(img, sys.argv[-1], labels=lab, output=Output(chunks=4),
                execution=Execution(workers=2, progress=False))
"""

SLOW = """
from slow_sources import SlowSource
from chunkio import Execution, Output
from chunkio.convert import run_conversion

r = run_conversion(
    SlowSource(200, float(sys.argv[3])), sys.argv[2], output=Output(chunks=5),
    execution=Execution(workers=2, progress=False),
)
print("blocks", json.dumps([r.resumed_blocks, r.written_blocks]))
"""


def start_script(
    tmp_path: Path, body: str, *args: str, method: str = "default"
) -> tuple[subprocess.Popen[str], str]:
    """Run ``PRELUDE + body + EPILOGUE`` as ``python -W error script.py method *args``."""
    script = tmp_path / f"plain_{uuid.uuid4().hex[:8]}.py"
    script.write_text(PRELUDE + body + EPILOGUE)
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-W", "error", str(script), method, *args],
        cwd=tmp_path,
        env={**os.environ, MARKER: marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, marker


def run_script(
    tmp_path: Path, body: str, *args: str, method: str = "default"
) -> tuple[list[str], str]:
    """Run a plain script to the end; its stdout lines and stderr. Asserts it succeeded."""
    proc, marker = start_script(tmp_path, body, *args, method=method)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert_no_processes_left(marker, set())
    return out.splitlines(), err


def pools_and_body_ran_once(lines: list[str], method: str) -> list[str]:
    assert lines.count("start") == 1, f"the script body ran more than once: {lines}"
    assert lines.count("done") == 1, lines
    pools = json.loads(next(x for x in lines if x.startswith("pools "))[len("pools ") :])
    expected = "spawn" if method == "spawn" else "forkserver"
    assert pools and set(pools) == {expected}, pools
    return list(pools)


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked(marker: str) -> list[psutil.Process]:
    """Live processes started (directly or not) by the script run tagged ``marker``."""
    found = []
    for p in psutil.process_iter():
        try:
            if alive(p) and p.environ().get(MARKER) == marker:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{p.pid} (gone)")
    return out


def assert_no_processes_left(marker: str, recorded: set[psutil.Process], within: float = 5.0):
    """Within ``within`` s, neither a recorded nor a ``marker``-tagged process is alive."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in recorded if alive(p)] + marked(marker)
        if not left:
            return
        if time.monotonic() > deadline:
            message = f"processes left after {within} s: {describe(left)}"
            for p in left:  # started by this test: do not leave them to the next ones
                with contextlib.suppress(psutil.Error):
                    p.kill()
            raise AssertionError(message)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`PHOTOS` small JPEGs in three classes."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for i in range(PHOTOS):
        folder = root / f"class{i % 3}"
        folder.mkdir(exist_ok=True)
        pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)
    return root


#: a spawned converter re-imports torch and chunkio in every process: the default suite runs a
#: plain script under spawn once (write_arrays); the others under spawn run with ``make soak``
SPAWN_SLOW = pytest.mark.slow
METHODS = ("default", "spawn")

# -- plain scripts ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) for m in METHODS])
def test_images_from_a_plain_script(method: str, photos: Path, tmp_path: Path) -> None:
    dst = tmp_path / "photos.zarr"
    lines, _ = run_script(tmp_path, IMAGES, str(photos), str(dst), method=method)
    assert len(pools_and_body_ran_once(lines, method)) == 2, "check and write passes: pools"
    ref = tmp_path / "ref.zarr"
    convert_images(photos, ref, size=16, execution=Execution(workers=1, progress=False))
    assert_same_dataset(str(dst), str(ref))
    assert read_all(str(dst))[0].num_samples == PHOTOS
    assert not staging_of(dst).exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", [pytest.param("default", marks=pytest.mark.slow), "spawn"])
def test_write_arrays_from_a_plain_script(method: str, tmp_path: Path) -> None:
    dst = tmp_path / "arrays.h5"
    lines, _ = run_script(tmp_path, ARRAYS, "-", str(dst), method=method)
    assert len(pools_and_body_ran_once(lines, method)) == 1
    rng = np.random.default_rng(0)
    data = {"x": rng.integers(0, 255, (300, 3, 4), dtype=np.uint8), "y": np.arange(300)}
    ref = tmp_path / "ref.h5"
    write_arrays(ref, data, output=Output(chunks=10), execution=Execution(progress=False))
    assert_same_dataset(str(dst), str(ref))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_volumes_from_a_plain_script(tmp_path: Path) -> None:
    img, lab = _case_files(tmp_path, 4)
    dst = tmp_path / "volumes.zarr"
    lines, _ = run_script(tmp_path, VOLUMES, *img, *lab, str(dst))
    assert len(pools_and_body_ran_once(lines, "default")) == 1
    ref = tmp_path / "ref.zarr"
    convert_volumes(
        img,
        ref,
        labels=lab,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    _same_dataset(str(dst), str(ref))


ALL_THREE = f"""
import numpy as np
import chunkio
from chunkio import Execution, Output, write_arrays
from chunkio.convert import images
from chunkio.convert.volumes import convert_volumes

photos, images_dst, arrays_dst, volumes_dst = sys.argv[2:6]
n = len(sys.argv[6:]) // 2
img, lab = sys.argv[6 : 6 + n], sys.argv[6 + n :]
# write_arrays first: its pool starts the forkserver (no warm-up); then the others' pools
rng = np.random.default_rng(0)
data = {{"x": rng.integers(0, 255, (300, 3, 4), dtype=np.uint8), "y": np.arange(300)}}
write_arrays(arrays_dst, data, output=Output(chunks=10), execution=Execution(workers=2))
convert_volumes(img, volumes_dst, labels=lab, output=Output(chunks=4),
                execution=Execution(workers=2, progress=False))
images._WARM_UP_FILES = {PHOTOS}
chunkio.convert_images(photos, images_dst, size=16, execution=chunkio.Execution(workers=2))
"""


@pytest.mark.timeout(180)
def test_arrays_volumes_and_images_from_one_plain_script(photos: Path, tmp_path: Path) -> None:
    """The default suite's run of the three scripts above (``make soak`` runs each in its own
    interpreter): one interpreter and one forkserver, four pools (the image conversion's
    check and write passes), the script's body run once, each dataset equal to one written
    without workers."""
    img, lab = _case_files(tmp_path, 4)
    dst = {name: tmp_path / f"{name}{suffix}" for name, suffix in
           (("images", ".zarr"), ("arrays", ".h5"), ("volumes", ".zarr"))}  # fmt: skip
    lines, _ = run_script(
        tmp_path, ALL_THREE, str(photos), *(str(p) for p in dst.values()), *img, *lab
    )
    assert len(pools_and_body_ran_once(lines, "default")) == 4
    rng = np.random.default_rng(0)
    data = {"x": rng.integers(0, 255, (300, 3, 4), dtype=np.uint8), "y": np.arange(300)}
    ref = tmp_path / "ref.h5"
    write_arrays(ref, data, output=Output(chunks=10), execution=Execution(progress=False))
    assert_same_dataset(str(dst["arrays"]), str(ref))
    ref = tmp_path / "ref-volumes.zarr"
    convert_volumes(img, ref, labels=lab, output=Output(chunks=4),
                    execution=Execution(workers=1, progress=False))  # fmt: skip
    _same_dataset(str(dst["volumes"]), str(ref))
    ref = tmp_path / "ref-images.zarr"
    convert_images(photos, ref, size=16, execution=Execution(workers=1, progress=False))
    assert_same_dataset(str(dst["images"]), str(ref))
    assert read_all(str(dst["images"]))[0].num_samples == PHOTOS
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("chunkio-staging")]


OWN_SOURCE = (
    "\nfrom typing import Any\n\n"
    + inspect.getsource(SlowSource)
    + """
def main():
    from chunkio import Execution, Output
    from chunkio.convert import run_conversion

    r = run_conversion(
        SlowSource(60), sys.argv[2], output=Output(chunks=5), execution=Execution(workers=2)
    )
    print("blocks", json.dumps([r.resumed_blocks, r.written_blocks]))


if sys.argv[3] == "guarded":
    if __name__ == "__main__":
        main()
else:
    main()
"""
)


@pytest.mark.timeout(120)
def test_a_source_defined_in_the_script_needs_and_works_with_a_main_guard(
    tmp_path: Path,
) -> None:
    """Workers must import such a script: standard multiprocessing rules, and a clear hint."""
    dst = tmp_path / "own.zarr"
    lines, _ = run_script(tmp_path, OWN_SOURCE, str(dst), "guarded")
    # each worker imports the script (its unguarded lines print "start" and "done" there)
    assert [x for x in lines if x.startswith("blocks")] == ["blocks [0, 12]"], lines
    assert 'pools ["forkserver"]' in lines, lines
    run_conversion(
        SlowSource(60),
        tmp_path / "ref.zarr",
        output=Output(chunks=5),
        execution=Execution(progress=False),
    )
    assert_same_dataset(str(dst), str(tmp_path / "ref.zarr"))
    proc, marker = start_script(tmp_path, OWN_SOURCE, str(tmp_path / "bad.zarr"), "unguarded")
    out, err = proc.communicate(timeout=100)
    assert proc.returncode != 0 and "done" not in out.splitlines()
    assert 'must start the conversion under `if __name__ == "__main__":`' in err, err
    assert_no_processes_left(marker, set())


WARM_UP = """
import os
import time
from multiprocessing import forkserver

processes.warm_up()
server = forkserver._forkserver
deadline = time.monotonic() + (60 if processes.start_method() == "forkserver" else 0)
loaded = False
while not loaded and time.monotonic() < deadline:  # the server imports in the background
    pid = server._forkserver_pid
    if pid is not None:
        with open(f"/proc/{pid}/maps") as fh:
            loaded = "simplejpeg" in fh.read()
    time.sleep(0.02)
print("preloaded", loaded)
with processes.worker_processes(2) as pool:
    print("workers", len({pool.submit(os.getpid).result() for _ in range(8)}) >= 1)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["default", pytest.param("spawn", marks=SPAWN_SLOW)])
def test_the_warmed_up_forkserver_has_the_worker_modules_and_not_the_script(
    method: str, tmp_path: Path
) -> None:
    """``processes.warm_up``: imports done once in the server, the caller's script never run."""
    lines, _ = run_script(tmp_path, WARM_UP, method=method)
    pools = pools_and_body_ran_once(lines, method)  # "start" once: no process ran the script
    assert len(pools) == 1 and "workers True" in lines, lines
    # under spawn there is no server to warm up: nothing is started early
    assert ("preloaded True" if method == "default" else "preloaded False") in lines, lines


def test_under_spawn_the_warm_up_starts_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default suite's part of the spawn row above (a script whose pool spawns its
    workers, each importing afresh, runs with ``make soak``): the caller chose spawn, so
    ``warm_up`` leaves the forkserver unstarted and its preload list as it was."""
    import multiprocessing
    import threading
    from multiprocessing import forkserver

    from chunkio.convert.engine import processes

    server = forkserver.ForkServer()  # a fresh one: this process's may run already
    monkeypatch.setattr(forkserver, "_forkserver", server)
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert processes.start_method() == "spawn"
    preload = list(server._preload_modules)
    processes.warm_up()
    assert server._forkserver_pid is None and server._preload_modules == preload
    assert not [t for t in threading.enumerate() if t.name == "chunkio-forkserver-warm-up"]


# -- SIGKILL: no orphans, then resume -----------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["default", pytest.param("spawn", marks=SPAWN_SLOW)])
def test_sigkill_leaves_no_workers_forkserver_or_tracker(method: str, tmp_path: Path) -> None:
    dst = tmp_path / "killed.zarr"
    proc, marker = start_script(tmp_path, SLOW, str(dst), "0.1", method=method)
    try:
        wait_for_manifest(dst, 6, proc)  # both workers have finished blocks
        converter = psutil.Process(proc.pid)
        recorded = set(converter.children(recursive=True))
        commands = [" ".join(p.cmdline()) for p in recorded]
        assert sum("resource_tracker" in c for c in commands) == 1, commands
        workers = [c for c in commands if "resource_tracker" not in c]
        if method == "spawn":
            assert len(workers) == 2 and all("spawn_main" in c for c in workers), commands
        else:  # the forkserver, and the two workers it forked (same command line)
            assert len(workers) == 3 and all("forkserver" in c for c in workers), commands
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # before reading its pipes: leftover workers would hold them open
        assert_no_processes_left(marker, recorded, within=5.0)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert not dst.exists()
    done = staging_of(dst).joinpath("manifest.jsonl").read_text().count("\n")
    # resumed here, in one process: what the killed pool left is what a resume reads (a
    # plain script's pool is the tests above)
    result = run_conversion(
        SlowSource(200), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    resumed, written = result.resumed_blocks, result.written_blocks
    assert resumed >= done and written > 0 and resumed + written == 40
    ref = tmp_path / "ref.zarr"
    run_conversion(
        SlowSource(200), ref, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert_same_dataset(str(dst), str(ref))


# -- progress --------------------------------------------------------------------------------


def final_lines(err: str) -> list[str]:
    """The lines of a captured stderr that draw a bar at 100%."""
    return [s for s in err.replace("\r", "\n").splitlines() if "100%|" in s]


def test_each_progress_bar_prints_its_final_line_once(
    photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from chunkio.convert.engine import core as engine

    # Draw on every update (as a slow conversion does): the last update then reaches 100%.
    eager = functools.partial(tqdm, mininterval=0, miniters=1)
    monkeypatch.setattr(engine, "tqdm", eager)  # every bar of a conversion is the engine's
    convert_images(
        photos, tmp_path / "p.zarr", size=16, execution=Execution(workers=1, progress=True)
    )
    lines = final_lines(capsys.readouterr().err)
    assert [x.split(":")[0] for x in lines] == ["check", "p.zarr"], lines
    run_conversion(
        SlowSource(40),
        tmp_path / "s.zarr",
        output=Output(chunks=5),
        execution=Execution(progress=True),
    )
    lines = final_lines(capsys.readouterr().err)
    assert [x.split(":")[0] for x in lines] == ["s.zarr"], lines
    img, lab = _case_files(tmp_path, 3)
    convert_volumes(
        img,
        tmp_path / "v.zarr",
        labels=lab,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=True),
    )
    lines = final_lines(capsys.readouterr().err)
    assert [x.split(":")[0] for x in lines] == ["v.zarr"], lines
