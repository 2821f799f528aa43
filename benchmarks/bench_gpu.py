"""On a GPU: how long does a ResNet-50 training step wait for its data?

One prepared run for a lent GPU machine (one H100/H200, 16 cores): make ~20k natural-photo
JPEGs of ImageNet's size mix with all cores, convert them (``encoding="jpeg"``), then train
torchvision's ResNet-50 (bf16 autocast, channels_last, batch 256, SGD) for a fixed number of
steps fed by each loader in turn:

a. chunkio ``make_loader(..., transform=RRC(224)+flip, device="cuda")``, ring workers;
b. torchvision ``ImageFolder`` + the same transforms + ``DataLoader(pin_memory=True)``, the
   same worker count;
c. one batch resident on the GPU (compute only: the upper bound);
d. chunkio ``Workers(decode="gpu")``: nvImageCodec decodes the crops on the GPU (no workers);
e. chunkio ``Workers(decode="torchvision")``: torchvision's nvJPEG, whole images, cropped on
   the GPU;
f. chunkio ``Workers(decode="nvimgcodec-roi")``: nvImageCodec decoding only each crop's region.

Every step ends with ``loss.item()`` (as a training log does), so the host clock measures the
GPU: **data wait** is the time blocked in ``next(loader)`` plus the host-to-device call the
loader needs, as a fraction of the step. Per row: images/s, mean step, data wait, the CPU
cores the loader kept busy (this process and its workers), GPU memory and RSS growth from the
second to the last timed step (the kept batch and the batches in flight exist at both), whether
a batch kept across later steps stayed intact (the batch lifetime rule with ``device="cuda"``),
and, from a short ``torch.profiler`` window, the share of host-to-device copy time that ran
while a kernel of another stream was running (overlap).

``--dry-run`` rehearses the whole script on the CPU (a few small images, a tiny model, the
``reference`` decoder in place of the GPU one); the test suite runs it.

    python -m benchmarks.bench_gpu                 # on the GPU machine
    python -m benchmarks.bench_gpu --dry-run       # anywhere
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import chunkio
from benchmarks.data import make_imagenet_folder

MEAN = torch.tensor([0.485, 0.456, 0.406]) * 255
STD = torch.tensor([0.229, 0.224, 0.225]) * 255


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its children, live ones included."""
    try:
        import psutil

        me = psutil.Process()
        total = sum(me.cpu_times()[:2])
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += sum(child.cpu_times()[:2])
        return float(total)
    except ImportError:  # pragma: no cover - psutil is in the dev extra
        r = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # pragma: no cover
        return 0


class _TinyNet(torch.nn.Module):
    """The dry run's model: two convolutions and a linear layer."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
        )
        self.head = torch.nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def _model(dry_run: bool, classes: int, device: torch.device) -> torch.nn.Module:
    if dry_run:
        return _TinyNet(classes).to(device)
    from torchvision.models import resnet50

    return resnet50(num_classes=classes).to(device, memory_format=torch.channels_last)


class _Trainer:
    """One SGD step of the model on a uint8 (B, 3, H, W) batch: normalise on the device,
    bf16 autocast on CUDA, channels_last, then ``loss.item()`` (a host sync, as a log does)."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.mean = MEAN.view(1, 3, 1, 1).to(device)
        self.std = STD.view(1, 3, 1, 1).to(device)
        self.amp = device.type == "cuda"

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> float:
        x = images.to(memory_format=torch.channels_last).float().sub_(self.mean).div_(self.std)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            loss = torch.nn.functional.cross_entropy(self.model(x), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.item())


def _overlap(trace: Path) -> dict[str, Any]:
    """Share of host-to-device copy time that ran while a kernel of another stream ran."""
    events = json.loads(trace.read_text()).get("traceEvents", [])
    copies, kernels = [], []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat, name = str(e.get("cat", "")).lower(), str(e.get("name", ""))
        stream = (e.get("args") or {}).get("stream", e.get("tid"))
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]), stream)
        if cat == "gpu_memcpy" and "HtoD" in name:
            copies.append(span)
        elif cat == "kernel":
            kernels.append(span)
    total = sum(b - a for a, b, _ in copies)
    if not copies:
        return {"h2d_copies": 0, "h2d_us": 0.0, "overlapped": None}
    kernels.sort()
    covered = 0.0
    for a, b, stream in copies:
        spans = sorted((max(a, ka), min(b, kb)) for ka, kb, ks in kernels if ks != stream)
        end = a
        for x, y in spans:
            if y <= x or y <= end:
                continue
            covered += y - max(x, end)
            end = y
    return {
        "h2d_copies": len(copies),
        "h2d_us": round(total, 1),
        "overlapped": round(covered / total, 3) if total else None,
        "copy_streams": sorted({str(s) for _, _, s in copies}),
    }


def _profile(
    batches: Iterator[Any],
    to_device: Callable[[Any], tuple[torch.Tensor, torch.Tensor]],
    trainer: _Trainer,
    steps: int,
    out: Path,
) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            trainer.step(*to_device(next(batches)))
    prof.export_chrome_trace(str(out))
    return _overlap(out)


def _row(
    name: str,
    batches: Iterator[Any],
    to_device: Callable[[Any], tuple[torch.Tensor, torch.Tensor]],
    trainer: _Trainer,
    *,
    warmup: int,
    steps: int,
    batch_size: int,
    profile_steps: int,
    trace_dir: Path | None,
    keep_check: bool,
) -> dict[str, Any]:
    device = trainer.device
    for _ in range(warmup):  # worker start-up, cudnn autotuning, page cache
        trainer.step(*to_device(next(batches)))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    mem0 = rss0 = 0
    waits, totals = [], []
    kept: tuple[torch.Tensor, int] | None = None
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    for k in range(steps):
        t0 = time.perf_counter()
        images, labels = to_device(next(batches))
        t1 = time.perf_counter()
        if keep_check and k == 1:  # keep batch 1 across the later steps
            kept = (images, int(images.sum(dtype=torch.int64)))
        trainer.step(images, labels)
        t2 = time.perf_counter()
        waits.append(t1 - t0)
        totals.append(t2 - t0)
        if k == 1:  # growth is counted from here: the batches in flight are already there
            mem0 = torch.cuda.memory_allocated() if cuda else 0
            rss0 = _rss()
    wall = time.perf_counter() - wall0
    cpu = _cpu_seconds() - cpu0
    intact = None if kept is None else int(kept[0].sum(dtype=torch.int64)) == kept[1]
    mem1 = torch.cuda.memory_allocated() if cuda else 0
    row: dict[str, Any] = {
        "name": name,
        "steps": steps,
        "images_per_s": round(steps * batch_size / sum(totals), 1),
        "mean_step_ms": round(1000 * sum(totals) / steps, 2),
        "data_wait": round(sum(waits) / sum(totals), 4),
        "max_wait_ms": round(1000 * max(waits), 2),
        "cpu_cores_busy": round(cpu / wall, 2),
        "gpu_mem_growth_mib": round((mem1 - mem0) / 2**20, 1),
        "gpu_peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else 0,
        "rss_growth_mib": round((_rss() - rss0) / 2**20, 1),
        "kept_batch_intact": intact,
    }
    if profile_steps and trace_dir is not None:
        trace = trace_dir / f"trace_{name.split()[0]}.json"
        row["copy_overlap"] = _profile(batches, to_device, trainer, profile_steps, trace)
    return row


def _device_pair(device: torch.device) -> Callable[[Any], tuple[torch.Tensor, torch.Tensor]]:
    def to_device(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = batch
        return (
            images.to(device, non_blocking=True),
            labels.to(device, non_blocking=True).long(),
        )

    return to_device


def _imagefolder(root: Path, batch_size: int, workers: int, pin: bool) -> Iterator[Any]:
    from torch.utils.data import DataLoader

    try:
        from torchvision import datasets
        from torchvision import transforms as T

        dataset: Any = datasets.ImageFolder(
            str(root),
            transform=T.Compose(
                [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()]
            ),
        )
        kind = "torchvision ImageFolder"
    except ImportError:  # the dry run, on a machine without torchvision
        from benchmarks.baselines import ImageFolderAugmented

        dataset = ImageFolderAugmented(root, size=224)
        kind = "ImageFolder (torchvision's algorithm, Pillow)"
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=workers > 0,
    )
    print(f"  baseline: {kind}", flush=True)
    return _forever(loader)


def _forever(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


def _chunkio(
    dst: Path, batch_size: int, workers: int, device: torch.device | None, decode: str, size: int
) -> Any:
    from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

    return chunkio.make_loader(
        str(dst),
        batch_size=batch_size,
        fields=("image", "label"),
        transform=Compose([RandomResizedCrop(size), RandomHorizontalFlip()]),
        num_workers=workers if decode == "cpu" else 0,
        device=device,
        workers=chunkio.Workers(decode=decode),
        drop_last=True,
        seed=0,
    )


def run(
    *,
    dry_run: bool = False,
    images: int = 20_000,
    classes: int = 100,
    batch_size: int = 256,
    workers: int = 14,
    warmup: int = 15,
    steps: int = 60,
    profile_steps: int = 5,
    root: Path | None = None,
    rows: str = "abcdef",
) -> dict[str, Any]:
    """Make the data, convert it, train with each loader; the results as a dict."""
    cores = len(os.sched_getaffinity(0))
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    if dry_run:
        images, classes, batch_size = min(images, 96), min(classes, 4), min(batch_size, 16)
        workers, warmup, steps, profile_steps = min(workers, 2), 1, 3, 1
    size = 224
    root = Path(root or tempfile.mkdtemp(prefix="bench_gpu_"))
    t = time.perf_counter()
    src = make_imagenet_folder(root / "jpeg", n_images=images, n_classes=classes, workers=cores)
    made = time.perf_counter() - t
    dst = root / "train.zarr"
    t = time.perf_counter()
    chunkio.convert_images(
        src,
        dst,
        images=chunkio.ImageOptions(encoding="jpeg"),
        execution=chunkio.Execution(workers=cores, progress=False, overwrite=True),
    )
    converted = time.perf_counter() - t
    print(f"  {images} JPEGs made in {made:.1f} s, converted in {converted:.1f} s", flush=True)
    torch.manual_seed(0)
    trainer = _Trainer(_model(dry_run, classes, device), device)
    to_device = _device_pair(device)
    target = device if device.type == "cuda" else None
    common = {
        "warmup": warmup,
        "steps": steps,
        "batch_size": batch_size,
        "profile_steps": profile_steps,
        "trace_dir": root,
    }
    results: list[dict[str, Any]] = []

    def record(row: dict[str, Any], extra: dict[str, Any]) -> None:
        row.update(extra)
        results.append(row)
        print("  " + json.dumps(row), flush=True)

    first: Any = None
    if "a" in rows:
        with _chunkio(dst, batch_size, workers, target, "cpu", size) as loader:
            batches = _forever(loader)
            first = to_device(next(batches))
            row = _row("a chunkio ring", batches, to_device, trainer, keep_check=True, **common)
            record(row, {"workers": workers, "route": loader.transport})
    if "b" in rows:
        batches = _imagefolder(src, batch_size, workers, pin=device.type == "cuda")
        row = _row("b ImageFolder+Pillow", batches, to_device, trainer, keep_check=False, **common)
        record(row, {"workers": workers, "route": "torch DataLoader"})
        del batches
    if "c" in rows:
        if first is None:
            with _chunkio(dst, batch_size, 0, target, "cpu", size) as loader:
                first = to_device(next(iter(loader)))
        resident = (first[0].clone(), first[1].clone())

        def same() -> Iterator[Any]:
            while True:
                yield resident

        row = _row("c GPU-resident", same(), lambda b: b, trainer, keep_check=False, **common)
        record(row, {"workers": 0, "route": "none"})
    for letter, decode in (("d", "gpu"), ("e", "torchvision"), ("f", "nvimgcodec-roi")):
        if letter not in rows:
            continue
        chosen = decode if device.type == "cuda" else "reference"
        try:
            loader = _chunkio(dst, batch_size, 0, target, chosen, size)
        except (ImportError, RuntimeError, ValueError) as err:
            results.append({"name": f"{letter} chunkio decode={decode!r}", "error": str(err)})
            print(f"  {letter}: {err}", flush=True)
            continue
        with loader:
            try:
                row = _row(
                    f"{letter} chunkio decode={chosen}",
                    _forever(loader),
                    to_device,
                    trainer,
                    keep_check=True,
                    **common,
                )
            except Exception as err:  # report, keep the other rows
                results.append({"name": f"{letter} chunkio decode={chosen}", "error": repr(err)})
                print(f"  {letter}: {err!r}", flush=True)
                continue
            record(row, {"workers": 0, "route": loader.transport})
    machine = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "cores": cores,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine,
        "setup": {
            "images": images,
            "classes": classes,
            "batch_size": batch_size,
            "workers": workers,
            "warmup": warmup,
            "steps": steps,
            "dry_run": dry_run,
            "make_s": round(made, 1),
            "convert_s": round(converted, 1),
        },
        "rows": results,
    }


def format_table(results: dict[str, Any]) -> str:
    rows = results["rows"]
    bound = next((r["images_per_s"] for r in rows if r["name"].startswith("c ")), None)
    lines = [
        "| loader | workers | img/s | x resident | step ms | data wait | CPU cores busy "
        "| H2D overlapped | kept batch intact | GPU mem growth MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error'][:80]} |||||||||")
            continue
        ratio = f"{r['images_per_s'] / bound:.2f}" if bound else "-"
        overlap = (r.get("copy_overlap") or {}).get("overlapped")
        lines.append(
            f"| {r['name']} | {r['workers']} | {r['images_per_s']:,.0f} | {ratio} "
            f"| {r['mean_step_ms']} | {100 * r['data_wait']:.1f}% | {r['cpu_cores_busy']} "
            f"| {'-' if overlap is None else f'{100 * overlap:.0f}%'} "
            f"| {r['kept_batch_intact']} | {r['gpu_mem_growth_mib']} |"
        )
    m, s = results["machine"], results["setup"]
    lines.append(
        f"\n{results['date']}, {m['device']}, {m['cores']} cores, torch {m['torch']}; "
        f"{s['images']} JPEGs, batch {s['batch_size']}, {s['steps']} timed steps after "
        f"{s['warmup']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="tiny set, tiny model, CPU")
    p.add_argument("--images", type=int, default=20_000)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--rows", default="abcdef", help="which rows to run (letters)")
    p.add_argument("--root", type=Path, help="working folder (default: a temporary one)")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    a = p.parse_args(argv)
    results = run(
        dry_run=a.dry_run,
        images=a.images,
        classes=a.classes,
        batch_size=a.batch,
        workers=a.workers,
        warmup=a.warmup,
        steps=a.steps,
        profile_steps=a.profile_steps,
        root=a.root,
        rows=a.rows,
    )
    if a.out:
        a.out.write_text(json.dumps(results, indent=1))
    print(format_table(results))


if __name__ == "__main__":
    main()
