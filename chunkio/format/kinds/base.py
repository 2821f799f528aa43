"""What every field kind declares: its arrays by role, its rules, its stored arrays' checks.

A kind is one object (a module of this package each): :class:`Kind` says what it may be
asked; :class:`ArrayRoles` names a field's arrays by what they hold, so that no caller counts
positions in a list whose order changes with the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from ...errors import FormatError
from ...util.messages import listing

__all__ = ["ArrayRoles", "Arrays", "FieldLike", "Kind", "check_flat", "check_per_sample"]

#: stored arrays as a dataset holds them: name -> (shape, dtype, chunks)
Arrays = Mapping[str, tuple[tuple[int, ...], np.dtype[Any], tuple[int, ...]]]

#: the roles an array can have, in the order a field lists its arrays
ROLES = ("values", "bytes", "indices", "offsets", "spans", "shapes")


class FieldLike(Protocol):
    """What a kind reads of a field (:class:`chunkio.format.layout.FieldInfo`)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def sample_shape(self) -> tuple[int, ...] | None: ...
    @property
    def encoding(self) -> str | None: ...
    @property
    def array(self) -> str | None: ...


class ArrayRoles:
    """The stored arrays of one field, by role.

    ``values``: the elements (a dense field's one array, a ragged or sparse field's flat
    values); ``bytes``: an encoded field's encoded images; ``indices``: a sparse field's
    columns, beside its values; ``offsets``: where each sample's values start (N + 1);
    ``spans``: each encoded sample's ``[start, stop)`` in the bytes; ``shapes``: each
    sample's shape. Asking for a role the field's kind has not is a
    :class:`~chunkio.errors.FormatError` naming the field.

    >>> roles = ArrayRoles("x", "ragged", values="x__values", offsets="x__offsets")
    >>> roles.offsets, roles.data, roles.all
    ('x__offsets', 'x__values', ('x__values', 'x__offsets'))
    >>> roles.spans
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: ragged field 'x' has no spans array; its arrays: values, offsets
    """

    __slots__ = ("_roles", "field", "kind")

    def __init__(self, field: str, kind: str, **roles: str) -> None:
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise TypeError(f"array roles are {list(ROLES)}; got {sorted(unknown)}")
        self.field, self.kind = field, kind
        self._roles = {r: roles[r] for r in ROLES if r in roles}

    def _role(self, role: str) -> str:
        try:
            return self._roles[role]
        except KeyError:
            raise FormatError(
                f"{self.kind} field {self.field!r} has no {role} array; its arrays: "
                f"{listing(list(self._roles), show=str, brackets=False)}"
            ) from None

    def has(self, role: str) -> bool:
        return role in self._roles

    @property
    def values(self) -> str:
        return self._role("values")

    @property
    def bytes(self) -> str:
        return self._role("bytes")

    @property
    def indices(self) -> str:
        return self._role("indices")

    @property
    def offsets(self) -> str:
        return self._role("offsets")

    @property
    def spans(self) -> str:
        return self._role("spans")

    @property
    def shapes(self) -> str:
        return self._role("shapes")

    @property
    def data(self) -> str:
        """The array the samples' elements are in: the values, or an encoded field's bytes."""
        return self._roles.get("values") or self._role("bytes")

    @property
    def locator(self) -> str:
        """Where each sample lies in the flat arrays: the offsets, or an encoded field's spans."""
        return self._roles.get("offsets") or self._role("spans")

    @property
    def flat(self) -> tuple[str, ...]:
        """The arrays chunked alike along the flat element axis (values or bytes, and a sparse
        field's columns); none for a field stored one row per sample."""
        if not (self.has("offsets") or self.has("spans")):
            return ()
        return tuple(self._roles[r] for r in ("values", "bytes", "indices") if r in self._roles)

    @property
    def all(self) -> tuple[str, ...]:
        """Every array, in the order the field lists them (:meth:`FieldInfo.array_names`)."""
        return tuple(self._roles.values())

    def __repr__(self) -> str:
        return f"ArrayRoles({self.field!r}, {self.kind!r}, {self._roles})"


_BYTES = np.dtype(np.uint8)


@dataclass(frozen=True)
class _Stored:
    """A field as a dataset's attributes name it: all its stored arrays' names need."""

    name: str
    kind: str
    dtype: np.dtype[Any] = _BYTES
    sample_shape: tuple[int, ...] | None = None
    encoding: str | None = None
    array: str | None = None


class Kind:
    """One field kind. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    #: written in a dataset's attributes (window and column fields are made on open)
    stored: ClassVar[bool] = True
    #: a sample is a run of flat arrays found through offsets or spans (ragged, encoded,
    #: sparse): a source reports every sample's shape before its blocks (``ragged_shapes``),
    #: blocks carry one array (or CSR row) per sample, and the writer plans where each run goes
    flat: ClassVar[bool] = False
    #: each sample is one row of one array, stored as it reads (dense, column)
    one_row: ClassVar[bool] = False
    #: samples are rows, or steps of rows, of plain numeric arrays (the field's
    #: ``array_names()``) read as stored (dense, window): CF decoding and statistics apply
    plain_arrays: ClassVar[bool] = False
    #: a batch of it is one array ``(B, *sample_shape)`` of its dtype (dense, window, column)
    one_array_batches: ClassVar[bool] = False
    #: window fields may step over it (dense)
    window_source: ClassVar[bool] = False
    #: reading it needs sizes its arrays hold, not the attributes (a sparse field's values per
    #: chunk): it is described from them when the dataset opens
    sized_by_arrays: ClassVar[bool] = False
    #: its array is read whole when the dataset opens (column): its chunks order nothing
    read_whole: ClassVar[bool] = False
    #: whether the samples' ``sample_shape`` must be given ("one"), never is ("none"), or is
    #: given when every sample shares it ("any")
    sample_shape: ClassVar[str] = "one"

    def roles(self, info: FieldLike) -> ArrayRoles:
        raise NotImplementedError

    def stored_roles(self, name: str) -> ArrayRoles:
        """The arrays a chunkio dataset stores its field ``name`` of this kind in, by role
        (what its attributes declare is enough)."""
        return self.roles(_Stored(name, self.name))

    def check(self, info: FieldLike) -> None:
        """Raise a :class:`~chunkio.errors.FormatError` unless ``info`` is a field of this kind."""
        if self.sample_shape == "one" and info.sample_shape is None:
            raise FormatError(f"field {info.name!r}: {self.name} fields need a sample_shape")
        if self.sample_shape == "none" and info.sample_shape is not None:
            raise FormatError(f"field {info.name!r}: {self.name} fields have no sample_shape")
        if info.encoding is not None:
            raise FormatError(
                f"field {info.name!r}: an encoding goes with kind 'encoded' only; got kind "
                f"{self.name!r} and encoding {info.encoding!r}"
            )

    def check_stored(self, name: str, sample_shape: tuple[int, ...] | None, encoding: str) -> None:
        """Raise a :class:`~chunkio.errors.FormatError` unless a dataset may store field
        ``name`` of this kind with samples of ``sample_shape`` (and ``encoding``)."""
        if not self.stored:
            raise FormatError(f"field {name!r}: kind {self.name!r} is not a stored kind")

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        """Raise unless the stored ``arrays`` hold field ``info`` of a dataset of ``n``
        samples, ``spc`` per chunk (``where``: the dataset). Each role's array is there."""
        raise NotImplementedError


def check_flat(arrays: Arrays, name: str, info: FieldLike, where: str) -> None:
    """The flat array of a ragged or encoded field: 1-D (each sample a run of it)."""
    if len(arrays[name][0]) != 1:
        raise FormatError(
            f"{where}: array {name!r} of {info.kind} field {info.name!r} must be 1-D; got "
            f"{tuple(arrays[name][0])}"
        )


def check_per_sample(arrays: Arrays, name: str, width: int, n: int, spc: int, where: str) -> None:
    """An (n, width) integer array of one row per sample, ``spc`` rows per chunk."""
    shape, dtype, chunks = arrays[name]
    if len(shape) != 2 or shape[0] != n or shape[1] != width or dtype.kind not in "iu":
        raise FormatError(
            f"{where}: array {name!r} must be ({n}, {width}) integers; got {tuple(shape)} {dtype}"
        )
    if n and chunks[0] != spc:
        raise FormatError(
            f"{where}: array {name!r} must hold {spc} samples per chunk; got {chunks[0]}"
        )
