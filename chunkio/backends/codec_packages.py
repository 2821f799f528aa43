"""Codecs and filters a store names that this installation cannot decode, and what to install.

A store written elsewhere may name an HDF5 filter whose plugin is not loaded, or a Zarr codec
no registry (zarr-python's, numcodecs') knows. Finding that out when a worker decodes the
first chunk gives a library traceback deep in a DataLoader; these helpers find it when the
dataset is made and name the package that provides the codec (which codecs exist is the
codec table's knowledge: :mod:`chunkio.backends.codec_table`).

>>> zarr_install_hint("imagecodecs_jpeg2k")
'pip install imagecodecs, then imagecodecs.numcodecs.register_codecs() before opening'
>>> hdf5_filter_name(32015), hdf5_filter_name(40000)
('zstd', 'filter 40000')
"""

from __future__ import annotations

from collections.abc import Sequence

from .codec_table import HDF5_SAFE, hdf5plugin_filters, zarr_codec_registered

__all__ = ["hdf5_filter_hint", "hdf5_filter_name", "missing_zarr_codecs", "zarr_install_hint"]

#: Zarr v2 (numcodecs) ids of codecs decoded by packages of their own
_PACKAGES = {"zfpy": "zfpy", "pcodec": "pcodec", "jpeg": "imagecodecs"}


def hdf5_filter_name(fid: int) -> str:
    """The filter's usual name (``"filter 40000"`` for one nobody registered here)."""
    return hdf5plugin_filters().get(fid) or HDF5_SAFE.get(fid) or f"filter {fid}"


def hdf5_filter_hint(fid: int) -> str:
    """What provides HDF5 filter ``fid``, as an instruction."""
    plugins = hdf5plugin_filters()
    if fid in plugins:
        return (
            f"install hdf5plugin (pip install hdf5plugin, which provides {plugins[fid]}); "
            "chunkio imports it, which registers its filters with HDF5"
        )
    if fid in HDF5_SAFE:
        return (
            "it is built into HDF5 or h5py (szip needs an HDF5 built with libaec, as h5py's "
            "wheels are)"
        )
    return (
        f"install the HDF5 plugin that provides filter id {fid} (the HDF Group's list of "
        "registered filters names it) and point HDF5_PLUGIN_PATH at its folder"
    )


def zarr_install_hint(codec: str) -> str:
    """What provides the Zarr codec named ``codec`` (a v3 name or a v2 numcodecs id)."""
    bare = codec.removeprefix("numcodecs.")
    if bare.startswith("imagecodecs_"):
        return (
            "pip install imagecodecs, then imagecodecs.numcodecs.register_codecs() before opening"
        )
    if bare in _PACKAGES:
        return f"pip install {_PACKAGES[bare]}"
    if codec.startswith("numcodecs."):
        return "pip install -U numcodecs zarr (zarr-python names numcodecs' codecs numcodecs.*)"
    return "install the package that registers it with numcodecs or zarr-python"


def missing_zarr_codecs(names: Sequence[str], zarr_format: int) -> list[str]:
    """The codecs of ``names`` that no registry here knows.

    >>> missing_zarr_codecs(["bytes", "zstd", "my-codec"], 3)
    ['my-codec']
    """
    return [n for n in names if not zarr_codec_registered(n, zarr_format)]
