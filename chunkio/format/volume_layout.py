"""How a chunkio dataset holds volumes: the ``extra["volumes"]`` description and its arrays.

A *volume dataset* is an ordinary chunkio dataset (see :mod:`chunkio.format.layout`) written by
:func:`chunkio.convert.volumes.convert_volumes` or :func:`chunkio.patches.stitch`. Two layouts:

*stacked* (every volume has the same shape)
    field ``image`` of shape ``(N, [C,] *spatial)`` chunked ``(1, [C,] *chunks)``, field
    ``label`` of shape ``(N, *spatial)``; ``samples_per_chunk`` = 1, so a
    :class:`~chunkio.ChunkDataset` serves whole volumes too.
*per-volume* (shapes differ)
    one field per volume, ``image_000``, ``image_001``, ... (and ``label_000``, ...), each of
    shape ``(1, [C,] *spatial_k)``: a valid chunkio dataset of one sample.

``extra["volumes"]`` records ``stacked``, ``count``, ``shapes`` (spatial shape of each volume),
``channels`` (``null`` when there is no channel axis), ``chunks`` (spatial chunk shape),
``image``/``label`` (field name stems, ``label`` ``null`` without labels), ``label_index``
(see :mod:`chunkio.format.label_index`) and per-volume ``sources`` (file names, voxel
spacing, affine and orientation) and ``scaling`` (``slope``/``inter``: original value =
stored * slope + inter).

The volumes of a store chunkio did not write (:func:`chunkio.format.foreign.foreign_volumes`) are
described by a :class:`VolumeSet` too, never written: stacked, and, for a single volume
stored as one spatial array, without the volume axis (``volume_axis=False``); so are the
images of an OME-Zarr store (:mod:`chunkio.patches.ome_zarr`), whose label arrays may keep a
channel axis of one (``label_channel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError
from ..util.numeric import ceil_div

__all__ = ["VOLUMES_KEY", "VolumeSet"]

VOLUMES_KEY = "volumes"
VOLUMES_VERSION = 1


@dataclass(frozen=True)
class VolumeSet:
    """Geometry of the volumes of one dataset: shapes, chunking and where each is stored.

    >>> vs = VolumeSet(shapes=((4, 6, 6), (4, 6, 6)), chunks=(2, 3, 3), stacked=True)
    >>> vs.array("image", 1), vs.chunk_grid(0), vs.region("image", 1, (0, 3, 3), (2, 6, 6))
    (('image', 1), (2, 2, 2), (slice(1, 2, None), slice(0, 2, None), slice(3, 6, None), \
slice(3, 6, None)))
    """

    shapes: tuple[tuple[int, ...], ...]
    chunks: tuple[int, ...]
    stacked: bool
    channels: int | None = None
    image: str = "image"
    label: str | None = None
    #: whether the arrays have a leading volume axis (a user's single ``(D, H, W)`` array
    #: has none; chunkio writes one always)
    volume_axis: bool = True
    #: whether the label arrays have a channel axis of one (after the volume axis): an
    #: OME-Zarr label image written with its image's ``c`` axis
    label_channel: bool = False

    def __post_init__(self) -> None:
        if not self.shapes:
            raise FormatError("a volume dataset needs at least one volume; got none")
        if not self.volume_axis and (self.count != 1 or not self.stacked):
            raise FormatError(
                f"volumes stored without a volume axis are one stacked volume; got {self.count} "
                f"volumes, stacked={self.stacked}"
            )
        ndim = len(self.chunks)
        if ndim < 1 or any(c < 1 for c in self.chunks):
            raise FormatError(f"volume chunks must be positive; got {self.chunks}")
        for v, shape in enumerate(self.shapes):
            if len(shape) != ndim or any(s < 1 for s in shape):
                raise FormatError(
                    f"volume {v}: shape {shape} must have {ndim} positive sizes like chunks "
                    f"{self.chunks}"
                )
        if self.stacked and len(set(self.shapes)) != 1:
            raise FormatError(f"stacked volumes must share one shape; got {set(self.shapes)}")

    @property
    def count(self) -> int:
        return len(self.shapes)

    @property
    def ndim(self) -> int:
        """Spatial dimensions."""
        return len(self.chunks)

    def field_names(self, kind: str) -> tuple[str, ...]:
        """The layout fields holding ``kind`` (``"image"`` or ``"label"``) of every volume."""
        stem = self._stem(kind)
        if self.stacked:
            return (stem,)
        return tuple(per_volume_name(stem, v, self.count) for v in range(self.count))

    def array(self, kind: str, volume: int) -> tuple[str, int]:
        """Field name and row (axis-0 index) holding volume ``volume``."""
        if not 0 <= volume < self.count:
            raise IndexError(f"volume {volume} out of range for {self.count} volumes")
        stem = self._stem(kind)
        if self.stacked:
            return stem, volume
        return per_volume_name(stem, volume, self.count), 0

    def chunk_grid(self, volume: int) -> tuple[int, ...]:
        """Chunks per spatial axis of volume ``volume``."""
        return tuple(ceil_div(s, c) for s, c in zip(self.shapes[volume], self.chunks, strict=True))

    def region(
        self, kind: str, volume: int, lo: tuple[int, ...], hi: tuple[int, ...]
    ) -> tuple[slice, ...]:
        """The array region holding spatial box ``[lo, hi)`` of a volume (all channels;
        its row of the volume axis, when the arrays have one)."""
        _, row = self.array(kind, volume)
        channel = (slice(0, self.channels),) if kind == "image" and self.channels else ()
        if kind == "label" and self.label_channel:
            channel = (slice(0, 1),)
        box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
        if not self.volume_axis:
            return (*channel, *box)
        return (slice(row, row + 1), *channel, *box)

    def item_shape(self, kind: str, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of one patch of ``kind`` with spatial size ``spatial``."""
        if kind == "image" and self.channels:
            return (self.channels, *spatial)
        return tuple(spatial)

    def _stem(self, kind: str) -> str:
        if kind == "image":
            return self.image
        if kind == "label" and self.label is not None:
            return self.label
        raise KeyError(
            f"the volumes have no {kind!r} arrays (image={self.image!r}, label={self.label!r})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VOLUMES_VERSION,
            "stacked": self.stacked,
            "count": self.count,
            "shapes": [list(s) for s in self.shapes],
            "channels": self.channels,
            "chunks": list(self.chunks),
            "image": self.image,
            "label": self.label,
        }

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any], *, where: str) -> VolumeSet:
        """Parse ``extra["volumes"]`` of the dataset at ``where``."""
        meta = extra.get(VOLUMES_KEY)
        if not isinstance(meta, Mapping):
            raise FormatError(
                f"{where}: not a volume dataset (no extra[{VOLUMES_KEY!r}]); convert volumes "
                "with chunkio.convert.volumes.convert_volumes"
            )
        if meta.get("version") != VOLUMES_VERSION:
            raise FormatError(
                f"{where}: volume layout version {meta.get('version')!r} is not supported "
                f"(expected {VOLUMES_VERSION})"
            )
        try:
            channels = meta.get("channels")
            label = meta.get("label")
            vs = cls(
                shapes=tuple(tuple(int(s) for s in shape) for shape in meta["shapes"]),
                chunks=tuple(int(c) for c in meta["chunks"]),
                stacked=bool(meta["stacked"]),
                channels=None if channels is None else int(channels),
                image=str(meta["image"]),
                label=None if label is None else str(label),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise FormatError(f"{where}: malformed extra[{VOLUMES_KEY!r}]: {err!r}") from err
        if int(meta.get("count", -1)) != vs.count:
            raise FormatError(
                f"{where}: extra[{VOLUMES_KEY!r}] declares {meta.get('count')!r} volumes but "
                f"lists {vs.count} shapes"
            )
        return vs


def per_volume_name(stem: str, volume: int, count: int) -> str:
    """Field name of volume ``volume`` in the per-volume layout.

    >>> per_volume_name("image", 7, 12), per_volume_name("label", 7, 5000)
    ('image_007', 'label_0007')
    """
    width = max(3, len(str(count - 1)))
    return f"{stem}_{volume:0{width}d}"
