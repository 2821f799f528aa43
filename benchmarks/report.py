"""Render the suite's results: markdown table, JSON and a log-scale bar chart.

:func:`write_report` writes ``latest.md``, ``latest.json`` and ``latest.png`` into the results
folder and returns the markdown (``benchmarks.run`` prints it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["markdown", "mixing_markdown", "plot", "training_markdown", "write_report"]

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _conversion(results: Mapping[str, Any]) -> str:
    prep, n = results["prepare"], results["settings"]["n_images"]
    rates = ", ".join(f"{fmt} {n / s:,.0f} images/s" for fmt, s in prep["convert_s"].items())
    return f"Dataset built by {prep['converter']}: {rates}."


def _throughput(results: Mapping[str, Any]) -> list[str]:
    s = results["settings"]
    workers = sorted({r["workers"] for r in results["rows"]})
    names = list(dict.fromkeys(r["name"] for r in results["rows"]))
    rate = {(r["name"], r["workers"]): r["samples_per_s"] for r in results["rows"]}
    naive = {w: rate.get(("naive per-sample h5py Dataset", w)) for w in workers}
    n = s["workers"]
    header = ["loader", *(f"{w} workers" for w in workers), f"x naive h5py ({n} workers)"]
    of_limit = {
        (r["name"], r["workers"]): r["of_limit"] for r in results["rows"] if "of_limit" in r
    }
    if of_limit:
        header.append(f"of min(gather, decode x cores) ({n} workers)")
    rows = []
    for name in names:
        cells = [rate.get((name, w), "") for w in workers]
        here = rate.get((name, n)) or rate.get((name, 0))
        ratio = f"{here / naive[n]:,.1f}x" if here and naive.get(n) else ""
        fraction = of_limit.get((name, n), of_limit.get((name, 0)))
        rows.append(
            [name, *cells, ratio, *([f"{fraction:.2f}" if fraction else ""] if of_limit else [])]
        )
    title = (
        f"## Shuffled epoch, samples/s ({s['n_images']} images {s['sample_shape']}, "
        f"batch {s['batch_size']}; naive loaders over {s['naive_budget_s']:g} s)"
    )
    note = (
        "Limits: NumPy gather and decode rate are single-process figures; decode x cores is "
        "the ceiling for any reader that decodes these chunks (measured by decompressing the "
        "stored chunk bytes with numcodecs, no file read or checksum)."
    )
    return [title, "", *_table(header, rows), note, ""]


def check(
    target: str, measured: float, required: float, *, at_most: bool = False
) -> dict[str, Any]:
    """One target: ``measured`` must reach ``required`` (or stay below it, ``at_most``)."""
    passed = measured <= required if at_most else measured >= required
    return {
        "target": target,
        "measured": measured,
        "required": required,
        "at_most": at_most,
        "passed": passed,
    }


def check_lines(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """``PASS target: measured (>= required)`` lines for a console summary (a median over
    rounds with its ``range``: ``measured [min-max over n]``)."""
    lines = []
    for c in checks:
        mark = "PASS" if c["passed"] else "FAIL"
        op = "<=" if c.get("at_most") else ">="
        span = c.get("range")
        n, of = len(c.get("rounds", ())), c.get("of", 0)
        over = "" if span is None or n < 2 else f" [{span[0]:.2f}-{span[1]:.2f} over {n}]"
        if n < of:  # measured in fewer rounds than ran (a peer failing in some)
            over += f" ({n} of {of} rounds)"
        lines.append(f"{mark} {c['target']}: {c['measured']:.2f}{over} ({op} {c['required']})")
    return lines


def _checks(results: Mapping[str, Any]) -> list[str]:
    rows = [
        [c["target"], c["measured"], c["required"], "PASS" if c["passed"] else "FAIL"]
        for c in results["checks"]
    ]
    return ["## Targets", "", *_table(["target", "measured", "required", ""], rows)]


def _amplification(amp: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Read amplification and shuffle quality",
        "",
        f"Bytes decoded per byte delivered, in-process through make_loader's reader: "
        f"zarr {amp['in_process_zarr']:.3f}, hdf5 {amp['in_process_hdf5']:.3f}. "
        f"Modelled for {amp['readers']} reader(s) with the default mixing pool "
        f"({amp['default_pool_mib']:g} MiB): {amp['modelled_readers']:.3f}. "
        f"{amp['samples_per_chunk']} samples per chunk. Label mixing: ratio to a uniform "
        "shuffle (1.0 = as mixed, lower is worse).",
        "",
    ]
    header = [
        "pool MiB",
        "pool samples",
        "chunks/batch",
        "amplification",
        "chunk diversity",
        "displacement",
        "distinct labels ratio",
        "largest label share ratio",
    ]
    rows = [
        [
            p["pool_mib"],
            p["pool"],
            p["chunks_per_batch"],
            p["read_amplification"],
            p["chunk_diversity"],
            p["displacement"],
            p.get("distinct_labels_ratio", ""),
            p.get("largest_label_share_ratio", ""),
        ]
        for p in amp["pools"]
    ]
    return lines + _table(header, rows)


def _memory(mem: Mapping[str, Any]) -> list[str]:
    if "skipped" in mem:
        return ["## Worker memory", "", f"Skipped: {mem['skipped']}", ""]
    rows = [
        [
            w["pid"],
            _mib(w["peak_rss"]),
            _mib(w["peak_uss"]),
            _mib(w["rss_growth"]),
            _mib(w["uss_growth"]),
        ]
        for w in mem["workers"]
    ]
    title = f"## Worker memory over {mem['epochs']} epochs ({mem['transport']}, persistent workers)"
    header = ["worker pid", "peak RSS", "peak USS", "RSS growth", "USS growth"]
    return [title, "", *_table(header, rows)]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        out = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [(prefix, value)]


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _section(title: str, value: Any) -> list[str]:
    """Another module's results: scalars as key/value rows, lists of records as tables."""
    if isinstance(value, Mapping) and "skipped" in value:
        return [f"## {title}", "", f"Skipped: {value['skipped']}", ""]
    items = value.items() if isinstance(value, Mapping) else [("value", value)]
    scalars = [(k, v) for k, v in items if not _records(v)]
    lines = [f"## {title}", "", *_table(["key", "value"], _flatten(dict(scalars)))]
    for key, records in items:
        if _records(records):
            columns = list(dict.fromkeys(c for r in records for c in r))
            rows = [[r.get(c, "") for c in columns] for r in records]
            lines += [f"{key}:", "", *_table(columns, rows)]
    return lines


def _versus(seen: float, uniform: float, digits: int = 2) -> str:
    return f"{seen:.{digits}f} ({uniform:.{digits}f})"


def _mixing_cells(r: Mapping[str, Any]) -> list[str]:
    """Label mixing as 'observed (uniform)' and the ratios (1.0 = as mixed as uniform)."""
    return [
        _versus(r["distinct_labels"], r["uniform_distinct_labels"], 1),
        f"{r['distinct_labels_ratio']:.2f}",
        _versus(r["largest_label_share"], r["uniform_largest_label_share"]),
        f"{r['largest_label_share_ratio']:.2f}",
    ]


_MIXING_HEADER = [
    "distinct labels/batch (uniform)",
    "ratio",
    "largest label share (uniform)",
    "ratio",
]


def training_markdown(results: Mapping[str, Any]) -> list[str]:
    """bench_training: accuracy, loader rate and label mixing per loader, and the check."""
    if "skipped" in results:
        return ["## Training parity (bench_training)", "", f"Skipped: {results['skipped']}", ""]
    s = results["settings"]
    lines = [
        f"## Training parity (bench_training): digits {s['image_shape']}, {s['train_samples']} "
        f"train / {s['test_samples']} test, {s['epochs']} epochs, batch {s['batch_size']}, "
        f"{s['optimizer']}, {s['seeds']} loader seed(s), make_loader num_workers="
        f"{s['workers']}, torch threads {s['torch_threads']}",
        "",
        "Test accuracy: mean over the loader seeds (each seed's in brackets; the curve is the "
        "mean after each epoch). Start: make_loader (worker start) or reading every sample into "
        "memory; samples/s: the loader alone over one warm epoch; train s: per seed, all "
        "epochs. Label mixing: epoch 0's batches, observed (uniform-shuffle expectation); "
        "ratios 1.0 = as mixed as a uniform shuffle, lower is worse.",
        "",
    ]
    header = [
        "loader",
        "test acc",
        "acc by epoch",
        "start s",
        "1st epoch s",
        "samples/s",
        "train s",
    ]
    rows = []
    for r in results["rows"]:
        if "skipped" in r:
            rows.append([r["loader"], f"skipped: {r['skipped']}", *[""] * 9])
            continue
        seeds = ", ".join(f"{a:.3f}" for a in r["accuracy_by_seed"])
        warned = ", LabelMixingWarning" if r.get("label_warning") else ""
        rows.append(
            [
                f"{r['loader']} [{r['transport']}{warned}]",
                f"{r['accuracy']:.4f} ({seeds})",
                " ".join(f"{a:.3f}" for a in r["accuracy_by_epoch"]),
                f"{r['start_s']:.2f}",
                f"{r['first_epoch_s']:.2f}",
                f"{r['loader_samples_per_s']:,.0f}",
                f"{r['train_s']:.1f}",
                *_mixing_cells(r),
            ]
        )
    lines += _table([*header, *_MIXING_HEADER], rows)
    stored = [
        [name, f"{c['convert_s']:.1f}", int(c["stored_chunks"]), *_mixing_cells(_unprefixed(c))]
        for name, c in results["conversions"].items()
        if "skipped" not in c
    ]
    lines += [
        "Stored order (each stored chunk taken as a batch):",
        "",
        *_table(["conversion", "convert s", "chunks", *_MIXING_HEADER], stored),
    ]
    for c in results["checks"]:
        verdict = "PASS" if c["passed"] else "FAIL"
        lines.append(f"Check: {c['target']}: {c['measured']:.2f} (<= {c['required']:g}) {verdict}")
    return [*lines, ""]


def _unprefixed(conversion: Mapping[str, Any]) -> dict[str, Any]:
    """A conversion's ``stored_*`` figures without the prefix."""
    return {k.removeprefix("stored_"): v for k, v in conversion.items()}


def mixing_markdown(results: Mapping[str, Any]) -> list[str]:
    """bench_mixing: label mixing per conversion, worker count, batch size and pool."""
    if "skipped" in results:
        return ["## Label mixing (bench_mixing)", "", f"Skipped: {results['skipped']}", ""]
    s = results["settings"]
    lines = [
        f"## Label mixing (bench_mixing): {s['classes']} classes x {s['per_class']} images "
        f"{s['image_shape']} ({s['dataset_mib']:.0f} MiB decoded), class-sorted folder, "
        "make_loader defaults, epoch 0",
        "",
        "Observed (uniform-shuffle expectation); ratios: 1.0 = as mixed as a uniform shuffle, "
        f"lower is worse. Pool: make_loader's default ({s['default_pool_mib']:g} MiB, the "
        "share of this dataset it holds in brackets) or pool_bytes set to a fraction of the "
        "data, as a dataset that many times the pool's size sees it. Warned: make_loader "
        "raised LabelMixingWarning.",
        "",
    ]
    rows = []
    for r in results["rows"]:
        head = [r["conversion"], r["workers"], r["batch_size"]]
        if "skipped" in r:
            rows.append([*head, "", f"skipped: {r['skipped']}", *[""] * 5])
            continue
        share = f"{r['pool_fraction']:.0%}"
        pool = f"default ({share})" if r["pool"] == "default" else f"{share} of data"
        warned = "yes" if r["label_warning"] else ""
        rows.append([*head, pool, int(r["batches"]), *_mixing_cells(r), warned])
    header = ["conversion", "workers", "batch", "pool", "batches", *_MIXING_HEADER, "warned"]
    lines += _table(header, rows)
    stored = [
        [name, int(c["stored_chunks"]), *_mixing_cells(_unprefixed(c))]
        for name, c in results["conversions"].items()
        if "skipped" not in c
    ]
    lines += [
        "Stored order (each stored chunk as a batch):",
        "",
        *_table(["conversion", "chunks", *_MIXING_HEADER], stored),
    ]
    return lines


def markdown(results: Mapping[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# chunkio benchmark (`make bench`)",
        "",
        f"Machine: {m['platform']}; {m['cpu']}; {m['cores']} cores available; "
        f"{m['memory_gib']:.1f} GiB RAM; Python {m['python']}, torch {m['torch']}. "
        "Shared and noisy: read the ratios, not the absolute figures.",
        f"Run: {'quick' if results['settings']['quick'] else 'full'}, "
        f"{results['elapsed_s']:.0f} s. {_conversion(results)}",
        "",
        *_checks(results),
        *_throughput(results),
        *_amplification(results["amplification"]),
        *_memory(results["memory"]),
    ]
    for key, title in (
        ("convert", "Conversion (bench_convert)"),
        ("transport", "Transport (bench_transport)"),
        ("patches", "Patches (bench_patches)"),
        ("read_profile", "Read path: one epoch per stage (bench_read_profile)"),
        ("codecs", "Codecs and chunk sizes (bench_codecs)"),
        ("images", "Training inputs at 224 px: augmented epochs and storage (bench_images)"),
        ("decoders", "Image decoders (bench_decoders)"),
        ("foreign", "Your own HDF5 file and Zarr store, read in place (bench_foreign)"),
        ("convert_arrays", "Streaming conversion of your own HDF5 file (bench_convert_arrays)"),
        ("singlecell", "Single-cell: a sorted h5ad through each loader (bench_singlecell)"),
    ):
        if key in results:
            lines += _section(title, results[key])
    if "training" in results:
        lines += training_markdown(results["training"])
    if "mixing" in results:
        lines += mixing_markdown(results["mixing"])
    return "\n".join(lines)


def plot(results: Mapping[str, Any], path: Path) -> None:
    """Horizontal bars of samples/s per loader and worker count, log axis."""
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt

    rows = results["rows"]
    names = list(dict.fromkeys(r["name"] for r in rows))
    workers = sorted({r["workers"] for r in rows})
    rate = {(r["name"], r["workers"]): r["samples_per_s"] for r in rows}
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(names) + 1.5))
    height = 0.8 / len(workers)
    for j, w in enumerate(workers):
        ys = [i + j * height for i, n in enumerate(names) if (n, w) in rate]
        xs = [rate[(n, w)] for n in names if (n, w) in rate]
        ax.barh(ys, xs, height=height, label=f"{w} workers")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (shuffled epoch, log scale)")
    ax.set_title(f"chunkio benchmark - {results['machine']['cores']} cores")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: Mapping[str, Any], out_dir: str | Path = RESULTS) -> str:
    """Write ``latest.{md,json,png}`` into ``out_dir``; return the markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(results)
    (out / "latest.md").write_text(text + "\n")
    (out / "latest.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    plot(results, out / "latest.png")
    return text
