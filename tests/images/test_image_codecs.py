"""chunkio.images.encoding with the real libraries on real photo crops."""

from __future__ import annotations

import pickle
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from benchmarks.data import sample_photos
from chunkio.errors import CorruptChunkError, OptionalDependencyError
from chunkio.images.decoders import ImageDecoder, MissingDecoderError, image_decoder
from chunkio.images.encoding import ENCODINGS, check_encoding, decoded_shape, encode_image

LIBRARIES = {
    "jpeg": ["simplejpeg", "imagecodecs", "Pillow"],
    "png": ["imagecodecs", "Pillow"],
    "webp": ["imagecodecs", "Pillow"],
}
ALL = [(enc, lib) for enc, libs in LIBRARIES.items() for lib in libs]


@pytest.fixture(scope="module")
def photos() -> list[np.ndarray]:
    return sample_photos()


def crop(photos: list[np.ndarray], k: int = 0, h: int = 224, w: int = 224) -> np.ndarray:
    photo = photos[k % 2]
    y, x = (60 + 37 * k) % (photo.shape[0] - h), (90 + 53 * k) % (photo.shape[1] - w)
    return np.ascontiguousarray(photo[y : y + h, x : x + w])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * float(np.log10(255.0**2 / mse))


def lossless(encoding: str) -> tuple[str, int]:
    return (encoding, 100) if encoding == "webp" else (encoding, 90)


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_raw_round_trip_exact(photos: list[np.ndarray], dtype: type) -> None:
    image = crop(photos).astype(dtype) * 3
    data = encode_image(image, "raw")
    assert len(data) == image.nbytes
    out = np.zeros_like(image)
    image_decoder("raw").decode_into(np.frombuffer(data, np.uint8), out)
    np.testing.assert_array_equal(out, image)
    with pytest.raises(ValueError, match="needs"):
        image_decoder("raw").decode_into(data, np.zeros((2, 2), dtype))


@pytest.mark.parametrize("library", LIBRARIES["png"])
def test_png_round_trip_exact(photos: list[np.ndarray], library: str) -> None:
    rgb = crop(photos)
    rgba = np.dstack([rgb, rgb[:, :, 1]])
    gray = np.ascontiguousarray(rgb[:, :, 0])
    gray16 = gray.astype(np.uint16) * 257 + np.arange(224, dtype=np.uint16)
    rgb16 = rgb.astype(np.uint16) * 251
    dec = image_decoder("png", library)
    for image in (rgb, rgba, gray, gray16, rgb16):
        data = encode_image(image, "png")
        assert decoded_shape(data, "png") == image.shape
        got = dec.decode(data)
        assert got.dtype == image.dtype
        np.testing.assert_array_equal(got, image)
    # (H, W, 1) round-trips through decode_into an (H, W, 1) row
    data = encode_image(gray[:, :, None], "png")
    out = np.zeros((224, 224, 1), np.uint8)
    dec.decode_into(data, out)
    np.testing.assert_array_equal(out[:, :, 0], gray)
    out16 = np.zeros((224, 224, 1), np.uint16)
    dec.decode_into(encode_image(gray16[:, :, None], "png"), out16)
    np.testing.assert_array_equal(out16[:, :, 0], gray16)


@pytest.mark.parametrize("library", LIBRARIES["webp"])
def test_webp_lossless_at_q100(photos: list[np.ndarray], library: str) -> None:
    rgb = crop(photos, 1, 96, 96)  # small: a lossless 224 px WebP encode takes 0.3 CPU-s
    rgba = np.dstack([rgb, np.where(rgb[:, :, 0] > 128, 0, 200).astype(np.uint8)])
    gray = np.ascontiguousarray(rgb[:, :, 2])
    dec = image_decoder("webp", library)
    for image in (rgb, rgba):
        data = encode_image(image, "webp", 100)
        assert decoded_shape(data, "webp") == image.shape
        np.testing.assert_array_equal(dec.decode(data), image)  # RGB under alpha 0 kept too
    data = encode_image(gray, "webp", 100)
    assert decoded_shape(data, "webp") == (96, 96, 3)  # WebP has no gray mode
    for out in (np.zeros((96, 96), np.uint8), np.zeros((96, 96, 1), np.uint8)):
        dec.decode_into(data, out)
        np.testing.assert_array_equal(out.reshape(96, 96), gray)
    lossy = encode_image(rgb, "webp", 90)
    assert len(lossy) < len(encode_image(rgb, "webp", 100))
    assert psnr(dec.decode(lossy), rgb) > 30


@pytest.mark.parametrize("library", LIBRARIES["jpeg"])
def test_jpeg_q90_psnr(photos: list[np.ndarray], library: str) -> None:
    dec = image_decoder("jpeg", library)
    figures = []
    for k in range(6):
        image = crop(photos, k)
        data = encode_image(image, "jpeg", 90)
        assert len(data) < image.nbytes / 3  # full-resolution detail; the bench measures 8x
        got = dec.decode(data)
        assert got.shape == image.shape and got.dtype == np.uint8
        figures.append(psnr(got, image))
    assert np.mean(figures) > 33, figures  # 4:2:0 at q90, full-resolution crops
    assert min(figures) > 30, figures
    # from quality 95 chroma is kept whole (4:4:4): larger, clearly better
    image = crop(photos, 0)
    q95, q94 = encode_image(image, "jpeg", 95), encode_image(image, "jpeg", 94)
    assert len(q94) < 0.85 * len(q95)
    assert psnr(dec.decode(q95), image) > psnr(dec.decode(q94), image) + 1.5


@pytest.mark.parametrize("library", LIBRARIES["jpeg"])
def test_jpeg_gray_keeps_two_dims(photos: list[np.ndarray], library: str) -> None:
    gray = np.ascontiguousarray(crop(photos)[:, :, 1])
    dec = image_decoder("jpeg", library)
    for image in (gray, gray[:, :, None]):
        data = encode_image(image, "jpeg", 90)
        assert decoded_shape(data, "jpeg") == (224, 224)
        got = dec.decode(data)
        assert got.shape == (224, 224)
        assert psnr(got, gray) > 35
        out = np.zeros((224, 224, 1), np.uint8)
        dec.decode_into(data, out)
        np.testing.assert_array_equal(out[:, :, 0], got)


def test_libraries_agree(photos: list[np.ndarray]) -> None:
    data = encode_image(crop(photos, 2), "jpeg", 90)
    ref = image_decoder("jpeg", "simplejpeg").decode(data)
    for library in ("imagecodecs", "Pillow"):
        got = image_decoder("jpeg", library).decode(data)
        assert np.abs(got.astype(int) - ref).max() <= 2, library
    image = crop(photos, 3)
    for data in (
        encode_image(image, "webp", 80),
        encode_image(np.dstack([image, image[:, :, :1]]), "png"),
    ):
        enc = "webp" if data[:4] == b"RIFF" else "png"
        a = image_decoder(enc, "imagecodecs").decode(data)  # type: ignore[arg-type]
        b = image_decoder(enc, "Pillow").decode(data)  # type: ignore[arg-type]
        np.testing.assert_array_equal(a, b)


# --- decode_into -------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "library"), ALL)
def test_decode_into_batch_row(photos: list[np.ndarray], encoding: str, library: str) -> None:
    images = [crop(photos, k, 96, 80) for k in range(3)]  # small: lossless WebP is slow
    blobs = [encode_image(im, *lossless(encoding)) for im in images]  # type: ignore[arg-type]
    chunk = np.frombuffer(b"".join(blobs), np.uint8)  # samples are views into a chunk buffer
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    batch = np.full((5, 96, 80, 3), 7, np.uint8)
    start = 0
    for i, blob in enumerate(blobs):
        view = chunk[start : start + len(blob)]
        start += len(blob)
        dec.decode_into(view, batch[i + 1])
        np.testing.assert_array_equal(batch[i + 1], dec.decode(blob))
        if encoding != "jpeg":
            np.testing.assert_array_equal(batch[i + 1], images[i])
    assert (batch[0] == 7).all() and (batch[4] == 7).all()
    # memoryview input and a non-contiguous (channels-first transposed) row
    chw = np.zeros((3, 96, 80), np.uint8)
    dec.decode_into(memoryview(blobs[0]), chw.transpose(1, 2, 0))
    np.testing.assert_array_equal(chw.transpose(1, 2, 0), batch[1])


@pytest.mark.parametrize(("encoding", "library"), ALL)
def test_decode_into_shape_mismatch(photos: list[np.ndarray], encoding: str, library: str) -> None:
    data = encode_image(crop(photos, 0, 64, 80), *lossless(encoding))  # type: ignore[arg-type]
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    out = np.zeros((80, 64, 3), np.uint8)
    with pytest.raises(ValueError, match=r"decodes to \(64, 80, 3\) uint8; out is \(80, 64, 3\)"):
        dec.decode_into(data, out)
    with pytest.raises(ValueError, match="out is"):
        dec.decode_into(data, np.zeros((64, 80, 3), np.float32))
    assert not out.any()


# --- headers and scaling -----------------------------------------------------------------


def test_decoded_shape_from_header(photos: list[np.ndarray]) -> None:
    image = crop(photos, 1, 123, 77)
    for encoding in ("jpeg", "png", "webp"):
        data = encode_image(image, encoding)  # type: ignore[arg-type]
        assert decoded_shape(data, encoding) == (123, 77, 3)
        chunk = np.frombuffer(b"x" * 99 + data + b"y" * 99, np.uint8)
        assert decoded_shape(chunk[99 : 99 + len(data)], encoding) == (123, 77, 3)
        assert decoded_shape(data[: len(data) // 2], encoding) == (123, 77, 3)
    assert decoded_shape(encode_image(image[:, :, 0], "png"), "png") == (123, 77)
    assert decoded_shape(encode_image(np.dstack([image, image[:, :, :1]]), "png"), "png") == (
        123,
        77,
        4,
    )
    rgba = np.dstack([image, image[:, :, :1]])
    for quality in (80, 100):  # lossy with alpha (VP8X), lossless (VP8L)
        assert decoded_shape(encode_image(rgba, "webp", quality), "webp") == (123, 77, 4)
    with pytest.raises(ValueError, match="no shape"):
        decoded_shape(encode_image(image, "raw"), "raw")
    for encoding in ("jpeg", "png", "webp"):
        with pytest.raises(CorruptChunkError, match=f"corrupt {encoding} image"):
            decoded_shape(b"\x00" * 64, encoding)


@pytest.mark.parametrize("library", ["simplejpeg", "Pillow"])
def test_decode_scaled_jpeg(photos: list[np.ndarray], library: str) -> None:
    dec = image_decoder("jpeg", library)
    data = encode_image(crop(photos, 0, 225, 301), "jpeg", 90)
    full = dec.decode(data)
    for (mh, mw), shape in {
        (225, 301): (225, 301),
        (200, 10): (225, 301),
        (113, 151): (113, 151),
        (100, 100): (113, 151),
        (30, 30): (57, 76),
        (29, 1): (29, 38),
        (1, 1): (29, 38),
    }.items():
        got = dec.decode_scaled(data, mh, mw)
        assert got.shape == (*shape, 3), (mh, mw, got.shape)
        if shape[0] < 225:  # a real downscale of the same picture
            ref = full[:: 225 // shape[0] + 1, :: 301 // shape[1] + 1].mean()
            assert abs(float(got.mean()) - float(ref)) < 10
    gray = encode_image(crop(photos)[:, :, 0], "jpeg", 90)
    assert dec.decode_scaled(gray, 50, 50).shape == (56, 56)


@pytest.mark.parametrize(("encoding", "library"), [*ALL[1:], ("png", "Pillow")])
def test_decode_scaled_full_size_elsewhere(
    photos: list[np.ndarray], encoding: str, library: str
) -> None:
    data = encode_image(crop(photos, 0, 100, 120), encoding)  # type: ignore[arg-type]
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    if encoding == "jpeg" and library == "Pillow":
        assert dec.decode_scaled(data, 10, 10).shape == (13, 15, 3)
    else:
        assert dec.decode_scaled(data, 10, 10).shape == (100, 120, 3)


# --- validation --------------------------------------------------------------------------


def test_check_encoding_errors() -> None:
    with pytest.raises(ValueError, match=r"one of raw, jpeg, png, webp, yuv420; got 'jpg'"):
        check_encoding("jpg", 90)
    for q in (0, 101, 90.5, True, "90", None):
        for enc in ("jpeg", "webp"):
            with pytest.raises(ValueError, match=f"{enc} quality must be an int in 1..100"):
                check_encoding(enc, q)  # type: ignore[arg-type]
    for enc in ENCODINGS:
        check_encoding(enc, 1)
        check_encoding(enc, 100)
    check_encoding("png", 0)  # ignored
    check_encoding("raw", -5)
    check_encoding("jpeg", np.int64(75))  # type: ignore[arg-type]


def test_encode_image_refuses_what_the_encoding_cannot_hold(photos: list[np.ndarray]) -> None:
    rgb = crop(photos, 0, 32, 32)
    with pytest.raises(ValueError, match="use png"):
        encode_image(np.dstack([rgb, rgb[:, :, 0]]), "jpeg")
    with pytest.raises(ValueError, match="use png"):
        encode_image(rgb.astype(np.uint16), "jpeg")
    with pytest.raises(ValueError, match="uint8"):
        encode_image(rgb.astype(np.uint16), "webp")
    with pytest.raises(ValueError, match="uint8 or uint16"):
        encode_image(rgb.astype(np.float32), "png")
    with pytest.raises(ValueError, match="C in 1, 3, 4"):
        encode_image(rgb[:, :, :2], "png")
    with pytest.raises(ValueError, match="got 'gif'"):
        encode_image(rgb, "gif")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="quality"):
        encode_image(rgb, "jpeg", 0)


# --- corrupt data ------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "library"), ALL)
def test_truncated_and_corrupt_raise(photos: list[np.ndarray], encoding: str, library: str) -> None:
    data = encode_image(crop(photos, 3), encoding, 90)  # type: ignore[arg-type]
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    out = np.zeros((224, 224, 3), np.uint8)
    broken = {
        "truncated": data[: len(data) * 2 // 3],
        "truncated end": data[:-10],
        "garbage": bytes(range(256)) * 4,
        "empty": b"",
    }
    for what, bad in broken.items():
        with pytest.raises(CorruptChunkError, match=f"corrupt {encoding} image: "):
            dec.decode_into(bad, out)
        with pytest.raises(CorruptChunkError, match=f"corrupt {encoding} image: "):
            dec.decode(bad)
        assert what


def test_simplejpeg_catches_corrupt_entropy_data(photos: list[np.ndarray]) -> None:
    data = bytearray(encode_image(crop(photos, 4), "jpeg", 90))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff\x00" * 32 + b"\xff\xd0" * 16
    with pytest.raises(CorruptChunkError, match="corrupt jpeg image: simplejpeg"):
        image_decoder("jpeg").decode(bytes(data))


@pytest.mark.parametrize("encoding", ["jpeg", "png"])
def test_pillow_truncation_is_an_error_even_where_loading_truncated_images_is_on(
    photos: list[np.ndarray], monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    """A user's script (or another library) may set Pillow's global switch that pads a
    truncated file with grey; chunkio's own end-of-image check still refuses the file, and
    decoding whole files leaves the switch as it found it."""
    from PIL import ImageFile

    data = encode_image(crop(photos, 3), encoding, 90)  # type: ignore[arg-type]
    dec = image_decoder(encoding, "Pillow")  # type: ignore[arg-type]
    whole = dec.decode(data)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # chunkio never sets it
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    np.testing.assert_array_equal(dec.decode(data), whole)
    for cut in (len(data) * 2 // 3, len(data) - 10):
        with pytest.raises(CorruptChunkError, match=f"corrupt {encoding} image: Pillow"):
            dec.decode(data[:cut])
        with pytest.raises(CorruptChunkError, match=f"corrupt {encoding} image: Pillow"):
            dec.decode_scaled(data[:cut], 50, 50)  # the augmentation's reduced decode
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True


#: the function each (library, encoding) decodes with, as ``module:attribute``
DECODE_CALLS = {
    ("simplejpeg", "jpeg"): "chunkio.images.jpeg:decode",
    ("imagecodecs", "jpeg"): "imagecodecs:jpeg8_decode",
    ("imagecodecs", "png"): "imagecodecs:png_decode",
    ("imagecodecs", "webp"): "imagecodecs:webp_decode",
    ("Pillow", "jpeg"): "PIL.Image:open",
    ("Pillow", "png"): "PIL.Image:open",
    ("Pillow", "webp"): "PIL.Image:open",
}
DEFAULTS = {"jpeg": "simplejpeg", "png": "imagecodecs", "webp": "imagecodecs"}


@pytest.mark.parametrize(("encoding", "library"), [*ALL, *((e, None) for e in DEFAULTS)])
def test_each_decoder_decodes_with_the_library_it_names(
    photos: list[np.ndarray], monkeypatch: pytest.MonkeyPatch, encoding: str, library: str | None
) -> None:
    """Not the ``library`` attribute (a class constant): the library's own decode function is
    called, and only that one, for a named library and for the measured default."""
    import importlib

    data = encode_image(crop(photos, 2, 64, 64), *lossless(encoding))  # type: ignore[arg-type]
    calls: dict[str, int] = {}
    for target in set(DECODE_CALLS.values()):
        module, name = target.split(":")
        real = getattr(importlib.import_module(module), name)

        def spy(*a: object, _real=real, _target=target, **kw: object) -> object:
            calls[_target] = calls.get(_target, 0) + 1
            return _real(*a, **kw)

        monkeypatch.setattr(importlib.import_module(module), name, spy)
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    dec.decode(data)
    expected = library or DEFAULTS[encoding]
    assert dec.library == expected
    assert calls == {DECODE_CALLS[expected, encoding]: 1}


# --- decoder objects ---------------------------------------------------------------------


def test_image_decoder_defaults_and_missing() -> None:
    assert image_decoder("jpeg").library == "simplejpeg"
    assert image_decoder("png").library == "imagecodecs"
    assert image_decoder("webp").library == "imagecodecs"
    assert image_decoder("raw").library == "numpy"
    for enc, lib in ALL:
        dec = image_decoder(enc, lib)  # type: ignore[arg-type]
        assert isinstance(dec, ImageDecoder)
        assert (dec.encoding, dec.library, dec.releases_gil) == (enc, lib, True)
    with pytest.raises(MissingDecoderError, match="no jpeg decoder named 'libjpeg'"):
        image_decoder("jpeg", "libjpeg")
    with pytest.raises(MissingDecoderError, match="simplejpeg"):
        image_decoder("png", "simplejpeg")
    with pytest.raises(ValueError, match="got 'gif'"):
        image_decoder("gif")  # type: ignore[arg-type]
    assert issubclass(MissingDecoderError, ImportError)
    assert issubclass(MissingDecoderError, OptionalDependencyError)


def test_missing_library_names_the_pip_package(
    monkeypatch: pytest.MonkeyPatch, photos: list[np.ndarray]
) -> None:
    monkeypatch.setitem(sys.modules, "imagecodecs", None)  # import imagecodecs -> ImportError
    with pytest.raises(MissingDecoderError, match="pip install imagecodecs"):
        image_decoder("png", "imagecodecs")
    assert image_decoder("png").library == "Pillow"  # the default falls back
    assert image_decoder("webp").library == "Pillow"
    with pytest.raises(MissingDecoderError, match="pip install imagecodecs"):
        encode_image(crop(photos, 0, 8, 8).astype(np.uint16), "png")


@pytest.mark.parametrize(("encoding", "library"), [*ALL, ("raw", "numpy")])
def test_decoder_pickles(photos: list[np.ndarray], encoding: str, library: str) -> None:
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    back = pickle.loads(pickle.dumps(dec))
    assert back == dec and type(back) is type(dec) and back.library == library
    if encoding != "raw":
        data = encode_image(crop(photos, 0, 64, 64), *lossless(encoding))  # type: ignore[arg-type]
        np.testing.assert_array_equal(back.decode(data), dec.decode(data))


@pytest.mark.parametrize(("encoding", "library"), ALL)
def test_threads_decode_like_serial(photos: list[np.ndarray], encoding: str, library: str) -> None:
    images = [crop(photos, k, 96, 96) for k in range(16)]
    blobs = [encode_image(im, encoding, 85) for im in images]  # type: ignore[arg-type]
    dec = image_decoder(encoding, library)  # type: ignore[arg-type]
    serial = np.stack([dec.decode(b) for b in blobs])
    batch = np.zeros_like(serial)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: dec.decode_into(blobs[i % 16], batch[i % 16]), range(64)))
    np.testing.assert_array_equal(batch, serial)
