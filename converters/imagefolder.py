"""ImageFolder (``ROOT/<class>/<image>``) -> chunkio dataset.

Thin over :func:`chunkio.convert.images.convert_images`, which documents the discovery rules
(classes sorted by name -> labels 0..K-1, hidden and non-image files ignored) and the decode
policy (EXIF orientation, mode, size). Unlike ``convert_images``, a folder without class
subfolders is refused, as torchvision's ``ImageFolder`` refuses it.
"""

from __future__ import annotations

import os
from typing import Any

from chunkio.convert import ConversionResult
from chunkio.convert.images import convert_images
from chunkio.errors import SourceError

__all__ = ["convert"]


def convert(
    src: str | os.PathLike[str],
    dst: Any,
    *,
    shuffle: bool = True,
    seed: int = 0,
    **kw: Any,
) -> ConversionResult:
    """Convert the ImageFolder at ``src`` into ``dst``; ``kw`` go to ``convert_images``.

    Images are stored in a seeded random order (``shuffle``, ``seed``), so every chunk mixes
    classes; ``source_index`` and ``path`` map rows back to files (``shuffle=False``: class by
    class, in listing order).

    Examples
    --------
    ``convert("imagenette2/train", "train.zarr", size=(160, 160), on_error="skip")``
    """
    root = os.fspath(src)
    if not os.path.isdir(root):
        raise SourceError(f"{root}: expected an ImageFolder directory; it is not a directory")
    classes = [e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")]
    if not classes:
        raise SourceError(
            f"{root}: no class subfolders (expected ROOT/<class>/<image>); use "
            "chunkio.convert.images.convert_images for a flat folder of unlabelled images"
        )
    return convert_images(root, dst, shuffle=shuffle, seed=seed, **kw)
