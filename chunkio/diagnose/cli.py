"""The ``chunkio`` command: convert, inspect, verify and diagnose datasets.

::

    chunkio convert images SRC DST [--size H [W]] [--resize shorter-crop|pad|stretch]
                                   [--mode RGB|L|keep] [--on-error raise|skip]
                                   [--format zarr|hdf5] [--workers N] [--no-progress]
                                   [--overwrite] [--no-shuffle] [--seed S]
                                   [--encoding raw|jpeg|png|webp|yuv420|auto] [--quality Q]
                                   [--max-size N]
    chunkio convert volumes SRC DST [--format zarr|hdf5] [--chunks N [N N]] [--labels DIR]
                                    [--on-overflow error|clip|scale]
                                    [--nan-policy error|zero|keep]
                                    [--workers N] [--no-progress] [--overwrite]
    chunkio convert arrays SRC [SRC ...] DST --fields NAME=PATH [NAME=PATH ...] (or PATH ...)
                                   [--samples-per-chunk N] [--chunk-bytes B]
                                   [--compression zstd|lz4|...] [--no-shuffle] [--seed S]
                                   [--storage-options JSON] [--trust-codecs]
                                   [--format zarr|hdf5] [--workers N] [--no-progress]
                                   [--overwrite]
    chunkio info PATH [--json] [--fields NAME=PATH ...] [--storage-options JSON]
                      [--trust-codecs]
    chunkio verify PATH [--fields NAME=PATH ...] [--storage-options JSON] [--trust-codecs]
                                                  exit status 1 when anything is wrong
    chunkio doctor PATH [--step-time S] [--fields NAME=PATH ...] [--storage-options JSON]
                        [--trust-codecs]

``info``, ``verify`` and ``doctor`` also take any HDF5 file or Zarr store chunkio did not
write; ``--fields`` names its arrays (``NAME=PATH`` pairs, or bare array paths).

Expected failures (bad input, missing files, an existing destination) print one line on
stderr and exit with status 2; usage errors too (argparse). The options such a message
advises are spelled as flags (``--overwrite``), as :func:`chunkio.util.messages.as_flags`
writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..backends.codec_table import CODECS, DEFAULT_CODEC
from ..convert.engine.chunking import DEFAULT_CHUNK_BYTES
from ..errors import ChunkioError
from ..util.messages import as_flags
from .info_text import format_info

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


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


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _common_convert_options(p: argparse.ArgumentParser, *, sources: bool = False) -> None:
    """``sources``: one or more SRC (files or stores read end to end as one dataset)."""
    if sources:
        p.add_argument("src", nargs="+", help="source file(s) or store(s), end to end")
    else:
        p.add_argument("src", help="source folder (or file)")
    p.add_argument("dst", help="destination: a .zarr directory or a .h5 file")
    p.add_argument("--format", choices=["zarr", "hdf5"], help="default: from the DST suffix")
    p.add_argument("--workers", type=_positive_int, help="processes (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST")


def _execution(args: argparse.Namespace) -> Any:
    """The :class:`~chunkio.Execution` of :func:`_common_convert_options`' options."""
    from ..convert.options import Execution

    return Execution(workers=args.workers, progress=not args.no_progress, overwrite=args.overwrite)


def _sizes_option(p: argparse.ArgumentParser, flag: str, text: str) -> None:
    """An option taking one or more positive sizes (``N [N ...]``)."""
    p.add_argument(flag, type=_positive_int, nargs="+", metavar="N", help=text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkio", description="Chunked Zarr v3 / HDF5 datasets for PyTorch."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    convert = commands.add_parser(
        "convert", help="convert images, volumes or an existing store into a dataset"
    )
    kinds = convert.add_subparsers(dest="kind", required=True)
    _images_options(kinds.add_parser("images", help="an ImageFolder or flat folder of images"))
    _volumes_options(
        kinds.add_parser("volumes", help="a folder of 3-D volumes (NIfTI, TIFF, NumPy)")
    )
    _arrays_options(kinds.add_parser("arrays", help="arrays of existing HDF5 files or Zarr stores"))
    _dataset_commands(commands)
    return parser


def _images_options(images: argparse.ArgumentParser) -> None:
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
    images.add_argument("--samples-per-chunk", type=_positive_int, help="default: about 1 MiB")
    _shuffle_options(images, "images")
    images.add_argument(
        "--encoding",
        choices=["raw", "jpeg", "png", "webp", "yuv420", "auto"],
        default="raw",
        help="raw pixels (default), or each image's encoded bytes (auto: jpeg for JPEGs)",
    )
    images.add_argument(
        "--quality", type=_positive_int, default=90, help="JPEG/WebP quality 1-100 (default 90)"
    )
    images.add_argument(
        "--max-size", type=_positive_int, help="shrink images whose longer side is larger"
    )


def _shuffle_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--no-shuffle",
        action="store_true",
        help=f"store {what} in source order (default: a seeded random order, so every chunk "
        "mixes classes; the field source_index maps rows back)",
    )
    p.add_argument(
        "--seed", type=_non_negative_int, default=0, help="seed of the stored order (default 0)"
    )


def _arrays_options(arrays: argparse.ArgumentParser) -> None:
    _common_convert_options(arrays, sources=True)
    arrays.add_argument(
        "--fields",
        nargs="+",
        required=True,
        metavar="NAME=PATH",
        help="the arrays to convert: NAME=PATH pairs (e.g. image=train/images) or bare "
        "array paths; axis 0 is the sample axis",
    )
    arrays.add_argument("--samples-per-chunk", type=_positive_int, help="default: --chunk-bytes")
    arrays.add_argument(
        "--chunk-bytes",
        type=_positive_int,
        default=DEFAULT_CHUNK_BYTES,
        help="target decoded bytes per chunk (default 1 MiB)",
    )
    arrays.add_argument("--compression", choices=CODECS, default=DEFAULT_CODEC, help="chunk codec")
    _shuffle_options(arrays, "samples")
    _storage_options_argument(arrays)
    _trust_codecs_argument(arrays)


def _volumes_options(volumes: argparse.ArgumentParser) -> None:
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


#: the positional paths of info, verify and doctor
PATHS_HELP = "a dataset, HDF5 file or Zarr store; several: read as one dataset, end to end"


def _dataset_commands(commands: Any) -> None:
    """``info``, ``verify`` and ``doctor``: commands that look at an existing dataset."""
    info = commands.add_parser("info", help="describe a dataset, HDF5 file or Zarr store")
    info.add_argument("path", nargs="+", help=PATHS_HELP)
    info.add_argument("--json", action="store_true", help="machine-readable output")
    _path_options(info)

    verify = commands.add_parser("verify", help="read every chunk; exit 1 on any problem")
    verify.add_argument("path", nargs="+", help=PATHS_HELP)
    verify.add_argument("--no-progress", action="store_true", help="no progress bar")
    _path_options(verify)

    doctor = commands.add_parser("doctor", help="diagnose loading speed for a dataset")
    doctor.add_argument("path", nargs="+", help=PATHS_HELP)
    doctor.add_argument(
        "--step-time",
        type=float,
        metavar="S",
        help="your training step time in seconds, to compare against",
    )
    _path_options(doctor)

    stats = commands.add_parser(
        "stats", help="per-field, per-channel mean and std in one pass, saved as JSON"
    )
    stats.add_argument("path", nargs="+", help=PATHS_HELP)
    stats.add_argument("--out", required=True, help="the stats file to write (JSON)")
    stats.add_argument("--diff", action="store_true", help="of differences between steps")
    _path_options(stats)


def _path_options(parser: argparse.ArgumentParser) -> None:
    """``--fields``, ``--storage-options`` and ``--trust-codecs``: which arrays of a store, how
    to reach it, and whether to decode what chunkio does not consider safe."""
    parser.add_argument(
        "--fields",
        nargs="+",
        metavar="NAME=PATH",
        help="for a store chunkio did not write: its arrays, as NAME=PATH pairs "
        "(image=train/images label=train/labels) or bare array paths",
    )
    _storage_options_argument(parser)
    _trust_codecs_argument(parser)


def _trust_codecs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-codecs",
        action="store_true",
        help="allow codecs, filters and links chunkio does not consider safe",
    )


def _opened(args: argparse.Namespace) -> dict[str, Any]:
    """How the commands that look at a store open it: ``--fields``, ``--storage-options``,
    ``--trust-codecs`` as keyword arguments."""
    return {
        "fields": _fields(args),
        "storage_options": args.storage_options,
        "trust_codecs": args.trust_codecs,
    }


def _fields(args: argparse.Namespace) -> Any:
    """``--fields`` as ChunkDataset's ``fields`` (None when not given)."""
    from ..format.foreign import fields_from_words

    return None if args.fields is None else fields_from_words(args.fields)


def _size(values: list[int] | None) -> tuple[int, int] | None:
    if values is None:
        return None
    if len(values) > 2:
        raise ValueError(f"--size takes H W or one number; got {len(values)} numbers")
    return (values[0], values[-1])


def _convert_images(args: argparse.Namespace) -> int:
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


def _convert_volumes(args: argparse.Namespace) -> int:
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
        output=Output(format=args.format, chunks=chunks),
        execution=_execution(args),
        **options,
    )
    print(_done(result, "volumes"))
    return EXIT_OK


def _convert_arrays(args: argparse.Namespace) -> int:
    from ..convert.options import Output
    from ..convert.stores import convert_arrays
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


def _storage_options_argument(parser: argparse.ArgumentParser) -> None:
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


def _info(args: argparse.Namespace) -> int:
    from .dataset_report import info

    found = [info(p, **_opened(args)) for p in args.path]
    if len(found) > 1:  # several files: each described, then the dataset they make
        _one_dataset(args)
    if args.json:
        whole = {"files": found, "num_samples": sum(d.get("num_samples") or 0 for d in found)}
        print(json.dumps(found[0] if len(found) == 1 else whole, indent=2))
    else:
        print("\n\n".join(format_info(d) for d in found))
    return EXIT_OK


def _one_dataset(args: argparse.Namespace) -> None:
    """Several paths must make one dataset (the same fields): else its error."""
    from ..dataset import ChunkDataset

    ChunkDataset(list(args.path), **_opened(args))


def _verify(args: argparse.Namespace) -> int:
    from .dataset_report import verify

    tick = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(unit="chunk", desc="verify", leave=False)

        def tick() -> None:
            bar.update()

    try:
        reports = [verify(p, on_chunk=tick, **_opened(args)) for p in args.path]
    finally:
        if tick is not None:
            bar.close()
    print("\n".join(map(str, reports)))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_PROBLEMS


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import main_doctor

    text = main_doctor(
        args.path[0] if len(args.path) == 1 else list(args.path),
        step_time=args.step_time,
        **_opened(args),
    )
    print(text)
    return EXIT_OK


def _stats(args: argparse.Namespace) -> int:
    from ..dataset import ChunkDataset
    from .stats import compute_stats

    path = args.path[0] if len(args.path) == 1 else list(args.path)
    dataset = ChunkDataset(path, **_opened(args))
    found = compute_stats(dataset, diff=args.diff)
    found.save(args.out)
    for name, f in found.fields.items():
        print(f"{name}: mean {f['mean']} std {f['std']}")
    print(f"wrote {args.out}")
    return EXIT_OK


def _one_line(err: BaseException) -> str:
    """``err``'s message on one line, with the options it advises spelled as this command's
    flags (``--on-error skip``, not ``on_error='skip'``)."""
    return as_flags(" ".join(str(err).split())) or type(err).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``chunkio`` command with ``argv`` (default: ``sys.argv[1:]``); return the status."""
    args = _parser().parse_args(argv)
    handlers = {"info": _info, "verify": _verify, "doctor": _doctor, "stats": _stats}
    if args.command == "convert":
        kinds = {"images": _convert_images, "volumes": _convert_volumes, "arrays": _convert_arrays}
        handler = kinds[args.kind]
    else:
        handler = handlers[args.command]
    try:
        return handler(args)
    except (ChunkioError, OSError, ValueError) as err:
        # Expected failures (bad input, missing paths): one line, no traceback.
        print(f"chunkio: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("chunkio: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
