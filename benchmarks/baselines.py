"""What users do today: per-sample Datasets over HDF5, Zarr and JPEG folders, done correctly.

Each opens its handle lazily in the worker (so they work with num_workers > 0) and reads one
sample per ``__getitem__``; they are the baselines chunkio is measured against.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import zarr
from PIL import Image, ImageOps
from torch.utils.data import Dataset

__all__ = [
    "IMG_EXTENSIONS",
    "ImageFolderAugmented",
    "ImageFolderDataset",
    "InMemoryBatchDataset",
    "NaiveH5Dataset",
    "NaiveZarrDataset",
    "TorchvisionRandomResizedCrop",
    "pil_loader",
    "pil_to_tensor",
]


class NaiveH5Dataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """h5py, one sample per ``__getitem__``. A URL (``s3://...``) is opened as users open one:
    ``h5py.File`` on an fsspec file object (``storage_options`` go to fsspec; a readahead
    cache of ``block_size`` bytes, fsspec's default kind of cache)."""

    def __init__(
        self,
        path: str,
        image: str = "image",
        label: str = "label",
        *,
        storage_options: dict[str, Any] | None = None,
        block_size: int = 2 << 20,
    ) -> None:
        self.path, self.image, self.label = path, image, label
        self.storage_options, self.block_size = storage_options, block_size
        with self._open() as f:
            self.n = len(f[image])
        self._file: Any = None
        self._pid = -1

    def _open(self) -> h5py.File:
        if "://" not in self.path:
            return h5py.File(self.path, "r")
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.path, **(self.storage_options or {}))
        fileobj = fs.open(path, "rb", block_size=self.block_size)
        return h5py.File(fileobj, "r")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._file is None or self._pid != os.getpid():
            self._file, self._pid = self._open(), os.getpid()
        f = self._file
        return torch.from_numpy(f[self.image][i]), torch.tensor(int(f[self.label][i]))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None}


class NaiveZarrDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """zarr-python, one sample per ``__getitem__`` (a URL with ``storage_options``)."""

    def __init__(
        self,
        path: str,
        image: str = "image",
        label: str = "label",
        *,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.path, self.image, self.label = path, image, label
        self.storage_options = storage_options
        self.n = self._open()[image].shape[0]
        self._group: Any = None
        self._pid = -1

    def _open(self) -> Any:
        return zarr.open_group(self.path, mode="r", storage_options=self.storage_options)

    def __len__(self) -> int:
        return int(self.n)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._group is None or self._pid != os.getpid():
            self._group, self._pid = self._open(), os.getpid()
        g = self._group
        return torch.from_numpy(np.asarray(g[self.image][i])), torch.tensor(int(g[self.label][i]))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_group": None}


class ImageFolderDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """torchvision.datasets.ImageFolder, minus torchvision: decode a JPEG per sample."""

    def __init__(self, root: str) -> None:
        classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        self.items = [
            (str(f), k) for k, c in enumerate(classes) for f in sorted((Path(root) / c).iterdir())
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, label = self.items[i]
        with Image.open(path) as im:
            arr = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        return torch.from_numpy(arr.transpose(2, 0, 1).copy()), torch.tensor(label)


class InMemoryBatchDataset(Dataset[Any]):
    """A perfect batched reader: NumPy gather from RAM, no decode (the transport's limit)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])

    def __getitems__(self, idx: list[int]) -> Any:
        from chunkio import SampleBatch

        index = np.asarray(idx)
        batch = (torch.from_numpy(self.images[index]), torch.from_numpy(self.labels[index]))
        return SampleBatch(batch, len(idx))


# --------------------------------------------------------------------------------------------
# torchvision's ImageFolder + RandomResizedCrop + RandomHorizontalFlip + PILToTensor, replicated
# (torchvision's wheel does not load against the pinned torch here). Each piece follows
# torchvision 0.2x line by line: the same torch RNG draws, the same Pillow calls, in order.
# --------------------------------------------------------------------------------------------

#: torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(path: str) -> Image.Image:
    """torchvision.datasets.folder.pil_loader."""
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def pil_to_tensor(pic: Image.Image) -> torch.Tensor:
    """torchvision.transforms.functional.pil_to_tensor: uint8 ``(C, H, W)`` (a permuted view)."""
    img = torch.as_tensor(np.array(pic, copy=True))
    img = img.view(pic.size[1], pic.size[0], len(pic.getbands()))
    return img.permute((2, 0, 1))


class TorchvisionRandomResizedCrop:
    """torchvision.transforms.RandomResizedCrop on PIL images (bilinear, antialiased).

    :meth:`get_params` is torchvision's, draw for draw (``torch.empty(1).uniform_``,
    ``torch.randint``); :meth:`__call__` is ``F.resized_crop``'s PIL path: ``img.crop`` then
    ``img.resize((w, h), BILINEAR)``.
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    ) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio = scale, ratio

    @staticmethod
    def get_params(
        img: Image.Image, scale: Sequence[float], ratio: Sequence[float]
    ) -> tuple[int, int, int, int]:
        """``(top, left, h, w)``: torchvision's ``RandomResizedCrop.get_params``."""
        width, height = img.size
        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            w = round(math.sqrt(target_area * aspect_ratio))
            h = round(math.sqrt(target_area / aspect_ratio))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, size=(1,)).item())
                j = int(torch.randint(0, width - w + 1, size=(1,)).item())
                return i, j, h, w
        # fallback to central crop
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w = width
            h = round(w / min(ratio))
        elif in_ratio > max(ratio):
            h = height
            w = round(h * max(ratio))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img: Image.Image) -> Image.Image:
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        img = img.crop((j, i, j + w, i + h))
        return img.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)


class ImageFolderAugmented(Dataset[tuple[torch.Tensor, int]]):
    """``ImageFolder(root, transform=Compose([RandomResizedCrop(size),
    RandomHorizontalFlip(), PILToTensor()]))``, minus torchvision.

    Samples are ``(uint8 (3, size, size) tensor, class index)``; the default collate stacks
    them into ``(B, 3, size, size)`` and a ``(B,)`` int64 tensor.
    """

    def __init__(self, root: str | Path, size: int = 224, flip_p: float = 0.5) -> None:
        root = Path(root)
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples: list[tuple[str, int]] = []
        for k, c in enumerate(self.classes):  # torchvision's make_dataset: sorted os.walk
            for dirpath, _, fnames in sorted(os.walk(root / c, followlinks=True)):
                for fname in sorted(fnames):
                    if fname.lower().endswith(IMG_EXTENSIONS):
                        self.samples.append((os.path.join(dirpath, fname), k))
        self.crop = TorchvisionRandomResizedCrop(size)
        self.flip_p = flip_p

    def __len__(self) -> int:
        return len(self.samples)

    def transform(self, img: Image.Image) -> torch.Tensor:
        img = self.crop(img)
        if torch.rand(1) < self.flip_p:  # RandomHorizontalFlip
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return pil_to_tensor(img)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, target = self.samples[index]
        return self.transform(pil_loader(path)), target
