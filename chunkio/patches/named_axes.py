"""A user's own image array described by named axes (``axes="cyx"``), as OME-NGFF names them.

Without ``axes``, :class:`~chunkio.patches.PatchDataset` tells what an array of a store
chunkio did not write holds from its number of dimensions (:func:`chunkio.format.foreign.
foreign_volumes`): one axis more than the patch is a volume axis. That reads an RGB slide
stored ``(3, H, W)`` as three gray images; ``axes`` says what each axis is: ``t`` (volumes),
``c`` (channels), then the space axes (``yx``, ``zyx``; any other letters), in that order,
one letter per dimension. A label array has the image's axes without ``c``.

Channels after the space axes (``yxc``, as tifffile gives RGB pages) cannot be read as the
channel axis in place (a patch's channels would be strided in every chunk); they are refused
here with the way around: read ``c`` as one more space axis (``patch_size=(h, w, 3)``), or
store the image channels first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..backends import ArrayInfo, Reader
from ..errors import FormatError, MissingFieldError
from ..format.foreign import FieldSelection, volume_field
from ..format.layout import DatasetLayout
from ..format.volume_layout import VolumeSet

__all__ = ["NamedAxes", "axes_volumes"]


@dataclass(frozen=True)
class NamedAxes:
    """The axes of an image array: their letters, whether the first is ``t`` (volumes),
    and where ``c`` (channels) is (``None``: no channel axis)."""

    names: str
    time: bool
    channel: int | None

    @classmethod
    def parse(cls, axes: str, spatial: int) -> NamedAxes:
        """``axes`` checked against NGFF's order for ``spatial`` space axes.

        >>> NamedAxes.parse("cyx", 2)
        NamedAxes(names='cyx', time=False, channel=0)
        """
        if not isinstance(axes, str) or len(set(axes)) != len(axes) or not axes.isalpha():
            raise ValueError(
                f"axes must be distinct letters such as 'cyx' or 'tczyx'; got {axes!r}"
            )
        names = axes.lower()
        space = names.replace("t", "").replace("c", "")
        lead = names[: len(names) - len(space)]
        if lead not in ("", "t", "c", "tc") or len(space) != spatial:
            hint = (
                "; channels after the space axes are not read in place: give patch_size "
                "one more size for them (a space axis), or store the image channels first"
                if "c" in names and lead not in ("c", "tc")
                else ""
            )
            raise ValueError(
                f"axes must be an optional 't', an optional 'c', then {spatial} space axes "
                f"(one per patch size); got {axes!r}{hint}"
            )
        return cls(names, lead.startswith("t"), lead.index("c") if "c" in lead else None)

    @property
    def label(self) -> str:
        """The axes of a label array: the image's without ``c``."""
        return self.names.replace("c", "")


def axes_volumes(
    reader: Reader, fields: FieldSelection | None, axes: NamedAxes, spatial: int
) -> tuple[DatasetLayout, VolumeSet]:
    """The volumes of the image array ``fields`` names (and its label array), by ``axes``."""
    where = reader.location
    arrays = _arrays(fields, where)
    infos = {kind: _info(reader, path) for kind, path in arrays.items()}
    image = infos["image"]
    if len(image.shape) != len(axes.names):
        raise FormatError(
            f"{where}: array {arrays['image']!r} of shape {tuple(image.shape)}: expected one "
            f"dimension per axis of axes={axes.names!r}"
        )
    shape = tuple(int(n) for n in image.shape[-spatial:])
    count = int(image.shape[0]) if axes.time else 1
    label = infos.get("label")
    want = ((count,) if axes.time else ()) + shape
    if label is not None and tuple(int(n) for n in label.shape) != want:
        raise FormatError(
            f"{where}: label array {arrays['label']!r} has shape {tuple(label.shape)}; "
            f"expected {want} (axes {axes.label!r}: the image's {tuple(image.shape)} without "
            "channels)"
        )
    volumes = VolumeSet(
        shapes=(shape,) * count,
        chunks=tuple(int(c) for c in image.chunks[-spatial:]),
        stacked=True,
        channels=None if axes.channel is None else int(image.shape[axes.channel]),
        label=None if label is None else "label",
        volume_axis=axes.time,
    )
    layout = DatasetLayout(
        num_samples=count,
        samples_per_chunk=1,
        fields=tuple(
            volume_field(kind, arrays[kind], info, where, volume_axis=axes.time)
            for kind, info in infos.items()
        ),
        foreign=True,
    )
    return layout, volumes


def _arrays(fields: FieldSelection | None, where: str) -> dict[str, str]:
    """``{"image": path, ["label": path]}`` from a mapping or a list (image first)."""
    if isinstance(fields, Mapping):
        arrays = {str(k): str(v).strip("/") for k, v in fields.items()}
    elif fields is not None and not isinstance(fields, str):
        arrays = {k: str(v).strip("/") for k, v in zip(("image", "label"), fields, strict=False)}
        if len(fields) > 2:
            arrays["?"] = ""
    else:
        arrays = {}
    if "image" not in arrays or not set(arrays) <= {"image", "label"}:
        raise FormatError(
            f"{where}: with axes, fields name an 'image' array and optionally a 'label' array "
            f"(a mapping, or a list: image first); got {fields!r}"
        )
    return arrays


def _info(reader: Reader, path: str) -> ArrayInfo:
    try:
        return reader.array_info(path)
    except MissingFieldError as err:
        raise MissingFieldError(
            f"{reader.location}: no array {path!r}; arrays found: {reader.array_names()}"
        ) from err
