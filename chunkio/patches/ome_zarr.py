"""OME-Zarr (OME-NGFF) images read in place: their metadata as typed, validated values.

An OME-Zarr store holds a *multiscale image*: the group's ``multiscales`` attribute (NGFF 0.4
on Zarr v2, at the top level of the attributes; NGFF 0.5 on Zarr v3, under ``"ome"``) names
its axes (``t`` time, ``c`` channel, 2 or 3 ``space`` axes, in that order) and its scale levels
(``datasets``: array paths, full resolution first, each with ``coordinateTransformations``: a
``scale`` and an optional ``translation`` per axis, from voxel index to physical position of
the voxel's centre). Label images live in ``labels/<name>``, each a multiscale image of its
own (listed by ``labels``' ``labels`` attribute).

:func:`read_image` parses and checks one multiscale group into an :class:`OmeImage`;
:func:`ome_volumes` describes the image at one scale (and its label image at the matching
scale) as the :class:`~chunkio.format.volume_layout.VolumeSet` and fields that
:class:`chunkio.patches.PatchDataset` reads through its usual read path: time points are
volumes (the volume axis), channels the channel axis. Every inconsistency is a
:class:`~chunkio.errors.FormatError` naming the store, the metadata key and what was expected.
Nothing is written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import ArrayInfo, Reader
from ..errors import FormatError, MissingFieldError
from ..format.foreign import volume_field
from ..format.layout import DatasetLayout
from ..format.volume_layout import VolumeSet

__all__ = [
    "OmeAxis",
    "OmeImage",
    "OmeLevel",
    "OmeVolumes",
    "aligned",
    "is_ome_zarr",
    "label_names",
    "ome_volumes",
    "read_image",
]

AXIS_TYPES = ("time", "channel", "space")
#: relative tolerance of scale comparisons (levels written as floats by several tools)
_RTOL = 1e-6


@dataclass(frozen=True)
class OmeAxis:
    """One axis of a multiscale image: ``name``, ``type`` (time, channel, space) and
    ``unit`` (``None`` when not given)."""

    name: str
    type: str
    unit: str | None = None


@dataclass(frozen=True)
class OmeLevel:
    """One scale level: the array ``path`` in the store, and per axis the ``scale`` and
    ``translation`` from voxel index to physical position (of the voxel's centre)."""

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class OmeImage:
    """A multiscale image (or label image) of an OME-Zarr store."""

    location: str
    group: str
    version: str
    axes: tuple[OmeAxis, ...]
    levels: tuple[OmeLevel, ...]

    @property
    def key(self) -> str:
        """Where the metadata is, for messages: ``<group>/multiscales[0]``."""
        return f"{self.group}/multiscales[0]" if self.group else "multiscales[0]"

    @property
    def spatial(self) -> tuple[int, ...]:
        """Positions of the space axes."""
        return tuple(i for i, a in enumerate(self.axes) if a.type == "space")

    def axis(self, kind: str) -> int | None:
        """Position of the time or channel axis (``None`` when there is none)."""
        found = [i for i, a in enumerate(self.axes) if a.type == kind]
        return found[0] if found else None

    def level(self, scale: int) -> OmeLevel:
        """Scale level ``scale`` (0: full resolution)."""
        n = len(self.levels)
        if isinstance(scale, bool) or not isinstance(scale, int) or not 0 <= scale < n:
            raise FormatError(
                f"{self.location}: {self.key}.datasets: expected a scale in 0..{n - 1} "
                f"({', '.join(lv.path for lv in self.levels)}); got scale={scale!r}"
            )
        return self.levels[scale]


@dataclass(frozen=True)
class OmeVolumes:
    """An OME-Zarr image at one scale as :class:`chunkio.patches.PatchDataset` reads it.

    ``spacing`` and ``origin``: physical size of a voxel and position of voxel 0's centre
    per spatial axis (named ``axes``, in ``units``) at that scale.
    """

    layout: DatasetLayout
    volumes: VolumeSet
    image: OmeImage
    level: OmeLevel
    axes: tuple[str, ...]
    units: tuple[str | None, ...]
    spacing: tuple[float, ...]
    origin: tuple[float, ...]
    label: str | None = None


def ome_attrs(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The OME metadata of a group's attributes: under ``"ome"`` (NGFF 0.5) or the
    attributes themselves (0.4)."""
    ome = attrs.get("ome")
    return ome if isinstance(ome, Mapping) else attrs


def is_ome_zarr(attrs: Mapping[str, Any]) -> bool:
    """Whether a group's attributes declare an OME-Zarr multiscale image.

    >>> is_ome_zarr({"ome": {"version": "0.5", "multiscales": []}}), is_ome_zarr({"a": 1})
    (True, False)
    """
    return "multiscales" in ome_attrs(attrs)


def label_names(reader: Reader) -> tuple[str, ...]:
    """The label images the store lists in ``labels``' ``labels`` attribute (none: ``()``)."""
    try:
        attrs = reader.group_attrs("labels")
    except MissingFieldError:
        return ()
    names = ome_attrs(attrs or {}).get("labels", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise FormatError(
            f"{reader.location}: labels/labels: expected a list of label image names; got {names!r}"
        )
    return tuple(names)


def read_image(reader: Reader, group: str = "") -> OmeImage:
    """The multiscale image of ``group`` (``""``: the store's root), checked: axes of known
    types in NGFF order, 2 or 3 space axes, every level's array present with one dimension
    per axis, a positive scale per axis."""
    where = reader.location
    try:
        attrs = reader.attrs() if not group else reader.group_attrs(group)
    except MissingFieldError as err:
        raise FormatError(f"{where}: {group}: expected an OME-Zarr image group; none") from err
    meta = ome_attrs(attrs or {})
    key = f"{group}/multiscales" if group else "multiscales"
    scales = meta.get("multiscales")
    if not isinstance(scales, list) or not scales or not isinstance(scales[0], Mapping):
        raise FormatError(
            f"{where}: {key}: expected a list of multiscale images (OME-NGFF 0.4 or 0.5); "
            f"got {scales!r}"
        )
    first = scales[0]
    version = str(meta.get("version", first.get("version", "0.4")))
    axes = _axes(first.get("axes"), where, f"{key}[0].axes")
    datasets = first.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise FormatError(
            f"{where}: {key}[0].datasets: expected a list of scale levels; got {datasets!r}"
        )
    outer = _transforms(first.get("coordinateTransformations"), len(axes), where, key, True)
    levels = []
    prefix = f"{group}/" if group else ""
    for k, ds in enumerate(datasets):
        at = f"{key}[0].datasets[{k}]"
        if not isinstance(ds, Mapping) or not isinstance(ds.get("path"), str):
            raise FormatError(f"{where}: {at}.path: expected an array path; got {ds!r}")
        path = prefix + str(ds["path"]).strip("/")
        info = _array(reader, path, f"{at}.path")
        if len(info.shape) != len(axes):
            raise FormatError(
                f"{where}: {key}[0].axes: expected one axis per dimension of array {path!r} "
                f"{tuple(info.shape)}; got {len(axes)} axes {[a.name for a in axes]}"
            )
        scale, shift = _transforms(ds.get("coordinateTransformations"), len(axes), where, at)
        levels.append(
            OmeLevel(
                path,
                tuple(s * o for s, o in zip(scale, outer[0], strict=True)),
                tuple(t * o + u for t, o, u in zip(shift, outer[0], outer[1], strict=True)),
            )
        )
    return OmeImage(where, group, version, axes, tuple(levels))


def ome_volumes(
    reader: Reader, spatial: int, *, scale: int = 0, label: str | None = None
) -> OmeVolumes:
    """The image of the store ``reader`` has open at level ``scale``, as volumes of
    ``spatial`` axes; with ``label`` (a name listed in ``labels``), that label image at the
    level of the same scale as the label field."""
    image = read_image(reader)
    where, key = reader.location, image.key
    if len(image.spatial) != spatial:
        names = [a.name for a in image.axes]
        raise FormatError(
            f"{where}: {key}.axes: expected {spatial} space axes for a patch size of "
            f"{spatial} sizes; got {len(image.spatial)} in {names}"
        )
    level = image.level(scale)
    info = reader.array_info(level.path)
    t, c = image.axis("time"), image.axis("channel")
    count = int(info.shape[t]) if t is not None else 1
    shape = tuple(int(info.shape[i]) for i in image.spatial)
    fields = [volume_field("image", level.path, info, where, volume_axis=t is not None)]
    label_level = None
    if label is not None:
        label_level, label_info, with_channel = _label_level(reader, image, level, label, info)
        fields.append(
            volume_field("label", label_level.path, label_info, where, volume_axis=t is not None)
        )
    volumes = VolumeSet(
        shapes=(shape,) * count,
        chunks=tuple(int(info.chunks[i]) for i in image.spatial),
        stacked=True,
        channels=int(info.shape[c]) if c is not None else None,
        label=None if label is None else "label",
        volume_axis=t is not None,
        label_channel=label is not None and with_channel,
    )
    layout = DatasetLayout(
        num_samples=count, samples_per_chunk=1, fields=tuple(fields), foreign=True
    )
    return OmeVolumes(
        layout=layout,
        volumes=volumes,
        image=image,
        level=level,
        axes=tuple(image.axes[i].name for i in image.spatial),
        units=tuple(image.axes[i].unit for i in image.spatial),
        spacing=tuple(level.scale[i] for i in image.spatial),
        origin=tuple(level.translation[i] for i in image.spatial),
        label=None if label_level is None else label_level.path,
    )


def _label_level(
    reader: Reader, image: OmeImage, level: OmeLevel, name: str, info: ArrayInfo
) -> tuple[OmeLevel, ArrayInfo, bool]:
    """The level of label image ``name`` with ``level``'s spatial scale and shape; its
    array's description; whether it has a (single) channel axis."""
    where = image.location
    listed = label_names(reader)
    if name not in listed:
        raise FormatError(
            f"{where}: labels/labels: expected a label image {name!r}; the store lists "
            f"{list(listed)}"
        )
    lab = read_image(reader, f"labels/{name}")
    spatial_names = [image.axes[i].name for i in image.spatial]
    if [lab.axes[i].name for i in lab.spatial] != spatial_names or (
        (lab.axis("time") is None) != (image.axis("time") is None)
    ):
        raise FormatError(
            f"{where}: {lab.key}.axes: expected the image's time and space axes "
            f"{[a.name for a in image.axes if a.type != 'channel']}; got "
            f"{[a.name for a in lab.axes]}"
        )
    lab = aligned(reader, image, lab)
    want = tuple(int(info.shape[i]) for i in image.spatial)
    for candidate in lab.levels:
        if _close(
            [candidate.scale[i] for i in lab.spatial], [level.scale[i] for i in image.spatial]
        ):
            break
    else:
        scales = [[lv.scale[i] for i in lab.spatial] for lv in lab.levels]
        raise FormatError(
            f"{where}: {lab.key}.datasets: expected a level with the image's spatial scale "
            f"{[level.scale[i] for i in image.spatial]} ({level.path}); got scales {scales}"
        )
    found = reader.array_info(candidate.path)
    t, c = lab.axis("time"), lab.axis("channel")
    got = tuple(int(found.shape[i]) for i in lab.spatial)
    counts = (found.shape[t], info.shape[image.axis("time") or 0]) if t is not None else (1, 1)
    if got != want or counts[0] != counts[1] or (c is not None and found.shape[c] != 1):
        raise FormatError(
            f"{where}: {lab.key}.datasets: label array {candidate.path!r} has shape "
            f"{tuple(found.shape)} (axes {[a.name for a in lab.axes]}); expected the shape of "
            f"image array {level.path!r} {tuple(info.shape)} without channels (or with one)"
        )
    return candidate, found, c is not None


def aligned(reader: Reader, image: OmeImage, other: OmeImage) -> OmeImage:
    """``other`` (a label image of ``image``, space axes checked to match) placed in the
    image's physical frame: when the two full-resolution levels have one spatial shape but
    not one placement (ome-zarr-py writes label images with a unit scale unless given the
    image's), each of ``other``'s levels keeps its scale and offset *relative to its level 0*,
    and level 0 is the image's. Otherwise ``other`` as it is."""
    mine, theirs = image.levels[0], other.levels[0]
    pairs = list(zip(image.spatial, other.spatial, strict=True))
    shape_i = reader.array_info(mine.path).shape
    shape_o = reader.array_info(theirs.path).shape
    if [shape_i[i] for i, _ in pairs] != [shape_o[j] for _, j in pairs] or (
        _close([mine.scale[i] for i, _ in pairs], [theirs.scale[j] for _, j in pairs])
        and _close(
            [mine.translation[i] for i, _ in pairs], [theirs.translation[j] for _, j in pairs]
        )
    ):
        return other
    levels = []
    for lv in other.levels:
        scale, shift = list(lv.scale), list(lv.translation)
        for i, j in pairs:
            ratio = mine.scale[i] / theirs.scale[j]
            scale[j] = lv.scale[j] * ratio
            shift[j] = mine.translation[i] + (lv.translation[j] - theirs.translation[j]) * ratio
        levels.append(OmeLevel(lv.path, tuple(scale), tuple(shift)))
    return dataclasses.replace(other, levels=tuple(levels))


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(math.isclose(x, y, rel_tol=_RTOL, abs_tol=1e-12) for x, y in zip(a, b, strict=True))


def _axes(raw: Any, where: str, key: str) -> tuple[OmeAxis, ...]:
    if not isinstance(raw, list) or not raw:
        raise FormatError(f"{where}: {key}: expected a list of axes; got {raw!r}")
    axes = []
    for a in raw:
        if isinstance(a, str):  # NGFF 0.3 wrote bare names; their types are implied
            a = {"name": a, "type": {"t": "time", "c": "channel"}.get(a, "space")}
        if not isinstance(a, Mapping) or a.get("type") not in AXIS_TYPES:
            raise FormatError(
                f"{where}: {key}: expected axes of type {' / '.join(AXIS_TYPES)}; got {a!r}"
            )
        unit = a.get("unit")
        axes.append(
            OmeAxis(str(a.get("name")), str(a["type"]), None if unit is None else str(unit))
        )
    order = [AXIS_TYPES.index(a.type) for a in axes]
    space = order.count(2)
    if order != sorted(order) or order.count(0) > 1 or order.count(1) > 1 or space not in (2, 3):
        raise FormatError(
            f"{where}: {key}: expected an optional time axis, an optional channel axis, then "
            f"2 or 3 space axes; got {[(a.name, a.type) for a in axes]}"
        )
    return tuple(axes)


def _transforms(
    raw: Any, ndim: int, where: str, key: str, optional: bool = False
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(scale, translation)`` of a ``coordinateTransformations`` list (a scale, then an
    optional translation; ``optional``: the whole list may be absent, the identity)."""
    at = f"{key}.coordinateTransformations"
    scale, shift = (1.0,) * ndim, (0.0,) * ndim
    if raw is None and optional:
        return scale, shift
    if not isinstance(raw, list) or not raw:
        raise FormatError(f"{where}: {at}: expected a list holding a scale; got {raw!r}")
    seen = []
    for tr in raw:
        kind = tr.get("type") if isinstance(tr, Mapping) else None
        values = tr.get(kind) if isinstance(tr, Mapping) and isinstance(kind, str) else None
        if kind == "identity":
            seen.append(kind)
            continue
        if kind not in ("scale", "translation") or not isinstance(values, list):
            values = None  # refused just below, with the transform named
        if values is None or not _numbers(values, ndim):
            raise FormatError(
                f"{where}: {at}: expected a scale and an optional translation of {ndim} "
                f"numbers (one per axis); got {tr!r}"
            )
        seen.append(kind)
        if kind == "scale":
            scale = tuple(float(v) for v in values)
        else:
            shift = tuple(float(v) for v in values)
    if (not optional and seen[:1] != ["scale"]) or any(s <= 0 for s in scale):
        raise FormatError(
            f"{where}: {at}: expected a positive scale first (then a translation); got {raw!r}"
        )
    return scale, shift


def _numbers(values: Any, n: int) -> bool:
    return (
        isinstance(values, list)
        and len(values) == n
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        and all(math.isfinite(v) for v in values)
    )


def _array(reader: Reader, path: str, key: str) -> ArrayInfo:
    try:
        return reader.array_info(path)
    except MissingFieldError as err:
        raise FormatError(
            f"{reader.location}: {key}: expected an array at {path!r}; nothing there "
            f"(arrays: {reader.array_names()})"
        ) from err
