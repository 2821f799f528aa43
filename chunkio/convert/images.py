"""Folders of images -> a chunkio dataset: :func:`convert_images`.

Two parallel passes over the files:

1. **Check** (:func:`chunkio.convert.decode.probe_image`): every file is opened and decoded
   once - JPEGs at 1/8 scale through Pillow's ``draft``, which still reads all of the
   entropy-coded data and so finds truncation, at a fraction of a full decode (PNG chunk
   CRCs are checked too). This yields each image's size after EXIF orientation and its
   stored mode, so the dataset's shape - dense, or ragged with every offset - is known
   before anything is written, and every bad file is known too.
2. **Write** (:func:`chunkio.convert.run_conversion`): only the good files, decoded by the
   declared policy, in chunk-aligned blocks; atomic and resumable.

Why check first instead of writing and compacting afterwards: a file that fails only when
its pixels are decoded (a truncated JPEG has a perfect header) would otherwise leave a hole in
a chunk another process already wrote; compaction would rewrite every later chunk. The check
also lets ``on_error="raise"`` fail before anything is written. Its cost, measured in one
process (``benchmarks/bench_convert.py``): about 0.4-0.6 of a full decode for 500x375 JPEGs,
but 0.8-0.9 for 64-128 px ones, where opening and parsing the file costs as much as decoding
it. A file that passes the check but fails in the write pass (it changed in between) stops
the conversion with a :class:`~chunkio.errors.SourceError` naming it, whatever ``on_error``
says; rerunning resumes.

Both passes run in this process when the work is estimated at less than
:data:`~chunkio.convert.image_check.POOL_MIN_SECONDS`: a worker process must import NumPy,
Pillow, zarr and torch before its first image, which costs seconds. ``workers`` is therefore
an upper bound; a ``client`` is always used.

Stored fields:

``image``
    ``(N, C, H, W)`` uint8 (uint16 for 16-bit images), channels first. Without ``size``,
    images of different sizes make ``image`` a *ragged* field (``ChunkDataset`` returns a list
    of ``(C, H, W)`` tensors per batch).
``label``
    ``(N,)`` int64, when there are labels (ImageFolder classes, or ``labels=``).
``orig_size``
    ``(N, 2)`` int32: each image's ``(H, W)`` after EXIF orientation, before resizing.
``path``
    ``(N, L)`` uint8: each source path relative to ``src``, file-system encoded, zero-padded
    (:func:`source_paths` decodes it; :func:`chunkio.read_source_paths` reads and decodes it
    from a dataset). A field, not a format attribute: attributes are parsed by every process
    that opens the dataset and would grow with N.
``source_index``
    ``(N,)`` int64, when shuffled (the default): each stored image's position in the sorted
    file listing (:mod:`chunkio.convert.shuffling`).

Images are stored in a seeded random order by default (``shuffle=True``), so every chunk
holds a random mix of classes rather than one class folder after another.

Skipped files are listed, with reasons, in ``extra["skipped"]`` and in the returned
:class:`ImageConversionResult`.

Rerunning a finished conversion is cheap: before the check pass, the listing (every file's
path, size and modification time, one ``stat`` each, nothing decoded) and the options are
compared with the record the complete destination keeps (:mod:`chunkio.convert.rerun`).
Equal: the result is returned as it is (``unchanged``); different: refused, naming what changed.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Compression, Format, detect_format
from ..backends.base import DEFAULT_CODEC
from ..errors import SourceError
from ..grid import SampleGrid
from ..layout import DatasetLayout, FieldInfo
from ..provenance import decode_paths
from . import image_check
from .chunking import choose_samples_per_chunk
from .decode import DecodePolicy, ImageMode, Probe, ResizeMode, load_image
from .image_check import Checked, check_all
from .pipeline import ConversionResult, run_conversion
from .rerun import Request, compression_option, display, file_listing, reuse_complete
from .scan import ImageEntry, OnError, ScanResult, Skipped, scan_folder, scan_paths
from .shuffling import SOURCE_INDEX, check_order_options, order_extra, shuffled

__all__ = [
    "ImageConversionResult",
    "ImageSource",
    "convert_images",
    "source_paths",
]

#: The write pass per image (decode, resize, compress, write), relative to the check pass:
#: measured 2x for 64-128 px JPEGs, more for larger ones (the check decodes at 1/8 scale).
_WRITE_PER_CHECK = 4.0
#: Decoded bytes per block (the unit of work, resume and fsync) to aim for.
_BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class ImageConversionResult(ConversionResult):
    """A :class:`~chunkio.convert.ConversionResult` plus what the image scan left out."""

    skipped: tuple[Skipped, ...] = ()
    ignored: int = 0
    class_names: tuple[str, ...] | None = None


class ImageSource:
    """A :class:`~chunkio.convert.BlockSource` of checked image files (pass 2).

    Built by :func:`convert_images`; each sample's stored shape is known in advance and
    checked again after decoding.
    """

    def __init__(
        self,
        entries: Sequence[ImageEntry],
        checked: Sequence[Checked],
        policy: DecodePolicy,
        *,
        labelled: bool,
    ) -> None:
        probes = [c.probe for c in checked]
        self.policy = policy
        self.stored_mode = _agreed_mode(entries, probes, policy)
        self._paths = [e.path for e in entries]
        self._fingerprint_parts = [
            (e.rel, e.label, c.size, c.mtime_ns) for e, c in zip(entries, checked, strict=True)
        ]
        self.num_samples = len(entries)
        channels, dtype = probes[0].channels, probes[0].dtype
        self.orig_size = np.array([(p.height, p.width) for p in probes], np.int32).reshape(-1, 2)
        self.shapes = _stored_shapes(self.orig_size, channels, policy.size)
        self.labels = np.array([e.label for e in entries], np.int64) if labelled else None
        encoded = [os.fsencode(e.rel) for e in entries]
        width = max(len(b) for b in encoded)
        self.path_bytes = np.zeros((len(encoded), width), np.uint8)
        for i, b in enumerate(encoded):
            self.path_bytes[i, : len(b)] = np.frombuffer(b, np.uint8)
        ragged = len({tuple(s) for s in self.shapes.tolist()}) > 1
        image = (
            FieldInfo("image", dtype, None, "ragged")
            if ragged
            else FieldInfo("image", dtype, tuple(int(s) for s in self.shapes[0]))
        )
        self.fields: tuple[FieldInfo, ...] = (
            image,
            *([FieldInfo("label", np.dtype(np.int64), ())] if labelled else []),
            FieldInfo("orig_size", np.dtype(np.int32), (2,)),
            FieldInfo("path", np.dtype(np.uint8), (width,)),
        )

    @property
    def mean_sample_nbytes(self) -> float:
        """Mean decoded bytes of one image (for chunk and block sizing)."""
        itemsize = self.fields[0].dtype.itemsize
        return float(np.prod(self.shapes, axis=1).mean()) * itemsize

    @property
    def ragged(self) -> bool:
        return self.fields[0].kind == "ragged"

    def ragged_shapes(self, name: str) -> npt.NDArray[np.int64]:
        """Per-sample shapes of ragged field ``name`` (only ``image`` can be ragged)."""
        if name != "image" or not self.ragged:
            raise KeyError(f"{name!r} is not a ragged field of this source")
        return self.shapes

    def fingerprint(self) -> str:
        h = hashlib.sha256(repr((self.policy, self.stored_mode)).encode())
        for part in self._fingerprint_parts:
            h.update(repr(part).encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        return self.read_rows(np.arange(start, stop, dtype=np.int64))

    def read_rows(self, indices: npt.NDArray[np.int64]) -> dict[str, Any]:
        """Images ``indices`` (any order), in that order: one file each."""
        idx = np.asarray(indices, dtype=np.int64)
        images = [self._load(int(i)) for i in idx]
        out: dict[str, Any] = {
            "image": images if self.ragged else np.stack(images),
            "orig_size": self.orig_size[idx],
            "path": self.path_bytes[idx],
        }
        if self.labels is not None:
            out["label"] = self.labels[idx]
        return out

    def _load(self, i: int) -> npt.NDArray[Any]:
        arr = load_image(self._paths[i], self.policy, stored=self.stored_mode)
        expected = tuple(int(s) for s in self.shapes[i])
        if arr.shape != expected:
            raise SourceError(
                f"{self._paths[i]}: decoded to shape {arr.shape}, but the check pass found "
                f"{expected}; the file changed during the conversion (rerun to resume)"
            )
        return arr


def _stored_shapes(
    orig: npt.NDArray[np.int32], channels: int, size: tuple[int, int] | None
) -> npt.NDArray[np.int64]:
    shapes = np.empty((len(orig), 3), np.int64)
    shapes[:, 0] = channels
    shapes[:, 1:] = orig if size is None else size
    return shapes


def _agreed_mode(
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


def _normalise_size(size: int | Sequence[int] | None) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return (int(size), int(size))
    if isinstance(size, Sequence) and len(size) == 2:
        return (int(size[0]), int(size[1]))
    raise ValueError(f"size must be None, an int or (H, W); got {size!r}")


def _scan(src: Any, labels: Sequence[int] | None, on_error: OnError) -> tuple[ScanResult, str]:
    if isinstance(src, (str, os.PathLike)):
        if labels is not None:
            raise TypeError("labels= is for a sequence of paths; a folder's labels are its classes")
        result = scan_folder(src, on_error=on_error)
        return result, "imagefolder" if result.class_names is not None else "flat"
    return scan_paths(src, labels=labels, on_error=on_error), "paths"


def _partition(
    entries: Sequence[ImageEntry], checked: Sequence[Checked], on_error: OnError
) -> tuple[list[ImageEntry], list[Checked], list[Skipped]]:
    good_e, good_c, skipped = [], [], []
    for e, c in zip(entries, checked, strict=True):
        if c.probe.error is None:
            good_e.append(e)
            good_c.append(c)
        else:
            skipped.append(Skipped(e.rel, c.probe.error))
    if skipped and on_error == "raise":
        first = next(e for e, c in zip(entries, checked, strict=True) if c.probe.error)
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


def convert_images(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dst: Any,
    *,
    labels: Sequence[int] | None = None,
    size: int | Sequence[int] | None = None,
    resize: ResizeMode = "shorter-crop",
    mode: ImageMode = "RGB",
    on_error: OnError = "raise",
    format: Format | None = None,
    samples_per_chunk: int | None = None,
    compression: str | Compression = DEFAULT_CODEC,
    checksum: bool = True,
    workers: int | None = None,
    client: Any = None,
    progress: bool = True,
    overwrite: bool = False,
    shuffle: bool = True,
    seed: int = 0,
) -> ImageConversionResult:
    """Convert a folder (or list) of images into a chunkio dataset at ``dst``.

    Parameters
    ----------
    src
        An ImageFolder (``src/<class>/<image>``: labels are class indices in sorted name
        order), a flat folder (no labels), or a sequence of image paths. Discovery rules:
        :mod:`chunkio.convert.scan`.
    dst
        A ``.zarr`` directory or ``.h5`` file (built atomically, resumable), or any
        destination :func:`~chunkio.convert.run_conversion` accepts.
    labels
        One int per path, with a sequence ``src`` only.
    size
        ``(H, W)`` or ``N`` for ``(N, N)``: resize every image by ``resize``. ``None``: keep
        sizes (a ragged ``image`` field if they differ).
    resize
        ``"shorter-crop"`` (cover, then centre crop), ``"pad"`` (fit, then zero-pad, centred)
        or ``"stretch"``.
    mode
        ``"RGB"``, ``"L"`` or ``"keep"``: see :mod:`chunkio.convert.decode` for the exact
        conversions (alpha is dropped; 16-bit data is never clipped).
    on_error
        ``"raise"``: the first bad file stops the conversion before anything is written.
        ``"skip"``: bad files are left out and listed in the result and ``extra["skipped"]``.
    format, samples_per_chunk, overwrite, client, progress
        As for :func:`~chunkio.convert.run_conversion`.
    compression, checksum
        Codec name or :class:`~chunkio.backends.Compression`; checksums are on by default.
    workers
        At most this many processes in each pass (``None``: one per core); small jobs run
        in this process (see the module docstring).
    shuffle, seed
        Store the images in the order ``perm = np.random.default_rng(seed).permutation(N)``
        of the N good files in listing order (stored row ``i`` is file ``perm[i]``), with a
        ``source_index`` field (= ``perm``); ``path`` and ``label`` follow their images.
        ``shuffle=False`` keeps the listing order (class by class) and adds no field. See
        :mod:`chunkio.convert.shuffling`.

    Returns
    -------
    ImageConversionResult
        ``unchanged`` when ``dst`` already holds this very conversion: the same files (paths,
        sizes, modification times) converted with the same options. It is then returned
        without checking or reading any image.

    Raises
    ------
    SourceError
        No usable images, a bad file under ``on_error="raise"`` (the message names it), or
        images whose modes or bit depths cannot share one array.
    DestinationExistsError
        ``dst`` holds anything but this conversion's complete result (the message names what
        differs), and ``overwrite`` is false.
    """
    started = time.perf_counter()
    check_order_options(shuffle, seed)
    policy = DecodePolicy(mode, _normalise_size(size), resize)
    workers = _default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be None or an int >= 1; got {workers!r}")
    if not isinstance(compression, Compression):
        compression = Compression(codec=compression, checksum=checksum)
    scan, layout_kind = _scan(src, labels, on_error)
    fmt: Format = format or detect_format(dst)
    options = {
        "format": fmt,
        "size": policy.size,
        "resize": policy.resize,
        "mode": policy.mode,
        "on_error": on_error,
        "samples_per_chunk": samples_per_chunk,
        "compression": compression_option(compression),
        "shuffle": bool(shuffle),
        "seed": int(seed) if shuffle else None,
    }
    request = Request("images", _listing(scan, layout_kind), options)
    done = reuse_complete(dst, fmt, request, overwrite=overwrite)
    if done is not None:  # this very conversion, complete: nothing to check or write
        return _unchanged(display(dst), fmt, done, time.perf_counter() - started)
    paths = [e.path for e in scan.entries]
    checked, timing = check_all(paths, policy, workers=workers, client=client, progress=progress)
    entries, good, bad = _partition(scan.entries, checked, on_error)
    source = ImageSource(entries, good, policy, labelled=entries[0].label is not None)
    skipped = (*scan.skipped, *bad)
    spc = samples_per_chunk or choose_samples_per_chunk(
        max(1, int(source.mean_sample_nbytes)), num_samples=source.num_samples
    )
    estimate = timing.per_file * _WRITE_PER_CHECK * source.num_samples
    if client is None and estimate < image_check.POOL_MIN_SECONDS:
        workers = 1
    extra = _extra(scan, layout_kind, source, good, skipped)
    if shuffle:
        extra["source"]["fields"][SOURCE_INDEX] = "position in the sorted file listing"
    result = run_conversion(
        shuffled(source, shuffle=shuffle, seed=seed),
        dst,
        format=format,
        samples_per_chunk=spc,
        compression=compression,
        class_names=scan.class_names,
        extra=order_extra(extra, shuffle=shuffle, seed=seed),
        overwrite=overwrite,
        workers=workers,
        client=client,
        progress=progress,
        block_chunks=_block_chunks(source, spc, workers),
        request=request,
    )
    base = {f.name: getattr(result, f.name) for f in fields(result)}
    return ImageConversionResult(
        **base, skipped=skipped, ignored=scan.ignored, class_names=scan.class_names
    )


def _listing(scan: ScanResult, layout_kind: str) -> str:
    """The scanned listing, each file with its size and mtime: one stat per file."""
    root = None if scan.root is None else os.path.abspath(scan.root)
    head = (layout_kind, root, scan.class_names, scan.ignored, [s.to_json() for s in scan.skipped])
    return file_listing(head, [(e.path, (e.rel, e.label)) for e in scan.entries])


def _unchanged(
    path: str, fmt: Format, layout: DatasetLayout, seconds: float
) -> ImageConversionResult:
    """The result of a conversion found complete at its destination."""
    extra = layout.extra
    return ImageConversionResult(
        path=path,
        format=fmt,
        num_samples=layout.num_samples,
        samples_per_chunk=layout.samples_per_chunk,
        fields=layout.fields,
        resumed_blocks=SampleGrid(layout.num_samples, layout.samples_per_chunk).num_chunks,
        written_blocks=0,
        seconds=seconds,
        unchanged=True,
        skipped=tuple(Skipped(str(s["path"]), str(s["reason"])) for s in extra.get("skipped", [])),
        ignored=int(extra.get("ignored", 0)),
        class_names=layout.class_names,
    )


def _default_workers() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity


def _block_chunks(source: ImageSource, samples_per_chunk: int, workers: int) -> int:
    """Chunks per block: about :data:`_BLOCK_BYTES`, but enough blocks to keep workers busy.

    Every block costs an fsync of each of its chunk files and of the manifest, so tiny blocks
    make small-image conversions fsync-bound.
    """
    num_chunks = -(-source.num_samples // samples_per_chunk)
    chunk_bytes = max(1.0, source.mean_sample_nbytes * samples_per_chunk)
    by_size = max(1, int(_BLOCK_BYTES // chunk_bytes))
    by_balance = max(1, num_chunks // (4 * workers)) if workers > 1 else num_chunks
    return max(1, min(by_size, by_balance))


def _extra(
    scan: ScanResult,
    layout_kind: str,
    source: ImageSource,
    good: Sequence[Checked],
    skipped: Sequence[Skipped],
) -> dict[str, Any]:
    policy = source.policy
    return {
        "source": {
            "kind": "images",
            "layout": layout_kind,
            "root": None if scan.root is None else os.path.abspath(scan.root),
            "mode": policy.mode,
            "stored_mode": source.stored_mode,
            "size": None if policy.size is None else list(policy.size),
            "resize": policy.resize,
            "alpha": "dropped",
            "exif_transpose": True,
            "frames": "first",
            "multi_frame_files": sum(c.probe.frames > 1 for c in good),
            "fields": {"orig_size": "(H, W) after EXIF orientation", "path": "relative, utf-8"},
        },
        "skipped": [s.to_json() for s in skipped],
        "ignored": scan.ignored,
    }


def source_paths(path_field: npt.NDArray[np.uint8]) -> list[str]:
    """Decode the ``path`` field (``(N, L)`` uint8, zero-padded) into relative paths.

    >>> source_paths(np.array([[97, 47, 120, 0], [98, 47, 121, 122]], np.uint8))
    ['a/x', 'b/yz']
    """
    return decode_paths(path_field)
