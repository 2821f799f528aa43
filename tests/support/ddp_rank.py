"""One rank of a real ``torch.distributed`` job (gloo on 127.0.0.1), run by
tests/loader/test_ddp_order.py.

    python tests/support/ddp_rank.py \\
        RANK WORLD PORT DATASET GLOBAL_BATCH NUM_WORKERS OUT [RESUME_FROM] \\
        [--fields=JSON] [--epochs=E,E,...]

Reads one epoch with ``chunkio.make_loader`` (rank and world size taken from the initialised
process group), all-gathers every step's sample ids, and rank 0 writes them to OUT as JSON,
together with the loader state after ``STOP_AT`` steps. With RESUME_FROM (a JSON file holding
such a state), the loader is restored first and reads the rest of the epoch.

``--fields``: the ``fields`` mapping of a store chunkio did not write (JSON), its field
``sample_id`` holding the ids; ``--epochs``: the epochs to read (default ``EPOCH``), each
one's steps written under ``"epochs"`` (``"steps"`` and ``"state"`` are the first one's).
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist
from ddp_launch import gloo_group

import chunkio

STOP_AT = 3
EPOCH = 1


def main(argv: list[str]) -> int:
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    path, global_batch, workers, out = argv[3], int(argv[4]), int(argv[5]), argv[6]
    options = dict(a[2:].split("=", 1) for a in argv[7:] if a.startswith("--"))
    resume = next((a for a in argv[7:] if not a.startswith("--")), None)
    fields = json.loads(options["fields"]) if "fields" in options else "sample_id"
    epochs = [int(e) for e in options.get("epochs", str(EPOCH)).split(",")]
    with gloo_group(rank, world, port):
        loader = chunkio.make_loader(
            path,
            global_batch // world,
            fields=fields,
            num_workers=workers,
            seed=7,
            ordering=chunkio.Ordering(pool_bytes=1 << 20),
        )
        assert (loader.sampler.rank, loader.sampler.world_size) == (rank, world)
        by_epoch, state = {}, None
        for epoch in epochs:
            loader.set_epoch(epoch)
            if resume is not None and epoch == epochs[0]:
                with open(resume) as f:
                    loader.load_state_dict(json.load(f))
            steps = by_epoch[str(epoch)] = []
            for i, batch in enumerate(loader):
                ids = batch[list(fields).index("sample_id")] if isinstance(fields, dict) else batch
                pieces: list[list[int]] = [[] for _ in range(world)]
                dist.all_gather_object(pieces, ids.tolist())
                steps.append([s for piece in pieces for s in piece])
                if i + 1 == STOP_AT and epoch == epochs[0]:
                    state = loader.state_dict()
        loader.close()
        if rank == 0:
            with open(out, "w") as f:
                first = by_epoch[str(epochs[0])]
                json.dump({"steps": first, "state": state, "epochs": by_epoch}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
