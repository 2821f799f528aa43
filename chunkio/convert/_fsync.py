"""fsync helpers: what "durably written" means before the manifest may say so.

A SIGKILL leaves the OS page cache intact; fsync is what makes the manifest's claim survive a
power cut or kernel panic as well.
"""

from __future__ import annotations

import os

from ..backends import Format

__all__ = ["fsync_path", "fsync_tree", "sync_chunks"]


def fsync_path(path: str) -> None:
    """fsync one file or directory (any process may sync data another one wrote)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str, *, finish_zarr: bool = False) -> None:
    """fsync every file and directory under ``path``, and ``path`` itself.

    ``finish_zarr`` is for a Zarr group whose chunks were synced as they were written: only
    metadata files (``zarr.json``) and directories are synced, and ``*.partial`` files are
    deleted - zarr's LocalStore writes each chunk to such a temporary file and renames it, so
    a killed writer leaves them behind.
    """
    if not os.path.isdir(path):
        fsync_path(path)
        return
    for root, _dirs, files in os.walk(path, topdown=False):
        for name in files:
            full = os.path.join(root, name)
            if not finish_zarr:
                fsync_path(full)
            elif name.endswith(".partial"):
                os.unlink(full)
            elif name == "zarr.json":
                fsync_path(full)
        fsync_path(root)


def sync_chunks(
    data_path: str, fmt: Format, arrays: tuple[str, ...], first: int, stop: int
) -> None:
    """Make chunks ``[first, stop)`` of ``arrays`` in a local dataset durable.

    Zarr chunk files (default chunk-key encoding ``c/<i>/0/...``) can be synced by any
    process: workers call this right after writing their block. An HDF5 file must first be
    flushed by its one writer; then the whole file is synced.
    """
    if fmt == "hdf5":
        fsync_path(data_path)
        return
    for name in arrays:
        chunk_root = os.path.join(data_path, name, "c")
        for chunk in range(first, stop):
            path = os.path.join(chunk_root, str(chunk))
            if os.path.exists(path):
                fsync_tree(path)
        if os.path.isdir(chunk_root):
            fsync_path(chunk_root)  # the new directory entries
