"""The samples of :func:`~chunkio.convert.images.convert_images`: checked image files, read as a
:class:`~chunkio.convert.BlockSource` in the write pass."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...format.kinds import kind_of
from ...format.layout import FieldInfo
from ...images.pillow import DecodePolicy, load_image
from .check import Checked
from .encoding import choose_encoding, image_bytes, stored_as_is
from .plan import agreed_mode, stored_shapes
from .scan import ImageEntry

__all__ = ["ImageSource"]

#: decoded bytes over encoded bytes, roughly, of natural photos (chunk sizing only):
#: JPEG q90 4:2:0 measured 8.6x (bench_images), WebP q90 about as small, PNG 1.5-2x
_ENCODED_RATIO = {"jpeg": 8.0, "webp": 8.0, "png": 1.5, "yuv420": 2.5}


class ImageSource:
    """A :class:`~chunkio.convert.BlockSource` of checked image files (pass 2).

    Built by :func:`convert_images`; each sample's stored shape is known in advance and
    checked again after decoding.
    """

    def __init__(
        self,
        entries: Sequence[ImageEntry],
        checked: Sequence[Checked],
        policy: DecodePolicy,
        *,
        labelled: bool,
        encoding: str = "raw",
        quality: int = 90,
    ) -> None:
        probes = [c.probe for c in checked]
        self.policy = policy
        self.stored_mode = agreed_mode(entries, probes, policy)
        self._paths = [e.path for e in entries]
        self._fingerprint_parts = [
            (e.rel, e.label, c.size, c.mtime_ns) for e, c in zip(entries, checked, strict=True)
        ]
        self.num_samples = len(entries)
        channels, dtype = probes[0].channels, probes[0].dtype
        self.orig_size = np.array([(p.height, p.width) for p in probes], np.int32).reshape(-1, 2)
        self.shapes = stored_shapes(self.orig_size, channels, policy.size, policy.max_size)
        self.encoding = choose_encoding(encoding, entries, channels, dtype)
        self.quality = quality
        self.as_is = stored_as_is(self.encoding, checked, self.shapes, self.orig_size, dtype)
        self._file_sizes = np.array([c.size for c in checked], np.int64)
        self.labels = np.array([e.label for e in entries], np.int64) if labelled else None
        encoded = [os.fsencode(e.rel) for e in entries]
        width = max(len(b) for b in encoded)
        self.path_bytes = np.zeros((len(encoded), width), np.uint8)
        for i, b in enumerate(encoded):
            self.path_bytes[i, : len(b)] = np.frombuffer(b, np.uint8)
        ragged = len({tuple(s) for s in self.shapes.tolist()}) > 1
        shape = None if ragged else tuple(int(s) for s in self.shapes[0])
        if self.encoding != "raw":
            image = FieldInfo("image", dtype, shape, "encoded", encoding=self.encoding)
        else:
            image = FieldInfo("image", dtype, shape, "ragged" if ragged else "dense")
        self.fields: tuple[FieldInfo, ...] = (
            image,
            *([FieldInfo("label", np.dtype(np.int64), ())] if labelled else []),
            FieldInfo("orig_size", np.dtype(np.int32), (2,)),
            FieldInfo("path", np.dtype(np.uint8), (width,)),
        )

    @property
    def mean_sample_nbytes(self) -> float:
        """Mean decoded bytes of one image (for chunk and block sizing)."""
        itemsize = self.fields[0].dtype.itemsize
        return float(np.prod(self.shapes, axis=1).mean()) * itemsize

    @property
    def mean_stored_nbytes(self) -> float:
        """Estimated mean bytes one image is stored as (for chunk sizing): its decoded bytes
        for ``raw``; for an encoding, a file kept as it is takes its file's size, the others
        their decoded bytes over :data:`_ENCODED_RATIO` (never more than their file's size)."""
        decoded = np.prod(self.shapes, axis=1).astype(np.float64) * self.fields[0].dtype.itemsize
        if self.encoding == "raw" or not decoded.size:
            return float(decoded.mean()) if decoded.size else 0.0
        sizes = np.asarray(self._file_sizes, np.float64)
        guess = decoded / _ENCODED_RATIO[self.encoding]
        guess = np.where(sizes > 0, np.minimum(guess, sizes), guess)
        return float(np.where(self.as_is, sizes, guess).mean())

    @property
    def ragged(self) -> bool:
        """Whether ``image`` is a list per block (ragged, or encoded bytes)."""
        return kind_of(self.fields[0].kind).flat

    def ragged_shapes(self, name: str) -> npt.NDArray[np.int64]:
        """Per-sample (decoded) shapes of the ragged or encoded field ``image``."""
        if name != "image" or not self.ragged:
            raise KeyError(f"{name!r} is not a ragged or encoded field of this source")
        return self.shapes

    def fingerprint(self) -> str:
        options = (self.policy, self.stored_mode, self.encoding, self.quality)
        h = hashlib.sha256(repr(options).encode())
        for part in self._fingerprint_parts:
            h.update(repr(part).encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        return self.read_rows(np.arange(start, stop, dtype=np.int64))

    def read_rows(self, indices: npt.NDArray[np.int64]) -> dict[str, Any]:
        """Images ``indices`` (any order), in that order: one file each."""
        idx = np.asarray(indices, dtype=np.int64)
        if self.encoding == "raw":
            images: list[Any] = [self.load(int(i)) for i in idx]
        else:
            images = [self.encoded(int(i)) for i in idx]
        out: dict[str, Any] = {
            "image": images if self.ragged else np.stack(images),
            "orig_size": self.orig_size[idx],
            "path": self.path_bytes[idx],
        }
        if self.labels is not None:
            out["label"] = self.labels[idx]
        return out

    def encoded(self, i: int) -> bytes:
        """Image ``i`` as the bytes the field stores (:func:`~.encoding.image_bytes`)."""
        return image_bytes(
            self._paths[i],
            tuple(int(s) for s in self.shapes[i]),
            as_is=bool(self.as_is[i]),
            load=lambda: self.load(i),
            encoding=self.encoding,
            quality=self.quality,
        )

    def load(self, i: int) -> npt.NDArray[Any]:
        """Image ``i``, decoded by the policy and checked against its planned shape."""
        arr = load_image(self._paths[i], self.policy, stored=self.stored_mode)
        expected = tuple(int(s) for s in self.shapes[i])
        if arr.shape != expected:
            raise SourceError(
                f"{self._paths[i]}: decoded to shape {arr.shape}, but the check pass found "
                f"{expected}; the file changed during the conversion (rerun to resume)"
            )
        return arr
