"""How many samples go into one chunk: a pure function of the sample size.

Chunks are the unit of I/O, compression and checksumming in both formats: too small and the
per-chunk overhead (a file per chunk in Zarr, a B-tree entry in HDF5, a decode call per read)
dominates; too large and random-access reads decode far more than a batch needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...format.layout import FieldInfo
from ...sampling.order import check_int

__all__ = ["DEFAULT_CHUNK_BYTES", "chunk_samples", "choose_samples_per_chunk"]

#: Target uncompressed bytes per chunk. A starting point, to be tuned by measurement
#: (benchmarks/): kept as one named constant so that tuning touches one line.
DEFAULT_CHUNK_BYTES = 1 << 20


def choose_samples_per_chunk(
    sample_nbytes: int,
    *,
    target_bytes: int = DEFAULT_CHUNK_BYTES,
    num_samples: int | None = None,
) -> int:
    """Samples per chunk so that one chunk holds about ``target_bytes`` uncompressed.

    Parameters
    ----------
    sample_nbytes
        Uncompressed bytes of one sample (of the largest field, when there are several).
        Zero (empty samples) is treated as one byte.
    target_bytes
        Desired uncompressed chunk size in bytes.
    num_samples
        Dataset length, when known: a chunk never holds more samples than the dataset.

    Returns
    -------
    int
        ``floor(target_bytes / sample_nbytes)``, at least 1 (a sample larger than the target
        gets a chunk of its own) and at most ``num_samples`` (when given and positive).

    Examples
    --------
    >>> choose_samples_per_chunk(1024)
    1024
    >>> choose_samples_per_chunk(3 * 224 * 224)  # an RGB 224x224 uint8 image
    6
    >>> choose_samples_per_chunk(64 << 20)  # larger than the target: one per chunk
    1
    >>> choose_samples_per_chunk(4, num_samples=100)
    100
    >>> choose_samples_per_chunk(4, num_samples=0)
    1
    """
    sample_nbytes = check_int("sample_nbytes", sample_nbytes, 0)
    target_bytes = check_int("target_bytes", target_bytes, 1)
    spc = max(1, target_bytes // max(1, sample_nbytes))
    if num_samples is not None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
            raise ValueError(f"num_samples must be an int >= 0; got {num_samples!r}")
        spc = max(1, min(spc, num_samples))
    return spc


def chunk_samples(
    fields: Sequence[FieldInfo],
    num_samples: int,
    samples_per_chunk: int | None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> int:
    """``samples_per_chunk`` as given, or ``chunk_bytes`` of the largest field's samples."""
    if samples_per_chunk is not None:
        return samples_per_chunk
    largest = max(f.sample_nbytes for f in fields)
    return choose_samples_per_chunk(largest, target_bytes=chunk_bytes, num_samples=num_samples)
