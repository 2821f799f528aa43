"""Images, one home per concept: how image bytes are read, decoded and encoded (the
transforms that resample them live in :mod:`chunkio.transforms`).

Image code by layer: this package is the *codecs* (bytes <-> pixels), used by conversion,
reading and the GPU route alike; *augmentation* (crop, resize and flip plans) is
:mod:`chunkio.transforms.image`; *converting* folders of images is
:func:`chunkio.convert.images.convert_images` (the entry point) over
:mod:`chunkio.convert.image` (its steps), as ``convert_volumes`` is over
:mod:`chunkio.convert.volume`.

:mod:`chunkio.images.jpeg`
    The one JPEG header parser (frame size, components, sampling factors, EXIF orientation,
    the markers that leave a file to Pillow) and the one libjpeg-turbo (simplejpeg) path:
    encode, strict decode (into a buffer or DCT-scaled), and the plain-JPEG fast path that
    conversion takes, bit-exact with Pillow.
:mod:`chunkio.images.pillow`
    The Pillow decode policy of conversion: modes, 16-bit, EXIF orientation, decompression
    bombs, truncation, resizing (:class:`~chunkio.images.pillow.DecodePolicy`).
:mod:`chunkio.images.encoding`
    The encodings of an encoded image field (raw, jpeg, png, webp, yuv420): validation,
    encoding, and the decoded shape read from a header.
:mod:`chunkio.images.yuv`
    The ``yuv420`` encoding: pre-decoded 4:2:0 pixels in LZ4 bands, read by box.
:mod:`chunkio.images.decoders`
    The decoders of encoded fields, one per encoding and library, writing into batch rows.
Nothing is imported here: each module pulls in only the libraries it needs.

Modules here may import :mod:`chunkio.util` and :mod:`chunkio.errors`, and the codec table
(:mod:`chunkio.backends.codec_table`, the one place that calls compressors) for ``yuv420``.
"""
