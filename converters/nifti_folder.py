"""A folder of NIfTI images with matching label files -> chunkio volume dataset, in one call.

The Medical Segmentation Decathlon / nnU-Net layout::

    ROOT/dataset.json          optional: label names ("labels"), used as class names
    ROOT/imagesTr/x.nii.gz     images (nnU-Net channel files x_0000.nii.gz match x.nii.gz)
    ROOT/labelsTr/x.nii.gz     label volumes, matched to images by file name

Hidden files (the ``._x.nii.gz`` files macOS leaves in the MSD archives) are ignored. Thin
over :func:`chunkio.convert.volumes.convert_volumes`, which documents the layout, the value
policies and the per-chunk label index used for label-balanced patch sampling.
"""

from __future__ import annotations

import json
import os
from typing import Any

from chunkio.convert import ConversionResult
from chunkio.convert.volumes import convert_volumes
from chunkio.errors import SourceError

__all__ = ["convert", "label_names"]


def convert(
    src: str | os.PathLike[str],
    dst: Any,
    *,
    images: str = "imagesTr",
    labels: str | None = "labelsTr",
    **kw: Any,
) -> ConversionResult:
    """Convert ``src/images`` (with ``src/labels``) into ``dst``; ``kw`` go to convert_volumes.

    ``labels=None`` (or a missing labels folder when ``images`` is not ``imagesTr``, e.g.
    ``imagesTs``) converts images only.

    Examples
    --------
    ``convert("Task02_Heart", "heart.zarr", output=Output(chunks=64),
    execution=Execution(workers=4))`` (:class:`chunkio.Output`, :class:`chunkio.Execution`)
    """
    root = os.fspath(src)
    image_dir = os.path.join(root, images)
    if not os.path.isdir(image_dir):
        raise SourceError(f"{root}: expected an image folder {images!r}; it does not exist")
    label_dir = None if labels is None else os.path.join(root, labels)
    if label_dir is not None and not os.path.isdir(label_dir):
        if images == "imagesTr":
            raise SourceError(
                f"{root}: no label folder {labels!r} next to {images!r}; pass labels=None to "
                "convert the images alone"
            )
        label_dir = None
    if "class_names" not in kw and label_dir is not None:
        kw["class_names"] = label_names(root)
    return convert_volumes(image_dir, dst, labels=label_dir, **kw)


def label_names(root: str | os.PathLike[str]) -> list[str] | None:
    """Label names from ``root/dataset.json`` ordered by value (MSD or nnU-Net v2 style).

    MSD writes ``{"labels": {"0": "background", "1": "left atrium"}}``, nnU-Net v2
    ``{"labels": {"background": 0, "left atrium": 1}}``; ``None`` without a usable file.
    """
    path = os.path.join(os.fspath(root), "dataset.json")
    try:
        with open(path, encoding="utf-8") as fh:
            labels = json.load(fh).get("labels")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(labels, dict) or not labels:
        return None
    try:
        pairs = [(int(k), str(v)) for k, v in labels.items()]  # MSD: value -> name
    except (TypeError, ValueError):
        try:
            pairs = [(int(v), str(k)) for k, v in labels.items()]  # nnU-Net v2: name -> value
        except (TypeError, ValueError):
            return None  # region-based labels (lists of values): no single name per value
    values = sorted(v for v, _ in pairs)
    if values != list(range(len(values))):
        return None  # gaps: names by position would be wrong
    return [name for _, name in sorted(pairs)]
