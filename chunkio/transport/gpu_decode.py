"""The loader's route with ``Workers(decode="gpu")``: encoded JPEG bytes in, decoded crops on
the device.

No worker process decodes pixels. One background thread of this process, for each batch in
sampler order:

1. reads the batch's encoded bytes (whole bytes chunks, once each, in storage order: the
   same reads a ring worker makes, without decoding) and its other fields (labels);
2. plans every crop with the dataset's :class:`~chunkio.transforms.Compose`, keyed exactly as
   the CPU path keys it, so both routes draw the same boxes and flips;
3. queues the decode, resize and flip on a side CUDA stream
   (:mod:`chunkio.images.gpu_jpeg`) and records an event.

It stays up to ``ahead`` batches in front of the consumer. ``next`` makes the consumer's
stream wait on the batch's event (the host does not block) and marks the batch's memory as
used by that stream, so the caching allocator cannot hand it to a later batch early: batches
are fresh device memory and may be kept, as with ``device=...`` on the other routes. Errors in
the thread are raised by the ``next`` that would have returned the failed batch.

The route reads batches from :class:`EncodedBatches` and never reads the dataset's
attributes: what it needs to know of it (its fields, transform, the image field's encoding and
output shape) comes as a :class:`DecodeTarget` of values, built by the loader.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from ..images.gpu_jpeg import GPU_DECODERS, BatchDecoder, PixelBox, finish, gpu_decoder
from ..transforms.render import TORCH_MODES, pixel_span
from .gpu import map_tensors
from .lease import Lease

__all__ = [
    "GPU_DECODERS",
    "DecodeTarget",
    "EncodedBatches",
    "GpuDecodeRoute",
    "crop_boxes",
    "gpu_decode_route",
]

_DONE = object()


class EncodedBatches(Protocol):
    """What the route reads batches from (:class:`chunkio.ChunkDataset` is one)."""

    def read_encoded(
        self, indices: Sequence[int] | npt.ArrayLike, field: str
    ) -> tuple[list[npt.NDArray[np.uint8]], npt.NDArray[np.int64]]:
        """The encoded bytes and stored ``(C, H, W)`` shapes of samples ``indices``."""
        ...

    def read_batch(
        self,
        indices: Sequence[int] | npt.ArrayLike,
        out: Any = None,
        *,
        once: bool | None = None,
        epoch: int = 0,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Samples ``indices`` of ``fields`` as NumPy arrays, by field."""
        ...

    def arrange(self, columns: dict[str, Any]) -> Any:
        """Columns by field -> the batch as the consumer receives it."""
        ...


@dataclass(frozen=True)
class DecodeTarget:
    """What the route needs to know of the dataset it reads, as values (the loader builds it:
    :func:`chunkio.loader.routes.decode_target`).

    ``location``: named in errors; ``fields``: a batch's fields, in order; ``transform``: the
    dataset's transform as given (named when it cannot decode); ``crop``: its field transform
    (a :class:`~chunkio.transforms.Compose`, which plans crops), else ``None``; ``kind``,
    ``encoding`` and ``shape``: the kind, image encoding and batch shape of ``crop``'s field.
    """

    location: object
    fields: tuple[str, ...]
    transform: Any
    crop: Any = None
    kind: str = ""
    encoding: str | None = None
    shape: tuple[int, ...] | None = None


def crop_boxes(
    plans: Sequence[Any], shapes: npt.NDArray[np.int64]
) -> tuple[list[PixelBox], list[bool]]:
    """Each plan's box rounded to whole pixels of its ``(C, H, W)`` image, as the CPU path
    rounds it (:func:`~chunkio.transforms.render.pixel_span`), and its flip.

    >>> from chunkio.transforms import CropPlan
    >>> crop_boxes([CropPlan((2.4, 0.0, 7.6, 9.9), (4, 4), True)], np.array([[3, 10, 10]]))
    ([(2, 0, 8, 10)], [True])
    """
    boxes: list[PixelBox] = []
    flips: list[bool] = []
    for plan, (_, height, width) in zip(plans, shapes.tolist(), strict=True):
        left, top, right, bottom = plan.box
        x0, x1 = pixel_span(left, right, int(width))
        y0, y1 = pixel_span(top, bottom, int(height))
        boxes.append((x0, y0, x1, y1))
        flips.append(bool(plan.flip))
    return boxes, flips


def gpu_decode_route(
    source: EncodedBatches, target: DecodeTarget, decode: str, device: Any, ahead: int
) -> GpuDecodeRoute:
    """The route of ``make_loader(workers=Workers(decode=...))``; checks that ``target`` (the
    dataset ``source`` reads) is what it decodes: a JPEG field under a
    :class:`~chunkio.transforms.Compose` of fixed output size."""
    transform = target.crop
    if transform is None or getattr(transform, "plan", None) is None:
        raise ValueError(
            f"Workers(decode={decode!r}) needs transform=chunkio.transforms.Compose"
            f"([...]) with a fixed output size on the JPEG field; got {target.transform!r}"
        )
    if target.encoding != "jpeg":  # only an encoded field has an encoding
        raise ValueError(
            f"{target.location}: Workers(decode={decode!r}) decodes JPEG fields; "
            f"field {transform.field!r} is {target.kind}"
            + (f" ({target.encoding})" if target.encoding is not None else "")
        )
    on = device if device is not None else torch.device("cpu")
    channels = int(target.shape[0]) if target.shape is not None else 3
    decoder = gpu_decoder(decode, on, channels)
    return GpuDecodeRoute(source, target, device=on, decoder=decoder, ahead=ahead)


class GpuDecodeRoute:
    """Batches of ``source`` with ``target``'s image field decoded on ``device`` by
    ``decoder``."""

    delivers_on_device = True

    def __init__(
        self,
        source: EncodedBatches,
        target: DecodeTarget,
        *,
        device: torch.device,
        decoder: BatchDecoder,
        ahead: int = 2,
    ) -> None:
        transform = target.crop
        if transform is None or getattr(transform, "plan", None) is None:
            raise ValueError("decode='gpu' needs a chunkio.transforms.Compose on the image field")
        self.source = source
        self.field: str = transform.field
        self.others = [f for f in target.fields if f != self.field]
        self.device = device
        self.decoder = decoder
        self.ahead = max(1, int(ahead))
        self.transform = transform
        self.mode = TORCH_MODES[transform.resample]
        shape = target.shape
        if shape is None:
            raise ValueError(f"decode='gpu': field {self.field!r} has no fixed output shape")
        self.shape: tuple[int, ...] = tuple(shape)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the thread -----------------------------------------------------------------------------

    def _host(self, idx: np.ndarray, epoch: int) -> tuple[list[np.ndarray], Any, dict[str, Any]]:
        """Encoded bytes, crop plans and the other fields of one batch (no pixel work)."""
        data, shapes = self.source.read_encoded(idx, self.field)
        seed = int(self.transform.seed)
        plans = [
            self.transform.plan((seed, epoch, int(i)), int(s[1]), int(s[2]))
            for i, s in zip(idx.tolist(), shapes.tolist(), strict=True)
        ]
        others = self.source.read_batch(idx, fields=self.others, epoch=epoch) if self.others else {}
        return data, crop_boxes(plans, shapes), others

    def _device_batch(
        self, idx: np.ndarray, epoch: int, side: torch.cuda.Stream | None
    ) -> tuple[Any, Any, list[Any]]:
        data, (boxes, flips), others = self._host(idx, epoch)
        rows = torch.empty((len(idx), *self.shape), dtype=torch.float32, device=self.device)
        keep = self.decoder.decode(data, boxes, flips, rows, self.mode)
        out = torch.empty((len(idx), *self.shape), dtype=torch.uint8, device=self.device)
        finish(rows, out)
        keep.append(rows)
        columns: dict[str, Any] = {self.field: out}
        for name, value in others.items():
            host = torch.from_numpy(np.ascontiguousarray(value))
            if self.device.type == "cuda":
                host = host.pin_memory()
            columns[name] = host.to(self.device, non_blocking=True)
            keep.append(host)  # the copy reads it until the stream passes
        event = None
        if side is not None:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(side)
        return self.source.arrange(columns), event, keep

    def _work(self, batches: Iterable[Any], epoch: int, out: queue.Queue[Any]) -> None:
        side = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None  # type: ignore[no-untyped-call]
        held: list[tuple[Any, list[Any]]] = []  # device work in flight and what it reads
        try:
            for idx in batches:
                if self._stop.is_set():
                    return
                idx = np.asarray(idx, dtype=np.int64)
                if side is not None:
                    with torch.cuda.device(self.device), torch.cuda.stream(side):
                        batch, event, keep = self._device_batch(idx, epoch, side)
                else:
                    batch, event, keep = self._device_batch(idx, epoch, None)
                held.append((event, keep))
                while len(held) > self.ahead:  # sources of older batches: free once done
                    old_event, _ = held.pop(0)
                    if old_event is not None:
                        old_event.synchronize()
                self._put(out, (batch, event))
        except BaseException as err:  # handed to the consumer, raised by its next()
            self._put(out, err)
        finally:
            for event, _ in held:
                if event is not None:
                    event.synchronize()
            self._put(out, _DONE)

    def _put(self, out: queue.Queue[Any], item: Any) -> None:
        while not self._stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    # -- the route --------------------------------------------------------------------------

    def run(self, batches: Iterable[Any], parts: Any, *, epoch: int) -> Iterator[Lease]:
        self.close()
        self._stop = threading.Event()
        results: queue.Queue[Any] = queue.Queue(maxsize=self.ahead)
        thread = threading.Thread(
            target=self._work,
            args=(batches, epoch, results),
            name="chunkio-gpu-decode",
            daemon=True,
        )
        self._thread = thread
        thread.start()
        try:
            while True:
                item = results.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item  # the thread's own error, with its traceback
                batch, event = item
                if event is not None:
                    consumer = torch.cuda.current_stream(self.device)
                    consumer.wait_event(event)
                    # memory made on the side stream: not reused before the consumer is done
                    map_tensors(functools.partial(_used_by, stream=consumer), batch)
                yield Lease(batch)
        finally:
            self.close()

    def worker_pids(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _used_by(tensor: torch.Tensor, *, stream: Any) -> None:
    if tensor.is_cuda:
        tensor.record_stream(stream)
