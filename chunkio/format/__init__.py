"""The on-disk format: what a dataset is, whoever wrote it.

:mod:`.layout` (field arrays, the sample axis, format attributes and their validation),
:mod:`.kinds` (each field kind in a module of its own: its arrays by role, its rules),
:mod:`.names` (names that become paths), :mod:`.grid` (the chunk grid along the sample axis),
:mod:`.foreign` (stores chunkio did not write, read in place: a layout from the arrays
themselves), :mod:`.volume_layout` and :mod:`.label_index` (how volumes and their per-chunk
label index are stored), :mod:`.store_layout` (what a store holds, decided in one place, and
the windows opened on it) and :mod:`.windows` (the window spec: fields with steps around each
anchor, and which anchors are valid), :mod:`.sparse` (CSR groups: AnnData and h5sparse
matrices) and :mod:`.columns` (dataframe columns: categoricals, legacy compound tables, and
the groups a field may name). Modules here may import :mod:`chunkio.util`,
:mod:`chunkio.errors` and the backend protocol (:mod:`chunkio.backends`,
:mod:`chunkio.backends.base`), never a backend implementation (``backends.zarr``,
``backends.hdf5``), the read side, sampling, conversion or diagnostics."""

from __future__ import annotations
