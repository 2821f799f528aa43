"""Folders of images -> a chunkio dataset: :func:`convert_images`, the entry point; its
steps (scan, check, plan, read, encode) are :mod:`chunkio.convert.image`, as
``convert_volumes``' are :mod:`chunkio.convert.volume`: entry points at the top of
:mod:`chunkio.convert`, their parts below, importing none of them.

Two passes over the files:

1. **Check** (:func:`chunkio.images.pillow.probe_image`): every file is opened and its
   headers parsed - size, mode, frames, EXIF orientation, the decompression-bomb limit - PNG
   chunk CRCs are verified, and a JPEG that does not end with its end-of-image marker
   (truncated, or with bytes appended) is decoded at 1/8 scale to tell which. This yields
   each image's size after EXIF orientation and its stored mode, so the dataset's shape -
   dense, or ragged with every offset - is known before anything is written, and nearly
   every bad file is known too. Plain JPEGs are read from their headers without Pillow
   (:mod:`chunkio.images.jpeg`): 0.06 of a Pillow decode for 224-256 px JPEGs and 0.12
   for 64-128 px ones, where opening a file costs as much as decoding it; the check that
   decoded every JPEG at 1/8 scale costs 0.55-0.7 (``check_vs_decode`` in
   ``benchmarks/bench_convert.py``).
2. **Write** (:func:`chunkio.convert.run_conversion`): only the good files, decoded by the
   declared policy, in chunk-aligned blocks; atomic and resumable. Plain JPEGs kept at their
   size are decoded by libjpeg-turbo without Pillow, bit-exact with Pillow's decode (compared
   once per coding kind; :func:`chunkio.images.jpeg.decode_plain`), at 0.6 of its time.

Why check first instead of writing and compacting afterwards: a file left out moves every
later image, so a file found bad while writing would leave a hole in a chunk another process
already wrote; compaction would rewrite every later chunk. A few kinds of damage pass the
check and fail only when the pixels are decoded (a corrupt Huffman table, a truncated JPEG
whose last bytes happen to be an end marker, a PNG whose compressed data is damaged under
correct CRCs). Such a file stops the write pass. Under ``on_error="raise"`` the conversion
fails naming it (the destination is not created; staged blocks are discarded by the next
run, whose files or options differ). Under ``"skip"`` it is left out and the conversion is
planned and written again, from scratch, after a thorough check (every JPEG decoded at 1/8
scale, as this pass did before it was made cheap), so that a folder with many such files
restarts once or twice, not once per file. The result is the same dataset a conversion
that knew of the file from the start would write, whether or not the run was interrupted
(a run killed after the restart repeats it: the record of the refused file is not kept).
A file whose decoded shape differs from its probe (it changed during the conversion) stops
it with a :class:`~chunkio.errors.SourceError` whatever ``on_error`` says; rerunning
resumes.

The write pass runs in this process when it is estimated (a few files decoded and timed,
:func:`chunkio.convert.image.write.write_work`,
:func:`chunkio.convert.engine.workers.pool_pays`) to take less than
:data:`~chunkio.convert.engine.workers.POOL_MIN_SECONDS` here, since starting worker processes
costs about half a second; so does the check pass, whose work is rarely worth a pool.
``workers`` is therefore an upper bound; a ``client`` is always used. From
:data:`_WARM_UP_FILES` files on, the pool's process server starts in the background while
the files are checked, with the workers' modules imported once
(:func:`~chunkio.convert.engine.processes.warm_up`), so the workers start in milliseconds.

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
    file listing (:mod:`chunkio.convert.shuffle.order`).

Images are stored in a seeded random order by default (``shuffle=True``), so every chunk
holds a random mix of classes rather than one class folder after another.

Skipped files are listed, with reasons, in ``extra["skipped"]`` and in the returned
:class:`ImageConversionResult`.

Rerunning a finished conversion is cheap: before the check pass, the listing (every file's
path, size and modification time, one ``stat`` each, nothing decoded) and the options are
compared with the record the complete destination keeps (:mod:`chunkio.convert.durability.rerun`).
Equal: the result is returned as it is (``unchanged``); different: refused, naming what changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Format, detect_format
from ..errors import SourceError
from ..images.encoding import check_encoding
from ..images.pillow import DecodePolicy, ImageMode, ResizeMode, UndecodableImage
from ..read.provenance import decode_paths
from ..util.deprecated import Moved, moved_keywords
from .durability.rerun import Request, compression_option, display, reuse_complete
from .engine.chunking import DEFAULT_CHUNK_BYTES
from .engine.processes import warm_up
from .engine.workers import available_cores
from .image.check import Checked, check_all
from .image.plan import ImageConversionResult, listing, normalise_size, scan_source, unchanged
from .image.scan import OnError
from .image.source import ImageSource
from .image.write import Job, undecodable, write_plan
from .options import (
    DEFAULT_EXECUTION,
    DEFAULT_OUTPUT,
    ConversionOptions,
    Execution,
    Output,
    moved,
)
from .pipeline import convert_source
from .shuffle.order import check_order_options, shuffled

__all__ = [
    "ImageConversionResult",
    "ImageOptions",
    "ImageSource",
    "convert_images",
    "source_paths",
]

#: Files from which a conversion that may use a pool starts its process server early
#: (:func:`~chunkio.convert.engine.processes.warm_up`): fewer take under a second to write.
_WARM_UP_FILES = 1000
#: The fields of ImageOptions (convert_images' keywords of the same names before it)
_IMAGE_FIELDS = ("resize", "mode", "max_size", "encoding", "quality")


@dataclass(frozen=True)
class ImageOptions:
    """How :func:`convert_images` decodes and stores images, besides their ``size``.

    Parameters
    ----------
    resize
        How images reach ``size``: ``"shorter-crop"`` (default: cover, then centre crop),
        ``"pad"`` (fit, then zero-pad, centred) or ``"stretch"``.
    mode
        ``"RGB"`` (default), ``"L"`` or ``"keep"``: see :mod:`chunkio.images.pillow` for the
        exact conversions (alpha is dropped; 16-bit data is never clipped).
    max_size
        Shrink images whose longer side exceeds it, keeping the aspect ratio (Lanczos);
        smaller images are kept as they are. Exclusive with ``size``.
    encoding
        How ``image`` is stored: ``"raw"`` (default: pixels, compressed by the
        :class:`~chunkio.Output`'s compression; bit-exact with Pillow's decode), ``"jpeg"``,
        ``"webp"`` or ``"png"`` (each image's encoded bytes, an *encoded* field:
        ``ChunkDataset`` decodes each sample straight into its place in the batch),
        ``"yuv420"`` (pre-decoded Y'CbCr 4:2:0 pixels, LZ4-compressed in bands of rows:
        about 5x JPEG's size, read several times faster; see :mod:`chunkio.images.yuv`), or
        ``"auto"`` (JPEG for folders of JPEGs, raw otherwise). Images are encoded after
        ``mode``, ``size`` and ``max_size``; a JPEG file those leave unchanged is stored as
        it is (checked by a 1/8-scale decode, which reads every coefficient; bit-exact with
        the raw conversion, see :meth:`ImageSource.encoded`).
    quality
        JPEG/WebP quality, 1-100 (default 90; WebP 100 is lossless; PNG is always lossless).

    Examples
    --------
    >>> ImageOptions()
    ImageOptions(resize='shorter-crop', mode='RGB', max_size=None, encoding='raw', quality=90)
    >>> ImageOptions(encoding="jpeg", quality=95).quality
    95
    """

    resize: ResizeMode = "shorter-crop"
    mode: ImageMode = "RGB"
    max_size: int | None = None
    encoding: str = "raw"
    quality: int = 90

    def __post_init__(self) -> None:
        if self.encoding != "auto":
            check_encoding(self.encoding, self.quality)
        elif (
            isinstance(self.quality, bool)
            or not isinstance(self.quality, int)
            or not 1 <= self.quality <= 100
        ):
            raise ValueError(f"quality must be an int in 1..100; got {self.quality!r}")
        self.policy(None)  # mode, resize and max_size are checked here

    def policy(self, size: tuple[int, int] | None) -> DecodePolicy:
        """The decode policy with every image resized to ``size`` (``None``: kept)."""
        return DecodePolicy(self.mode, size, self.resize, self.max_size)


DEFAULT_IMAGES = ImageOptions()

#: convert_images' keywords that moved into the option objects
_MOVED = {
    **{old: Moved("images", ImageOptions, old) for old in _IMAGE_FIELDS},
    **moved("format", "samples_per_chunk", "compression", "checksum"),
    **moved("workers", "client", "progress", "overwrite"),
}


@moved_keywords("convert_images", _MOVED)
def convert_images(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dst: Any,
    *,
    labels: Sequence[int] | None = None,
    size: int | Sequence[int] | None = None,
    on_error: OnError = "raise",
    shuffle: bool = True,
    seed: int = 0,
    images: ImageOptions | None = None,
    output: Output | None = None,
    execution: Execution | None = None,
) -> ImageConversionResult:
    """Convert a folder (or list) of images into a chunkio dataset at ``dst``.

    The keywords that moved into :class:`ImageOptions` (``resize``, ``mode``, ``max_size``,
    ``encoding``, ``quality``), :class:`~chunkio.Output` (``format``, ``samples_per_chunk``
    -> ``chunks``, ``compression``, ``checksum``) and :class:`~chunkio.Execution`
    (``workers``, ``client``, ``progress``, ``overwrite``) are still accepted for one
    release, with a ``DeprecationWarning``.

    Parameters
    ----------
    src
        An ImageFolder (``src/<class>/<image>``: labels are class indices in sorted name
        order), a flat folder (no labels), or a sequence of image paths. Discovery rules:
        :mod:`chunkio.convert.image.scan`.
    dst
        A ``.zarr`` directory or ``.h5`` file (built atomically, resumable), or any
        destination :func:`~chunkio.convert.run_conversion` accepts.
    labels
        One int per path, with a sequence ``src`` only.
    size
        ``(H, W)`` or ``N`` for ``(N, N)``: resize every image by ``images.resize``.
        ``None``: keep sizes (a ragged ``image`` field if they differ).
    on_error
        ``"raise"``: the first bad file stops the conversion before anything is written (or,
        for damage only a full decode reveals, when the write pass meets it; nothing is
        published). ``"skip"``: bad files are left out and listed in the result and
        ``extra["skipped"]`` (see the module docstring for files the write pass refuses).
    shuffle, seed
        Store the images in the order ``perm = np.random.default_rng(seed).permutation(N)``
        of the N good files in listing order (stored row ``i`` is file ``perm[i]``), with a
        ``source_index`` field (= ``perm``); ``path`` and ``label`` follow their images.
        ``shuffle=False`` keeps the listing order (class by class) and adds no field. See
        :mod:`chunkio.convert.shuffle.order`.
    images
        Resizing, colour mode, ``max_size``, and how ``image`` is stored (raw pixels or
        encoded bytes): :class:`ImageOptions`.
    output
        :class:`~chunkio.Output`. ``chunks`` (samples per chunk) defaults to about
        ``chunk_bytes`` (1 MiB) of stored bytes per chunk: decoded pixels for
        ``encoding="raw"``, estimated encoded sizes (:attr:`ImageSource.mean_stored_nbytes`)
        otherwise. Checksums are on by default. No ``extra``: the converter writes its own.
    execution
        :class:`~chunkio.Execution`. ``workers``: at most this many processes in each pass
        (``None``: one per core); small jobs run in this process (see the module docstring).

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
        differs), and not ``Execution(overwrite=True)``.
    """
    started = time.perf_counter()
    images = DEFAULT_IMAGES if images is None else images
    output = DEFAULT_OUTPUT if output is None else output
    execution = DEFAULT_EXECUTION if execution is None else execution
    check_order_options(shuffle, seed)
    output.no_extra("convert_images")
    samples_per_chunk = output.samples_per_chunk("convert_images")
    policy = images.policy(normalise_size(size))
    encoding, quality = images.encoding, images.quality
    workers = available_cores() if execution.workers is None else execution.workers
    compression = output.compression_codec()
    write = ConversionOptions(
        format=output.format,
        samples_per_chunk=samples_per_chunk,
        compression=compression,
        execution=replace(execution, workers=workers),
        pack=True,
    )
    scan, layout_kind = scan_source(src, labels, on_error)
    fmt: Format = output.format or detect_format(dst)
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
        "encoding": encoding,
        "quality": int(quality),
        "max_size": policy.max_size,
    }
    if output.chunk_bytes != DEFAULT_CHUNK_BYTES:  # recorded only when asked: older records
        options["chunk_bytes"] = output.chunk_bytes  # (without it) still match their rerun
    request = Request("images", listing(scan, layout_kind), options)
    done = reuse_complete(dst, fmt, request, overwrite=execution.overwrite)
    if done is not None:  # this very conversion, complete: nothing to check or write
        return unchanged(display(dst), fmt, done, time.perf_counter() - started)
    if workers > 1 and execution.client is None and len(scan.entries) >= _WARM_UP_FILES:
        warm_up()  # the workers' process server starts while the files are checked
    job = Job(
        scan, layout_kind, policy, on_error, dst, encoding, int(quality), shuffle, seed,
        output.chunk_bytes,
    )  # fmt: skip
    return _check_and_write(job, replace(write, request=request))


def _check_and_write(job: Job, options: ConversionOptions) -> ImageConversionResult:
    """The check pass, then the write pass; again without any file the write pass refused.

    The default check cannot see every kind of damage (see :func:`probe_image`): a file that
    fails only when its pixels are decoded stops the write pass. Under ``on_error="raise"``
    that is the error. Under ``"skip"`` the file is left out and the conversion planned and
    written again - the staged blocks of the first plan are discarded, since leaving a file
    out moves every later image - after a thorough check of every file, so that a folder
    with many such files is planned again once or twice, not once per file.
    """
    paths = [e.path for e in job.scan.entries]
    failed: dict[str, str] = {}
    thorough = False
    checked: list[Checked] | None = None
    while True:
        if checked is None:
            checked = check_all(
                paths,
                job.policy,
                execution=options.execution,
                progress=options.execution.progress,
                thorough=thorough,
            )
        try:
            return _write(job, options, checked, failed)
        except SourceError as err:
            bad = undecodable(err)
            if bad is None or bad.path is None or bad.path in failed:
                raise
            if job.on_error == "raise":
                raise UndecodableImage(
                    f"{bad}; pass on_error='skip' to leave bad files out",
                    path=bad.path,
                    reason=bad.reason,
                ) from err
            failed[bad.path] = str(bad.reason)
            if not thorough:
                thorough, checked = True, None


def _write(
    job: Job, options: ConversionOptions, checked: Sequence[Checked], failed: Mapping[str, str]
) -> ImageConversionResult:
    """The write pass over the files that ``checked`` and ``failed`` leave in."""
    plan = write_plan(job, options, checked, failed)
    source = shuffled(plan.source, shuffle=job.shuffle, seed=job.seed)
    result = convert_source(source, job.dst, plan.options)
    base = {f.name: getattr(result, f.name) for f in fields(result)}
    return ImageConversionResult(
        **base, skipped=plan.skipped, ignored=job.scan.ignored, class_names=job.scan.class_names
    )


def source_paths(path_field: npt.NDArray[np.uint8]) -> list[str]:
    """Decode the ``path`` field (``(N, L)`` uint8, zero-padded) into relative paths.

    >>> source_paths(np.array([[97, 47, 120, 0], [98, 47, 121, 122]], np.uint8))
    ['a/x', 'b/yz']
    """
    return decode_paths(path_field)
