"""What a conversion needs from a storage format besides arrays: capabilities and file steps.

Conversion code (:mod:`chunkio.convert`) asks a :class:`~chunkio.backends.base.Storage` these
questions instead of comparing format names: may workers write their own chunks, is a chunk a
killed writer left whole or absent, how are written chunks made durable, what makes the final
bytes canonical, and how is a copy grown for an append.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

from ..errors import ConversionError
from ..util.fsync import fsync_path, fsync_tree
from ..util.numeric import ceil_div

__all__ = ["HDF5Storage", "MemoryStorage", "ZarrStorage", "chunk_files"]


def chunk_files(array_dir: str, chunks: range) -> list[str]:
    """The files (or, with the ``"/"`` key separator, the folders) that hold sample-axis chunks
    ``chunks`` of a local Zarr v3 array, whichever default key separator it uses (chunkio
    writes ``"."``; older datasets and other writers ``"/"``) and however it is chunked along
    the other axes; for a sharded array, the shards holding them. Only those that exist."""
    meta_path = os.path.join(array_dir, "zarr.json")
    st = os.stat(meta_path)
    sep, shape, inner, per_object = _chunk_naming(meta_path, st.st_ino, st.st_mtime_ns, st.st_size)
    if per_object > 1 and len(chunks):
        chunks = range(chunks.start // per_object, ceil_div(chunks.stop, per_object))
    if sep == "/":
        paths = (os.path.join(array_dir, "c", str(k)) for k in chunks)
        return [p for p in paths if os.path.exists(p)]
    # Each sample-axis chunk spans every chunk of the other axes: name them all (a listing of
    # the array's folder would grow with the dataset, once per synced task).
    others = [range(ceil_div(n, c)) for n, c in zip(shape[1:], inner[1:], strict=True)]
    paths = (
        os.path.join(array_dir, sep.join(["c", *map(str, (k, *rest))]))
        for k in chunks
        for rest in itertools.product(*others)
    )
    return [p for p in paths if os.path.exists(p)]


@functools.lru_cache(maxsize=256)
def _chunk_naming(
    meta_path: str, inode: int, mtime_ns: int, size: int
) -> tuple[str, tuple[int, ...], tuple[int, ...], int]:
    """Key separator, shape, object (chunk or shard) shape, and sample-axis chunks per object
    from ``zarr.json``: parsed once per version of the file (a conversion syncs every array
    once per task; zarr replaces the file by a rename, so a new version has a new inode)."""
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    encoding = meta.get("chunk_key_encoding") or {}
    sep = str((encoding.get("configuration") or {}).get("separator", "/"))
    shape = tuple(int(n) for n in meta["shape"])
    inner = tuple(int(c) for c in meta["chunk_grid"]["configuration"]["chunk_shape"])
    from .zarr.shard import shard_layout

    layout = shard_layout(meta)
    per_object = 1 if layout is None else layout.grid[0]
    return sep, shape, inner, per_object


class _Capabilities:
    """What a format can do unless it says otherwise (each flag is described by
    :class:`~chunkio.backends.base.Storage`): the cautious answers, so that a format claims
    only what it has: one writer at a time, chunks a killed writer may have left half
    written, written anywhere, on disk, without shards."""

    format: str
    concurrent_writers = False
    atomic_chunks = False
    local_only = False
    in_memory = False
    shards = False


class ZarrStorage(_Capabilities):
    """Zarr v3: one file per chunk, so writers that own whole chunks never meet."""

    format = "zarr"
    concurrent_writers = True
    #: every chunk file is written to a temporary file and renamed into place (zarr's
    #: LocalStore and chunkio's own writer, :class:`~.zarr.writing.LocalChunkEncoder`)
    atomic_chunks = True
    #: many chunks in one object (``sharding_indexed``)
    shards = True

    def holds_data(self, location: Any) -> bool:
        import zarr

        try:
            zarr.open_group(store=location, mode="r")
        except Exception:  # "nothing there" takes several exception types across stores
            return False
        return True

    def clear(self, location: Any) -> None:
        """Nothing to do: writing recreates every array it needs (``overwrite=True``)."""

    def sync_chunks(self, path: str, arrays: Sequence[str], first: int, stop: int) -> None:
        """fsync chunk files ``[first, stop)`` along the sample axis, and the folders holding
        their new entries (either default key separator); any process may sync the files
        another wrote."""
        for name in arrays:
            array_dir = os.path.join(path, name)
            files = chunk_files(array_dir, range(first, stop))
            for chunk_path in files:
                fsync_tree(chunk_path)
            for folder in sorted({os.path.dirname(p) for p in files}):
                fsync_path(folder)  # the new directory entries

    def seal(self, path: str, scratch: str, *, pack: bool = False) -> None:
        """With ``pack``, arrays of small chunk files become shards (:mod:`.zarr.pack`);
        chunks were synced as written: sync the metadata, drop killed writers' temp files."""
        if pack:
            from .zarr.pack import pack_arrays

            pack_arrays(path)
        fsync_tree(path, finish_zarr=True)

    def copy_for_growth(
        self, src: str, dst: str, names: Sequence[str], old_samples: int, new_samples: int
    ) -> None:
        """Hard-link the published chunks into ``dst``, copy what an append rewrites (metadata
        and each array's partial last chunk), then resize every array to ``new_samples``.

        LocalStore replaces a file by renaming a temporary one, so writing the copy never
        changes a byte the published version's links point to; copying the rewritten files
        keeps that true even for a store that rewrites files in place.
        """
        import zarr

        step = {n: int(zarr.open_array(store=src, path=n, mode="r").chunks[0]) for n in names}
        rewritten = tuple(
            os.path.relpath(p, src)
            for n in names
            if old_samples % step[n]
            for p in chunk_files(
                os.path.join(src, n), range(old_samples // step[n], old_samples // step[n] + 1)
            )
        )
        for root, _dirs, files in os.walk(src):
            rel = os.path.relpath(root, src)
            target = os.path.join(dst, rel)
            os.makedirs(target, exist_ok=True)
            for file in files:
                if file.endswith(".partial"):
                    continue  # a killed writer's temporary file
                a, b = os.path.join(root, file), os.path.join(target, file)
                key = os.path.normpath(os.path.join(rel, file))
                if file == "zarr.json" or any(
                    key == p or key.startswith(p + os.sep) for p in rewritten
                ):
                    shutil.copyfile(a, b)
                else:
                    os.link(a, b)
        for n in names:
            arr = zarr.open_array(store=dst, path=n, mode="r+")
            arr.resize((new_samples, *arr.shape[1:]))


class HDF5Storage(_Capabilities):
    """HDF5: one file with one writer, whose chunk placement depends on the write order; a
    writer killed mid-write can leave half-updated chunks (not ``atomic_chunks``: staged chunks
    are read back)."""

    format = "hdf5"
    local_only = True

    def holds_data(self, location: Any) -> bool:
        return isinstance(location, (str, os.PathLike)) and os.path.exists(location)

    def clear(self, location: Any) -> None:
        """Never called: HDF5 is written in a staging directory and published whole."""

    def sync_chunks(self, path: str, arrays: Sequence[str], first: int, stop: int) -> None:
        """The one writer has flushed; sync the whole file."""
        fsync_path(path)

    def seal(self, path: str, scratch: str, *, pack: bool = False) -> None:
        """Rewrite ``path`` with its chunks in sorted order (equal content, equal bytes);
        HDF5 has no shards (``pack`` is ignored): a dataset is one file already."""
        from .hdf5.write import write_canonical

        write_canonical(path, scratch)
        os.replace(scratch, path)
        fsync_path(path)

    def copy_for_growth(
        self, src: str, dst: str, names: Sequence[str], old_samples: int, new_samples: int
    ) -> None:
        """A new file whose arrays have the old creation properties and ``new_samples`` rows;
        the old full chunks are copied as stored bytes (nothing decoded). HDF5 cannot grow a
        fixed-size dataset in place."""
        import h5py

        with h5py.File(src, "r") as fin, h5py.File(dst, "w") as fout:
            for key, value in fin.attrs.items():
                fout.attrs[key] = value
            for name in names:
                d = fin[name]
                spc = int(d.chunks[0])
                shape = (new_samples, *d.shape[1:])
                # as HDF5Writer: room for a chunk larger than the array
                maxshape = tuple(max(s, c) for s, c in zip(shape, d.chunks, strict=True))
                space = h5py.h5s.create_simple(shape, maxshape)
                dcpl = d.id.get_create_plist()
                h5py.h5d.create(fout.id, name.encode(), d.id.get_type(), space, dcpl=dcpl)
                out = fout[name]
                zeros = (0,) * (d.ndim - 1)
                for chunk in range(old_samples // spc):  # full chunks, as stored
                    mask, raw = d.id.read_direct_chunk((chunk * spc, *zeros))
                    out.id.write_direct_chunk((chunk * spc, *zeros), raw, mask)


class MemoryStorage(_Capabilities):
    """The in-memory reference backend: nothing on disk, nothing to sync."""

    format = "memory"
    atomic_chunks = True
    in_memory = True

    def holds_data(self, location: Any) -> bool:
        from ._memory import has_memory_store

        return has_memory_store(os.fspath(location))

    def clear(self, location: Any) -> None:
        from ._memory import delete_memory_store

        delete_memory_store(os.fspath(location))

    def sync_chunks(self, path: str, arrays: Sequence[str], first: int, stop: int) -> None:
        pass

    def seal(self, path: str, scratch: str, *, pack: bool = False) -> None:
        pass

    def copy_for_growth(
        self, src: str, dst: str, names: Sequence[str], old_samples: int, new_samples: int
    ) -> None:
        raise ConversionError(f"{src}: in-memory datasets cannot be appended to")
