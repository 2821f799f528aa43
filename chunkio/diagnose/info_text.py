"""The text ``chunkio info`` prints: a dataset's description
(:func:`chunkio.diagnose.dataset_report.info`)
and a store chunkio did not write (:mod:`chunkio.diagnose.foreign_report`), as aligned tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_foreign_info", "format_info"]


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def _table(header: tuple[str, ...], body: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines of left-aligned columns."""
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _shape(values: list[int]) -> str:
    return "x".join(map(str, values)) or "()"


def format_info(d: dict[str, Any]) -> str:
    """The human-readable table ``chunkio info`` prints."""
    if not d.get("chunkio_dataset", True):
        return format_foreign_info(d)
    classes = d["class_names"]
    if classes is not None and len(classes) > 10:
        classes = [*classes[:10], f"... ({len(classes)} in all)"]
    ratio = d["compression_ratio"]
    lines = [
        f"path:              {d['path']}",
        f"format:            {d['format']}",
        f"complete:          {'yes' if d['complete'] else 'NO (conversion unfinished)'}",
        f"samples:           {d['num_samples']}",
        f"samples per chunk: {d['samples_per_chunk']} ({d['num_chunks']} chunks)",
        f"class names:       {'-' if classes is None else ', '.join(map(str, classes))}",
        f"compression:       {', '.join(d.get('compression') or []) or '-'}",
        f"size on disk:      {_human_bytes(d['size_on_disk'])}",
        f"decoded size:      {_human_bytes(d['nbytes'])}"
        + ("" if ratio is None else f" (compression ratio {ratio:.2f})"),
    ]
    skipped = d["extra"].get("skipped")
    if skipped:
        lines.append(f"skipped sources:   {len(skipped)}")
    header = ("array", "shape", "dtype", "chunks", "compression", "stored")
    rows = [
        (
            name,
            _shape(a["shape"]),
            a["dtype"],
            _shape(a["chunks"]),
            a["compression"]["name"] if a.get("compression") else ",".join(a["codecs"]) or "-",
            _human_bytes(a["stored_nbytes"]),
        )
        for name, a in d["arrays"].items()
    ]
    return "\n".join([*lines, "", *_table(header, rows)])


def format_foreign_info(d: dict[str, Any]) -> str:
    """What ``chunkio info`` prints for a store chunkio did not write: every array (codec
    chain, stored bytes, compression ratio), then the fields ``--fields`` names, or how to
    name them."""
    ratio = d["compression_ratio"]
    lines = [
        f"path:              {d['path']}",
        f"format:            {d['format']} (not a chunkio dataset: read in place)",
        f"size on disk:      {_human_bytes(d['size_on_disk'])}",
        f"decoded size:      {_human_bytes(d['nbytes'])}"
        + ("" if ratio is None else f" (compression ratio {ratio:.2f})"),
        "",
    ]
    header = ("array", "shape", "dtype", "chunks", "codecs", "stored", "ratio")
    rows = [
        (
            name,
            _shape(a["shape"]),
            a["dtype"],
            _shape(a["chunks"]),
            ",".join(a["codecs"]) or "-",
            _human_bytes(a["stored_nbytes"]),
            "-" if a["compression_ratio"] is None else f"{a['compression_ratio']:.2f}",
        )
        for name, a in d["arrays"].items()
    ]
    lines += _table(header, rows)
    lines += [f"{name}  not readable: {why}" for name, why in d["unreadable"].items()]
    if d["fields"] is None:
        return "\n".join([*lines, "", d["hint"]])
    lines += [
        "",
        f"samples:           {d['num_samples']}",
        f"chunk-aware order: follows field {d['order_field']!r}, {d['samples_per_chunk']} "
        f"samples per chunk ({d['num_chunks']} chunks)",
        "",
    ]
    header = ("field", "array", "dtype", "sample shape", "chunks", "samples/chunk", "chunk")
    rows = [
        (
            name,
            f["array"],
            f["dtype"],
            _shape(f["sample_shape"]),
            _shape(f["chunks"]),
            str(f["samples_per_chunk"]),
            _human_bytes(f["chunk_nbytes"]),
        )
        for name, f in d["fields"].items()
    ]
    return "\n".join(lines + _table(header, rows))
