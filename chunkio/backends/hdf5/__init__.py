"""The HDF5 backend (private: use it through :mod:`chunkio.backends`).

:mod:`.backend` (:class:`HDF5Reader` over h5py), :mod:`.raw` (raw chunk reads by rows for the
filter pipelines chunkio decodes), :mod:`.grid` (the same by boxes of any chunk grid),
:mod:`.storage` (where an array's chunks lie), :mod:`.remote` (HDF5 files on an object store,
read in place), :mod:`.checks` (what an array must pass before it is read), :mod:`.described`
(a local file as one process described it, read by the others without h5py),
:mod:`.registry` (every reader, closed before a fork), :mod:`.attrs` (attributes as Python)
and :mod:`.write` (:class:`HDF5Writer`). Modules here may import :mod:`chunkio.util`,
:mod:`chunkio.errors`, :mod:`chunkio.remote` and the rest of :mod:`chunkio.backends` (its
protocol, codec table and checksums), never the Zarr backend, the read side, sampling or
conversion.
"""

from __future__ import annotations
