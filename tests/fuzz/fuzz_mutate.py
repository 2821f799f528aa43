"""Seeded mutations of a store on disk, each one a kind of bad input a reader meets.

:func:`plan` draws a mutation from a seeded generator and the store's listing (pure: the same
seed and store give the same mutation, so a case id replays); :func:`apply` performs it. The
operators (:data:`OPS`) fall into two groups:

- bytes as a disk or a copy damages them: ``flip``, ``truncate``, ``extend``, ``delete`` of a
  chunk or metadata file (Zarr), ``flip``/``truncate`` anywhere in an HDF5 file;
- stored values a writer could have got wrong, written *through* zarr-python or h5py or with
  the store's own codecs so that checksums stay valid and only the reader's checks can catch
  them: ``value`` (an element of any array set to a hostile number, or two swapped), ``json``
  (a field of the JSON metadata or of an HDF5 attribute), ``short``/``long`` (a chunk
  re-encoded to decode to fewer or more bytes than its shape holds, crc32c / fletcher32
  recomputed), ``shard-index`` (a shard's index entries, crc32c recomputed); those two are
  :mod:`fuzz_recode`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

#: numbers that stored sizes, offsets and counts must be checked against before any use
HOSTILE = (-1, 0, 1, 2**31 - 1, 2**31, 2**40, 10**12, -(2**31))
ZARR_META = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")
#: operators by store layout (a draw falls back to ``value`` where one does not apply)
OPS = {
    "zarr": (
        "flip",
        "truncate",
        "extend",
        "delete",
        "json",
        "value",
        "short",
        "long",
        "shard-index",
    ),
    "h5": ("flip", "truncate", "json", "value", "short", "long"),
}


def _files(root: Path) -> list[str]:
    if root.is_file():
        return [""]
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock"
    )


def _zarr_arrays(root: Path) -> list[str]:
    """Array paths of a Zarr store (folders whose metadata says ``array``)."""
    out = []
    for meta in sorted(root.rglob("zarr.json")):
        if json.loads(meta.read_text()).get("node_type") == "array":
            out.append(str(meta.parent.relative_to(root)))
    out += [str(p.parent.relative_to(root)) for p in sorted(root.rglob(".zarray"))]
    return sorted(out)


def _h5_arrays(path: Path) -> list[str]:
    import h5py

    names: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(names)


def plan(rng: np.random.Generator, root: Path, layout: str) -> dict[str, Any]:
    """A mutation of the store at ``root`` drawn from ``rng``: a JSON-able dict that
    :func:`apply` performs (``op``, its target, its parameters)."""
    op = str(rng.choice(OPS[layout]))
    arrays = _zarr_arrays(root) if layout == "zarr" else _h5_arrays(root)
    if layout == "zarr":
        files = _files(root)
        meta = [f for f in files if Path(f).name in ZARR_META]
        chunks = [f for f in files if Path(f).name not in ZARR_META]
        sharded = [a for a in arrays if _sharded(root / a)]
        if op == "shard-index" and not sharded:
            op = "value"
        if op in ("flip", "truncate", "extend", "delete"):
            target = str(rng.choice(meta if rng.random() < 0.3 else chunks))
            return {
                "op": op,
                "file": target,
                **_byte_params(rng, op, (root / target).stat().st_size),
            }
        if op == "json":
            return {"op": op, "file": str(rng.choice(meta)), "draw": int(rng.integers(2**31))}
        if op == "shard-index":
            array = str(rng.choice(sharded))
            shard = str(rng.choice(_chunk_files(root, array)))
            return {"op": op, "array": array, "file": shard, "draw": int(rng.integers(2**31))}
        recodable = [a for a in arrays if _recodable(root / a)]
        if op in ("short", "long") and recodable:
            array = str(rng.choice(recodable))
            files = _chunk_files(root, array)
            if files:
                return {
                    "op": op,
                    "array": array,
                    "file": str(rng.choice(files)),
                    "bytes": int(rng.choice([1, 3, 8, 64])),
                }
            op = "value"
        return {"op": "value", "array": str(rng.choice(arrays)), "draw": int(rng.integers(2**31))}
    size = root.stat().st_size
    if op in ("flip", "truncate"):
        params = _byte_params(rng, op, size)
        if op == "flip" and rng.random() < 0.5:  # inside a chunk: past the checksum's reach?
            span = _h5_chunk_span(root, arrays, rng)
            if span is not None:
                params["offset"] = [int(span[0] + rng.integers(span[1])) for _ in params["offset"]]
        return {"op": op, "file": "", **params}
    if op == "json":
        return {"op": op, "draw": int(rng.integers(2**31))}
    if op in ("short", "long"):
        chunked = [a for a in arrays if _h5_chunked(root, a)]
        if chunked:
            return {
                "op": op,
                "array": str(rng.choice(chunked)),
                "draw": int(rng.integers(2**31)),
                "bytes": int(rng.choice([1, 3, 8, 64])),
            }
    return {"op": "value", "array": str(rng.choice(arrays)), "draw": int(rng.integers(2**31))}


def _pick(rng: np.random.Generator, options: Any) -> Any:
    """One of ``options``, as drawn (Python numbers kept: no numpy array that overflows)."""
    return list(options)[int(rng.integers(len(options)))]


def _byte_params(rng: np.random.Generator, op: str, size: int) -> dict[str, Any]:
    if op == "flip":
        n = int(rng.integers(1, 4))
        return {
            "offset": [int(rng.integers(max(size, 1))) for _ in range(n)],
            "xor": [int(rng.integers(1, 256)) for _ in range(n)],
        }
    if op == "truncate":
        return {"size": int(rng.integers(max(size, 1)))}
    if op == "extend":
        return {"bytes": int(rng.choice([1, 4, 64])), "fill": int(rng.integers(256))}
    return {}


def _sharded(array: Path) -> bool:
    meta = array / "zarr.json"
    if not meta.exists():
        return False
    codecs = json.loads(meta.read_text()).get("codecs", [])
    return any(c.get("name") == "sharding_indexed" for c in codecs)


_RECODED = {"bytes", "transpose", "blosc", "zstd", "gzip", "crc32c", "sharding_indexed"}


def _recodable(array: Path) -> bool:
    """Whether :func:`_recode` can re-encode the chunks of ``array`` (numbers, through the
    codecs it knows; not strings' ``vlen-utf8``)."""
    if (array / ".zarray").exists():
        meta = json.loads((array / ".zarray").read_text())
        compressor = (meta.get("compressor") or {}).get("id")
        return "O" not in str(meta["dtype"]) and not meta.get("filters") and compressor in (
            None, "blosc", "zstd", "gzip", "zlib")  # fmt: skip
    meta = json.loads((array / "zarr.json").read_text())
    names = {c["name"] for c in meta.get("codecs", [])}
    for c in meta.get("codecs", []):
        if c["name"] == "sharding_indexed":
            names |= {i["name"] for i in c["configuration"]["codecs"]}
    return isinstance(meta.get("data_type"), str) and names <= _RECODED and (
        meta["data_type"] not in ("string", "bytes"))  # fmt: skip


def _chunk_files(root: Path, array: str) -> list[str]:
    folder = root / array
    return sorted(
        str(p.relative_to(root))
        for p in folder.rglob("*")
        if p.is_file()
        and p.name not in ZARR_META
        and p.parent.name != "__pycache__"
        and not (p.parent != folder and (p.parent / "zarr.json").exists())
    )


def _h5_chunked(path: Path, name: str) -> bool:
    import h5py

    with h5py.File(path, "r") as f:
        d = f[name]
        return d.chunks is not None and d.size > 0 and d.id.get_num_chunks() > 0


def _h5_chunk_span(path: Path, arrays: list[str], rng: np.random.Generator) -> Any:
    import h5py

    chunked = [a for a in arrays if _h5_chunked(path, a)]
    if not chunked:
        return None
    with h5py.File(path, "r") as f:
        d = f[str(rng.choice(chunked))]
        info = d.id.get_chunk_info(int(rng.integers(d.id.get_num_chunks())))
        return int(info.byte_offset), max(int(info.size), 1)


# -- apply --------------------------------------------------------------------------------


def apply(root: Path, layout: str, m: dict[str, Any]) -> None:
    """Perform mutation ``m`` (from :func:`plan`) on the store at ``root``."""
    op = m["op"]
    target = root / m["file"] if m.get("file") else root
    if layout == "h5":
        import hdf5plugin  # noqa: F401  # chunkio's HDF5 filters (LZ4), for reads and writes
    if op == "flip":
        with open(target, "r+b") as fh:
            for offset, xor in zip(m["offset"], m["xor"], strict=True):
                fh.seek(offset)
                byte = fh.read(1)
                if byte:
                    fh.seek(offset)
                    fh.write(bytes([byte[0] ^ xor]))
    elif op == "truncate":
        os.truncate(target, m["size"])
    elif op == "extend":
        with open(target, "ab") as fh:
            fh.write(bytes([m["fill"]]) * m["bytes"])
    elif op == "delete":
        target.unlink()
    elif op == "json":
        if layout == "zarr":
            doc = json.loads(target.read_text())
            target.write_text(json.dumps(hostile_json(doc, np.random.default_rng(m["draw"]))))
        else:
            _h5_attr(root, np.random.default_rng(m["draw"]))
    elif op == "value":
        rng = np.random.default_rng(m["draw"])
        if layout == "zarr":
            import zarr

            _set_value(zarr.open_array(root / m["array"], mode="r+"), rng)
        else:
            import h5py

            with h5py.File(root, "r+") as f:
                _set_value(f[m["array"]], rng)
    elif op in ("short", "long"):
        from fuzz_recode import rechunk_h5, rechunk_zarr

        delta = m["bytes"] if op == "long" else -m["bytes"]
        if layout == "zarr":
            rechunk_zarr(root, m["array"], target, delta)
        else:
            rechunk_h5(root, m["array"], np.random.default_rng(m["draw"]), delta)
    elif op == "shard-index":
        from fuzz_recode import shard_index

        shard_index(root / m["array"], target, np.random.default_rng(m["draw"]))
    else:
        raise ValueError(f"unknown mutation {op!r}")


def hostile_json(doc: Any, rng: np.random.Generator) -> Any:
    """``doc`` with one leaf (or one key) replaced by a hostile value.

    >>> hostile_json({"shape": [4]}, np.random.default_rng(0)) != {"shape": [4]}
    True
    """
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, at: tuple[Any, ...]) -> None:
        paths.append(at)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*at, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*at, i))

    walk(doc, ())
    at = paths[int(rng.integers(1, len(paths)))] if len(paths) > 1 else ()
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    old = parent[at[-1]] if at else doc
    new = _hostile_leaf(old, rng)
    if not at:
        return new
    if new is _DROP:
        del parent[at[-1]]
    else:
        parent[at[-1]] = new
    return doc


_DROP = object()


def _hostile_leaf(old: Any, rng: np.random.Generator) -> Any:
    if rng.random() < 0.1:
        return _DROP
    if isinstance(old, bool):
        return not old
    if isinstance(old, int):
        return _pick(rng, [*HOSTILE, old + 1, old - 1, old * 2])
    if isinstance(old, float):
        return _pick(rng, [0.0, -1.0, 1e300, old * 2])
    if isinstance(old, str):
        return _pick(rng, ["", "../x", "<i8", "|u1", "<f8", "zstd", "x" * 3, old[::-1]])
    if isinstance(old, list):
        choice = int(rng.integers(4))
        return (
            []
            if choice == 0
            else old[:-1]
            if choice == 1
            else [*old, 0]
            if choice == 2
            else [2**40 for _ in old]
        )
    if old is None:
        return _pick(rng, HOSTILE)
    if isinstance(old, dict) and old:
        copy = dict(old)
        copy.pop(sorted(copy)[int(rng.integers(len(copy)))])
        return copy
    return 0


def _set_value(array: Any, rng: np.random.Generator) -> None:
    """One element of ``array`` set to a hostile value (cast as numpy casts), or two swapped."""
    if array.size == 0 or array.ndim == 0:
        return
    flat = [int(rng.integers(s)) for s in array.shape]
    if rng.random() < 0.25 and array.shape[0] > 1:  # out of order: two rows swapped
        i, j = sorted(rng.choice(array.shape[0], 2, replace=False).tolist())
        a, b = np.asarray(array[i]), np.asarray(array[j])
        if not np.array_equal(a, b):
            array[i], array[j] = b, a
            return
    dtype = np.dtype(array.dtype)
    if dtype.kind in "iub":
        n = int(array.shape[0])
        value: Any = _pick(rng, [*HOSTILE, n, n + 1, -n])
    elif dtype.kind == "f":
        value = float(rng.choice([np.nan, np.inf, -1.0, 1e30, 0.0]))
    else:
        return
    with np.errstate(all="ignore"):
        array[tuple(flat)] = np.array(value).astype(dtype)


def _h5_attr(path: Path, rng: np.random.Generator) -> None:
    """A hostile value in one attribute of any object of the file (a JSON string attribute
    such as chunkio's gets one of its fields changed)."""
    import h5py

    with h5py.File(path, "r+") as f:
        found: list[tuple[str, str]] = [("/", k) for k in f.attrs]
        f.visititems(lambda n, o: found.extend((n, k) for k in o.attrs))
        if not found:
            return
        obj_name, key = found[int(rng.integers(len(found)))]
        obj = f[obj_name]
        old = obj.attrs[key]
        if isinstance(old, bytes | str):
            text = old.decode() if isinstance(old, bytes) else old
            try:
                new: Any = json.dumps(hostile_json(json.loads(text), rng))
            except ValueError:  # a plain string (anndata's encoding-type)
                new = str(_hostile_leaf(text, rng)) if rng.random() < 0.8 else "csc_matrix"
            obj.attrs[key] = new
        else:
            a = np.array(old)
            if a.dtype.kind in "iuf" and a.size:
                a = a.copy().reshape(-1)
                a[int(rng.integers(a.size))] = np.array(_pick(rng, HOSTILE)).astype(a.dtype)
                obj.attrs[key] = a.reshape(np.shape(old))
            else:
                del obj.attrs[key]
