"""The ``chunkio convert`` subcommands (images, volumes, arrays): their options and what they
run, and the options they share with the dataset commands (``--storage-options``,
``--trust-codecs``). :mod:`.cli` assembles the parser and reports errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..backends.codec_table import CODECS, DEFAULT_CODEC
from ..convert.engine.chunking import DEFAULT_CHUNK_BYTES

__all__ = [
    "non_negative_int",
    "positive_int",
    "arrays_options",
    "convert_arrays",
    "convert_images",
    "convert_volumes",
    "images_options",
    "storage_options_argument",
    "trust_codecs_argument",
    "volumes_options",
]

EXIT_OK = 0


def _int_at_least(minimum: int, words: str) -> Callable[[str], int]:
    """An argparse type: an int >= ``minimum``, else an error saying ``expected {words}``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {words}; got {text!r}")
        return value

    return parse


positive_int = _int_at_least(1, "a positive integer")
non_negative_int = _int_at_least(0, "an integer >= 0")


def _common_convert_options(p: argparse.ArgumentParser, *, sources: bool = False) -> None:
    """``sources``: one or more SRC (files or stores read end to end as one dataset)."""
    if sources:
        p.add_argument("src", nargs="+", help="source file(s) or store(s), end to end")
    else:
        p.add_argument("src", help="source folder (or file)")
    p.add_argument("dst", help="destination: a .zarr directory or a .h5 file")
    p.add_argument("--format", choices=["zarr", "hdf5"], help="default: from the DST suffix")
    p.add_argument("--workers", type=positive_int, help="processes (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST")


def _execution(args: argparse.Namespace) -> Any:
    """The :class:`~chunkio.Execution` of :func:`_common_convert_options`' options."""
    from ..convert.options import Execution

    return Execution(workers=args.workers, progress=not args.no_progress, overwrite=args.overwrite)


def _sizes_option(p: argparse.ArgumentParser, flag: str, text: str) -> None:
    """An option taking one or more positive sizes (``N [N ...]``)."""
    p.add_argument(flag, type=positive_int, nargs="+", metavar="N", help=text)


def images_options(images: argparse.ArgumentParser) -> None:
    _common_convert_options(images)
    _sizes_option(
        images, "--size", "target size: H W, or one number for a square (default: keep sizes)"
    )
    images.add_argument(
        "--resize",
        choices=["shorter-crop", "pad", "stretch"],
        default="shorter-crop",
        help="how images reach --size",
    )
    images.add_argument(
        "--mode",
        choices=["RGB", "L", "keep"],
        default="RGB",
        help="stored colour mode (default RGB)",
    )
    images.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default="raise",
        help="bad files: fail (default) or skip and list them",
    )
    images.add_argument("--samples-per-chunk", type=positive_int, help="default: about 1 MiB")
    _shuffle_options(images, "images")
    images.add_argument(
        "--encoding",
        choices=["raw", "jpeg", "png", "webp", "yuv420", "auto"],
        default="raw",
        help="raw pixels (default), or each image's encoded bytes (auto: jpeg for JPEGs)",
    )
    images.add_argument(
        "--quality", type=positive_int, default=90, help="JPEG/WebP quality 1-100 (default 90)"
    )
    images.add_argument(
        "--max-size", type=positive_int, help="shrink images whose longer side is larger"
    )


def _shuffle_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--no-shuffle",
        action="store_true",
        help=f"store {what} in source order (default: a seeded random order, so every chunk "
        "mixes classes; the field source_index maps rows back)",
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the stored order (default 0)"
    )


def arrays_options(arrays: argparse.ArgumentParser) -> None:
    _common_convert_options(arrays, sources=True)
    arrays.add_argument(
        "--fields",
        nargs="+",
        required=True,
        metavar="NAME=PATH",
        help="the arrays to convert: NAME=PATH pairs (e.g. image=train/images) or bare "
        "array paths; axis 0 is the sample axis",
    )
    arrays.add_argument("--samples-per-chunk", type=positive_int, help="default: --chunk-bytes")
    arrays.add_argument(
        "--chunk-bytes",
        type=positive_int,
        default=DEFAULT_CHUNK_BYTES,
        help="target decoded bytes per chunk (default 1 MiB)",
    )
    arrays.add_argument("--compression", choices=CODECS, default=DEFAULT_CODEC, help="chunk codec")
    _shuffle_options(arrays, "samples")
    storage_options_argument(arrays)
    trust_codecs_argument(arrays)


def volumes_options(volumes: argparse.ArgumentParser) -> None:
    _common_convert_options(volumes)
    _sizes_option(
        volumes,
        "--chunks",
        "spatial chunk shape: one number or three (default: chosen for the data)",
    )
    volumes.add_argument("--labels", help="label volumes: a folder matched by file name")
    volumes.add_argument(
        "--on-overflow",
        choices=["error", "clip", "scale"],
        help="values outside the stored dtype (default: error)",
    )
    volumes.add_argument(
        "--nan-policy", choices=["error", "zero", "keep"], help="NaN/Inf values (default: error)"
    )
    volumes.add_argument(
        "--ome-zarr",
        nargs="?",
        const=0,
        type=non_negative_int,
        metavar="LEVELS",
        help="write one OME-Zarr image per volume (NGFF 0.5, Zarr only), with at most LEVELS "
        "scale levels (default: until a level fits one chunk)",
    )


def _size(values: list[int] | None) -> tuple[int, int] | None:
    if values is None:
        return None
    if len(values) > 2:
        raise ValueError(f"--size takes H W or one number; got {len(values)} numbers")
    return (values[0], values[-1])


def convert_images(args: argparse.Namespace) -> int:
    from ..convert.images import ImageOptions, convert_images
    from ..convert.options import Output

    result = convert_images(
        args.src,
        args.dst,
        size=_size(args.size),
        on_error=args.on_error,
        shuffle=not args.no_shuffle,
        seed=args.seed,
        images=ImageOptions(
            resize=args.resize,
            mode=args.mode,
            max_size=args.max_size,
            encoding=args.encoding,
            quality=args.quality,
        ),
        output=Output(format=args.format, chunks=args.samples_per_chunk),
        execution=_execution(args),
    )
    skipped = getattr(result, "skipped", ())
    print(_done(result, "images"))
    for item in skipped:
        print(f"skipped {item.path}: {item.reason}")
    return EXIT_OK


def _ome_zarr(levels: int | None) -> bool | int:
    """``--ome-zarr`` absent: False; given alone: True (levels chosen); ``--ome-zarr N``: N."""
    if levels is None:
        return False
    return True if levels == 0 else levels


def convert_volumes(args: argparse.Namespace) -> int:
    from ..convert.options import Output
    from ..convert.volumes import convert_volumes

    options: dict[str, Any] = {}
    for name in ("labels", "on_overflow", "nan_policy"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    chunks = None
    if args.chunks is not None:
        chunks = args.chunks[0] if len(args.chunks) == 1 else tuple(args.chunks)
    result = convert_volumes(
        args.src,
        args.dst,
        output=Output(format=args.format, chunks=chunks, ome_zarr=_ome_zarr(args.ome_zarr)),
        execution=_execution(args),
        **options,
    )
    print(_done(result, "volumes"))
    return EXIT_OK


def convert_arrays(args: argparse.Namespace) -> int:
    from ..convert.arrays import convert_arrays
    from ..convert.options import Output
    from ..format.foreign import fields_from_words

    result = convert_arrays(
        args.src[0] if len(args.src) == 1 else list(args.src),
        args.dst,
        fields=fields_from_words(args.fields),
        storage_options=args.storage_options,
        trust_codecs=args.trust_codecs,
        shuffle=not args.no_shuffle,
        seed=args.seed,
        output=Output(
            format=args.format,
            chunks=args.samples_per_chunk,
            chunk_bytes=args.chunk_bytes,
            compression=args.compression,
        ),
        execution=_execution(args),
    )
    print(_done(result, "samples"))
    return EXIT_OK


def _done(result: Any, what: str) -> str:
    if getattr(result, "unchanged", False):  # a rerun of a finished conversion: no I/O
        return f"{result.path} is up to date: {result.num_samples} {what}, nothing to do"
    return f"wrote {result.num_samples} {what} to {result.path} ({result.seconds:.1f} s)"


def storage_options_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-options",
        type=_json_object,
        metavar="JSON",
        help="for a URL: fsspec options, e.g. '{\"anon\": true}' or s3fs's key/secret",
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object; got {text!r}")
    return value


def trust_codecs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-codecs",
        action="store_true",
        help="allow codecs, filters and links chunkio does not consider safe",
    )
