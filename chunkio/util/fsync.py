"""fsync helpers: what "durably written" means before the manifest may say so.

A SIGKILL leaves the OS page cache intact; fsync is what makes the manifest's claim survive a
power cut or kernel panic as well.
"""

from __future__ import annotations

import os

__all__ = ["fsync_path", "fsync_tree"]


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
    deleted - zarr's LocalStore and chunkio's own chunk writer write each chunk to such a
    temporary file and rename it, so a killed writer leaves them behind.
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
