"""Volume files: TIFF stacks (tifffile), NIfTI (nibabel) and NumPy ``.npy``/``.npz``.

:func:`probe_volume` reads a file's header only (shape, dtype, spacing, affine), so checking
a whole dataset before converting costs no decoding; :func:`load_volume` decodes one volume,
channels first. Voxel axes are kept as the file stores them (NIfTI ``i, j, k`` - the affine
maps them to world coordinates; TIFF ``Z, Y, X``; NumPy as saved). A channel axis - NIfTI's
4th axis, TIFF samples (``S``) or channels (``C``), a NumPy array's first axis when it has four
- is moved first. tifffile and nibabel are optional (``pip install 'chunkio[volumes]'``).
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import OptionalDependencyError, SourceError

__all__ = [
    "VOLUME_SUFFIXES",
    "VolumeFile",
    "load_volume",
    "match_labels",
    "probe_volume",
    "volume_files",
    "volume_stem",
]

VOLUME_SUFFIXES = (".nii.gz", ".nii", ".tiff", ".tif", ".npy", ".npz")
_CHANNEL_SUFFIX = re.compile(r"_\d{4}$")  # nnU-Net names channels case_0000, case_0001, ...


@dataclass(frozen=True)
class VolumeFile:
    """A volume file's header: spatial shape, channels, decoded dtype and spatial metadata."""

    path: str
    kind: str
    spatial: tuple[int, ...]
    channels: int | None
    dtype: np.dtype[Any]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spatial if self.channels is None else (self.channels, *self.spatial)


def volume_stem(path: str) -> str:
    """File name without its volume suffix.

    >>> volume_stem("imagesTr/la_003.nii.gz"), volume_stem("a/b.TIF")
    ('la_003', 'b')
    """
    name = os.path.basename(path)
    for suffix in VOLUME_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def volume_files(src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The volume files of a folder (sorted; hidden files and other suffixes ignored) or list."""
    if isinstance(src, str | os.PathLike):
        folder = os.fspath(src)
        if not os.path.isdir(folder):
            if os.path.isfile(folder):
                return [folder]
            raise SourceError(f"{folder}: no such folder or file")
        names = sorted(
            n
            for n in os.listdir(folder)
            if not n.startswith(".") and n.lower().endswith(VOLUME_SUFFIXES)
        )
        files = [os.path.join(folder, n) for n in names]
        files = [f for f in files if os.path.isfile(f)]
        if not files:
            raise SourceError(f"{folder}: no volume files ({', '.join(VOLUME_SUFFIXES)})")
        return files
    files = [os.fspath(f) for f in src]
    if not files:
        raise SourceError("no volume files given (an empty list)")
    for f in files:
        if not os.path.isfile(f):
            raise SourceError(f"{f}: no such file")
    return files


def match_labels(
    images: Sequence[str], labels: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
) -> list[str]:
    """One label file per image: a list in the same order, or a folder matched by file name.

    In a folder, ``x.nii.gz`` labels image ``x.nii.gz`` (any volume suffix); an nnU-Net channel
    suffix (``x_0000``) is tried without it too.
    """
    if not isinstance(labels, str | os.PathLike):
        found = volume_files(labels)
        if len(found) != len(images):
            raise SourceError(
                f"expected one label file per image: {len(images)} images, {len(found)} labels"
            )
        return found
    folder = os.fspath(labels)
    by_stem = {volume_stem(f): f for f in volume_files(folder)}
    out = []
    for image in images:
        stem = volume_stem(image)
        match = by_stem.get(stem) or by_stem.get(_CHANNEL_SUFFIX.sub("", stem))
        if match is None:
            raise SourceError(f"{image}: no label file named {stem!r} in {folder}")
        out.append(match)
    unused = sorted(set(by_stem.values()) - set(out))
    if unused:
        raise SourceError(f"{folder}: {len(unused)} label file(s) match no image, e.g. {unused[0]}")
    return out


def probe_volume(path: str) -> VolumeFile:
    """Read the header of a volume file (no voxel data)."""
    kind = _kind(path)
    try:
        return _PROBES[kind](path)
    except (SourceError, OptionalDependencyError):
        raise
    except Exception as err:
        raise SourceError(f"{path}: cannot read the {kind} header: {err}") from err


def load_volume(vf: VolumeFile) -> npt.NDArray[Any]:
    """Decode the volume of ``vf``, channels first; its shape is ``vf.shape``."""
    try:
        data = _LOADS[vf.kind](vf)
    except (SourceError, OptionalDependencyError):
        raise
    except Exception as err:
        raise SourceError(f"{vf.path}: cannot decode the {vf.kind} data: {err}") from err
    if data.shape != vf.shape:
        raise SourceError(f"{vf.path}: header says shape {vf.shape}; the data has {data.shape}")
    return data


def _kind(path: str) -> str:
    name = path.lower()
    if name.endswith((".nii", ".nii.gz")):
        return "nifti"
    if name.endswith((".tif", ".tiff")):
        return "tiff"
    if name.endswith(".npz"):
        return "npz"
    if name.endswith(".npy"):
        return "npy"
    raise SourceError(f"{path}: not a volume file (expected one of {', '.join(VOLUME_SUFFIXES)})")


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError as err:
        raise OptionalDependencyError(
            f"reading this volume needs {module!r}: pip install 'chunkio[volumes]'"
        ) from err


def _split_channels(
    path: str, shape: tuple[int, ...], channel_axis: int | None
) -> tuple[tuple[int, ...], int | None]:
    spatial = tuple(s for i, s in enumerate(shape) if i != channel_axis)
    if len(spatial) != 3:
        raise SourceError(
            f"{path}: expected a 3-D volume (optionally with channels); got shape {shape}"
        )
    return spatial, None if channel_axis is None else shape[channel_axis]


# -- NIfTI -------------------------------------------------------------------------------------
def _probe_nifti(path: str) -> VolumeFile:
    nib = _require("nibabel")
    img = nib.load(path)
    shape = tuple(int(s) for s in img.shape)
    if len(shape) == 5 and shape[3] == 1:  # (x, y, z, t=1, c): a vector-valued image
        shape = (*shape[:3], shape[4])
    spatial, channels = _split_channels(path, shape, 3 if len(shape) == 4 else None)
    proxy = img.dataobj
    scaled = getattr(proxy, "slope", 1.0) != 1.0 or getattr(proxy, "inter", 0.0) != 0.0
    dtype = np.dtype(np.float32) if scaled else np.dtype(img.get_data_dtype())
    affine = np.asarray(img.affine, np.float64)
    meta = {
        "affine": affine.tolist(),
        "spacing": [float(z) for z in img.header.get_zooms()[:3]],
        "axcodes": list(nib.aff2axcodes(affine)),
    }
    units = getattr(img.header, "get_xyzt_units", None)  # NIfTI-1 and -2 headers have them
    space = units()[0] if units is not None else "unknown"
    if space != "unknown":
        meta["unit"] = str(space)
    return VolumeFile(path, "nifti", spatial, channels, dtype, meta)


def _load_nifti(vf: VolumeFile) -> npt.NDArray[Any]:
    nib = _require("nibabel")
    data = np.asanyarray(nib.load(vf.path).dataobj)
    data = data.reshape((*vf.spatial, vf.channels) if vf.channels else vf.spatial)
    if vf.channels:
        data = np.moveaxis(data, -1, 0)
    return np.ascontiguousarray(data, dtype=vf.dtype)


# -- TIFF --------------------------------------------------------------------------------------
def _probe_tiff(path: str) -> VolumeFile:
    tifffile = _require("tifffile")
    with tifffile.TiffFile(path) as tf:
        series = tf.series[0]
        axes, shape = str(series.axes), tuple(int(s) for s in series.shape)
        channel = [i for i, a in enumerate(axes) if a in "CS"]
        if len(channel) > 1:
            raise SourceError(f"{path}: axes {axes!r} hold more than one channel axis")
        spatial, channels = _split_channels(path, shape, channel[0] if channel else None)
        meta: dict[str, Any] = {"axes": axes}
        ij = tf.imagej_metadata or {}
        page = tf.pages[0]
        if "XResolution" in page.tags and "YResolution" in page.tags:
            rx, ry = page.get_resolution()
            if rx > 0 and ry > 0:
                meta["spacing"] = [ij.get("spacing"), 1.0 / ry, 1.0 / rx]
        if "unit" in ij:
            meta["unit"] = str(ij["unit"])
        return VolumeFile(path, "tiff", spatial, channels, np.dtype(series.dtype), meta)


def _load_tiff(vf: VolumeFile) -> npt.NDArray[Any]:
    tifffile = _require("tifffile")
    data = np.asarray(tifffile.imread(vf.path, series=0))
    axes = str(vf.meta.get("axes", ""))
    channel = [i for i, a in enumerate(axes) if a in "CS"]
    if channel:
        data = np.moveaxis(data, channel[0], 0)
    return np.ascontiguousarray(data)


# -- NumPy -------------------------------------------------------------------------------------
def _probe_npy(path: str) -> VolumeFile:
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    return _numpy_volume(path, "npy", tuple(arr.shape), arr.dtype)


def _npz_key(path: str) -> str:
    with zipfile.ZipFile(path) as zf:
        keys = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
    if len(keys) == 1:
        return keys[0]
    for key in ("image", "volume", "label"):
        if key in keys:
            return key
    raise SourceError(f"{path}: holds arrays {keys}; expected one, or one named 'image'")


def _probe_npz(path: str) -> VolumeFile:
    key = _npz_key(path)
    with zipfile.ZipFile(path) as zf, zf.open(key + ".npy") as fh:
        version = np.lib.format.read_magic(fh)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _fortran, dtype = read(fh)
    vf = _numpy_volume(path, "npz", tuple(shape), np.dtype(dtype))
    return VolumeFile(vf.path, vf.kind, vf.spatial, vf.channels, vf.dtype, {"key": key})


def _numpy_volume(path: str, kind: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> VolumeFile:
    if dtype.kind not in "biuf":
        raise SourceError(f"{path}: dtype {dtype} is not a number type chunkio stores")
    spatial, channels = _split_channels(path, shape, 0 if len(shape) == 4 else None)
    return VolumeFile(path, kind, spatial, channels, dtype, {})


def _load_npy(vf: VolumeFile) -> npt.NDArray[Any]:
    return np.ascontiguousarray(np.load(vf.path, allow_pickle=False))


def _load_npz(vf: VolumeFile) -> npt.NDArray[Any]:
    with np.load(vf.path, allow_pickle=False) as z:
        return np.ascontiguousarray(z[vf.meta["key"]])


_PROBES = {"nifti": _probe_nifti, "tiff": _probe_tiff, "npy": _probe_npy, "npz": _probe_npz}
_LOADS = {"nifti": _load_nifti, "tiff": _load_tiff, "npy": _load_npy, "npz": _load_npz}
