"""One converted volume as an OME-Zarr 0.5 image: its scale pyramid, its label image and the
label index chunkio samples from.

An image ``<name>`` (a Zarr v3 group) holds::

    zarr.json                   attributes "ome" (NGFF 0.5 "multiscales") and "chunkio"
    s0, s1, ...                 the image, full resolution first; axes ([c,] z, y, x)
    labels/zarr.json            "ome": {"labels": ["label"]}
    labels/label/s0, s1, ...    the label image ("image-label"), axes (z, y, x), same levels
    chunkio/label_index         the label index of labels/label/s0, as chunkio writes it
    chunkio/label_points        (:mod:`chunkio.format.label_index`); viewers ignore the group

Levels halve every spatial axis longer than one voxel (sizes rounded up): images by the mean
of each block (edge blocks padded with their edge voxels; integers rounded to nearest),
labels by the block's first voxel (nearest neighbour, never a value that is not a label).
Every array of every level is chunked like the conversion's chunks (clipped to the level's
shape), with the conversion's codec and checksum, all-zero chunks stored (a missing chunk is
an error, not zeros), and named dimensions, as NGFF 0.5 requires. A level's ``scale`` is the
voxel spacing times its downsampling factor and its ``translation`` puts each voxel at the
centre of the block it summarises (level 0 at the origin: NGFF 0.5 has no rotation, so a
NIfTI affine is kept in the ``chunkio`` attributes, with the rest of the source's metadata).

The ``chunkio`` attribute's ``label_index`` names the index arrays, the label level they
index and its chunk shape: :func:`chunkio.patches.ome_reads.ome_label_index` uses it when
they match the level and chunks it reads, instead of reading every label volume.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...backends import Compression
from ...backends.codec_table import zarr_compressors
from ...format.layout import ATTR_KEY
from ...util.fsync import fsync_tree
from ...util.numeric import ceil_div
from .sources import VolumeFile
from .tasks import VolumeResult, VolumeTask, prepare_volume

__all__ = [
    "LABEL_NAME",
    "OME_VERSION",
    "OmeJob",
    "image_intact",
    "level_steps",
    "ome_axes",
    "shrink_image",
    "shrink_label",
]

OME_VERSION = "0.5"
#: the label image's name under ``labels/``
LABEL_NAME = "label"
#: at most this many label values get a colour in ``image-label.colors`` (a volume of cell
#: instances holds millions: then only 0 and the class names' values get one)
MAX_LABEL_COLOURS = 256
#: label colours (RGB), value 1 first, repeating past the last (value 0 is transparent)
LABEL_PALETTE = (
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
    (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
)  # fmt: skip
INDEX_ROWS = "chunkio/label_index"
INDEX_POINTS = "chunkio/label_points"
SPATIAL_NAMES = ("z", "y", "x")
#: source spellings of length units -> the UDUNITS-2 names NGFF asks for
_UNITS = {
    "m": "meter",
    "meter": "meter",
    "cm": "centimeter",
    "mm": "millimeter",
    "micron": "micrometer",
    "microns": "micrometer",
    "um": "micrometer",
    "\u00b5m": "micrometer",
    "\u03bcm": "micrometer",
    "micrometer": "micrometer",
    "nm": "nanometer",
    "nanometer": "nanometer",
}


def level_steps(
    shape: Sequence[int], chunks: Sequence[int], levels: int | None
) -> list[tuple[int, ...]]:
    """The cumulative downsampling factor per spatial axis of each level (level 0 first).

    ``levels``: how many (fewer when every axis is down to one voxel); ``None``: until the
    level fits in one chunk.

    >>> level_steps((16, 24, 24), (8, 8, 8), None)
    [(1, 1, 1), (2, 2, 2), (4, 4, 4)]
    >>> level_steps((1, 5, 4), (8, 8, 8), 3)
    [(1, 1, 1), (1, 2, 2), (1, 4, 4)]
    """
    out = [tuple(1 for _ in shape)]
    size = list(shape)
    while True:
        more = any(s > c for s, c in zip(size, chunks, strict=True))
        if (levels is None and not more) or (levels is not None and len(out) >= levels):
            return out
        step = [2 if s > 1 else 1 for s in size]
        if step == [1] * len(size):
            return out
        size = [ceil_div(s, f) for s, f in zip(size, step, strict=True)]
        out.append(tuple(a * f for a, f in zip(out[-1], step, strict=True)))


def _level_shape(shape: Sequence[int], factor: Sequence[int]) -> tuple[int, ...]:
    return tuple(ceil_div(s, f) for s, f in zip(shape, factor, strict=True))


def shrink_image(data: npt.NDArray[Any], factor: Sequence[int]) -> npt.NDArray[Any]:
    """Block means of the trailing spatial axes of ``data`` (edge blocks padded with their
    edge voxels), in ``data``'s dtype (integers rounded to nearest, ties to even).

    >>> shrink_image(np.array([[0, 2, 4], [2, 4, 8]], np.uint8), (2, 2))
    array([[2, 6]], dtype=uint8)
    """
    lead = data.ndim - len(factor)
    full = [ceil_div(s, f) * f for s, f in zip(data.shape[lead:], factor, strict=True)]
    pad = [(0, 0)] * lead + [(0, n - s) for n, s in zip(full, data.shape[lead:], strict=True)]
    padded = np.pad(data, pad, mode="edge") if any(p[1] for p in pad) else data
    blocks = [*data.shape[:lead]]
    for n, f in zip(full, factor, strict=True):
        blocks.extend((n // f, f))
    axes = tuple(lead + 2 * k + 1 for k in range(len(factor)))
    mean: npt.NDArray[np.float64] = padded.reshape(blocks).mean(axis=axes, dtype=np.float64)
    if data.dtype.kind in "biu":
        mean = np.rint(mean)
    return mean.astype(data.dtype)


def shrink_label(label: npt.NDArray[Any], factor: Sequence[int]) -> npt.NDArray[Any]:
    """Each block's first voxel (nearest neighbour): a level of labels holds only labels.

    >>> shrink_label(np.arange(6).reshape(2, 3), (2, 2))
    array([[0, 2]])
    """
    return np.ascontiguousarray(label[tuple(slice(None, None, f) for f in factor)])


def ome_unit(unit: Any) -> str | None:
    """A source's length unit as NGFF names it (``None``: unknown or not a length)."""
    return _UNITS.get(str(unit).strip().lower()) if unit is not None else None


def ome_axes(channels: bool, unit: str | None, *, label: bool = False) -> list[dict[str, Any]]:
    """The ``axes`` of an image (``[c,] z, y, x``) or of its label image (``z, y, x``)."""
    space = [
        {"name": n, "type": "space", **({"unit": unit} if unit else {})} for n in SPATIAL_NAMES
    ]
    head = [{"name": "c", "type": "channel"}] if channels and not label else []
    return head + space


def spacing_of(vf: VolumeFile) -> tuple[float, ...]:
    """The voxel spacing a source records (1 where it records none or nonsense)."""
    raw = vf.meta.get("spacing") or []
    out = []
    for k in range(len(vf.spatial)):
        value = raw[k] if k < len(raw) else None
        ok = isinstance(value, int | float) and math.isfinite(value) and value > 0
        out.append(float(value) if ok and value is not None else 1.0)
    return tuple(out)


def _datasets(
    steps: Sequence[tuple[int, ...]], spacing: Sequence[float], lead: int
) -> list[dict[str, Any]]:
    out = []
    for k, factor in enumerate(steps):
        scale = [1.0] * lead + [s * f for s, f in zip(spacing, factor, strict=True)]
        shift = [0.0] * lead + [s * (f - 1) / 2 for s, f in zip(spacing, factor, strict=True)]
        out.append(
            {
                "path": f"s{k}",
                "coordinateTransformations": [
                    {"type": "scale", "scale": scale},
                    {"type": "translation", "translation": shift},
                ],
            }
        )
    return out


def _multiscales(
    name: str, axes: list[dict[str, Any]], datasets: list[dict[str, Any]], method: str
) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "axes": axes,
            "datasets": datasets,
            "type": method,
            "metadata": {"method": method, "writer": "chunkio"},
        }
    ]


@dataclass(frozen=True)
class OmeJob:
    """What a worker needs to write volumes as OME-Zarr images: the collection's root (a
    path or URL when workers run elsewhere; a zarr store in this process), each volume's
    image name, the levels and codec; picklable when ``root`` is."""

    root: Any
    names: tuple[str, ...]
    levels: int | None
    compression: Compression
    #: fsync each image before its volume is recorded (a staged, resumable destination)
    durable: bool
    #: names of the label values 0, 1, ... (the label image's ``properties``)
    class_names: tuple[str, ...] | None = None

    def run(self, task: VolumeTask) -> VolumeResult:
        """Convert one volume and write its image; return what the manifest keeps."""
        result = prepare_volume(task)
        self.write(task, result)
        if self.durable:
            fsync_tree(f"{self.root}/{self.names[task.volume]}")
        result.image = result.label = None  # written: nothing to send back but the index
        return result

    def written(self, result: VolumeResult) -> bool:
        return True

    def write(self, task: VolumeTask, result: VolumeResult) -> None:
        """The image of ``task``'s volume, replacing whatever an earlier run left there:
        arrays first, then the attributes that make it an image."""
        import zarr

        name = self.names[task.volume]
        group = zarr.open_group(store=self.root, path=name, mode="w", zarr_format=3)
        image = np.asarray(result.image)
        spatial = task.image.spatial
        steps = level_steps(spatial, task.chunks, self.levels)
        spacing = spacing_of(task.image)
        unit = ome_unit(task.image.meta.get("unit"))
        channels = task.image.channels is not None
        lead = image.ndim - len(spatial)
        axes = ome_axes(channels, unit)
        self._levels(group, image, steps, task.chunks, axes, shrink_image)
        attrs: dict[str, Any] = {
            "ome": {
                "version": OME_VERSION,
                "multiscales": _multiscales(name, axes, _datasets(steps, spacing, lead), "mean"),
            },
            ATTR_KEY: self._chunkio_attrs(task, result, steps),
        }
        if result.label is not None:
            self._label(group, task, result, steps, spacing, unit)
        group.update_attributes(attrs)

    def _levels(
        self,
        group: Any,
        data: npt.NDArray[Any],
        steps: Sequence[tuple[int, ...]],
        chunks: Sequence[int],
        axes: list[dict[str, Any]],
        shrink: Any,
    ) -> None:
        names = [a["name"] for a in axes]
        lead = data.ndim - len(chunks)
        level, previous = data, steps[0]
        for k, factor in enumerate(steps):
            if k:
                step = [f // p for f, p in zip(factor, previous, strict=True)]
                level, previous = shrink(level, step), factor
            spatial = level.shape[lead:]
            arr = group.create_array(
                f"s{k}",
                shape=level.shape,
                dtype=level.dtype,
                chunks=(
                    *level.shape[:lead],
                    *(min(c, n) for c, n in zip(chunks, spatial, strict=True)),
                ),
                compressors=zarr_compressors(self.compression),
                fill_value=0,
                dimension_names=names,
                # an all-zero chunk is stored, so that a missing chunk is never read as zeros
                config={"write_empty_chunks": True},
            )
            arr[...] = level

    def _label(
        self,
        group: Any,
        task: VolumeTask,
        result: VolumeResult,
        steps: Sequence[tuple[int, ...]],
        spacing: Sequence[float],
        unit: str | None,
    ) -> None:
        label = np.asarray(result.label)
        axes = ome_axes(False, unit, label=True)
        image_label = group.create_group(f"labels/{LABEL_NAME}")
        self._levels(image_label, label, steps, task.chunks, axes, shrink_label)
        image_label.update_attributes(
            {
                "ome": {
                    "version": OME_VERSION,
                    "image-label": self._image_label(_present(result.rows, label.dtype)),
                    "multiscales": _multiscales(
                        LABEL_NAME, axes, _datasets(steps, spacing, 0), "nearest"
                    ),
                }
            }
        )
        rows = result.rows.copy()
        rows[:, 0] = 0  # the image holds one volume
        for path, values in ((INDEX_ROWS, rows), (INDEX_POINTS, result.points)):
            arr = group.create_array(
                path,
                shape=values.shape,
                dtype=np.int64,
                chunks=tuple(max(1, n) for n in values.shape),
                compressors=zarr_compressors(self.compression),
                fill_value=0,
                config={"write_empty_chunks": True},
            )
            arr[...] = values
        group["labels"].update_attributes({"ome": {"version": OME_VERSION, "labels": [LABEL_NAME]}})

    def _image_label(self, present: npt.NDArray[Any]) -> dict[str, Any]:
        """``image-label``: a colour for every label value the volume holds or the class names
        name (NGFF 0.5's strict schema requires ``colors``; viewers draw them), 0 transparent."""
        names: Sequence[str] = self.class_names or ()
        named = set(range(min(len(names), MAX_LABEL_COLOURS)))
        values = sorted({int(v) for v in present} | named | {0})
        if len(values) > MAX_LABEL_COLOURS:  # instances, not classes: the named ones only
            values = sorted(named | {0})
        out: dict[str, Any] = {
            "colors": [{"label-value": v, "rgba": label_rgba(v)} for v in values],
            "source": {"image": "../../"},
        }
        if self.class_names is not None:
            out["properties"] = [
                {"label-value": v, "name": n} for v, n in enumerate(self.class_names)
            ]
        return out

    def _chunkio_attrs(
        self, task: VolumeTask, result: VolumeResult, steps: Sequence[tuple[int, ...]]
    ) -> dict[str, Any]:
        meta = {k: v for k, v in task.image.meta.items() if k in ("affine", "axcodes", "unit")}
        out: dict[str, Any] = {
            "source": {
                "image": task.image.path,
                **({"label": task.label.path} if task.label is not None else {}),
                **meta,
            },
            "scaling": {"slope": result.slope, "inter": result.inter},
            "levels": len(steps),
        }
        if task.label is not None:
            chunks = [min(c, n) for c, n in zip(task.chunks, task.image.spatial, strict=True)]
            out["label_index"] = {
                "label": LABEL_NAME,
                "level": f"labels/{LABEL_NAME}/s0",
                "chunks": chunks,
                "rows": INDEX_ROWS,
                "points": INDEX_POINTS,
            }
        return out


def image_intact(root: Any, name: str) -> bool:
    """Whether image ``name`` under ``root`` is whole: its attributes written and every
    array (each level, each label level, the index) reading back, checksums passing."""
    import zarr

    try:
        group = zarr.open_group(store=root, path=name, mode="r", zarr_format=3)
        ome = group.attrs.get("ome")  # written last: present only once the rest is
        return isinstance(ome, Mapping) and "multiscales" in ome and _whole(group)
    except Exception:  # missing, torn or corrupt: convert this volume again
        return False


def _whole(group: Any) -> bool:
    for _path, arr in group.arrays():
        if arr.nchunks_initialized != arr.nchunks:  # zarr reads a missing chunk as zeros
            return False
        arr[...]  # decodes every chunk: a torn one or a bad checksum raises
    return all(_whole(sub) for _path, sub in group.groups())


def _present(rows: npt.NDArray[np.int64], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The label values a volume holds, from its label index's rows (their value column, kept
    as int64: uint64 values past 2**63 read back through their own dtype).

    >>> _present(np.array([[0, 0, 0, 3, 8], [0, 0, 1, -1, 2]]), np.dtype("u8")).tolist()
    [3, 18446744073709551615]
    """
    values = rows[:, -2]
    return np.unique(values.view(np.uint64) if dtype == np.uint64 else values)


def label_rgba(value: int) -> list[int]:
    """The colour OME-Zarr label images chunkio writes give ``value``: 0 (background)
    transparent, others from :data:`LABEL_PALETTE` in turn.

    >>> label_rgba(0), label_rgba(1), label_rgba(11)
    ([0, 0, 0, 0], [230, 25, 75, 255], [230, 25, 75, 255])
    """
    if value == 0:
        return [0, 0, 0, 0]
    return [*LABEL_PALETTE[(value - 1) % len(LABEL_PALETTE)], 255]
