"""Start one process per rank of a real torch.distributed job on loopback, and wait for them.

Used by the DDP tests: each rank runs ``script RANK WORLD PORT *args`` (it joins a gloo group
on ``tcp://127.0.0.1:PORT``); a rank that fails or hangs fails the test with its output, and
none outlives it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
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
