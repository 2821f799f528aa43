"""The chunkio on-disk format, identical in Zarr v3 and HDF5.

A dataset is a Zarr v3 group or an HDF5 file holding one array per *field*, all sharing axis 0
as the sample axis and the same number of samples per chunk along it. The group/root carries:

``chunkio`` (attribute, a JSON object)
    ``format`` = ``"chunkio"``, ``version`` = 1, ``num_samples``, ``samples_per_chunk``,
    ``fields`` (name -> ``{"dtype", "sample_shape", "kind"}``), ``class_names`` (list or null),
    ``extra`` (free-form JSON from the writer: source info, skipped files, ...).
``chunkio_complete`` (attribute, ``true``)
    written last, after every chunk is on disk; a dataset without it is incomplete.

A ``dense`` field is one array named like the field, shape ``(N, *sample_shape)``. A ``ragged``
field (samples of varying shape) is three arrays: ``<name>__values`` (all elements, flat),
``<name>__offsets`` (N + 1 element offsets, int64) and ``<name>__shapes`` (N x ndim, int64).
An ``encoded`` field (images stored as JPEG, PNG or WebP bytes; its ``encoding`` says which) is
``<name>__bytes`` (uint8, the encoded images), ``<name>__spans`` (N x 2 int64: each sample's
``[start, stop)`` in the bytes) and ``<name>__shapes`` (N x ndim int64: each decoded shape);
its ``dtype`` and ``sample_shape`` (``None`` if shapes differ) describe the decoded samples,
channels first like a dense image field.

A ``sparse`` field (rows of a CSR matrix, ``sample_shape == (n_cols,)``; samples read as dense
rows) is stored as a ragged field of each row's stored values, with their columns beside them:
``<name>__values`` (flat, the field's dtype), ``<name>__indices`` (flat, int32 or int64: the
column of each value, chunked like the values), ``<name>__offsets`` (N + 1 int64: where each
row's values start) and ``<name>__shapes`` (N x 1 int64: each row's number of values). Like a
ragged field's, each sample chunk's values start on a chunk boundary of the values array
(:mod:`chunkio.convert.engine.ragged`), so parallel writers never share a chunk.

A field may carry ``categories`` (a list of names: its integer values are codes into them, -1
for missing), as a categorical AnnData ``obs`` column converted by ``convert_arrays``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import (
    FormatError,
    IncompleteDatasetError,
    MissingFieldError,
    UnsafeInputError,
    UnsupportedVersionError,
)
from ..util.messages import keyword, listing
from .kinds import (
    ArrayRoles,
    Kind,
    encoded_array_names,
    kind_of,
    ragged_array_names,
    sparse_array_names,
)
from .names import validate_field_name

__all__ = [
    "ATTR_KEY",
    "COMPLETE_KEY",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LABEL_FIELDS",
    "DatasetLayout",
    "FieldInfo",
    "encoded_array_names",
    "label_field",
    "ragged_array_names",
    "sparse_array_names",
]

FORMAT_NAME = "chunkio"
FORMAT_VERSION = 1
ATTR_KEY = "chunkio"
COMPLETE_KEY = "chunkio_complete"

#: "window": steps of dense arrays around each anchor (:class:`chunkio.format.windows.WindowInfo`),
#: made when a dataset is opened with :class:`chunkio.Field` steps; "sparse": rows of a CSR
#: group (:class:`chunkio.format.sparse.SparseInfo`), stored natively too (see the module
#: docstring); "column": a member of a compound dataset
#: (:class:`chunkio.format.columns.ColumnInfo`); "window" and "column" are never stored. Each
#: kind is one module of :mod:`chunkio.format.kinds`.
FieldKind = Literal["dense", "ragged", "encoded", "window", "sparse", "column"]


@dataclass(frozen=True)
class FieldInfo:
    """One field: its element dtype, per-sample shape (``None`` if samples differ) and kind.

    ``encoding`` names the image encoding of an ``encoded`` field (``None`` otherwise).
    A field of a store chunkio did not write (:mod:`chunkio.format.foreign`) names its stored
    ``array`` (a path such as ``train/images``) and the ``rows_per_chunk`` of that array's
    chunks along the sample axis; chunkio's own fields are stored under their name, chunked
    like the dataset.
    """

    name: str
    dtype: np.dtype[Any]
    sample_shape: tuple[int, ...] | None
    kind: FieldKind = "dense"
    encoding: str | None = None
    array: str | None = None
    rows_per_chunk: int | None = None
    #: CF decoding on read (:class:`~chunkio.format.cf.CFFieldCoding`; ``dtype``: decoded)
    cf: Any = None
    #: names of the codes of a categorical field (its values index them; -1: missing)
    categories: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        validate_field_name(self.name)
        kind_of(self.kind, field=self.name).check(self)

    @property
    def sample_nbytes(self) -> int:
        """Bytes per sample (dense fields); 0 for ragged fields."""
        if self.sample_shape is None:
            return 0
        return int(np.prod(self.sample_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def kind_def(self) -> Kind:
        """The field's kind (:mod:`chunkio.format.kinds`): what it stores, what applies to it."""
        return kind_of(self.kind)

    @property
    def roles(self) -> ArrayRoles:
        """The field's stored arrays by role (``roles.values``, ``roles.offsets``, ...)."""
        return kind_of(self.kind).roles(self)

    def array_names(self) -> tuple[str, ...]:
        """Every stored array of the field (by role: :attr:`roles`)."""
        return self.roles.all

    def to_json(self) -> dict[str, Any]:
        shape = None if self.sample_shape is None else list(self.sample_shape)
        out: dict[str, Any] = {"dtype": self.dtype.str, "sample_shape": shape, "kind": self.kind}
        if self.encoding is not None:
            out["encoding"] = self.encoding
        if self.categories is not None:
            out["categories"] = list(self.categories)
        return out


@dataclass(frozen=True)
class DatasetLayout:
    """Validated format attributes of a chunkio dataset."""

    num_samples: int
    samples_per_chunk: int
    fields: tuple[FieldInfo, ...]
    class_names: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: a store chunkio did not write, read in place (:mod:`chunkio.format.foreign`): never-written
    #: chunks read as the fill value, as Zarr and HDF5 define them
    foreign: bool = False
    #: samples per chunk of the chunk-aware order where chunks differ in size (rows of a
    #: sparse matrix grouped by its data chunks); ``None``: ``samples_per_chunk`` each
    order_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.fields:
            raise FormatError("a dataset needs at least one field; got none")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise FormatError(f"field names must be unique; got {listing(names)}")
        if self.num_samples < 0 or self.samples_per_chunk < 1:
            raise FormatError(
                f"need num_samples >= 0 and samples_per_chunk >= 1; "
                f"got {self.num_samples}, {self.samples_per_chunk}"
            )

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def rows_per_chunk(self, f: FieldInfo) -> int:
        """Samples per chunk of field ``f``'s stored array."""
        return f.rows_per_chunk or self.samples_per_chunk

    def field(self, name: str, *, where: str = "") -> FieldInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise MissingFieldError(
            f"{where}: no field {name!r}; the dataset has fields {listing(self.field_names)}"
        )

    def to_attrs(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "num_samples": self.num_samples,
            "samples_per_chunk": self.samples_per_chunk,
            "fields": {f.name: f.to_json() for f in self.fields},
            "class_names": None if self.class_names is None else list(self.class_names),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_attrs(
        cls, attrs: Mapping[str, Any], *, where: str, require_complete: bool = True
    ) -> DatasetLayout:
        """Parse and validate the root attributes of a dataset at ``where``."""
        meta = attrs.get(ATTR_KEY)
        if not isinstance(meta, Mapping) or meta.get("format") != FORMAT_NAME:
            raise FormatError(
                f"{where}: not a chunkio dataset (expected attribute {ATTR_KEY!r} with "
                f"format {FORMAT_NAME!r}; got {type(meta).__name__})"
            )
        if meta.get("version") != FORMAT_VERSION:
            raise UnsupportedVersionError(
                f"{where}: chunkio format version {meta.get('version')!r} is not supported "
                f"(this chunkio reads version {FORMAT_VERSION})"
            )
        if require_complete and attrs.get(COMPLETE_KEY) is not True:
            raise IncompleteDatasetError(
                f"{where}: incomplete dataset (no {COMPLETE_KEY!r} marker): a conversion is "
                "still running or was interrupted; rerun it to resume"
            )
        try:
            fields = tuple(_parse_field(n, spec) for n, spec in dict(meta["fields"]).items())
            class_names = meta.get("class_names")
            return cls(
                num_samples=int(meta["num_samples"]),
                samples_per_chunk=int(meta["samples_per_chunk"]),
                fields=fields,
                class_names=None if class_names is None else tuple(map(str, class_names)),
                extra=dict(meta.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as err:
            if isinstance(err, UnsafeInputError):  # a field name that could escape the root
                raise UnsafeInputError(f"{where}: {err}") from err
            if isinstance(err, FormatError):
                raise FormatError(f"{where}: {err}") from err
            raise FormatError(f"{where}: malformed {ATTR_KEY!r} attribute: {err!r}") from err


#: names of a label field, in order of preference (the first the dataset has is its labels):
#: ``label`` (what chunkio's converters write), or a name users' own files give their labels
LABEL_FIELDS = ("label", "labels", "target", "targets", "y")


def label_field(layout: DatasetLayout) -> FieldInfo | None:
    """The field holding ``layout``'s labels: the first of :data:`LABEL_FIELDS` it has, if
    that one holds one integer per sample; ``None`` otherwise.

    >>> i8 = np.dtype("int64")
    >>> F = FieldInfo
    >>> label_field(DatasetLayout(4, 2, (F("x", i8, (3,)), F("y", i8, ())))).name
    'y'
    >>> label_field(DatasetLayout(4, 2, (F("x", i8, (3,)), F("labels", i8, (2,))))) is None
    True
    """
    names = [n for n in LABEL_FIELDS if n in layout.field_names]
    if not names:
        return None
    info = layout.field(names[0])
    scalar_int = info.kind_def.one_row and not info.sample_shape
    scalar_int = scalar_int and info.dtype.kind in "iu"
    return info if scalar_int else None


def _parse_field(name: str, spec: Mapping[str, Any]) -> FieldInfo:
    shape = spec["sample_shape"]
    kind = spec.get("kind", "dense")
    stored = kind_of(kind, field=name)
    categories = spec.get("categories")
    if categories is not None and not isinstance(categories, list):
        raise FormatError(f"field {name!r}: categories must be a list; got {categories!r}")
    sample_shape = None if shape is None else tuple(int(s) for s in shape)
    if sample_shape is not None and any(s < 0 for s in sample_shape):
        raise FormatError(f"field {name!r}: sample_shape must hold sizes >= 0; got {shape}")
    stored.check_stored(name, sample_shape, str(spec.get("encoding")))
    return FieldInfo(
        name=name,
        dtype=np.dtype(spec["dtype"]),
        sample_shape=sample_shape,
        kind=kind,
        encoding=spec.get("encoding"),
        categories=None if categories is None else tuple(str(c) for c in categories),
    )


def check_arrays(
    layout: DatasetLayout,
    arrays: Mapping[str, tuple[tuple[int, ...], np.dtype[Any], tuple[int, ...]]],
    *,
    where: str,
) -> None:
    """Check that the stored arrays (name -> shape, dtype, chunks) match the layout."""
    n, spc = layout.num_samples, layout.samples_per_chunk
    for f in layout.fields:
        for array in f.array_names():
            if array not in arrays:
                raise MissingFieldError(
                    f"{where}: field {f.name!r} declared but array {array!r} is missing"
                )
        kind_of(f.kind).check_arrays(f, arrays, n, spc, where)


def validate_sequence_of_names(
    fields: Sequence[str] | None, layout: DatasetLayout, where: str
) -> tuple[str, ...]:
    """Resolve a user's field selection against the layout (``None`` -> all fields)."""
    if fields is None:
        return layout.field_names
    if isinstance(fields, str):
        raise TypeError(f"fields must be a sequence of names, not a single string; got {fields!r}")
    for name in fields:
        layout.field(name, where=where)
    return tuple(fields)


def native_selection(fields: Any, where: str) -> Any:
    """A selection among a chunkio dataset's own fields: ``fields`` as a sequence of names.

    A dataset chunkio wrote names its fields itself, so a mapping (which names the arrays of
    a store chunkio did not write) can only select: ``{"x": "x"}`` is ``["x"]``; one that
    renames is refused rather than read as every field under the stored names.

    >>> native_selection({"x": "x", "y": "y"}, "d.zarr")
    ['x', 'y']
    >>> native_selection({"image": "x"}, "d.zarr")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: d.zarr is a chunkio dataset, which names its own fields: ...
    """
    if isinstance(fields, str):
        return [fields]
    if not isinstance(fields, Mapping):
        return fields
    renamed = [f"{k!r}: {v!r}" for k, v in fields.items() if k != v]
    if renamed:
        pairs = listing(renamed, show=str, brackets=False)
        raise FormatError(
            f"{where} is a chunkio dataset, which names its own fields: fields selects among "
            f"them and cannot rename them ({pairs}); select with a list, "
            f"{keyword('fields', list(fields.values()))}"
        )
    return list(fields.values())


def check_among(names: Sequence[str], fields: Sequence[str], where: str) -> None:
    """Raise :class:`MissingFieldError` naming the ``names`` that are not among the dataset's
    ``fields`` (``where``: the dataset and the call)."""
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise MissingFieldError(
            f"{where}: {listing(unknown)} not among the dataset's fields {listing(fields)}"
        )
