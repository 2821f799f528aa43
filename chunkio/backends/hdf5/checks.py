"""What an HDF5 array must pass before chunkio reads it: links, storage, virtual sources, filters.

Run on the reader's first look at each array, i.e. when the dataset is made, so bad input is
a typed error in the parent process, before any DataLoader worker starts:

* a **soft link** inside the file is followed (it is a second name for an object of the same
  file); an **external link** (or any other kind of link, at any step of the path) may point
  anywhere on disk and is refused unless ``trust_codecs=True``;
* **external raw storage** (``H5Pset_external``) likewise;
* a **virtual dataset** whose sources all lie in the same file is read through h5py; one
  with sources in other files is refused unless trusted, and when trusted every source file
  must exist (HDF5 would read a missing source's part as the fill value, silently);
* a **filter** outside the safe list is refused unless trusted; a filter this installation
  cannot decode is an :class:`~chunkio.errors.OptionalDependencyError` naming the package that
  provides it (hdf5plugin for Blosc, Zstd, LZ4, bitshuffle, ...), trusted or not.
"""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from ...errors import FormatError, MissingFieldError, OptionalDependencyError, UnsafeInputError
from ...util.messages import listing
from ..codec_packages import hdf5_filter_hint, hdf5_filter_name
from ..codec_table import HDF5_SAFE

__all__ = ["check_array", "in_file_node", "in_file_path", "list_arrays", "read_text"]

#: soft links followed for one name before it counts as a loop
_MAX_SOFT_LINKS = 32


def in_file_path(
    f: h5py.File, name: str, where: str, links: dict[str, Any] | None = None
) -> tuple[str | None, Any]:
    """The path of ``name`` through hard links only, its soft links followed:
    ``(path, None)``, or ``(None, link)`` at the first link of another kind (an external
    link) on the way, which HDF5 would follow out of the file. Nothing outside the file is
    opened: each step is looked up from a path already known to be in the file. A name
    with no object (a dangling soft link included) is a :class:`MissingFieldError`.
    ``links``: the links of ``f`` looked up so far (shared by the arrays of one group), kept
    by the caller while ``f`` is open."""
    todo = [p for p in name.split("/") if p not in ("", ".")]
    done, hops = "", 0
    while todo:
        step = f"{done}/{todo.pop(0)}"
        link = links.get(step) if links is not None else None
        if link is None:
            link = _link(f, step)
            if links is not None and link is not None:
                links[step] = link
        if link is None:
            raise MissingFieldError(f"{where}: array {name!r} is missing")
        if isinstance(link, h5py.SoftLink):
            hops += 1
            if hops > _MAX_SOFT_LINKS:
                raise FormatError(
                    f"{where}: array {name!r}: more than {_MAX_SOFT_LINKS} soft links "
                    "followed (a loop of soft links)"
                )
            target = str(link.path)
            done = "" if target.startswith("/") else done
            todo = [p for p in target.split("/") if p not in ("", ".")] + todo
            continue
        if not isinstance(link, h5py.HardLink):
            return None, link
        done = step
    return done or "/", None


def _link(f: h5py.File, path: str) -> Any:
    """The link at ``path`` (whose parent is reached through hard links only), as
    ``f.get(path, getlink=True)`` gives it, or None where there is none (a step through a
    dataset included). One call into HDF5 for a hard link: ``f.get`` first walks the path
    again to check it exists, ten times the cost, paid per array per file described."""
    name = path.encode("utf-8")
    try:
        kind = f.id.links.get_info(name).type
    except (KeyError, ValueError, TypeError, RuntimeError):  # no such link
        return None
    if kind == h5py.h5l.TYPE_HARD:
        return h5py.HardLink()
    try:  # soft, external, user-defined: rare, as h5py gives them
        return f.get(path, getlink=True)
    except (KeyError, ValueError, TypeError):
        return None


def list_arrays(f: h5py.File, where: str) -> list[str]:
    """The arrays of file ``f`` (``where``), by path, and its links at the top level.

    Links are listed too (without resolving them), so that opening one is refused by the
    reader as unsafe rather than reported as a missing array; arrays in groups by their path
    (visititems follows no links). A damaged header is a :class:`FormatError`."""
    nested: list[str] = []
    try:
        top = [k for k in f if not isinstance(f.get(k, getlink=True), h5py.HardLink)]
        f.visititems(
            lambda path, obj: nested.append(path) if isinstance(obj, h5py.Dataset) else None
        )
    except (RuntimeError, OSError, KeyError) as err:
        why = f"{type(err).__name__}: {err}"
        raise FormatError(f"{where}: its arrays cannot be listed ({why})") from err
    return sorted({*top, *nested})


def check_array(dset: Any, name: str, where: str, *, trust: bool) -> None:
    """Raise unless ``dset`` (array ``name`` of file ``where``) can be read safely here."""
    if not isinstance(dset, h5py.Dataset):
        raise FormatError(f"{where}: {name!r} is a group, not an array")
    plist = dset.id.get_create_plist()
    if plist.get_external_count() > 0 and not trust:
        raise UnsafeInputError(
            f"{where}: array {name!r} keeps its data in external raw files named inside the "
            "HDF5 file (H5Pset_external), which may lie anywhere on disk; refused unless "
            "trust_codecs=True"
        )
    if dset.is_virtual:
        _check_virtual(dset, name, where, trust=trust)
    ids = [int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters())]
    unsafe = [fid for fid in ids if fid not in HDF5_SAFE]
    if unsafe and not trust:
        raise UnsafeInputError(
            f"{where}: array {name!r} uses HDF5 filter id {unsafe[0]}; chunkio only decodes "
            f"{listing(sorted(HDF5_SAFE.values()), limit=6)} unless trust_codecs=True"
        )
    for position, fid in enumerate(ids):
        if not h5py.h5z.filter_avail(fid) and _applied(dset, position):
            raise OptionalDependencyError(
                f"{where}: array {name!r} is compressed with HDF5 filter "
                f"{hdf5_filter_name(fid)!r} (id {fid}), which this installation cannot "
                f"decode: {hdf5_filter_hint(fid)}"
            )


def _applied(dset: Any, position: int) -> bool:
    """Whether some stored chunk went through filter ``position`` of the pipeline (an
    optional filter may have been skipped for every chunk; HDF5 reads those without it)."""
    found = []

    def visit(info: Any) -> bool | None:
        if not (int(info.filter_mask) >> position) & 1:
            found.append(True)
            return True  # stop iterating
        return None

    if dset.chunks is None:
        return True
    if hasattr(dset.id, "chunk_iter"):
        dset.id.chunk_iter(visit)
    else:  # pragma: no cover - HDF5 < 1.14
        for i in range(dset.id.get_num_chunks()):
            visit(dset.id.get_chunk_info(i))
    return bool(found)


def _check_virtual(dset: Any, name: str, where: str, *, trust: bool) -> None:
    files = sorted({str(m.file_name) for m in dset.virtual_sources()} - {"."})
    if not files:
        return  # every source in this file: h5py reads it like any array
    if not trust:
        raise UnsafeInputError(
            f"{where}: array {name!r} is a virtual dataset whose sources lie in other files "
            f"({files}); refused unless trust_codecs=True"
        )
    for source in files:
        if "%" not in source and not _source_exists(source, where):
            raise FormatError(
                f"{where}: virtual dataset {name!r} maps source file {source!r}, which does "
                "not exist (HDF5 would read its part as the fill value)"
            )


def _source_exists(source: str, where: str) -> bool:
    """Whether HDF5 finds a virtual dataset's source file: as given (absolute or from the
    working directory), under ``HDF5_VDS_PREFIX``, or beside the virtual dataset's file."""
    prefix = os.environ.get("HDF5_VDS_PREFIX", "")
    places = [source, os.path.join(os.path.dirname(os.path.abspath(where)), source)]
    if prefix:
        places.append(os.path.join(prefix, source))
    return any(os.path.isfile(p) for p in places)


def in_file_node(
    f: h5py.File, name: str, where: str, *, trust: bool, links: dict[str, Any] | None = None
) -> Any:
    """The group or dataset at ``name``, through soft links inside the file only (any link
    when ``trust``); nothing there: a :class:`MissingFieldError`."""
    path, link = in_file_path(f, name, where, links)
    if path is None and not trust:
        raise UnsafeInputError(
            f"{where}: {name!r} is (or passes through) a {type(link).__name__}; chunkio "
            "follows soft links inside the file only, unless trust_codecs=True"
        )
    return f[path or name]


def read_text(node: Any) -> list[str]:
    """Every value of the string dataset ``node`` (variable-length or fixed-length bytes)."""
    if not isinstance(node, h5py.Dataset) or (
        h5py.check_string_dtype(node.dtype) is None and node.dtype.kind != "S"
    ):
        raise FormatError(f"{node.file.filename}: {node.name!r} is not an array of strings")
    values = np.asarray(node[()]).reshape(-1).tolist()
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
