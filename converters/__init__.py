"""Ready-made converters for common published dataset layouts, thin over :mod:`chunkio.convert`.

Each module has one function, ``convert(src, dst, **kw)``:

- :mod:`converters.imagefolder`: class-per-folder images (via ``convert_images``).
- :mod:`converters.cifar10`: the CIFAR-10 "python version" pickle batches.
- :mod:`converters.mnist`: MNIST (and Fashion-MNIST) idx files, gzipped or not.
- :mod:`converters.nifti_folder`: NIfTI images with matching label volumes (the Medical
  Segmentation Decathlon ``imagesTr``/``labelsTr`` layout, via ``convert_volumes``).
"""

from __future__ import annotations

__all__ = ["cifar10", "imagefolder", "mnist", "nifti_folder"]
