"""Where a conversion writes: atomic, resumable and exclusive for local destinations.

A local destination ``DIR/NAME`` (a ``.zarr`` directory or a ``.h5`` file) is built next to
itself and appears only when complete::

    DIR/.NAME.chunkio-lock          flock'ed for the whole conversion; holds the owner's pid
    DIR/.NAME.chunkio-staging/
        data                        the Zarr group directory or HDF5 file being written
        plan.json                   what is being converted (fingerprinted); written once the
                                    arrays exist
        manifest.jsonl              one line per finished block, fsync'd after its chunks

*Exclusive*: ``flock`` is released by the kernel when its holder dies, even by SIGKILL, so a
stale lock file never blocks anyone. *Resumable*: a rerun with the same plan fingerprint
keeps every chunk range the manifest lists (after checking it: HDF5 blocks are read back, the
fletcher32 filter turning corruption into an error) and redoes the rest; any other plan, or a
staging that cannot be reopened, is discarded. *Atomic*: the data is renamed onto ``NAME``
only after the completion marker is written and everything is fsync'd; with ``overwrite`` the
old dataset stays intact until then.

Non-local destinations (``memory://``, URLs other than ``file://``, zarr Store objects) are
written in place: there is no lock, staging or resume, and the completion marker - written
last - is the only guarantee that the data is whole.

*Publish* (:func:`publish`, shared with appends and stitching): a new path is a rename, a
file replaces a file with ``os.replace``, a directory is exchanged with
``renameat2(RENAME_EXCHANGE)`` (Linux), else the old one is first moved aside into
``<staging>/replaced`` (put back if the second rename fails).

*Canonical HDF5*: an HDF5 file is rewritten once at the end with its chunks in sorted order
(:func:`chunkio.backends.hdf5.write.write_canonical`), so equal content gives equal bytes,
whether the conversion ran in one go, in parallel or was killed and resumed. A complete
destination is never written again by the same conversion: see
:mod:`chunkio.convert.durability.rerun`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

from ...backends import Storage, storage_for
from ...errors import ConversionError, DestinationExistsError
from ...util.fsync import fsync_path
from .locking import DestinationLock
from .plan import ConversionPlan, verified_chunks

__all__ = [
    "REPLACED",
    "Destination",
    "StagedDestination",
    "is_local",
    "open_destination",
    "publish",
]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def is_local(dst: Any) -> str | None:
    """The absolute local path of ``dst``, or ``None`` for memory, remote URLs and stores.

    >>> is_local("file:///data/x.zarr"), is_local("s3://bucket/x.zarr"), is_local("memory://x")
    ('/data/x.zarr', None, None)
    """
    if not isinstance(dst, (str, os.PathLike)):
        return None
    text: str = os.fspath(dst)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        return None
    return os.path.abspath(text)


class Destination:
    """Where one conversion writes. Base class: a non-local destination, written in place."""

    #: whether data is built in a staging area and renamed into place at the end
    staged = False

    def __init__(self, location: Any, plan: ConversionPlan) -> None:
        self.location = location
        self.plan = plan
        self.storage: Storage = storage_for(plan.format)
        #: what a writer in this process opens
        self.data_location: Any = location
        #: chunks already durably written by an earlier, interrupted run
        self.done_chunks: frozenset[int] = frozenset()
        self.resumed = False

    @property
    def display(self) -> str:
        return self.location if isinstance(self.location, str) else repr(self.location)

    @property
    def worker_location(self) -> str | None:
        """A picklable location other processes may open to write their own chunks, if any."""
        if self.storage.concurrent_writers and isinstance(self.data_location, str):
            return self.data_location
        return None

    def open(self, *, overwrite: bool) -> None:
        if self.storage.local_only:
            raise ConversionError(
                f"{self.display}: {self.plan.format} can only be written to a local path; "
                "got a remote location"
            )
        exists = self.storage.holds_data(self.location)
        if exists and overwrite:
            self.storage.clear(self.location)
        if exists and not overwrite:
            raise DestinationExistsError(
                f"{self.display} already holds data; pass "
                "execution=chunkio.Execution(overwrite=True) to replace it"
            )

    def reset(self) -> None:
        """Forget earlier progress (nothing to forget when writing in place)."""
        self.done_chunks, self.resumed = frozenset(), False

    def created(self) -> None:
        """The arrays exist: from now on finished blocks may be recorded."""

    def record(self, first: int, stop: int) -> None:
        """Chunks ``[first, stop)`` are durably written."""

    def sync(self, arrays: tuple[str, ...], first: int, stop: int) -> None:
        """Make chunks durable before they are recorded (only staged data is synced)."""

    def commit(self, *, pack: bool = False) -> None:
        """The completion marker is written: publish the dataset (``pack``: small chunk
        files into shards first, see :meth:`chunkio.backends.Storage.seal`)."""

    def close(self) -> None:
        """Release what :meth:`open` took; staged progress is kept for a rerun."""


class StagedDestination(Destination):
    """A local path built in a sibling staging directory under an exclusive lock."""

    staged = True

    def __init__(self, path: str, plan: ConversionPlan) -> None:
        super().__init__(path, plan)
        parent, name = os.path.split(path)
        self.parent = parent
        self.lock_path = os.path.join(parent, f".{name}.chunkio-lock")
        self.staging = os.path.join(parent, f".{name}.chunkio-staging")
        self.data_location = os.path.join(self.staging, "data")
        self._plan_path = os.path.join(self.staging, "plan.json")
        self._manifest_path = os.path.join(self.staging, "manifest.jsonl")
        self._lock = DestinationLock(self.lock_path, path)
        self._manifest: Any = None

    # -- open / resume -------------------------------------------------------------------
    def open(self, *, overwrite: bool) -> None:
        os.makedirs(self.parent, exist_ok=True)
        self._lock.acquire()
        try:
            if os.path.lexists(self.location):
                self._check_replaceable(overwrite)
            self._prepare()
        except BaseException:
            self.close()
            raise

    def _check_replaceable(self, overwrite: bool) -> None:
        if not overwrite:
            raise DestinationExistsError(
                f"{self.location} already exists; pass "
                "execution=chunkio.Execution(overwrite=True) to replace it"
            )
        path = self.location
        if os.path.isdir(path) and not os.path.islink(path):
            ok = not os.listdir(path) or os.path.isfile(os.path.join(path, "zarr.json"))
        else:
            with open(path, "rb") as fh:
                ok = fh.read(8) == _HDF5_SIGNATURE
        if not ok:
            # overwrite=True must not become "rm -rf" of an arbitrary directory or file.
            raise DestinationExistsError(
                f"{path} exists and is neither a Zarr group nor an HDF5 file; refusing to "
                "replace it even with overwrite=True"
            )

    def _prepare(self) -> None:
        if os.path.isdir(self.staging):
            done = self._resumable()
            if done is not None:
                self.done_chunks, self.resumed = done, True
                self._open_manifest()
                return
        self.reset()

    def reset(self) -> None:
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None
        if os.path.isdir(self.staging) and not os.path.islink(self.staging):
            shutil.rmtree(self.staging)
        elif os.path.lexists(self.staging):
            os.unlink(self.staging)
        os.mkdir(self.staging)
        fsync_path(self.parent)
        self.done_chunks, self.resumed = frozenset(), False

    def _resumable(self) -> frozenset[int] | None:
        """Chunks of the existing staging that can be kept, or None to start afresh."""
        try:
            with open(self._plan_path, encoding="utf-8") as fh:
                saved = json.load(fh)
        except (OSError, ValueError):
            return None  # killed before the arrays were created
        if not isinstance(saved, dict) or saved.get("fingerprint") != self.plan.fingerprint():
            return None
        listed = self._read_manifest()
        try:
            return verified_chunks(self.data_location, self.plan, listed)
        except Exception:  # unopenable or structurally wrong: not worth salvaging
            return None

    def _read_manifest(self) -> set[int]:
        done: set[int] = set()
        try:
            with open(self._manifest_path, encoding="utf-8") as fh:
                lines = fh.read().split("\n")
        except FileNotFoundError:
            return done
        for line in lines:
            try:
                first, stop = json.loads(line)["chunks"]
                done.update(range(int(first), int(stop)))
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line: that block is simply redone
        return done

    def _open_manifest(self) -> None:
        # Cut a torn last line so the next record starts on a line of its own.
        with contextlib.suppress(FileNotFoundError), open(self._manifest_path, "r+b") as fh:
            text = fh.read()
            if text and not text.endswith(b"\n"):
                fh.truncate(text.rfind(b"\n") + 1)
        self._manifest = open(self._manifest_path, "a", encoding="utf-8")  # noqa: SIM115

    # -- writing -------------------------------------------------------------------------
    def created(self) -> None:
        tmp = self._plan_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"fingerprint": self.plan.fingerprint(), "plan": self.plan.to_json()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._plan_path)
        fsync_path(self.staging)
        self._open_manifest()

    def sync(self, arrays: tuple[str, ...], first: int, stop: int) -> None:
        self.storage.sync_chunks(self.data_location, arrays, first, stop)

    def record(self, first: int, stop: int) -> None:
        if self._manifest is None:
            raise ConversionError(f"{self.location}: block recorded before the arrays exist")
        grid = self.plan.grid
        samples = [
            first * grid.samples_per_chunk,
            min(stop * grid.samples_per_chunk, grid.num_samples),
        ]
        self._manifest.write(json.dumps({"chunks": [first, stop], "samples": samples}) + "\n")
        self._manifest.flush()
        os.fsync(self._manifest.fileno())

    def commit(self, *, pack: bool = False) -> None:
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None
        # Canonical bytes (HDF5: chunks in sorted order), everything synced, then the swap.
        scratch = os.path.join(self.staging, "canonical")
        self.storage.seal(self.data_location, scratch, pack=pack)
        publish(self.data_location, self.location, self.staging)
        shutil.rmtree(self.staging)
        fsync_path(self.parent)

    def close(self) -> None:
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None
        self._lock.release()


@contextlib.contextmanager
def open_destination(dst: Any, plan: ConversionPlan, *, overwrite: bool) -> Iterator[Destination]:
    """Lock and prepare ``dst`` for ``plan``; release it on exit (progress is kept).

    Raises
    ------
    DestinationBusyError
        Another process is converting into the same local destination.
    DestinationExistsError
        ``dst`` holds data and ``overwrite`` is false.
    """
    path = is_local(dst)
    dest: Destination
    if path is not None and not storage_for(plan.format).in_memory:
        dest = StagedDestination(path, plan)
    else:
        dest = Destination(dst if path is None else path, plan)
    dest.open(overwrite=overwrite)
    try:
        yield dest
    finally:
        dest.close()


# -- publishing: the one step conversions, appends and stitching share ------------------------

#: where, inside a staging directory, an old directory waits between the two renames
REPLACED = "replaced"


def publish(data: str, path: str, staging: str) -> None:
    """Move the complete, synced ``data`` onto ``path``; the old version ends in ``staging``."""
    if not os.path.lexists(path):
        os.rename(data, path)
    elif os.path.isfile(data) and os.path.isfile(path):
        os.replace(data, path)
    elif not _exchange(data, path):
        replaced = os.path.join(staging, REPLACED)
        os.rename(path, replaced)
        try:
            os.rename(data, path)
        except BaseException:
            os.rename(replaced, path)  # the staging is deleted next: the old version must not be
            raise
    fsync_path(os.path.dirname(path))


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where that is unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), b)
