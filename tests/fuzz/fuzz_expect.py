"""What each kind of bad input must get: the table behind ``docs/reference/bad-input.md``.

One row per mutation operator of :mod:`fuzz_mutate`: the input it stands for, the error
classes a reader may raise for it (a subclass counts), what the message names, and what is
left untouched. The fuzz suite holds chunkio to it: a typed error outside its row's classes
fails ``test_fuzz_short.py``, and the page's table, between its ``fuzz-table`` markers, must be
the one :func:`markdown` writes (``python tests/fuzz/fuzz_expect.py`` prints it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Expect:
    op: str
    input: str
    errors: tuple[str, ...]
    names: str
    untouched: str


UNTOUCHED = "the store's files; other chunks' rows"

EXPECTED: tuple[Expect, ...] = (
    Expect("flip", "bytes changed in a chunk or metadata file (Zarr), anywhere in an HDF5 file",
           ("CorruptChunkError", "FormatError", "ChunkReadError", "UnsafeInputError",
            "WindowError"),
           "file, array and chunk", UNTOUCHED),
    Expect("truncate", "a chunk or metadata file cut short (to any length, 0 included)",
           ("CorruptChunkError", "MissingChunkError", "FormatError", "ChunkReadError",
            "WindowError"),
           "file, array and chunk", UNTOUCHED),
    Expect("extend", "bytes appended to a chunk or metadata file",
           ("CorruptChunkError", "FormatError", "ChunkReadError"),
           "file, array and chunk", UNTOUCHED),
    Expect("delete", "a chunk or metadata file removed",
           ("MissingChunkError", "FormatError", "DatasetNotFoundError", "WindowError"),
           "file, array and chunk (a user's store: the fill value, as zarr-python reads it)",
           UNTOUCHED),
    Expect("json", "a field of the JSON metadata (Zarr) or of an attribute (HDF5, h5ad "
           "`shape`, `encoding-type`) set to a hostile value, or removed",
           ("FormatError", "UnsafeInputError", "WindowError", "ChunkReadError"),
           "file, the array or attribute and the value", UNTOUCHED),
    Expect("value", "one stored element (offsets, spans, shapes, counts, `indptr`, column "
           "indices, codes, data) set to -1, 0, 2^31, 2^40, 10^12, the row count, or two rows "
           "swapped, written through zarr-python / h5py (checksums valid)",
           ("FormatError", "CorruptChunkError", "WindowError"),
           "file, array, row (data values themselves are read back as stored)", UNTOUCHED),
    Expect("short", "a chunk re-encoded to decode to fewer bytes than its shape holds, with "
           "a valid crc32c / fletcher32",
           ("CorruptChunkError",), "file, array and chunk", UNTOUCHED),
    Expect("long", "a chunk re-encoded to decode to more bytes than its shape holds, with a "
           "valid checksum",
           ("CorruptChunkError",), "file, array and chunk", UNTOUCHED),
    Expect("shard-index", "a shard's index entry set to a hostile offset or size, or its "
           "entries permuted (index crc32c valid)",
           ("CorruptChunkError", "FormatError"), "file, array and shard", UNTOUCHED),
)  # fmt: skip

BY_OP = {e.op: e for e in EXPECTED}


def allowed(op: str, error: str) -> bool:
    """Whether the error class named ``error`` (``module.Class``) fits ``op``'s row.

    >>> allowed("short", "chunkio.errors.CorruptChunkError"), allowed("short", "builtins.OSError")
    (True, False)
    """
    from chunkio import errors

    cls = getattr(errors, error.rsplit(".", 1)[-1], None) if error.startswith("chunkio.") else None
    return cls is not None and any(issubclass(cls, getattr(errors, e)) for e in BY_OP[op].errors)


def markdown() -> str:
    """The page's table."""
    lines = [
        "| bad input | fuzz operator | error (or a subclass) | the message names | left untouched"
        " |",
        "|---|---|---|---|---|",
    ]
    for e in EXPECTED:
        classes = ", ".join(f"`{c}`" for c in e.errors)
        lines.append(f"| {e.input} | `{e.op}` | {classes} | {e.names} | {e.untouched} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
