"""Packing a finished Zarr v3 dataset's small files into shards, before it is published.

Parallel writers own whole chunks (or whole shards), and a killed run resumes from the files
already there; file systems and object stores pay per file. So, once everything is written:

* an array of small chunk files (labels, sizes, paths of a conversion without large fields)
  is rewritten as shards (``sharding_indexed``) of about :data:`PACK_SHARD_BYTES`;
* so are the samples of ragged and encoded fields written as chunk files (``__values``,
  ``__bytes``), whatever their chunk size: their chunks are about 1 MiB, and an image folder
  would otherwise keep a file per MiB (when the conversion shards, both are written as
  shards directly, each block's whole, and are not copied here);
* small shards written directly, one per conversion block (the small fields of a sharded
  conversion), are merged into shards of about :data:`PACK_SHARD_BYTES` (:func:`_merge`).

Stored chunk bytes are copied as they are (nothing is decoded): an array of a few MiB becomes
one file. Dense fields of large chunks are written as shards directly and never copied.

Crash safety without a second copy of the array: shards get keys of their own (``c/<i>``:
the ``"/"`` key separator, where chunk files are ``c.<i>``), so they are written beside the
chunk files; replacing ``zarr.json`` (a rename) switches readers from the chunks to the
shards at once; only then are the chunk files removed. Killed at any point, the array reads
the same; the next :func:`pack_arrays` removes what is left over and finishes.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ...errors import FormatError
from ...format.kinds import KINDS
from ...format.layout import ATTR_KEY
from ...util.fsync import fsync_tree
from ...util.numeric import ceil_div
from .chunks import ChunkFiles
from .shard import inner_range, shard_layout, sharding_codec
from .writing import write_file

__all__ = ["PACK_SHARD_BYTES", "SMALL_CHUNK_BYTES", "pack_arrays"]

#: stored bytes per shard to aim for
PACK_SHARD_BYTES = 64 << 20
#: arrays whose chunk files are at most this large on average are packed
SMALL_CHUNK_BYTES = 256 << 10
#: the key encoding of packed shards (distinct from chunk files' ``c.<i>``)
_SHARD_KEYS = {"name": "default", "configuration": {"separator": "/"}}


def pack_arrays(group: str) -> list[str]:
    """Pack (or merge) the arrays of the local Zarr group at ``group`` that the module
    docstring lists; their names."""
    packed = []
    always = _sample_arrays(group)
    for name in sorted(os.listdir(group)):
        array_dir = os.path.join(group, name)
        meta = _array_meta(array_dir)
        if meta is None:
            continue
        if shard_layout(meta) is not None:
            if _merge(array_dir, name, meta):  # small shards, written one per block
                packed.append(name)
            else:
                _drop_chunk_files(array_dir, meta)  # a pack interrupted after its switch
            continue
        if _pack(array_dir, name, meta, any_size=name in always):
            packed.append(name)
    return packed


def _sample_arrays(group: str) -> set[str]:
    """The arrays holding the samples of the ragged, sparse and encoded fields the group's
    chunkio layout declares (values and a sparse field's columns, bytes)."""
    try:
        with open(os.path.join(group, "zarr.json"), encoding="utf-8") as f:
            attrs = (json.load(f) or {}).get("attributes") or {}
        fields = (attrs.get(ATTR_KEY) or {}).get("fields") or {}
    except (OSError, ValueError, AttributeError):
        return set()
    found: set[str] = set()
    for name, spec in fields.items():  # values, bytes; a sparse field's columns beside them
        kind = KINDS.get(spec.get("kind", "dense")) if isinstance(spec, dict) else None
        if kind is not None and kind.stored and isinstance(name, str):
            found.update(kind.stored_roles(name).flat)
    return found


def _array_meta(array_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(array_dir, "zarr.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return meta if isinstance(meta, dict) and meta.get("node_type") == "array" else None


def _merge(array_dir: str, name: str, meta: dict[str, Any]) -> bool:
    """Shards written directly (one per conversion block, ``c.<i>`` keys) of an array whose
    shard files are small (a label, a path, an image index: a few kB per block) merged into
    shards of about :data:`PACK_SHARD_BYTES`, inner chunks copied as they are."""
    layout = shard_layout(meta, where=f"array {name!r}")
    keys = (meta.get("chunk_key_encoding") or {}).get("configuration") or {}
    if (
        layout is None
        or keys.get("separator", "/") != "."
        or layout.grid[1:] != (1,) * (len(layout.grid) - 1)
    ):
        return False
    shape = [int(n) for n in meta["shape"]]
    if layout.shard_shape[1:] != tuple(shape[1:]):
        return False
    num_shards = ceil_div(shape[0], layout.shard_shape[0])
    rest = ["0" for _ in shape[1:]]
    paths = [os.path.join(array_dir, ".".join(["c", str(i), *rest])) for i in range(num_shards)]
    sizes = [os.path.getsize(p) for p in paths if os.path.exists(p)]
    if len(sizes) < 2 or sum(sizes) / len(sizes) > SMALL_CHUNK_BYTES:
        return False
    per_shard = max(1, min(num_shards, PACK_SHARD_BYTES // max(1, max(sizes))))
    if per_shard == 1:
        return False
    shutil.rmtree(os.path.join(array_dir, "c"), ignore_errors=True)  # an earlier try's
    inner: list[bytes | None] = []  # every inner chunk of the array, in order
    for path in paths:
        blob = _read(path)
        if blob is None:
            inner.extend([None] * layout.n_inner)
            continue
        index = layout.parse_index(blob, where=f"array {name!r}: shard {path}")
        for i in range(layout.n_inner):
            span = inner_range(index, i)
            inner.append(None if span is None else blob[span[0] : span[1]])
    grid = _grid(per_shard * layout.shard_shape[0], meta)
    codec = sharding_codec(layout.inner_chunks, layout.inner_codecs)
    merged = shard_layout({**meta, "codecs": [codec], "chunk_grid": grid})
    if merged is None:  # pragma: no cover - sharding_codec always makes one
        raise FormatError(f"{array_dir}: could not describe its shards")
    n = merged.n_inner
    for shard in range(ceil_div(len(inner), n)):
        part = inner[shard * n : (shard + 1) * n]
        part += [None] * (n - len(part))
        shard_path = os.path.join(array_dir, "c", str(shard), *rest)
        os.makedirs(os.path.dirname(shard_path), exist_ok=True)
        write_file(shard_path, merged.encode(part), None)
    _switch(
        array_dir,
        {**meta, "chunk_grid": grid, "chunk_key_encoding": _SHARD_KEYS, "codecs": [codec]},
    )
    return True


def _pack(array_dir: str, name: str, meta: dict[str, Any], *, any_size: bool = False) -> bool:
    files = ChunkFiles.build(array_dir, name, meta)
    if files is None or files.chunks[1:] != files.shape[1:] or files.separator != ".":
        return False  # not a layout chunkio writes (chunked along other axes, nested keys)
    rows = files.chunks[0]
    num_chunks = ceil_div(files.shape[0], rows)
    paths = [files.path((c, *(0 for _ in files.shape[1:]))) for c in range(num_chunks)]
    sizes = [os.path.getsize(p) for p in paths if os.path.exists(p)]
    if len(sizes) < 2 or (not any_size and sum(sizes) / len(sizes) > SMALL_CHUNK_BYTES):
        return False
    # stored bytes per chunk of the array, counting the never-written ones (an encoded
    # field's regions are mostly unwritten): shards of about PACK_SHARD_BYTES each
    density = ceil_div(sum(sizes), num_chunks)
    per_shard = max(1, min(num_chunks, PACK_SHARD_BYTES // max(1, density)))
    if per_shard == 1:
        return False
    shutil.rmtree(os.path.join(array_dir, "c"), ignore_errors=True)  # an earlier try's
    rest = [0 for _ in files.shape[1:]]
    inner_shape = [rows, *files.shape[1:]]
    codec = sharding_codec(tuple(inner_shape), list(meta["codecs"]))
    layout = shard_layout({**meta, "codecs": [codec], "chunk_grid": _grid(per_shard * rows, meta)})
    if layout is None:  # pragma: no cover - sharding_codec always makes one
        raise FormatError(f"{array_dir}: could not describe its shards")
    for shard in range(ceil_div(num_chunks, per_shard)):
        inner: list[bytes | None] = []
        for c in range(shard * per_shard, (shard + 1) * per_shard):
            inner.append(_read(paths[c]) if c < num_chunks else None)
        shard_path = os.path.join(array_dir, "c", str(shard), *map(str, rest))
        os.makedirs(os.path.dirname(shard_path), exist_ok=True)
        write_file(shard_path, layout.encode(inner), None)
    new = {
        **meta,
        "chunk_grid": _grid(per_shard * rows, meta),
        "chunk_key_encoding": _SHARD_KEYS,
        "codecs": [codec],
    }
    _switch(array_dir, new)
    return True


def _switch(array_dir: str, new: dict[str, Any]) -> None:
    """Make the shards under ``c/`` durable, point ``zarr.json`` at them (a rename: readers
    switch at once), then remove the ``c.<i>`` files they replace."""
    fsync_tree(os.path.join(array_dir, "c"))
    tmp = os.path.join(array_dir, "zarr.json.packing")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(new, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(array_dir, "zarr.json"))  # readers switch to the shards here
    _drop_chunk_files(array_dir, new)


def _grid(first: int, meta: dict[str, Any]) -> dict[str, Any]:
    shape = list(meta["chunk_grid"]["configuration"]["chunk_shape"])
    return {"name": "regular", "configuration": {"chunk_shape": [first, *shape[1:]]}}


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None  # never written (e.g. the unused rest of an encoded field's region)


def _drop_chunk_files(array_dir: str, meta: dict[str, Any]) -> None:
    """Remove the chunk files a packed array (``"/"`` keys) no longer reads."""
    keys = (meta.get("chunk_key_encoding") or {}).get("configuration") or {}
    if keys.get("separator") != "/":
        return
    for entry in os.listdir(array_dir):
        if entry.startswith("c.") or entry.endswith(".partial"):
            os.unlink(os.path.join(array_dir, entry))
