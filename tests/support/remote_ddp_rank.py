"""One rank of a real ``torch.distributed`` job reading S3 datasets
(tests/remote/test_remote_ddp.py).

    python tests/support/remote_ddp_rank.py RANK WORLD PORT CONFIG OUT_DIR

CONFIG is a JSON file: ``{"storage_options": {...}, "jobs": [{"name", "url", "batch_size",
"num_workers", "fields", "id_field", "seed", "pool_bytes"}, ...]}``. For each job the rank joins
a gloo process group on 127.0.0.1, builds ``chunkio.make_loader(url, ..., rank=RANK,
world_size=WORLD)``, reads epoch 0 (no ``set_epoch``) and then epoch 1 (after
``set_epoch(1)``), and writes ``OUT_DIR/<name>.e<epoch>.r<rank>.npz``: every field of every
batch (concatenated, with the batch lengths) and the sample rows its sampler asked for. Each
step's ids (field ``id_field``) are all-gathered; rank 0 writes them to
``OUT_DIR/<name>.gathered.json`` as ``{epoch: [[ids of rank 0, ids of rank 1, ...], ...]}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
from ddp_launch import gloo_group

import chunkio

Steps = list[list[list[int]]]  # step -> rank -> sample ids


def _read_epoch(
    loader: Any, fields: list[str], id_field: str, world: int
) -> tuple[dict[str, Any], Steps]:
    parts: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    gathered: Steps = []
    for batch in loader:
        tensors = batch if isinstance(batch, tuple | list) else (batch,)
        assert len(tensors) == len(fields), (len(tensors), fields)
        for f, t in zip(fields, tensors, strict=True):
            parts[f].append(t.numpy().copy())  # the batch's memory is reused for the next one
        pieces: list[list[int]] = [[] for _ in range(world)]
        dist.all_gather_object(pieces, parts[id_field][-1].tolist())
        gathered.append(pieces)
    arrays: dict[str, Any] = {f: np.concatenate(v) for f, v in parts.items()}
    arrays["batch_lengths"] = np.array([len(v) for v in parts[id_field]], np.int64)
    return arrays, gathered


def main(argv: list[str]) -> int:
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    config = json.loads(Path(argv[3]).read_text())
    out = Path(argv[4])
    with gloo_group(rank, world, port):
        assert (dist.get_rank(), dist.get_world_size()) == (rank, world)
        for job in config["jobs"]:
            fields = list(job["fields"])
            loader = chunkio.make_loader(
                job["url"],
                job["batch_size"],
                storage_options=config["storage_options"],
                fields=tuple(fields),
                num_workers=job["num_workers"],
                seed=job["seed"],
                ordering=chunkio.Ordering(
                    rank=rank, world_size=world, pool_bytes=job["pool_bytes"]
                ),
            )
            expected_transport = "ring" if job["num_workers"] else "local"
            assert loader.transport == expected_transport, loader.transport
            gathered: dict[int, Steps] = {}
            with loader:
                for epoch in (0, 1):
                    if epoch:
                        loader.set_epoch(epoch)
                    assert loader.sampler.epoch == epoch
                    rows = loader.sampler.batches(epoch)
                    arrays, gathered[epoch] = _read_epoch(loader, fields, job["id_field"], world)
                    arrays["rows"] = np.concatenate(rows) if rows else np.zeros(0, np.int64)
                    arrays["row_lengths"] = np.array([len(r) for r in rows], np.int64)
                    np.savez(out / f"{job['name']}.e{epoch}.r{rank}.npz", **arrays)
            if rank == 0:
                (out / f"{job['name']}.gathered.json").write_text(json.dumps(gathered))
            dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
