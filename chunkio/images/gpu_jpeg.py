"""JPEG crops decoded on a GPU, straight into one batch tensor on the device.

The GPU half of ``make_loader(..., workers=Workers(decode="gpu"))``
(:mod:`chunkio.transport.gpu_decode`): a batch's encoded JPEG samples and their crop boxes in
whole pixels (from the crop plans of
:meth:`chunkio.transforms.Compose.plan`: the same boxes, sizes and flips the CPU path draws for
the same key, rounded as it rounds them) are decoded, resized with torch's antialiased
interpolation on the device and mirrored into one float batch, rounded to ``uint8`` at the end
(:func:`finish`): the pixels differ from the CPU path's by the decoders' rounding and the float
resize only (a few levels), never in geometry.

Decoders (a :class:`BatchDecoder` each):

``nvimgcodec``
    NVIDIA nvImageCodec (``pip install nvidia-nvimgcodec-cu13`` or ``-cu12`` with the matching
    ``nvidia-nvjpeg``): one batched call decodes the region of interest of every image
    (nvJPEG; the hardware JPEG engine of A100/H100-class GPUs where the backend uses it).
``torchvision``
    ``torchvision.io.decode_jpeg(..., device="cuda")`` (nvJPEG through torchvision): whole
    images in one batched call, then cropped on the device. No extra package where
    torchvision is installed.
``reference``
    simplejpeg on the CPU, then the same device-side resize: the route's logic, testable
    without a GPU (its pixels equal the CPU path's up to the float resize).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import simplejpeg
import torch

from ..errors import CorruptChunkError, OptionalDependencyError

__all__ = [
    "BatchDecoder",
    "NvImageCodecDecoder",
    "NvImageCodecRoiDecoder",
    "PixelBox",
    "ReferenceDecoder",
    "TorchvisionDecoder",
    "finish",
    "gpu_decoder",
    "resize_into",
]

#: the crop of one sample in whole source pixels: (left, top, right, bottom)
PixelBox = tuple[int, int, int, int]


class BatchDecoder(Protocol):
    """Decodes the boxes of a batch of JPEGs into ``out`` on the current CUDA stream."""

    name: str

    def decode(
        self,
        data: Sequence[npt.NDArray[np.uint8]],
        boxes: Sequence[PixelBox],
        flips: Sequence[bool],
        out: torch.Tensor,
        mode: str,
    ) -> list[Any]:
        """Write sample ``j`` (its box resized to ``out``'s size, mirrored if ``flips[j]``)
        into row ``j`` of the float batch ``out``; return what must stay alive until the
        queued device work is done."""
        ...


def resize_into(crop: torch.Tensor, flip: bool, out: torch.Tensor, mode: str) -> None:
    """``crop`` (``uint8`` ``(C, h, w)`` on the device) resized to ``out``'s ``(C, H, W)``
    with antialiasing (as the CPU path's torch kernels) and mirrored if ``flip``, into
    ``out``, a float row (:func:`finish` rounds a whole batch of them at once).

    >>> out = torch.empty(3, 2, 2)
    >>> resize_into(torch.full((3, 4, 4), 7, dtype=torch.uint8), True, out, "bilinear")
    >>> out.unique().tolist()
    [7.0]
    """
    size = (int(out.shape[-2]), int(out.shape[-1]))
    x = crop.unsqueeze(0).float()
    if tuple(crop.shape[-2:]) != size:
        x = torch.nn.functional.interpolate(
            x, size=size, mode=mode, antialias=mode in ("bilinear", "bicubic")
        )
    out.copy_(x[0].flip(-1) if flip else x[0])


def finish(rows: torch.Tensor, out: torch.Tensor) -> None:
    """A float batch from :func:`resize_into` rounded into the ``uint8`` batch ``out`` (three
    kernels for the whole batch instead of three per image)."""
    out.copy_(rows.round_().clamp_(0, 255))


def _corrupt(j: int, why: str) -> CorruptChunkError:
    return CorruptChunkError(
        f"sample {j} of the batch: the GPU decoder could not decode it ({why})"
    )


class NvImageCodecDecoder:
    """One nvImageCodec call decodes the batch: whole images (nvJPEG picks the hardware JPEG
    engine where the GPU has one), or with ``roi=True`` only each crop's region."""

    name = "nvimgcodec"

    def __init__(self, device: torch.device, channels: int, *, roi: bool = False) -> None:
        try:
            from nvidia import nvimgcodec
        except ImportError as err:
            raise OptionalDependencyError(
                "decode='gpu' with nvImageCodec needs the nvidia-nvimgcodec-cu13 (or -cu12) "
                "package and nvidia-nvjpeg for your CUDA version; decode='torchvision' uses "
                f"torchvision's nvJPEG instead ({err})"
            ) from err
        self._nv = nvimgcodec
        self.roi = roi
        index = device.index if device.index is not None else torch.cuda.current_device()
        self._decoder = nvimgcodec.Decoder(device_id=index)
        self._params = nvimgcodec.DecodeParams(
            apply_exif_orientation=False,  # the conversion already applied it to the pixels
            color_spec=nvimgcodec.ColorSpec.GRAY if channels == 1 else nvimgcodec.ColorSpec.SRGB,
        )

    def decode(
        self,
        data: Sequence[npt.NDArray[np.uint8]],
        boxes: Sequence[PixelBox],
        flips: Sequence[bool],
        out: torch.Tensor,
        mode: str,
    ) -> list[Any]:
        nv = self._nv
        sources = []
        for d, (x0, y0, x1, y1) in zip(data, boxes, strict=True):
            stream = nv.CodeStream(d)
            if self.roi:
                stream = stream.get_sub_code_stream(region=nv.Region(y0, x0, y1, x1))
            sources.append(stream)
        stream_id = torch.cuda.current_stream(out.device).cuda_stream
        images = self._decoder.decode(sources, params=self._params, cuda_stream=stream_id)
        keep: list[Any] = []
        for j, (image, (x0, y0, x1, y1)) in enumerate(zip(images, boxes, strict=True)):
            if image is None:
                raise _corrupt(j, "nvImageCodec returned no image")
            hwc = torch.as_tensor(image, device=out.device)
            keep.append(image)
            hwc = hwc.reshape(hwc.shape[0], hwc.shape[1], -1)
            if not self.roi:
                hwc = hwc[y0:y1, x0:x1]
            resize_into(hwc.permute(2, 0, 1), flips[j], out[j], mode)
        return keep


class NvImageCodecRoiDecoder(NvImageCodecDecoder):
    """nvImageCodec decoding only each crop's region (nvJPEG's ROI decode)."""

    name = "nvimgcodec-roi"

    def __init__(self, device: torch.device, channels: int) -> None:
        super().__init__(device, channels, roi=True)


class TorchvisionDecoder:
    """Whole images decoded by torchvision's batched nvJPEG call, cropped on the device."""

    name = "torchvision"

    def __init__(self, device: torch.device, channels: int) -> None:
        try:
            from torchvision.io import ImageReadMode, decode_jpeg
        except ImportError as err:
            raise OptionalDependencyError(
                f"decode='torchvision' needs torchvision with CUDA support ({err})"
            ) from err
        self._decode = decode_jpeg
        self._mode = ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB
        self.device = device

    def decode(
        self,
        data: Sequence[npt.NDArray[np.uint8]],
        boxes: Sequence[PixelBox],
        flips: Sequence[bool],
        out: torch.Tensor,
        mode: str,
    ) -> list[Any]:
        inputs = [torch.from_numpy(np.ascontiguousarray(d)) for d in data]
        try:
            images = self._decode(inputs, mode=self._mode, device=self.device)
        except RuntimeError as err:
            raise _corrupt(0, str(err)) from err
        for j, (image, (x0, y0, x1, y1)) in enumerate(zip(images, boxes, strict=True)):
            resize_into(image[:, y0:y1, x0:x1], flips[j], out[j], mode)
        return list(images)


class ReferenceDecoder:
    """simplejpeg on the CPU, then the same resize: the GPU route's logic without a GPU."""

    name = "reference"

    def __init__(self, device: torch.device, channels: int) -> None:
        self.device = device
        self._colorspace = "GRAY" if channels == 1 else "RGB"

    def decode(
        self,
        data: Sequence[npt.NDArray[np.uint8]],
        boxes: Sequence[PixelBox],
        flips: Sequence[bool],
        out: torch.Tensor,
        mode: str,
    ) -> list[Any]:
        for j, (d, (x0, y0, x1, y1)) in enumerate(zip(data, boxes, strict=True)):
            try:
                image = simplejpeg.decode_jpeg(
                    np.ascontiguousarray(d), colorspace=self._colorspace, strict=True
                )
            except ValueError as err:
                raise _corrupt(j, str(err)) from err
            crop = torch.from_numpy(np.ascontiguousarray(image[y0:y1, x0:x1]))
            crop = crop.reshape(crop.shape[0], crop.shape[1], -1).permute(2, 0, 1)
            resize_into(crop.to(self.device), flips[j], out[j], mode)
        return []


_DECODERS: dict[str, type[NvImageCodecDecoder | TorchvisionDecoder | ReferenceDecoder]] = {
    "gpu": NvImageCodecDecoder,
    "nvimgcodec": NvImageCodecDecoder,
    "nvimgcodec-roi": NvImageCodecRoiDecoder,
    "torchvision": TorchvisionDecoder,
    "reference": ReferenceDecoder,
}

#: what ``Workers(decode=...)`` accepts besides ``"cpu"``
GPU_DECODERS = tuple(_DECODERS)


def gpu_decoder(name: str, device: torch.device, channels: int) -> BatchDecoder:
    """The batch decoder called ``name`` (``"gpu"`` is nvImageCodec) for ``device``."""
    try:
        kind = _DECODERS[name]
    except KeyError:
        raise ValueError(f"decode must be 'cpu' or one of {GPU_DECODERS}; got {name!r}") from None
    return kind(device, channels)
