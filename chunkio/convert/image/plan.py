"""What an image conversion decides before writing, and what it records afterwards.

Pure helpers of :mod:`chunkio.convert.images`: the listing, which files are left out and why,
the stored shapes and mode, and the ``extra`` attributes that describe the conversion.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...backends import Format
from ...errors import SourceError
from ...format.grid import SampleGrid
from ...format.layout import DatasetLayout
from ...images.pillow import DecodePolicy, Probe, fitted_size
from ..durability.rerun import file_listing
from ..source import ConversionResult
from .check import Checked
from .scan import ImageEntry, OnError, ScanResult, Skipped, scan_folder, scan_paths

__all__ = [
    "ImageConversionResult",
    "agreed_mode",
    "default_workers",
    "describe",
    "listing",
    "normalise_size",
    "partition",
    "scan_source",
    "stored_shapes",
    "unchanged",
]


@dataclass(frozen=True)
class ImageConversionResult(ConversionResult):
    """A :class:`~chunkio.convert.ConversionResult` plus what the image scan left out."""

    skipped: tuple[Skipped, ...] = ()
    ignored: int = 0
    class_names: tuple[str, ...] | None = None


def stored_shapes(
    orig: npt.NDArray[np.int32],
    channels: int,
    size: tuple[int, int] | None,
    max_size: int | None = None,
) -> npt.NDArray[np.int64]:
    """``(N, 3)``: each image's stored ``(C, H, W)``."""
    shapes = np.empty((len(orig), 3), np.int64)
    shapes[:, 0] = channels
    if size is not None:
        shapes[:, 1:] = size
    elif max_size is None:
        shapes[:, 1:] = orig
    else:
        shapes[:, 1:] = [fitted_size(int(h), int(w), max_size) for h, w in orig.tolist()]
    return shapes


def agreed_mode(
    entries: Sequence[ImageEntry], probes: Sequence[Probe], policy: DecodePolicy
) -> str:
    """The one stored mode of all images; otherwise a SourceError listing the disagreement."""
    counts = Counter(p.stored_mode for p in probes)
    if len(counts) == 1:
        return next(iter(counts))
    examples: dict[str, str] = {}
    for e, p in zip(entries, probes, strict=True):
        examples.setdefault(p.stored_mode, e.rel)
    listing = "; ".join(f"{n} x {m} (e.g. {examples[m]})" for m, n in counts.most_common())
    hint = (
        "use mode='RGB' or mode='L' to convert them all"
        if policy.mode == "keep"
        else "convert the 16-bit and 8-bit images separately"
    )
    raise SourceError(
        f"images must share one stored mode under mode={policy.mode!r}; found {listing}; {hint}"
    )


def normalise_size(size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """``size=`` as ``(H, W)``.

    >>> normalise_size(8), normalise_size([4, 6]), normalise_size(None)
    ((8, 8), (4, 6), None)
    """
    if size is None:
        return None
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return (int(size), int(size))
    if isinstance(size, Sequence) and len(size) == 2:
        return (int(size[0]), int(size[1]))
    raise ValueError(f"size must be None, an int or (H, W); got {size!r}")


def scan_source(
    src: Any, labels: Sequence[int] | None, on_error: OnError
) -> tuple[ScanResult, str]:
    if isinstance(src, (str, os.PathLike)):
        if labels is not None:
            raise TypeError("labels= is for a sequence of paths; a folder's labels are its classes")
        result = scan_folder(src, on_error=on_error)
        return result, "imagefolder" if result.class_names is not None else "flat"
    return scan_paths(src, labels=labels, on_error=on_error), "paths"


def partition(
    entries: Sequence[ImageEntry],
    checked: Sequence[Checked],
    failed: Mapping[str, str],
    on_error: OnError,
) -> tuple[list[ImageEntry], list[Checked], list[Skipped]]:
    """Good files and their probes, and the bad ones with reasons (``failed``: by path)."""
    good_e, good_c, skipped = [], [], []
    first: ImageEntry | None = None
    for e, c in zip(entries, checked, strict=True):
        reason = failed.get(e.path, c.probe.error)
        if reason is None:
            good_e.append(e)
            good_c.append(c)
        else:
            first = first or e
            skipped.append(Skipped(e.rel, reason))
    if first is not None and on_error == "raise":
        more = f" (and {len(skipped) - 1} more bad files)" if len(skipped) > 1 else ""
        raise SourceError(
            f"{first.path}: {skipped[0].reason}{more}; pass on_error='skip' to leave bad files out"
        )
    if not good_e:
        raise SourceError(
            f"none of the {len(entries)} image files can be decoded; first: "
            f"{skipped[0].path}: {skipped[0].reason}"
        )
    return good_e, good_c, skipped


def listing(scan: ScanResult, layout_kind: str) -> str:
    """The scanned listing, each file with its size and mtime: one stat per file."""
    root = None if scan.root is None else os.path.abspath(scan.root)
    head = (layout_kind, root, scan.class_names, scan.ignored, [s.to_json() for s in scan.skipped])
    return file_listing(head, [(e.path, (e.rel, e.label)) for e in scan.entries])


def unchanged(
    path: str, fmt: Format, layout: DatasetLayout, seconds: float
) -> ImageConversionResult:
    """The result of a conversion found complete at its destination."""
    extra = layout.extra
    return ImageConversionResult.of_layout(
        path,
        fmt,
        layout,
        resumed_blocks=SampleGrid(layout.num_samples, layout.samples_per_chunk).num_chunks,
        written_blocks=0,
        seconds=seconds,
        unchanged=True,
        skipped=tuple(Skipped(str(s["path"]), str(s["reason"])) for s in extra.get("skipped", [])),
        ignored=int(extra.get("ignored", 0)),
        class_names=layout.class_names,
    )


def default_workers() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity


def describe(
    scan: ScanResult,
    layout_kind: str,
    policy: DecodePolicy,
    stored_mode: str,
    good: Sequence[Checked],
    skipped: Sequence[Skipped],
) -> dict[str, Any]:
    """``extra``: how the images were read, and what was left out."""
    return {
        "source": {
            "kind": "images",
            "layout": layout_kind,
            "root": None if scan.root is None else os.path.abspath(scan.root),
            "mode": policy.mode,
            "stored_mode": stored_mode,
            "size": None if policy.size is None else list(policy.size),
            "resize": policy.resize,
            "max_size": policy.max_size,
            "alpha": "dropped",
            "exif_transpose": True,
            "frames": "first",
            "multi_frame_files": sum(c.probe.frames > 1 for c in good),
            "fields": {"orig_size": "(H, W) after EXIF orientation", "path": "relative, utf-8"},
        },
        "skipped": [s.to_json() for s in skipped],
        "ignored": scan.ignored,
    }
