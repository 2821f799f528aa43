"""Codecs and filters a store names that this installation cannot decode, and what to install.

A store written elsewhere may name an HDF5 filter whose plugin is not loaded, or a Zarr codec
no registry (zarr-python's, numcodecs') knows. Finding that out when a worker decodes the
first chunk gives a library traceback deep in a DataLoader; these helpers find it when the
dataset is made and name the package that provides the codec.

>>> zarr_install_hint("imagecodecs_jpeg2k")
'pip install imagecodecs, then imagecodecs.numcodecs.register_codecs() before opening'
>>> hdf5_filter_name(32015)
'zstd'
"""

from __future__ import annotations

from collections.abc import Sequence

import hdf5plugin
import numcodecs.registry

__all__ = [
    "hdf5_filter_hint",
    "hdf5_filter_name",
    "missing_zarr_codecs",
    "zarr_install_hint",
]

#: HDF5 filter id -> name, for the filters hdf5plugin provides (chunkio imports it, which
#: registers them with HDF5)
_HDF5PLUGIN: dict[int, str] = {int(fid): name for name, fid in hdf5plugin.FILTERS.items()}
#: filters HDF5 or h5py provide themselves, by id
_BUILT_IN: dict[int, tuple[str, str]] = {
    1: ("gzip", "an HDF5 library built with zlib (h5py's wheels are)"),
    2: ("shuffle", "any HDF5 library"),
    3: ("fletcher32", "any HDF5 library"),
    4: ("szip", "an HDF5 library built with szip/libaec (h5py's wheels are)"),
    5: ("nbit", "any HDF5 library"),
    6: ("scaleoffset", "any HDF5 library"),
    32000: ("lzf", "h5py (it registers lzf)"),
}
#: Zarr v2 (numcodecs) ids of codecs in packages of their own
_PACKAGES = {"zfpy": "zfpy", "pcodec": "pcodec", "jpeg": "imagecodecs"}


def hdf5_filter_name(fid: int) -> str:
    """The filter's usual name (``"filter 40000"`` for one nobody registered here)."""
    if fid in _HDF5PLUGIN:
        return _HDF5PLUGIN[fid]
    return _BUILT_IN[fid][0] if fid in _BUILT_IN else f"filter {fid}"


def hdf5_filter_hint(fid: int) -> str:
    """What provides HDF5 filter ``fid``, as an instruction."""
    if fid in _HDF5PLUGIN:
        return (
            f"install hdf5plugin (pip install hdf5plugin, which provides {_HDF5PLUGIN[fid]}); "
            "chunkio imports it, which registers its filters with HDF5"
        )
    if fid in _BUILT_IN:
        return f"it needs {_BUILT_IN[fid][1]}"
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
    """The codecs of ``names`` that no registry here knows: numcodecs' for Zarr v2 ids,
    zarr-python's (and numcodecs' for its ``numcodecs.*`` names) for Zarr v3 names.

    >>> missing_zarr_codecs(["bytes", "zstd", "my-codec"], 3)
    ['my-codec']
    """
    return [n for n in names if not _registered(n, zarr_format)]


def _registered(name: str, zarr_format: int) -> bool:
    if zarr_format == 2:
        registry = numcodecs.registry
        return name in registry.codec_registry or name in registry.entries
    from zarr.registry import get_codec_class

    try:
        get_codec_class(name)
    except KeyError:
        return False
    # zarr-python names numcodecs' codecs numcodecs.<id> whether or not the package that
    # decodes one (zfpy, pcodec) is installed: numcodecs registers only those that are
    return not name.startswith("numcodecs.") or _registered(name.removeprefix("numcodecs."), 2)
