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
                                    [--ome-zarr [LEVELS]]
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
    chunkio --version      the version, and which compiled accelerations are active

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
from collections.abc import Sequence
from typing import Any

from ..errors import ChunkioError
from ..util.messages import as_flags
from .cli_convert import (
    arrays_options,
    convert_arrays,
    convert_images,
    convert_volumes,
    images_options,
    storage_options_argument,
    trust_codecs_argument,
    volumes_options,
)
from .info_text import format_info

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


class _Version(argparse.Action):
    """``--version``: the version and the compiled parts (each active, or missing with the
    fix), then exit, as argparse's own version action does."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .. import __version__
        from ..testing.compiled import report

        lines = [f"chunkio {__version__}", "compiled parts:", *(f"  {x}" for x in report())]
        print("\n".join(lines))
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkio", description="Chunked Zarr v3 / HDF5 datasets for PyTorch."
    )
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="print the version and which compiled accelerations are active, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    convert = commands.add_parser(
        "convert", help="convert images, volumes or an existing store into a dataset"
    )
    kinds = convert.add_subparsers(dest="kind", required=True)
    images_options(kinds.add_parser("images", help="an ImageFolder or flat folder of images"))
    volumes_options(
        kinds.add_parser("volumes", help="a folder of 3-D volumes (NIfTI, TIFF, NumPy)")
    )
    arrays_options(kinds.add_parser("arrays", help="arrays of existing HDF5 files or Zarr stores"))
    _dataset_commands(commands)
    return parser


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
    storage_options_argument(parser)
    trust_codecs_argument(parser)


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
        kinds = {"images": convert_images, "volumes": convert_volumes, "arrays": convert_arrays}
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
