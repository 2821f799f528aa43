"""What users do today: per-sample Datasets over HDF5, Zarr and JPEG folders, done correctly.

Each opens its handle lazily in the worker (so they work with num_workers > 0) and reads one
sample per ``__getitem__``; they are the baselines chunkio is measured against.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import zarr
from PIL import Image, ImageOps
from torch.utils.data import Dataset

__all__ = ["ImageFolderDataset", "InMemoryBatchDataset", "NaiveH5Dataset", "NaiveZarrDataset"]


class NaiveH5Dataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, path: str, image: str = "image", label: str = "label") -> None:
        self.path, self.image, self.label = path, image, label
        with h5py.File(path, "r") as f:
            self.n = len(f[image])
        self._file: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._file is None or self._pid != os.getpid():
            self._file, self._pid = h5py.File(self.path, "r"), os.getpid()
        f = self._file
        return torch.from_numpy(f[self.image][i]), torch.tensor(int(f[self.label][i]))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None}


class NaiveZarrDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, path: str, image: str = "image", label: str = "label") -> None:
        self.path, self.image, self.label = path, image, label
        self.n = zarr.open_group(path, mode="r")[image].shape[0]
        self._group: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return int(self.n)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._group is None or self._pid != os.getpid():
            self._group, self._pid = zarr.open_group(self.path, mode="r"), os.getpid()
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
