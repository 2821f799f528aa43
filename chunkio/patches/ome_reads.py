"""What :class:`~chunkio.patches.PatchDataset` reads of an OME-Zarr store besides its image
(:mod:`chunkio.patches.ome_zarr`): the label index of its label image, its mask, and the
physical placement of patches.

A mask names a label image (``"labels/tissue"`` or ``"tissue"``: its coarsest level), one
level's array (``"labels/tissue/s2"``: placed by that level's ``coordinateTransformations``)
or a plain array of the store (``"masks/tissue"``: placed as a downsampled level, by the
ratio of its shape to the full-resolution image's). Its spatial axes are the image's; it may
have a time axis (one mask per time point) and a channel axis of one. It is read whole, once,
when the dataset is made: masks are small (coarse) by nature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader
from ..errors import FormatError, MissingFieldError
from ..format.label_index import LabelIndex
from ..format.layout import ATTR_KEY
from ..read import read_whole
from .label_reads import index_labels_by_slabs
from .masks import VolumeMask, as_mask, footprint_edges
from .ome_zarr import (
    OmeImage,
    OmeLevel,
    OmeVolumes,
    aligned,
    is_ome_zarr,
    label_names,
    read_image,
)

__all__ = ["ome_label_index", "ome_mask", "physical_origins"]


def ome_label_index(reader: Reader, ome: OmeVolumes) -> LabelIndex:
    """The label index of the store's label image at the dataset's scale: the one chunkio
    stored with the image when it indexes that very label level with these chunks (see
    :mod:`chunkio.convert.volume.ome`), else each label volume read once, a slab of chunks
    at a time (:mod:`chunkio.patches.label_reads`; nothing is written)."""
    stored = _stored_label_index(reader, ome)
    if stored is not None:
        return stored
    label = ome.layout.field("label")
    return index_labels_by_slabs(reader, ome.volumes, label.roles.values, label.dtype)


def _stored_label_index(reader: Reader, ome: OmeVolumes) -> LabelIndex | None:
    """The index chunkio wrote with the image (attribute ``chunkio.label_index``), if it
    indexes the label level and chunks read; a stored index that is malformed or points
    outside the volumes is a :class:`~chunkio.errors.FormatError`."""
    meta = (reader.attrs() or {}).get(ATTR_KEY)
    found = meta.get("label_index") if isinstance(meta, Mapping) else None
    volumes, where = ome.volumes, reader.location
    if (
        not isinstance(found, Mapping)
        or found.get("level") != ome.label
        or found.get("chunks") != list(volumes.chunks)
    ):
        return None
    key = f"{ATTR_KEY}.label_index"
    try:
        rows, points = (
            read_whole(reader, str(found[k])).astype(np.int64, copy=False)
            for k in ("rows", "points")
        )
        index = LabelIndex(rows, points)
    except (MissingFieldError, FormatError, KeyError, ValueError, IndexError) as err:
        raise FormatError(f"{where}: {key}: expected arrays 'rows' and 'points'; {err}") from err
    shape = np.asarray(volumes.shapes[0], np.int64)
    if (
        index.ndim != volumes.ndim
        or np.any((index.volume < 0) | (index.volume >= volumes.count))
        or np.any((index.points < 0) | (index.points >= shape))
    ):
        raise FormatError(
            f"{where}: {key}: expected rows of {volumes.count} volume(s) and points inside "
            f"{tuple(shape.tolist())}; got rows {index.rows.shape}, points {index.points.shape}"
        )
    return index


def physical_origins(ome: OmeVolumes, origins: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Physical position of each patch origin voxel's centre (``origin * spacing + origin of
    the image``)."""
    out: npt.NDArray[np.float64] = origins * np.asarray(ome.spacing) + np.asarray(ome.origin)
    return out


def ome_mask(reader: Reader, ome: OmeVolumes, name: str) -> tuple[VolumeMask, ...]:
    """The mask ``name`` of the store, one :class:`VolumeMask` per volume of ``ome``."""
    where, image = reader.location, ome.image
    level, axes, info_shape = _mask_level(reader, ome, name.strip("/"))
    names = [a.name for a in image.axes]
    spatial = [names[i] for i in image.spatial]
    kinds = {"t": "time", "c": "channel"}
    extra = [a for a in axes if a not in spatial]
    if [a for a in axes if a in spatial] != spatial or any(kinds.get(a) is None for a in extra):
        raise FormatError(
            f"{where}: mask {name!r}: expected the image's space axes {spatial}, after an "
            f"optional time and a channel axis of one; got axes {axes} of shape {info_shape}"
        )
    values = read_whole(reader, level.path)
    lead = {a: int(values.shape[i]) for i, a in enumerate(axes) if a in extra}
    count = ome.volumes.count
    if lead.get("c", 1) != 1 or lead.get("t", count) not in (1, count):
        raise FormatError(
            f"{where}: mask {name!r} of shape {info_shape} (axes {axes}): expected a channel "
            f"axis of one and one time point or {count}"
        )
    per_time = values.reshape((lead.get("t", 1), *values.shape[len(extra) :]))
    full = reader.array_info(image.levels[0].path).shape
    full_level = image.levels[0]
    edges = []
    for k, i in enumerate(image.spatial):
        n_mask = int(per_time.shape[1 + k])
        at = axes.index(names[i])
        mask_scale, mask_shift = level.scale[at], level.translation[at]
        extent = n_mask * mask_scale
        limit = int(full[i]) * full_level.scale[i]
        if extent - limit >= mask_scale * (1 - 1e-9) or mask_shift - mask_scale / 2 < (
            full_level.translation[i] - full_level.scale[i] / 2 - mask_scale * (1 - 1e-9)
        ):
            raise FormatError(
                f"{where}: mask {name!r}: axis {names[i]!r} covers {extent:g} (shape "
                f"{n_mask}, scale {mask_scale:g}); expected no more than the image's "
                f"{limit:g} ({full_level.path} shape {int(full[i])}, scale "
                f"{full_level.scale[i]:g})"
            )
        edges.append(
            footprint_edges(
                ome.volumes.shapes[0][k],
                ome.spacing[k],
                ome.origin[k],
                n_mask,
                mask_scale,
                mask_shift,
            )
        )
    masks = [VolumeMask(as_mask(m), tuple(edges)) for m in per_time]
    return tuple(masks[v if len(masks) > 1 else 0] for v in range(count))


def _mask_level(reader: Reader, ome: OmeVolumes, name: str) -> tuple[OmeLevel, list[str], Any]:
    """The mask's array (as a level: its placement) and its axis names."""
    image = ome.image
    group = f"labels/{name}" if name in label_names(reader) else name
    try:
        attrs = reader.group_attrs(group)
    except MissingFieldError as err:
        raise FormatError(
            f"{reader.location}: mask {name!r}: expected a label image or an array; nothing "
            f"there (label images: {list(label_names(reader))}; arrays: "
            f"{reader.array_names()})"
        ) from err
    if attrs is not None:  # a group: a multiscale (label) image, read at its coarsest level
        lab = _in_frame(reader, image, read_image(reader, group))
        return lab.levels[-1], [a.name for a in lab.axes], _shape(reader, lab.levels[-1].path)
    owner = _owning_image(reader, name.rpartition("/")[0], name)
    if owner is not None:
        lab = _in_frame(reader, image, owner)
        level = next(lv for lv in lab.levels if lv.path == name)
        return level, [a.name for a in lab.axes], _shape(reader, name)
    return _plain_level(reader, image, name)


def _in_frame(reader: Reader, image: OmeImage, other: OmeImage) -> OmeImage:
    """A mask image placed in the image's frame (its space axes checked to be the image's)."""
    names = [image.axes[i].name for i in image.spatial]
    if [other.axes[j].name for j in other.spatial] != names:
        raise FormatError(
            f"{reader.location}: mask {other.key}.axes: expected the image's space axes "
            f"{names}; got {[a.name for a in other.axes]}"
        )
    return aligned(reader, image, other)


def _owning_image(reader: Reader, parent: str, path: str) -> OmeImage | None:
    """The multiscale image in group ``parent`` that ``path`` is a level of (if any)."""
    try:
        attrs = reader.attrs() if not parent else reader.group_attrs(parent)
    except MissingFieldError:
        return None
    if not is_ome_zarr(attrs or {}):
        return None
    owner = read_image(reader, parent)
    return owner if any(lv.path == path for lv in owner.levels) else None


def _plain_level(reader: Reader, image: OmeImage, path: str) -> tuple[OmeLevel, list[str], Any]:
    """A plain array placed as a downsampled level of the image: its trailing axes are the
    space axes, scaled by the ratio of the full-resolution shape to its shape."""
    shape = _shape(reader, path)
    full_level = image.levels[0]
    full = reader.array_info(full_level.path).shape
    names = [a.name for a in image.axes]
    spatial = [names[i] for i in image.spatial]
    nsp = len(spatial)
    if len(shape) < nsp or any(
        int(m) > int(full[i]) for m, i in zip(shape[-nsp:], image.spatial, strict=True)
    ):
        raise FormatError(
            f"{reader.location}: mask {path!r} of shape {tuple(shape)}: expected the space axes "
            f"{spatial} last, no larger than the image's {full_level.path} "
            f"{tuple(int(full[i]) for i in image.spatial)}"
        )
    lead = len(shape) - nsp
    # leading axes: (t, c), or one: a channel of one, else time points; more: refused later
    axes = {0: [], 1: ["c"] if int(shape[0]) == 1 else ["t"], 2: ["t", "c"]}.get(lead, ["?"] * lead)
    scale = [1.0] * lead
    shift = [0.0] * lead
    for m, i in zip(shape[-nsp:], image.spatial, strict=True):
        s = full_level.scale[i] * int(full[i]) / int(m)
        scale.append(s)
        shift.append(full_level.translation[i] + (s - full_level.scale[i]) / 2)
    return OmeLevel(path, tuple(scale), tuple(shift)), [*axes, *spatial], tuple(shape)


def _shape(reader: Reader, path: str) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in reader.array_info(path).shape)
    except MissingFieldError as err:
        raise FormatError(
            f"{reader.location}: mask {path!r}: expected an array; nothing there (arrays: "
            f"{reader.array_names()})"
        ) from err
