"""Reading an encoded image field: bytes chunks once per batch -> each image decoded into its row.

The encoded field kind of the per-process read core (:mod:`chunkio.read`). A batch's samples
are grouped by the bytes chunks that hold them; each chunk missing from a small cache is read
(and checksummed and decompressed) once, in storage order; then every image is decoded
straight into its place in the batch. With a :class:`~chunkio.transforms.image.Compose` the
transform is fused into the decode: a JPEG whose crop will be shrunk at least 2x is decoded at
1/2, 1/4 or 1/8 scale by libjpeg-turbo's DCT scaling (much less work); only the iMCU rows and
columns that cover the crop are decoded (:func:`chunkio.images.jpeg.decode_region`, where the
extension is built; else the whole image), then resized (one antialiased resize) and flipped
into the batch row. Both ways give the same pixels. A ``yuv420`` field's crop decompresses
and colour-converts the bands of rows that cover it only (:func:`chunkio.images.yuv.decode_box`),
then takes the same resize.

Stored sizes are checked before they size anything: the spans and shapes once, when the field
is opened (:func:`chunkio.format.grid.checked_encoded`: each span inside the bytes, where the
writer places it, each shape an image the encoding can hold and the field's where it declares
one: :class:`~chunkio.errors.FormatError` naming the sample), and each sample's shape against
its bytes' header before a batch is allocated (:class:`~chunkio.errors.CorruptChunkError`
naming the field, sample and bytes chunk).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError
from ..format.grid import SampleGrid, checked_encoded
from ..format.layout import FieldInfo
from ..images import jpeg, yuv
from ..images.decoders import ImageDecoder, image_decoder
from ..images.encoding import decoded_shape
from ..transforms.sample import FieldTransform, channels_last
from ..util.numeric import IntArray, ceil_div
from .base import ReadContext, ReadRequest, read_whole, transformed_buffer

__all__ = ["EncodedReads"]


class EncodedReads:
    """One encoded field of one process's dataset handle: its index, cache and decoder."""

    def __init__(self, ctx: ReadContext, info: FieldInfo) -> None:
        self.ctx = ctx
        self.reader = reader = ctx.reader
        self.info = info
        roles = info.roles
        self.data_name, spans_name, shapes_name = roles.bytes, roles.spans, roles.shapes
        self.spans = read_whole(reader, spans_name).astype(np.int64)
        self.shapes = read_whole(reader, shapes_name).astype(np.int64)
        data = reader.array_info(self.data_name)
        self.chunk_len = int(data.chunks[0])
        self.grid = SampleGrid(int(data.shape[0]), self.chunk_len)
        # the one check of the stored index (the one ragged and sparse fields' go through)
        checked_encoded(
            self.spans,
            self.shapes,
            ctx.grid,
            self.chunk_len,
            self.grid.num_samples,
            sample_shape=info.sample_shape,
            encoding=str(info.encoding),
            where=f"{reader.location}: field {info.name!r} ({spans_name!r}, {shapes_name!r})",
        )
        self.decoder: ImageDecoder = image_decoder(info.encoding)  # type: ignore[arg-type]
        # crops of JPEGs decoded by region: libjpeg-turbo, as the default decoder's
        self.region_decode = (
            info.encoding == "jpeg" and self.decoder.library == "simplejpeg" and jpeg.REGION_DECODE
        )
        # bytes chunks are small: keep twice as many as a dense field's cache
        self.cache_chunks = max(1, 2 * ctx.cache_chunks)
        self._cache: OrderedDict[int, npt.NDArray[np.uint8]] = OrderedDict()
        self._local = threading.local()  # decode buffers, one set per decoding thread

    def _check_shape(self, data: npt.NDArray[np.uint8], shape: tuple[int, ...]) -> None:
        """The sample's stored ``(C, H, W)`` against its bytes' header (raw: their length),
        before anything is allocated or planned by it. CorruptChunkError where they differ
        (the reader names the field, sample and chunk)."""
        encoding = self.info.encoding
        c, h, w = shape
        if encoding == "raw":
            need = c * h * w * self.info.dtype.itemsize
            if data.size != need:
                raise CorruptChunkError(
                    f"raw image of {data.size} bytes; its stored shape {shape} "
                    f"{self.info.dtype} needs {need}"
                )
            return
        if encoding == "yuv420":  # the header alone (its bands are checked by the decode)
            hh, ww, cc = yuv.head(data)
        else:
            header = decoded_shape(data, str(encoding))
            hh, ww, cc = (*header, 1) if len(header) == 2 else header
        # a WebP has no gray mode: a gray row takes the luminance of its RGB
        if (hh, ww) != (h, w) or not (cc == c or (encoding == "webp" and c == 1 and cc == 3)):
            raise CorruptChunkError(
                f"the {encoding} header says {hh}x{ww} with {cc} channel(s); the stored "
                f"shape is {shape}"
            )

    # -- bytes ------------------------------------------------------------------------------

    def _needed(self, idx: IntArray) -> list[int]:
        """The bytes chunks samples ``idx`` lie in, in storage order."""
        step = self.chunk_len
        return sorted(
            {
                c
                for a, b in self.spans[idx].tolist()
                for c in range(a // step, max(a // step + 1, ceil_div(b, step)))
            }
        )

    def prefetch(self, idx: IntArray) -> None:
        """Start fetching the bytes chunks samples ``idx`` need that the cache does not hold."""
        self.reader.prefetch(self.data_name, [c for c in self._needed(idx) if c not in self._cache])

    def _fetch(self, idx: IntArray) -> None:
        """Bring every bytes chunk the samples ``idx`` need into the cache, reading the missing
        ones as few contiguous ranges, in storage order."""
        needed = self._needed(idx)
        for c in needed:
            if c in self._cache:
                self._cache.move_to_end(c)
        missing = [c for c in needed if c not in self._cache]
        if missing:
            ranges = [self.grid.bounds(c) for c in missing]
            staging = np.empty(sum(b - a for a, b in ranges), np.uint8)
            self.reader.read_into(self.data_name, ranges, staging)
            at = 0
            for c, (a, b) in zip(missing, ranges, strict=True):
                self._cache[c] = staging[at : at + b - a]
                at += b - a
            self.ctx.stats.chunks_read += len(missing)
        keep = max(self.cache_chunks, len(needed))
        while len(self._cache) > keep:
            self._cache.popitem(last=False)

    def sample_bytes(self, i: int) -> npt.NDArray[np.uint8]:
        """The encoded bytes of sample ``i`` (its chunks must be cached): a view if they lie in
        one chunk."""
        a, b = (int(v) for v in self.spans[i])
        step = self.chunk_len
        first, last = a // step, (b - 1) // step
        if first == last:
            base = first * step
            return self._cache[first][a - base : b - base]
        # the sample's pieces only (not its chunks whole: megabytes for a sample of kilobytes)
        parts = [
            self._cache[c][max(a, c * step) - c * step : min(b, (c + 1) * step) - c * step]
            for c in range(first, last + 1)
        ]
        return np.concatenate(parts)

    def encoded(self, idx: IntArray) -> tuple[list[npt.NDArray[np.uint8]], npt.NDArray[np.int64]]:
        """The encoded bytes of samples ``idx`` (each its own contiguous copy) and their
        stored ``(C, H, W)`` shapes: every bytes chunk read once, in storage order, nothing
        decoded (the GPU decode route's read)."""
        self._fetch(idx)
        data = [np.array(self.sample_bytes(i)) for i in idx.tolist()]
        return data, self.shapes[idx]

    # -- decoding ---------------------------------------------------------------------------

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any] | list[npt.NDArray[Any]]:
        """Samples ``idx`` decoded (and transformed) into ``out``; a list of arrays when they
        have no common shape and no ``out`` was given. The samples may be spread over the
        core's decode threads (every decoder here releases the GIL)."""
        transform, epoch = how.transform, how.epoch
        self._fetch(idx)
        # every stored shape against its header before any buffer is sized by the shapes
        for i in idx.tolist():
            try:
                self._check_shape(self.sample_bytes(i), tuple(int(s) for s in self.shapes[i]))
            except CorruptChunkError as err:
                raise self._named(i, err) from err
        if out is None and transform is not None:
            fixed = self.info.sample_shape
            stored = (
                {tuple(fixed)} if fixed is not None else set(map(tuple, self.shapes[idx].tolist()))
            )
            out = transformed_buffer(self.ctx, self.info, transform, stored, len(idx))
        elif out is None and self.info.sample_shape is not None:
            out = np.empty((len(idx), *self.info.sample_shape), self.info.dtype)

        def one(job: tuple[int, int]) -> npt.NDArray[Any]:
            j, i = job
            shape = tuple(int(s) for s in self.shapes[i])
            target = out[j] if out is not None else None
            try:
                return self._decode_one(i, shape, target, transform, epoch, how.first)
            except CorruptChunkError as err:
                raise self._named(i, err) from err

        rows = list(self.ctx.map_rows(one, enumerate(idx.tolist())))
        return out if out is not None else rows

    def _named(self, i: int, err: CorruptChunkError) -> CorruptChunkError:
        """``err`` with the place: the store, field, sample and bytes chunk."""
        chunk = int(self.spans[i][0]) // self.chunk_len
        return CorruptChunkError(
            f"{self.reader.location}: field {self.info.name!r}, sample {i} (bytes chunk "
            f"{chunk} of {self.data_name!r}): {err}"
        )

    def _decode_one(
        self,
        i: int,
        shape: tuple[int, ...],
        out: npt.NDArray[Any] | None,
        transform: FieldTransform | None,
        epoch: int,
        first: int = 0,
    ) -> npt.NDArray[Any]:
        data = self.sample_bytes(i)  # its shape was checked against its header by read()
        if transform is None:
            if out is None:
                out = np.empty(shape, self.info.dtype)
            target = channels_last(out)
            if target.flags.c_contiguous:  # a channels-last batch row: decode straight into it
                self.decoder.decode_into(data, target)
                return out
            scratch = self._scratch_for(shape)
            self.decoder.decode_into(data, scratch)
            np.copyto(target, scratch)
            return out
        key = (int(transform.seed), int(epoch), i + first)  # the whole dataset's index
        plan_of = getattr(transform, "plan", None)
        render = getattr(transform, "render", None)
        if out is None:
            raise ValueError("a transformed encoded field needs an output buffer")
        if plan_of is None or render is None:  # any FieldTransform: decode whole, then apply
            scratch = self._scratch_for(shape)
            self.decoder.decode_into(data, scratch)
            transform.apply(scratch, channels_last(out), key)
            return out
        height, width = shape[1], shape[2]
        plan = plan_of(key, height, width)
        left, top, right, bottom = plan.box
        out_h, out_w = plan.size
        # the smallest decode whose crop still has at least the output's pixels
        min_h = math.ceil(height * out_h / max(bottom - top, 1e-9))
        min_w = math.ceil(width * out_w / max(right - left, 1e-9))
        crop_box = getattr(transform, "crop_box", None)
        render_crop = getattr(transform, "render_crop", None)
        if self.info.encoding == "yuv420" and crop_box is not None and render_crop is not None:
            left, top, right, bottom = crop_box(plan, height, width)
            rgbx = self._rgbx_crop(transform, shape, out, (bottom - top, right - left))
            if rgbx is not None:
                yuv.decode_box_rgbx(data, rgbx, top=top, left=left, size=(height, width))
                self._finish_rgbx(transform, rgbx, plan, out)
                return out
            row = channels_last(out)
            crop = np.empty((bottom - top, right - left, *row.shape[2:]), np.uint8)
            yuv.decode_box(data, crop, top=top, left=left, size=(height, width))
            render_crop(crop, plan, row)
            return out
        if (
            self.region_decode
            and crop_box is not None
            and render_crop is not None
            and self._decode_crop(data, shape, plan, (min_h, min_w), transform, out)
        ):
            return out
        if crop_box is not None and self.info.encoding == "jpeg" and not self.region_decode:
            jpeg.warn_whole_crop()  # once per process, where the partial decoder is missing
        # DCT scaling is JPEG's (a gray WebP would also come back with three channels)
        if self.info.encoding == "jpeg" and min_h < height and min_w < width:
            image = self.decoder.decode_scaled(data, min_h, min_w)
            scale = min(image.shape[0] / height, image.shape[1] / width)
        else:
            image = self._scratch_for(shape)
            self.decoder.decode_into(data, image)
            scale = 1.0
        render(image, plan, channels_last(out), scale=scale)
        return out

    def _decode_crop(
        self,
        data: npt.NDArray[np.uint8],
        shape: tuple[int, ...],
        plan: Any,
        minimum: tuple[int, int],
        transform: Any,
        out: npt.NDArray[Any],
    ) -> bool:
        """Decode only the pixels the plan's crop needs (DCT-scaled as the whole-image path
        scales), then resize them into ``out``: the whole-image path's pixels, less work.

        False where the whole-image path must decide: data the extension refuses (corrupt,
        truncated, CMYK, samplings simplejpeg reads otherwise or not at all: that path raises
        its own typed error or decodes it) and tiny images
        whose DCT scale simplejpeg picks otherwise (:func:`~chunkio.images.jpeg.exact_scale`).
        """
        channels, height, width = shape
        if minimum[0] < height and minimum[1] < width:
            d, sh, sw = jpeg.scaled_size(height, width, *minimum)
        else:
            d, sh, sw = 1, height, width
        if not jpeg.exact_scale(height, width, d):
            return False
        scale = 1.0 if d == 1 else min(sh / height, sw / width)
        left, top, right, bottom = transform.crop_box(plan, sh, sw, scale)
        size = (bottom - top, right - left)
        rgbx = self._rgbx_crop(transform, shape, out, size) if jpeg.REGION_RGBX else None
        # a gray crop is 2-D, as channels_last makes a gray row: render_crop wants the two alike
        crop = (
            rgbx
            if rgbx is not None
            else np.empty(size if channels == 1 else (*size, channels), np.uint8)
        )
        try:
            jpeg.decode_region(data, crop, size=(height, width), left=left, top=top, denominator=d)
        except (ValueError, NotImplementedError):  # the whole-image path gives the verdict
            return False
        if rgbx is not None:
            self._finish_rgbx(transform, rgbx, plan, out)
        else:
            transform.render_crop(crop, plan, channels_last(out))
        return True

    def _rgbx_crop(
        self, transform: Any, shape: tuple[int, ...], out: npt.NDArray[Any], size: tuple[int, int]
    ) -> npt.NDArray[np.uint8] | None:
        """A reused RGBX buffer of ``size`` for an RGB crop that :meth:`_finish_rgbx` can take
        (the transform resizes crops alone and the compiled parts are built), else None: the
        crop then takes ``render_crop``'s way. Both give the same pixels; this one saves
        torch's repacking of 3 channels to 4 and back, and numpy's copies into the row."""
        if (
            shape[0] != 3
            or not yuv.COMPILED
            or getattr(transform, "resize_crop", None) is None
            or out.shape[0] != 3
        ):
            return None
        h, w = size
        pool: npt.NDArray[np.uint8] | None = getattr(self._local, "rgbx", None)
        if pool is None or pool.size < h * w * 4:
            pool = self._local.rgbx = np.empty(max(h * w * 4, 1 << 18), np.uint8)
        return pool[: h * w * 4].reshape(h, w, 4)

    def _finish_rgbx(
        self, transform: Any, crop: npt.NDArray[np.uint8], plan: Any, out: npt.NDArray[Any]
    ) -> None:
        """Resize an RGBX crop, then mirror it (per the plan) into the channels-first row."""
        pixels = transform.resize_crop(crop, plan)
        if not yuv.rgbx_into(pixels, out, bool(plan.flip)):
            rgb = pixels[:, ::-1, :3] if plan.flip else pixels[..., :3]
            np.copyto(channels_last(out), rgb)

    def _scratch_for(self, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """A reused decode buffer for a ``(C, H, W)`` sample, channels last."""
        c, h, w = shape
        key = (h, w) if c == 1 else (h, w, c)
        scratch: dict[tuple[int, ...], npt.NDArray[Any]] | None = getattr(
            self._local, "buffers", None
        )
        if scratch is None or len(scratch) > 8:
            scratch = self._local.buffers = {}
        buf = scratch.get(key)
        if buf is None:
            buf = scratch[key] = np.empty(key, self.info.dtype)
        return buf
