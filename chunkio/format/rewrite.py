"""The ``chunkio convert arrays`` command that rewrites a store chunkio did not write as a
chunkio dataset: suggested by ``chunkio doctor`` (:mod:`chunkio.diagnose.doctor_chunking`) and
by the loader's label-mixing warning (:mod:`chunkio.sampling.label_check`), so that building the
message imports no converter."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from typing import Any

__all__ = ["rewrite_command", "suggested_destination"]


def suggested_destination(location: str) -> str:
    """``<source stem>.chunkio.zarr`` beside a local source (numbered if that exists), or in
    the current folder for a URL.

    >>> suggested_destination("s3://bucket/train.zarr/")
    'train.chunkio.zarr'
    """
    text = location.rstrip("/")
    stem = os.path.splitext(text.rsplit("/", 1)[-1])[0] or "dataset"
    if "://" in text and not text.startswith("file://"):
        return f"{stem}.chunkio.zarr"
    folder = os.path.dirname(text.removeprefix("file://"))
    candidate, n = os.path.join(folder, f"{stem}.chunkio.zarr"), 1
    while os.path.exists(candidate):
        n += 1
        candidate = os.path.join(folder, f"{stem}.chunkio-{n}.zarr")
    return candidate


def rewrite_command(
    location: str,
    arrays: Mapping[str, str],
    samples_per_chunk: int | None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    trust_codecs: bool = False,
) -> str:
    """The ``chunkio convert arrays`` command that rewrites the fields (name -> array path);
    ``samples_per_chunk=None``: the converter's default chunking.

    >>> print(rewrite_command("s3://b/u.zarr", {"image": "x"}, 85, {"anon": True}))
    ... # doctest: +NORMALIZE_WHITESPACE
    chunkio convert arrays s3://b/u.zarr u.chunkio.zarr --fields image=x
        --samples-per-chunk 85 --storage-options '{"anon": true}'
    >>> print(rewrite_command("user.h5", {"x": "a/x"}, None, trust_codecs=True))
    chunkio convert arrays user.h5 user.chunkio.zarr --fields x=a/x --trust-codecs
    """
    words = ["chunkio", "convert", "arrays", location, suggested_destination(location), "--fields"]
    words += [f"{name}={path}" for name, path in arrays.items()]
    if samples_per_chunk is not None:
        words += ["--samples-per-chunk", str(samples_per_chunk)]
    if storage_options:
        words += ["--storage-options", json.dumps(dict(storage_options))]
    if trust_codecs:
        words.append("--trust-codecs")
    return " ".join(shlex.quote(w) for w in words)
