"""Images, one home per concept: how image bytes are read, decoded, encoded and transformed.

:mod:`chunkio.images.jpeg`
    The one JPEG header parser (frame size, components, sampling factors, EXIF orientation,
    the markers that leave a file to Pillow) and the one libjpeg-turbo (simplejpeg) path:
    encode, strict decode (into a buffer or DCT-scaled), and the plain-JPEG fast path that
    conversion takes, bit-exact with Pillow.
:mod:`chunkio.images.pillow`
    The Pillow decode policy of conversion: modes, 16-bit, EXIF orientation, decompression
    bombs, truncation, resizing (:class:`~chunkio.images.pillow.DecodePolicy`).
:mod:`chunkio.images.encoding`
    The encodings of an encoded image field (raw, jpeg, png, webp): validation, encoding, and
    the decoded shape read from a header.
:mod:`chunkio.images.decoders`
    The decoders of encoded fields, one per encoding and library, writing into batch rows.
:mod:`chunkio.images.draws`
    The counter-based randomness of transform plans: uniform draws keyed by
    ``(seed, epoch, index)``. The plans themselves (crop boxes, sizes, flips: pure functions
    of that key) are made by the public :mod:`chunkio.transforms`.
:mod:`chunkio.images.render`
    Rendering a plan: the one crop-and-resize (torch, or Pillow for alpha) into a batch row.
:mod:`chunkio.images.normalize`
    The device-side end: a uint8 batch to normalized floats (re-exported by
    :mod:`chunkio.transforms`).

Nothing is imported here: each module pulls in only the libraries it needs.
"""
