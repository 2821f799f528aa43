"""Remote reads (issue 12 item 5): samples/s local vs S3 on loopback with 0 and 20 ms latency.

One JPEG dataset (natural-image JPEGs of ``size`` px, :func:`make_natural_folder`, converted
with ``convert_images(..., encoding="jpeg")``, which packs it into shards) is read side by side
in one run, shuffled epochs of ``make_loader(..., num_workers=workers)`` of ``image, label``:

1. **local**: the ``.zarr`` directory on local disk (page cache);
2. **S3 0 ms**: the same dataset uploaded to a moto S3 server in a child process, every request
   through :mod:`chunkio.testing.servers`' ``LatencyProxy`` with no added latency;
3. **S3 20 ms**: the same, each request delayed 20 ms (a far-away region);
4. **generic zarr per-sample, S3 20 ms**: what a user had before chunkio read object stores
   itself: ``zarr.open_group("s3://...", storage_options=...)`` in a torch ``Dataset`` whose
   ``__getitem__`` reads one sample (``image__bytes[a:b]``, ``label[i]``; the small
   ``image__spans`` index is read once per worker, which is generous) and decodes the JPEG with
   Pillow, through a ``DataLoader`` (a shuffled order, ``num_workers=workers``). Time-boxed:
   after two warm-up batches per worker, ``generic_samples`` samples are timed in whole rounds
   of one batch per worker (one sample costs several 20 ms round trips: an epoch would take
   minutes);
5. **S3 20 ms, prefetch=8** (``deep_prefetch``): row 3 with more lookahead per worker, which
   tells latency (deeper lookahead helps) from a per-request limit (it does not).

**Steady state.** chunkio rows: a fresh loader per row; the first ``skip_batches`` batches of
its first epoch are not timed (workers start, metadata and shard indexes are read, the first
chunks arrive), the rest of that epoch is the *cold* figure: every chunk comes over the wire,
as for a dataset larger than the workers' caches. Then ``epochs`` more whole epochs, the best
kept, are the *warm* figure: a set this small partly stays in the workers' chunk caches
across epochs, so fewer bytes are fetched. The checks use the cold figures.

**Per row.** ``samples_per_s`` (timed batches only); ``x_local``: over local's (same phase);
``req_per_sample``: requests the proxy answered / samples delivered, counted over the whole
cold epoch from ``make_loader`` on (opening included; ``requests_before_timing``: those before
the timed batches), over each whole warm epoch, and over the generic row's timed window;
``data_req_per_sample``: the same for chunk data ranges only (not listings, HEADs,
``zarr.json``, small arrays read whole or shard indexes); ``wire_per_stored``: bytes the proxy
sent to the client (status lines, headers and bodies) over the same span / *stored* bytes of
the samples delivered, i.e. each sample's JPEG bytes (its ``image__spans`` length) plus 8
bytes of label (1.0 = the payload exactly; below 1 = bytes served from the workers' caches;
above = read amplification and protocol overhead); ``wire_per_decoded``: the same over the
decoded bytes delivered (3 x size x size + 8 per sample). ``cpu``: CPU seconds per wall
second in the timed batches of the moto server, of this process (the consumer and the proxy's
thread) and of the loader's workers: on a 2-core machine, a sum near 2 means CPU-bound (moto
is pure Python and answers on one core at most). ``request_log``: the requests by kind and
object, the mean data range, and ranges fetched more than once. ``first_batch_s``: from
``make_loader`` to the first batch (opening the dataset remotely).

The servers come from :mod:`chunkio.testing.servers` (imported only once the dependencies are
found: the test suite and this benchmark must measure against the same moto child process and
latency proxy; it needs pytest, moto[server], boto3 and s3fs, the ``dev``/``remote`` extras).

    python -m benchmarks.bench_remote [--quick] [--workers 2] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import chunkio
from benchmarks.data import make_natural_folder
from benchmarks.report import check, check_lines

__all__ = ["format_table", "main", "run"]

N_CLASSES = 10
#: images and their side in the full and the quick set
N_FULL, N_QUICK = 3000, 160
SIZE_FULL, SIZE_QUICK = 160, 64
DELAY_S = 0.02
FIELDS = ("image", "label")
#: issue 12 item 5, S3 loopback with 20 ms per request
TARGETS = {"x_local": 0.5, "x_generic": 15.0, "req_per_64_samples": 1.0}
LOCAL, S3_0, S3_20 = "chunkio local", "chunkio S3 0 ms", "chunkio S3 20 ms"
GENERIC = "generic zarr per-sample S3 20 ms"


def _missing_dependency() -> str | None:
    for mod, extra in (("moto", "dev"), ("boto3", "dev"), ("s3fs", "remote"), ("pytest", "dev")):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install -e '.[{extra}]')"
    return None


def _servers() -> Any:
    """:mod:`chunkio.testing.servers`, imported late (it needs pytest; see the module docstring)."""
    from chunkio.testing import servers

    return servers


# -- measuring ----------------------------------------------------------------------------------


class _Cpu:
    """CPU seconds of the moto server, this process and its other children (the workers)."""

    def __init__(self, server_pid: int | None) -> None:
        self.me = psutil.Process()
        self.server_pid = server_pid

    def sample(self) -> dict[str, float]:
        out = {"server": 0.0, "main": 0.0, "workers": 0.0}
        t = self.me.cpu_times()
        out["main"] = t.user + t.system
        for child in self.me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                key = "server" if child.pid == self.server_pid else "workers"
                out[key] += c.user + c.system
        return out

    @staticmethod
    def rate(a: dict[str, float], b: dict[str, float], wall: float) -> dict[str, float]:
        """CPU seconds per wall second between two samples (a worker that started in between
        counts whole: the loaders start theirs before any window)."""
        return {k: max(0.0, b[k] - a[k]) / wall for k in a}


class _Window:
    """Timed samples from the first :meth:`start` on; counted samples and stored bytes from
    the window's creation (the proxy's counts are reset then)."""

    def __init__(self, proxy: Any, cpu: _Cpu, objects: dict[str, int]) -> None:
        self.proxy, self.cpu, self.objects = proxy, cpu, objects
        self.samples = self.stored = self.timed = 0
        self.setup = 0
        self.t0: float | None = None
        if proxy is not None:
            proxy.reset_counts()

    def start(self) -> None:
        if self.t0 is None:
            self.setup = self.proxy.requests if self.proxy is not None else 0
            self.cpu0 = self.cpu.sample()
            self.t0 = time.perf_counter()

    def add(self, samples: int, stored: int) -> None:
        self.samples += samples
        self.stored += stored
        if self.t0 is not None:
            self.timed += samples

    def close(self, decoded_per_sample: int) -> dict[str, Any]:
        if self.t0 is None:
            raise ValueError("nothing timed: more images, or fewer warm-up batches")
        wall = time.perf_counter() - self.t0
        out: dict[str, Any] = {
            "samples": self.timed,
            "seconds": wall,
            "samples_per_s": self.timed / wall,
            "cpu": _Cpu.rate(self.cpu0, self.cpu.sample(), wall),
        }
        if self.proxy is not None:
            log = list(self.proxy.log)
            summary = _log_summary(log, self.objects)
            sent = self.proxy.bytes_sent
            out |= {
                "counted_samples": self.samples,
                "requests": len(log),
                "requests_before_timing": self.setup,
                "bytes_sent": sent,
                "req_per_sample": len(log) / max(1, self.samples),
                "data_req_per_sample": summary["data"] / max(1, self.samples),
                "wire_per_stored": sent / max(1, self.stored),
                "wire_per_decoded": sent / max(1, self.samples * decoded_per_sample),
                "max_in_flight": self.proxy.max_in_flight,
                "request_log": summary,
            }
        return out


def _log_summary(log: list[tuple[str, str, str | None]], objects: dict[str, int]) -> dict[str, Any]:
    """The requests by kind and by object, the mean data range, ranges fetched again.

    Kinds: ``list`` (bucket listings), ``head`` (HEAD requests), ``metadata`` (``zarr.json``),
    ``whole`` (an object of a small array read whole: labels, spans, shapes), ``index`` (a
    range ending at the object's last byte: a shard index, which ``sharding_indexed`` puts at
    the end), ``data`` (the other ranges, and whole chunk files of ``image__bytes``: chunks).
    ``objects``: each object's size by its path below the dataset, e.g. ``label/c/0``.
    """
    kinds: collections.Counter[str] = collections.Counter()
    by_object: collections.Counter[str] = collections.Counter()
    sizes = []
    data: list[tuple[str, str | None]] = []
    for method, path, rng in log:
        key = path.split("?")[0].lstrip("/").split("/", 2)[-1]  # below bucket/dataset
        by_object[key] += 1
        a, _, b = (rng or "")[len("bytes=") :].partition("-")
        if "list-type=" in path or "delimiter=" in path:
            kinds["list"] += 1
        elif method == "HEAD":
            kinds["head"] += 1
        elif key.endswith("zarr.json"):
            kinds["metadata"] += 1
        elif not rng and key.startswith("image__bytes/") and key in objects:  # a chunk file
            kinds["data"] += 1
            data.append((path, rng))
            sizes.append(objects[key])
        elif not rng:
            kinds["whole"] += 1
        elif not a or (b and int(b) + 1 >= objects.get(key, 1 << 62)):
            kinds["index"] += 1
        else:
            kinds["data"] += 1
            data.append((path, rng))
            if b:
                sizes.append(int(b) - int(a) + 1)
    seen = collections.Counter((path, rng) for _, path, rng in log)
    data_seen = collections.Counter(data)
    return {
        "requests": len(log),
        **{k: kinds[k] for k in ("list", "head", "metadata", "whole", "index", "data")},
        "by_object": dict(by_object.most_common(10)),
        "mean_data_range_bytes": float(np.mean(sizes)) if sizes else 0.0,
        "ranges_fetched_again": sum(n - 1 for n in seen.values() if n > 1),
        "data_ranges_fetched_again": sum(n - 1 for n in data_seen.values() if n > 1),
    }


def _chunkio_row(
    name: str,
    location: str,
    storage_options: dict[str, Any] | None,
    proxy: Any,
    cpu: _Cpu,
    sample_bytes: np.ndarray,
    decoded: int,
    objects: dict[str, int],
    *,
    workers: int,
    batch_size: int,
    skip_batches: int,
    epochs: int,
    prefetch: int = 2,
) -> dict[str, Any]:
    """Cold: epoch 0 of a fresh loader, timed from batch ``skip_batches`` on, requests and
    bytes counted over all of it (opening included); warm: later epochs, whole."""
    row: dict[str, Any] = {"name": name, "workers": workers, "prefetch": prefetch}
    window = _Window(proxy, cpu, objects)
    opened = time.perf_counter()
    with chunkio.make_loader(
        location,
        batch_size,
        num_workers=workers,
        fields=FIELDS,
        seed=0,
        storage_options=storage_options,
        workers=chunkio.Workers(prefetch=prefetch),
    ) as loader:
        row["route"] = loader.transport
        for k, (indices, (_, y)) in enumerate(zip(_epoch_indices(loader, 0), loader, strict=True)):
            if k == 0:
                row["first_batch_s"] = time.perf_counter() - opened
            window.add(len(y), int(sample_bytes[indices].sum()))
            if k == skip_batches - 1:  # timed: the batches after this one
                window.start()
        row["cold"] = window.close(decoded)
        warm: list[dict[str, Any]] = []
        for epoch in range(1, epochs + 1):
            window = _Window(proxy, cpu, objects)
            window.start()
            for indices, (_, y) in zip(_epoch_indices(loader, epoch), loader, strict=True):
                window.add(len(y), int(sample_bytes[indices].sum()))
            warm.append(window.close(decoded))
        if warm:
            row["warm"] = max(warm, key=lambda w: w["samples_per_s"])
            row["warm_rates"] = [w["samples_per_s"] for w in warm]
    return row


def _epoch_indices(loader: Any, epoch: int) -> list[np.ndarray]:
    """Select ``epoch`` on ``loader`` and return the sample indices of its batches (the
    sampler's pure function of the epoch), to add up the stored bytes delivered."""
    loader.set_epoch(epoch)
    return list(loader.sampler.batches(epoch))


class ZarrPerSample(Dataset[tuple[torch.Tensor, int]]):
    """The generic path: zarr-python over fsspec/s3fs, one sample per ``__getitem__``.

    The group is opened lazily in each worker (an async s3fs made before ``fork`` is unusable
    after it); arrays are opened once per worker and ``image__spans`` (each sample's byte range
    in ``image__bytes``, 16 bytes per sample) is read whole once per worker.
    """

    def __init__(self, url: str, storage_options: dict[str, Any], n: int) -> None:
        self.url, self.storage_options, self.n = url, storage_options, n
        self._arrays: tuple[Any, Any, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n

    def _open(self) -> tuple[Any, Any, np.ndarray]:
        if self._arrays is None:
            import zarr

            g = zarr.open_group(self.url, mode="r", storage_options=self.storage_options)
            self._arrays = (g["image__bytes"], g["label"], np.asarray(g["image__spans"][:]))
        return self._arrays

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        data, label, spans = self._open()
        a, b = (int(v) for v in spans[i])
        blob = np.asarray(data[a:b]).tobytes()
        with Image.open(io.BytesIO(blob)) as im:
            pixels = np.asarray(im.convert("RGB"))
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1), int(label[i])


def _generic_row(
    url: str,
    storage_options: dict[str, Any],
    proxy: Any,
    cpu: _Cpu,
    sample_bytes: np.ndarray,
    decoded: int,
    objects: dict[str, int],
    *,
    n: int,
    workers: int,
    batch_size: int,
    samples: int,
) -> dict[str, Any]:
    """Time-boxed: two warm-up batches per worker (each opens the group), then at least
    ``samples`` samples timed, in whole rounds of one batch per worker; the proxy's counts are
    of the timed window only."""
    dataset = ZarrPerSample(url, storage_options, n)
    # the order is kept to add up the stored bytes delivered
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=order,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    # DataLoader workers take whole batches in turn and start together, so their batches
    # arrive in rounds of ``workers``: timed from the end of the second round, over whole rounds
    rounds = max(1, workers)
    window: _Window | None = None
    timed_batches = at = 0
    for k, (_, y) in enumerate(loader):
        if window is not None:
            window.add(len(y), int(sample_bytes[order[at : at + len(y)]].sum()))
            timed_batches += 1
            if window.samples >= samples and timed_batches % rounds == 0:
                break
        elif k == 2 * rounds - 1:
            window = _Window(proxy, cpu, objects)
            window.start()
        at += len(y)
    if window is None:
        raise ValueError("the generic path needs more than its warm-up batches: more images")
    cold = window.close(decoded)
    del loader  # stops the workers
    return {"name": GENERIC, "route": "torch DataLoader", "workers": workers, "cold": cold}


# -- the run ------------------------------------------------------------------------------------


def run(
    quick: bool = False,
    workers: int = 2,
    batch_size: int | None = None,
    *,
    root: str | Path = "bench-data/remote",
    n_images: int | None = None,
    size: int | None = None,
    delay_s: float = DELAY_S,
    skip_batches: int | None = None,
    epochs: int | None = None,
    generic_samples: int | None = None,
    deep_prefetch: int = 8,
) -> dict[str, Any]:
    """Rows (cold and warm samples/s, requests and bytes per sample, CPU), checks, as a dict;
    ``{"skipped": reason}`` without moto, boto3, s3fs or pytest.

    ``deep_prefetch``: also an S3 20 ms row with ``make_loader(prefetch=deep_prefetch)`` (0:
    not), which tells latency (more lookahead helps) from the server's request rate (it
    does not). The other rows use make_loader's default ``prefetch=2``.
    """
    missing = _missing_dependency()
    if missing:
        return {"skipped": missing}
    started = time.perf_counter()
    n = n_images or (N_QUICK if quick else N_FULL)
    size = size or (SIZE_QUICK if quick else SIZE_FULL)
    batch_size = batch_size or (16 if quick else 64)
    skip_batches = max(1, (1 if quick else 4) if skip_batches is None else skip_batches)
    epochs = (1 if quick else 2) if epochs is None else epochs
    generic_samples = generic_samples or (2 * batch_size if quick else 384)
    root = Path(root)
    folder = make_natural_folder(
        root / f"natural-{n}-{size}", n_images=n, n_classes=N_CLASSES, size=size
    )
    dst = root / f"natural-{n}-{size}-jpeg.zarr"
    t = time.perf_counter()
    chunkio.convert_images(
        folder,
        dst,
        images=chunkio.ImageOptions(encoding="jpeg", quality=90),
        execution=chunkio.Execution(workers=max(1, workers), progress=False, overwrite=True),
    )
    convert_s = time.perf_counter() - t
    local = chunkio.ChunkDataset(dst, fields=FIELDS)
    spans = _spans(dst)
    sample_bytes = (spans[:, 1] - spans[:, 0]) + 8  # JPEG bytes + the int64 label
    decoded = 3 * size * size + 8
    objects = {
        p.relative_to(dst).as_posix(): p.stat().st_size for p in dst.rglob("*") if p.is_file()
    }
    storage = {
        "files": len(objects),
        "bytes": sum(objects.values()),
        "jpeg_bytes_per_sample": float(sample_bytes.mean() - 8),
        "samples_per_chunk": local.samples_per_chunk,
        "decoded_bytes_per_sample": decoded,
    }
    servers = _servers()
    rows: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    kw = {"workers": workers, "batch_size": batch_size}
    with servers.S3Server() as s3:
        cpu = _Cpu(s3._proc.pid if s3._proc is not None else None)
        url = s3.upload_dir(dst, "bench", dst.name)
        common = (cpu, sample_bytes, decoded, objects)
        rows.append(
            _chunkio_row(
                LOCAL, str(dst), None, None, *common, **kw, skip_batches=skip_batches, epochs=epochs
            )
        )
        remote = [(S3_0, 0.0, 2), (S3_20, delay_s, 2)]
        if deep_prefetch:
            remote.append((f"{S3_20} prefetch={deep_prefetch}", delay_s, deep_prefetch))

        def behind_proxy(name: str, delay: float, row: Any, *args: Any, **extra: Any) -> None:
            """One row read through a latency proxy; a failure is reported, the rest measured."""
            with servers.LatencyProxy(s3.endpoint_url, delay) as proxy:
                options = s3.storage_options(endpoint_url=proxy.url)
                try:
                    rows.append(row(*args, options, proxy, *common, **kw, **extra))
                except Exception as err:  # report, measure the rest
                    errors[name] = f"{type(err).__name__}: {err}"

        for name, delay, depth in remote:
            behind_proxy(
                name,
                delay,
                _chunkio_row,
                name,
                url,
                skip_batches=skip_batches,
                epochs=epochs,
                prefetch=depth,
            )
        behind_proxy(GENERIC, delay_s, _generic_row, url, n=n, samples=generic_samples)
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        for phase in ("cold", "warm"):
            if phase in r and phase in by_name[LOCAL]:
                base = by_name[LOCAL][phase]["samples_per_s"]
                r[phase]["x_local"] = r[phase]["samples_per_s"] / base
    checks = []
    if S3_20 in by_name:
        ours = by_name[S3_20]["cold"]
        checks.append(
            check(
                "S3 20 ms: make_loader / local samples/s (cold steady state)",
                ours["x_local"],
                TARGETS["x_local"],
            )
        )
        if GENERIC in by_name:
            generic = by_name[GENERIC]["cold"]["samples_per_s"]
            checks.append(
                check(
                    "S3 20 ms: make_loader / generic zarr per-sample samples/s",
                    ours["samples_per_s"] / generic,
                    TARGETS["x_generic"],
                )
            )
        checks.append(
            check(
                "S3 20 ms: requests per 64 samples (cold steady state)",
                64 * ours["req_per_sample"],
                TARGETS["req_per_64_samples"],
                at_most=True,
            )
        )
    return {
        "settings": {
            "quick": quick,
            "n_images": n,
            "size": size,
            "workers": workers,
            "batch_size": batch_size,
            "delay_ms": delay_s * 1000,
            "skip_batches": skip_batches,
            "epochs": epochs,
            "generic_samples": generic_samples,
            "deep_prefetch": deep_prefetch,
            "cores": len(psutil.Process().cpu_affinity() or []) or psutil.cpu_count(),
        },
        "storage": storage,
        "convert_s": convert_s,
        "rows": rows,
        "checks": checks,
        "errors": errors,
        "elapsed_s": time.perf_counter() - started,
    }


def _spans(dst: Path) -> np.ndarray:
    import zarr

    return np.asarray(zarr.open_group(str(dst), mode="r")["image__spans"][:], dtype=np.int64)


# -- output -------------------------------------------------------------------------------------


def format_table(results: dict[str, Any]) -> str:
    if "skipped" in results:
        return f"bench_remote skipped: {results['skipped']}"
    s, st = results["settings"], results["storage"]
    lines = [
        f"{s['n_images']} JPEGs {s['size']}x{s['size']} q90 ({st['jpeg_bytes_per_sample']:.0f} "
        f"B each, {st['samples_per_chunk']} per chunk, {st['files']} objects), fields "
        f"image+label; batch {s['batch_size']}, {s['workers']} workers, {s['cores']} cores.",
        f"cold: a fresh loader's epoch 0, timed after {s['skip_batches']} batches, requests and "
        f"bytes of all of it; warm: best of {s['epochs']} later epochs; generic: "
        f"{s['generic_samples']} samples after two warm-up batches per worker.",
        "req/sample: all requests (data: chunk ranges only); wire/stored: bytes the proxy sent "
        "/ JPEG + label bytes of the samples delivered; cpu: CPU s per wall s (moto / this "
        "process incl. the proxy / workers).",
        "",
        "| loader | phase | samples/s | x local | req/sample | data req/sample | wire/stored "
        "| wire/decoded | cpu server/main/workers |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]

    def num(m: dict[str, Any], key: str, fmt: str) -> str:
        return format(m[key], fmt) if key in m else "-"

    for r in results["rows"]:
        for phase in ("cold", "warm"):
            if phase not in r:
                continue
            m = r[phase]
            c = m["cpu"]
            lines.append(
                f"| {r['name']} | {phase} | {m['samples_per_s']:.0f} | {num(m, 'x_local', '.3f')} "
                f"| {num(m, 'req_per_sample', '.4f')} | {num(m, 'data_req_per_sample', '.4f')} "
                f"| {num(m, 'wire_per_stored', '.2f')} | {num(m, 'wire_per_decoded', '.3f')} "
                f"| {c['server']:.2f} / {c['main']:.2f} / {c['workers']:.2f} |"
            )
    lines.append("")
    for r in results["rows"]:
        for phase in ("cold", "warm"):
            log = r.get(phase, {}).get("request_log")
            if log:
                lines.append(
                    f"{r['name']} ({phase}): {log['requests']} requests ({log['list']} list, "
                    f"{log['head']} HEAD, {log['metadata']} metadata, {log['whole']} whole "
                    f"objects, {log['index']} shard indexes, "
                    f"{log['data']} data ranges of {log['mean_data_range_bytes'] / 1024:.0f} KiB "
                    f"on average), {log['ranges_fetched_again']} fetched again (data: "
                    f"{log['data_ranges_fetched_again']}), at most "
                    f"{r[phase]['max_in_flight']} in flight; by object {log['by_object']}"
                )
        if "first_batch_s" in r:
            lines.append(f"{r['name']}: first batch {r['first_batch_s']:.2f} s after make_loader")
    lines.append("")
    lines += check_lines(results["checks"])
    for name, err in results["errors"].items():
        lines.append(f"{name} not measured: {err}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"{N_QUICK} images instead of {N_FULL}")
    p.add_argument("--images", type=int, help="images in the set (overrides --quick)")
    p.add_argument("--size", type=int, help="image side in px")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--delay-ms", type=float, default=DELAY_S * 1000)
    p.add_argument("--epochs", type=int, help="warm epochs per chunkio row")
    p.add_argument(
        "--deep-prefetch", type=int, default=8, help="prefetch of the extra 20 ms row (0: none)"
    )
    p.add_argument("--root", default="bench-data/remote", help="working folder")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    results = run(
        quick=args.quick,
        workers=args.workers,
        batch_size=args.batch_size,
        root=args.root,
        n_images=args.images,
        size=args.size,
        delay_s=args.delay_ms / 1000,
        epochs=args.epochs,
        deep_prefetch=args.deep_prefetch,
    )
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
