"""What reading a (possibly corrupted) store must give, decided without chunkio's readers.

:func:`reference` reads the store's arrays with zarr-python, h5py, scipy, Pillow or xarray,
applies the format's validity rules (chunkio's layout attribute matches the arrays; a ragged
field's offsets start at 0, never decrease, stay inside the values and agree with the shapes;
a sparse row's columns lie in ``[0, n_cols)``; an encoded image decodes to its stored shape;
AnnData's ``indptr``/``indices`` pass scipy's full check and its codes index the categories),
and returns the rows a correct reader returns, as :data:`Rows`: output key -> one array per
row. ``None``: the store is invalid (or unreadable) by those rules, so a correct reader raises,
or returns the rows it can still prove (the pristine ones).

Output keys follow :func:`rows_of`: a dict batch by field name, a tuple batch by position. A
seeded crop of a changed image is the one thing no reader here decides (a crop kind's
``image`` rows are left empty): the runner holds it to the same read through chunkio's plain
decoders, which decode the whole image and crop it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

Rows = dict[str, list[np.ndarray[Any, Any]]]
#: arrays larger than this are a mutated shape: the stores here hold a few thousand values
MAX_ELEMENTS = 10**7


class Invalid(Exception):
    """The store breaks a validity rule (the message says which)."""


def rows_of(batch: Any, into: Rows | None = None) -> Rows:
    """A collated batch (dict or tuple of tensors, lists of tensors for ragged fields) as
    :data:`Rows`, appended to ``into``."""
    import torch

    into = {} if into is None else into
    items = (
        batch.items()
        if isinstance(batch, dict)
        else enumerate(batch if isinstance(batch, tuple | list) else (batch,))
    )
    for key, value in items:
        out = into.setdefault(str(key), [])
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                value = value.to_dense()
            out.extend(np.array(r) for r in value.cpu().numpy())
        else:
            out.extend(
                np.array(v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for v in value
            )
    return into


def same(a: Rows | None, b: Rows | None, skip: tuple[str, ...] = ()) -> bool:
    """Whether ``a`` and ``b`` hold equal rows (values, shapes; NaN equal to NaN)."""
    if a is None or b is None or set(a) != set(b):
        return False
    for key in a:
        if key in skip:
            continue
        if len(a[key]) != len(b[key]):
            return False
        for x, y in zip(a[key], b[key], strict=True):
            if x.shape != y.shape:
                return False
            nan = x.dtype.kind in "fc" and y.dtype.kind in "fc"
            if not np.array_equal(x, y, equal_nan=nan):
                return False
    return True


def first_difference(a: Rows, b: Rows) -> str:
    """Where rows ``a`` first differ from ``b``: ``"key[row]"``, for the record of a wrong case."""
    if set(a) != set(b):
        return f"keys {sorted(a)} vs {sorted(b)}"
    for key in sorted(a):
        if len(a[key]) != len(b[key]):
            return f"{key}: {len(a[key])} rows vs {len(b[key])}"
        for i, (x, y) in enumerate(zip(a[key], b[key], strict=True)):
            if not same({key: [x]}, {key: [y]}):
                if x.shape != y.shape:
                    return f"{key}[{i}]: shape {x.shape} vs {y.shape}"
                at = int(np.flatnonzero(~((x == y) | ((x != x) & (y != y))))[0])
                return (
                    f"{key}[{i}] element {at}: {x.ravel()[at].item()!r} vs {y.ravel()[at].item()!r}"
                )
    return ""


# -- reading arrays as the other tools do ------------------------------------------------------


class Store:
    """Arrays and attributes of a Zarr store (zarr-python) or an HDF5 file (h5py)."""

    def __init__(self, path: Path, layout: str) -> None:
        self.path, self.layout = path, layout
        if layout == "h5":
            import h5py
            import hdf5plugin  # noqa: F401  # the filters chunkio writes (LZ4), as chunkio does

            self.file: Any = h5py.File(path, "r")

    def close(self) -> None:
        if self.layout == "h5":
            self.file.close()

    def array(self, name: str) -> np.ndarray[Any, Any]:
        if self.layout == "h5":
            node: Any = self.file[name]
        else:
            import zarr

            node = zarr.open_array(self.path / name, mode="r")
        size = int(np.prod(node.shape, dtype=object))
        if size > MAX_ELEMENTS:  # a hostile shape: zarr-python would walk every chunk of it
            raise Invalid(f"{name}: shape {node.shape}")
        return np.asarray(node[()] if self.layout == "h5" else node[...])

    def shape(self, name: str) -> tuple[int, ...]:
        if self.layout == "h5":
            return tuple(self.file[name].shape)
        import zarr

        return tuple(zarr.open_array(self.path / name, mode="r").shape)

    def attrs(self, name: str = "") -> dict[str, Any]:
        if self.layout == "h5":
            return dict((self.file[name] if name else self.file).attrs)
        import zarr

        node = zarr.open(self.path / name if name else self.path, mode="r")
        return dict(node.attrs)


def _layout(store: Store) -> dict[str, Any]:
    """chunkio's layout attribute, checked as the format says (complete, version 1)."""
    attrs = store.attrs()
    raw = attrs.get("chunkio")
    doc = json.loads(raw) if isinstance(raw, str | bytes) else raw
    if not isinstance(doc, dict) or doc.get("format") != "chunkio" or doc.get("version") != 1:
        raise Invalid(f"layout attribute {doc!r}")
    if attrs.get("chunkio_complete") is not True and not (
        isinstance(attrs.get("chunkio_complete"), np.bool_ | np.ndarray)
        and bool(np.all(attrs["chunkio_complete"]))
    ):
        raise Invalid("not complete")
    n, spc = doc.get("num_samples"), doc.get("samples_per_chunk")
    if not isinstance(n, int) or not isinstance(spc, int) or n < 0 or spc < 1:
        raise Invalid(f"num_samples {n!r}, samples_per_chunk {spc!r}")
    return doc


def _dense(store: Store, name: str, info: dict[str, Any], n: int) -> list[np.ndarray[Any, Any]]:
    values = store.array(name)
    shape = tuple(info["sample_shape"])
    if values.shape != (n, *shape) or values.dtype != np.dtype(info["dtype"]):
        raise Invalid(f"{name}: {values.shape} {values.dtype} for {n} x {shape} {info['dtype']}")
    return list(values)


def _ragged_spans(offsets: np.ndarray[Any, Any], total: int, n: int) -> np.ndarray[Any, Any]:
    if offsets.shape != (n + 1,) or (n and (offsets[0] != 0 or offsets[-1] > total)):
        raise Invalid(f"offsets {offsets.shape} for {n} rows over {total} values")
    if np.any(np.diff(offsets) < 0):
        raise Invalid("offsets decrease")
    return offsets


def _ragged(store: Store, name: str, info: dict[str, Any], n: int) -> list[np.ndarray[Any, Any]]:
    values = store.array(f"{name}__values")
    offsets = _ragged_spans(store.array(f"{name}__offsets").astype(np.int64), values.size, n)
    shapes = store.array(f"{name}__shapes")
    if shapes.shape[0] != n or np.any(shapes < 0):
        raise Invalid("shapes")
    out = []
    for i in range(n):
        size = int(np.prod(shapes[i]))
        if offsets[i] + size > offsets[i + 1]:  # rows may leave a gap (chunk-aligned starts)
            raise Invalid(f"row {i}: shape {shapes[i]} past the next row's offset")
        out.append(values[offsets[i] : offsets[i] + size].reshape(shapes[i]))
    return out


def _sparse(store: Store, name: str, info: dict[str, Any], n: int) -> list[np.ndarray[Any, Any]]:
    values = store.array(f"{name}__values")
    indices = store.array(f"{name}__indices")
    offsets = _ragged_spans(store.array(f"{name}__offsets").astype(np.int64), values.size, n)
    counts = store.array(f"{name}__shapes").reshape(-1)
    cols = int(info["sample_shape"][0])
    if indices.shape != values.shape or counts.shape != (n,):
        raise Invalid("indices / counts sizes")
    if np.any(counts < 0) or np.any(offsets[:-1] + counts > offsets[1:]):
        raise Invalid("counts past the next row's offset")
    take = np.concatenate(
        [np.arange(o, o + c) for o, c in zip(offsets[:-1], counts, strict=True)] or [[]]
    )
    take = take.astype(np.int64)
    cols_of = indices[take]
    if cols_of.size and (cols_of.min() < 0 or cols_of.max() >= cols):
        raise Invalid("column out of range")
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return _csr_rows(values[take], cols_of, indptr, (n, cols), np.dtype(info["dtype"]))


def _csr_rows(data: Any, indices: Any, indptr: Any, shape: tuple[int, int], dtype: Any) -> Any:
    import scipy.sparse as sp

    end = int(indptr[-1]) if len(indptr) else 0
    m = sp.csr_matrix((data[:end], indices[:end], indptr), shape=shape)
    try:
        m.check_format(full_check=True)
    except ValueError as err:
        raise Invalid(str(err)) from err
    return list(m.toarray().astype(dtype, copy=False))


def _encoded(store: Store, name: str, info: dict[str, Any], n: int, doc: dict[str, Any]) -> Any:
    blob = store.array(f"{name}__bytes")
    spans = store.array(f"{name}__spans")
    shapes = store.array(f"{name}__shapes")
    if spans.shape != (n, 2) or shapes.shape[0] != n:
        raise Invalid("spans / shapes sizes")
    encoding = info.get("encoding") or doc.get("extra", {}).get("source", {}).get("encoding")
    out = []
    for i in range(n):
        start, stop = (int(x) for x in spans[i])
        if not 0 <= start <= stop <= blob.size:
            raise Invalid(f"span {start, stop} outside {blob.size} bytes")
        pixels = _decode(bytes(blob[start:stop]), str(encoding), tuple(int(s) for s in shapes[i]))
        if pixels.shape != tuple(shapes[i]):
            raise Invalid(f"row {i}: decoded {pixels.shape}, stored {tuple(shapes[i])}")
        out.append(pixels)
    return out


def _decode(data: bytes, encoding: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """One image's pixels ``(C, H, W)``: Pillow, or chunkio's NumPy yuv420 decoder (the
    reference the compiled one is held to)."""
    if encoding == "yuv420":
        from chunkio.images import yuv

        saved = yuv._yuv
        yuv._yuv = None  # type: ignore[assignment]
        try:
            out = np.empty((shape[1], shape[2], shape[0]), np.uint8)
            yuv.decode_box(data, out)
        except Exception as err:
            raise Invalid(f"yuv420: {err!r}") from err
        finally:
            yuv._yuv = saved
        return np.ascontiguousarray(out.transpose(2, 0, 1))
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            pixels = np.asarray(im.convert("RGB") if im.mode not in ("RGB", "L") else im)
    except Exception as err:  # Pillow's refusals: OSError, SyntaxError, ValueError...
        raise Invalid(f"Pillow: {err!r}") from err
    return pixels[None] if pixels.ndim == 2 else np.ascontiguousarray(pixels.transpose(2, 0, 1))


def _native(store: Store, crop: bool) -> Rows:
    doc = _layout(store)
    n = doc["num_samples"]
    rows: Rows = {}
    for name, info in doc["fields"].items():
        kind = info.get("kind", "dense")
        if kind == "dense":
            rows[name] = _dense(store, name, info, n)
        elif kind == "ragged":
            rows[name] = _ragged(store, name, info, n)
        elif kind == "sparse":
            rows[name] = _sparse(store, name, info, n)
        elif kind == "encoded":
            rows[name] = [] if crop else _encoded(store, name, info, n, doc)
        else:
            raise Invalid(f"field kind {kind!r}")
    lengths = {len(v) for k, v in rows.items() if not (crop and k == "image")}
    if len(lengths) > 1:
        raise Invalid(f"fields of different lengths {lengths}")
    return rows


def _anndata(store: Store) -> Rows:
    attrs = store.attrs("X")
    if str(attrs.get("encoding-type")) != "csr_matrix":
        raise Invalid(f"X encoding {attrs.get('encoding-type')!r}")
    shape = tuple(int(s) for s in np.asarray(attrs.get("shape")).reshape(-1))
    if len(shape) != 2 or min(shape) < 0:
        raise Invalid(f"shape {shape}")
    data, indices = store.array("X/data"), store.array("X/indices")
    indptr = store.array("X/indptr")
    if indptr.shape != (shape[0] + 1,) or (len(indptr) and indptr[0] != 0):
        raise Invalid("indptr")
    if indptr[-1] > min(data.size, indices.size) or np.any(np.diff(indptr.astype(np.int64)) < 0):
        raise Invalid("indptr past the data or decreasing")
    x = _csr_rows(data, indices, indptr, (shape[0], shape[1]), data.dtype)
    codes = store.array("obs/cell/codes")
    categories = store.array("obs/cell/categories")
    if codes.shape != (shape[0],) or np.any((codes < -1) | (codes >= len(categories))):
        raise Invalid("codes")
    return {"0": x, "1": list(codes)}


def _foreign(store: Store) -> Rows:
    images, labels = store.array("train/images"), store.array("train/labels")
    if images.shape[0] != labels.shape[0]:
        raise Invalid(f"{images.shape[0]} images, {labels.shape[0]} labels")
    return {"0": list(images), "1": list(labels)}


def _windows(store: Store) -> Rows:
    doc = _layout(store)
    n = doc["num_samples"]
    var = {v: _dense(store, v, doc["fields"][v], n) for v in ("t2m", "u10", "v10")}
    time = _dense(store, "time", doc["fields"]["time"], n)
    anchors = range(1, n - 1)
    return {
        "0": [np.stack([np.stack([var[v][a + s] for v in var]) for s in (-1, 0)]) for a in anchors],
        "1": [np.stack([np.stack([var[v][a + 1] for v in var])]) for a in anchors],
        "2": [time[a] for a in anchors],
    }


def _cf(store: Store) -> Rows:
    """CF decoding as chunkio documents it (:mod:`chunkio.format.cf`: float32 arithmetic,
    which xarray's float64 matches to float32 precision), from zarr-python's raw values."""
    raw, time = store.array("t2m"), store.array("time")
    attrs = store.attrs("t2m")
    if raw.shape[0] != time.shape[0]:
        raise Invalid("t2m and time lengths")
    out = raw.astype(np.float32)
    if "scale_factor" in attrs:
        out *= np.float32(attrs["scale_factor"])
    if "add_offset" in attrs:
        out += np.float32(attrs["add_offset"])
    for key in ("_FillValue", "missing_value"):
        if key in attrs:
            out[raw == attrs[key]] = np.nan
    return {"0": list(out), "1": list(time)}


def reference(kind: Any, path: Path) -> tuple[Rows | None, str]:
    """The rows a correct reader returns for store kind ``kind`` (a
    :class:`~fuzz_stores.Kind`) at ``path``, or ``None`` and why the store is invalid."""
    try:
        store = Store(path, kind.layout)
        try:
            if kind.name.startswith("anndata"):
                return _anndata(store), ""
            if kind.name == "cf":
                return _cf(store), ""
            if kind.fields == "windows":
                return _windows(store), ""
            if isinstance(kind.fields, dict):
                return _foreign(store), ""
            return _native(store, kind.crop), ""
        finally:
            store.close()
    except Invalid as err:
        return None, f"invalid: {err}"
    except Exception as err:  # the reference tool refuses the bytes: invalid for it too
        return None, f"unreadable: {type(err).__name__}: {str(err)[:200]}"
