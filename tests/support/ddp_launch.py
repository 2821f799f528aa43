"""Start one process per rank of a real torch.distributed job on loopback, and wait for them.

Used by the DDP tests: each rank runs ``script RANK WORLD PORT *args`` (it joins a gloo group
on ``tcp://127.0.0.1:PORT``); a rank that fails or hangs fails the test with its output, and
none outlives it. :func:`fork_ranks` forks the ranks from the test process instead, for tests
about what the ranks read rather than how they start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).parent


@contextlib.contextmanager
def gloo_group(rank: int, world: int, port: int) -> Iterator[None]:
    """A rank's side of :func:`run_ranks`: join the gloo group on loopback; leave it after."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(script: str, world: int, args: list[str], *, timeout: float) -> None:
    """Run ``script`` as ranks ``0 .. world - 1``; assert every one exits 0."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), *sys.path])}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / script), str(r), str(world), str(port), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(world)
    ]
    try:
        outputs = [p.communicate(timeout=timeout)[0].decode() for p in procs]
    finally:
        for p in procs:  # a hung rank must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, text) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"rank {r} of {world} failed:\n{text}"


def _forked_rank(main: Callable[[list[str]], int], argv: list[str], log: int) -> None:
    """A forked rank: its output to ``log`` (the parent's fds are pytest's capture), then main."""
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    code = main(argv)
    sys.stdout.flush()
    if code:
        raise SystemExit(code)


def fork_ranks(
    main: Callable[[list[str]], int], world: int, args: list[str], *, timeout: float
) -> None:
    """As :func:`run_ranks`, each rank running ``main([RANK, WORLD, PORT, *args])`` in a process
    forked from this one: torch is already imported, so a rank starts in milliseconds instead
    of seconds (a fresh rank process is what :func:`run_ranks` tests)."""
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(world)]
        procs = [
            ctx.Process(
                target=_forked_rank,
                args=(main, [str(r), str(world), str(port), *args], logs[r].fileno()),
                name=f"rank-{r}",
            )
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
        finally:
            for p in procs:  # a hung rank must not outlive the test
                if p.is_alive():
                    p.kill()
                    p.join()
        for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
            log.seek(0)
            text = log.read().decode(errors="replace")
            assert p.exitcode == 0, f"rank {r} of {world} exited {p.exitcode}:\n{text}"
