"""Field kinds: what each kind of field stores and how its stored arrays are checked.

One module per kind (:mod:`.dense`, :mod:`.ragged`, :mod:`.encoded`, :mod:`.sparse`,
:mod:`.window`, :mod:`.column`), each one :class:`~.base.Kind` object that names its arrays
by role (:class:`~.base.ArrayRoles`: ``values``, ``bytes``, ``indices``, ``offsets``,
``spans``, ``shapes``), validates a field of its kind and checks its stored arrays, and
declares what the rest of the package asks of it (``stored``, ``flat``). :data:`KINDS` is the
registry: adding a kind is one module here and one entry there, beside its reader in
:data:`chunkio.read.core.FIELD_KINDS` and its writer in
:data:`chunkio.convert.engine.kinds.WRITE_KINDS`. Nothing outside these registries branches
on a kind's name (``tests/architecture/test_field_kinds.py``). Modules here may import
:mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.backends` and the rest of
:mod:`chunkio.format` but :mod:`chunkio.format.layout` (which imports them), never the read
side, sampling, conversion or diagnostics.
"""

from __future__ import annotations

from ...errors import FormatError
from .base import ArrayRoles, Kind
from .column import COLUMN
from .dense import DENSE
from .encoded import ENCODED, FIELD_ENCODINGS, encoded_array_names
from .ragged import RAGGED, ragged_array_names
from .sparse import SPARSE, sparse_array_names
from .window import WINDOW

__all__ = [
    "FIELD_ENCODINGS",
    "KINDS",
    "ArrayRoles",
    "Kind",
    "encoded_array_names",
    "kind_of",
    "ragged_array_names",
    "sparse_array_names",
]

#: field kind name -> its definition
KINDS: dict[str, Kind] = {k.name: k for k in (DENSE, RAGGED, ENCODED, WINDOW, SPARSE, COLUMN)}


def kind_of(name: str, *, field: str = "") -> Kind:
    """The kind called ``name`` (``field``: the field that has it, for the message).

    >>> kind_of("ragged").flat, kind_of("dense").flat
    (True, False)
    """
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise FormatError(
            f"field {field!r}: kind must be one of {list(KINDS)}; got {name!r}"
        ) from None
