"""Discovery of image files: which files a conversion reads, in which order, with which label.

The same input always yields the same list, in the same order, on every machine and run:

- Names are sorted by code point at every level (``os.listdir`` order is arbitrary).
- Hidden entries (name starting with ``.``: ``.DS_Store``, ``.git``, ``._x.jpg``) and files
  whose extension is not in :data:`IMAGE_EXTENSIONS` (case-insensitive) are *ignored*: they
  are counted, never read, never an error.
- Entries that look like images but cannot be one are *bad*: zero-byte files, directories
  named like images (``x.jpg/``), broken symbolic links. They are handled by ``on_error``:
  ``"raise"`` -> :class:`~chunkio.errors.SourceError` naming the first one, ``"skip"`` ->
  listed in :attr:`ScanResult.skipped` with the reason.
- Symbolic links are followed, but a directory is entered at most once (keyed by device and
  inode), so a link back to an ancestor cannot loop; the repeated visit is counted as ignored.
- Names are kept as they are (unicode, spaces); relative paths use ``/``.

Layouts: a root holding (non-hidden) subdirectories is an *ImageFolder*: each subdirectory is
a class, labelled by its index in the sorted class names, and is searched recursively; image
files lying directly in such a root belong to no class and are ignored (counted). A root with
no subdirectories is *flat*: its images carry no label. An empty root or an empty class is a
:class:`~chunkio.errors.SourceError`.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ...errors import SourceError

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageEntry",
    "OnError",
    "ScanResult",
    "Skipped",
    "scan_folder",
    "scan_paths",
]

OnError = Literal["raise", "skip"]

#: extensions (lower case) of the formats read as images; anything else is ignored
IMAGE_EXTENSIONS = frozenset(
    {
        ".jpg",
        ".jpeg",
        ".jfif",
        ".png",
        ".bmp",
        ".gif",
        ".tif",
        ".tiff",
        ".webp",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
    }
)


@dataclass(frozen=True)
class ImageEntry:
    """One image to convert: its path on disk, its name relative to the source, its label."""

    path: str
    rel: str
    label: int | None = None


@dataclass(frozen=True)
class Skipped:
    """A source entry left out of the dataset, and why."""

    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class ScanResult:
    """What a scan found: images in order, class names, skipped entries, ignored count."""

    entries: tuple[ImageEntry, ...]
    class_names: tuple[str, ...] | None
    skipped: tuple[Skipped, ...] = ()
    ignored: int = 0
    root: str | None = None


@dataclass
class _Walk:
    on_error: OnError
    root: str
    found: list[ImageEntry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    ignored: int = 0
    seen_dirs: set[tuple[int, int]] = field(default_factory=set)

    def bad(self, path: str, reason: str) -> None:
        rel = _rel(path, self.root)
        if self.on_error == "raise":
            raise SourceError(f"{path}: {reason} (pass on_error='skip' to leave it out)")
        self.skipped.append(Skipped(rel, reason))

    def enter(self, path: str) -> bool:
        """Whether ``path`` is a directory not yet visited (guards against symlink loops)."""
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        if key in self.seen_dirs:
            self.ignored += 1
            return False
        self.seen_dirs.add(key)
        return True


def _rel(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _sorted_entries(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as err:
        raise SourceError(f"{path}: cannot list directory: {err}") from err


def _visit_file(walk: _Walk, path: str, name: str, label: int | None) -> None:
    """Classify one non-directory entry."""
    if not _is_image_name(name):
        walk.ignored += 1
        return
    if os.path.islink(path) and not os.path.exists(path):
        walk.bad(path, f"broken symbolic link (points to {os.readlink(path)!r})")
        return
    try:
        size = os.path.getsize(path)
    except OSError as err:
        walk.bad(path, f"cannot stat file: {err}")
        return
    if size == 0:
        walk.bad(path, "empty file (0 bytes)")
        return
    walk.found.append(ImageEntry(path, _rel(path, walk.root), label))


def _walk_dir(walk: _Walk, directory: str, label: int | None, *, recurse: bool) -> None:
    for name in _sorted_entries(directory):
        path = os.path.join(directory, name)
        if name.startswith("."):
            walk.ignored += 1
        elif os.path.isdir(path):
            if _is_image_name(name):
                walk.bad(path, "is a directory, not an image file")
            elif recurse and walk.enter(path):
                _walk_dir(walk, path, label, recurse=True)
            elif not recurse:
                walk.ignored += 1
        else:
            _visit_file(walk, path, name, label)


def _class_dirs(root: str) -> list[str]:
    return [
        name
        for name in _sorted_entries(root)
        if not name.startswith(".")
        and not _is_image_name(name)
        and os.path.isdir(os.path.join(root, name))
    ]


def scan_folder(root: str | os.PathLike[str], *, on_error: OnError = "raise") -> ScanResult:
    """List the images under ``root`` (ImageFolder or flat layout; see the module docstring).

    Parameters
    ----------
    root
        The source directory.
    on_error
        ``"raise"``: a bad entry (empty file, directory named like an image, broken link) is a
        :class:`~chunkio.errors.SourceError`. ``"skip"``: it is listed in ``skipped``.

    Returns
    -------
    ScanResult
        Images in deterministic order with labels (ImageFolder) or ``None`` labels (flat).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for p in ["cat/b.jpg", "cat/a.png", "dog/c.jpg", "dog/notes.txt", ".DS_Store"]:
    ...     (d / p).parent.mkdir(exist_ok=True); _ = (d / p).write_bytes(b"x")
    >>> r = scan_folder(d)
    >>> [(e.rel, e.label) for e in r.entries], r.class_names, r.ignored
    ([('cat/a.png', 0), ('cat/b.jpg', 0), ('dog/c.jpg', 1)], ('cat', 'dog'), 2)
    """
    _check_on_error(on_error)
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise SourceError(f"{top}: expected a directory of images; it does not exist or is not one")
    walk = _Walk(on_error=on_error, root=top)
    walk.enter(top)
    classes = _class_dirs(top)
    if not classes:
        _walk_dir(walk, top, None, recurse=False)
        if not walk.found:
            raise SourceError(
                f"{top}: no images found (expected image files with extensions "
                f"{sorted(IMAGE_EXTENSIONS)} or class subdirectories; {walk.ignored} other "
                f"entries ignored, {len(walk.skipped)} bad)"
            )
        return ScanResult(tuple(walk.found), None, tuple(walk.skipped), walk.ignored, top)
    for name in _sorted_entries(top):
        path = os.path.join(top, name)
        if name in classes:
            continue
        if not name.startswith(".") and _is_image_name(name) and os.path.isdir(path):
            walk.bad(path, "is a directory, not an image file")
        else:
            walk.ignored += 1  # hidden, or a file beside the class folders: in no class
    for label, name in enumerate(classes):
        before = len(walk.found)
        path = os.path.join(top, name)
        if walk.enter(path):
            _walk_dir(walk, path, label, recurse=True)
        if len(walk.found) == before:
            raise SourceError(
                f"{path}: class {name!r} holds no usable images; every class folder needs at "
                "least one (remove the folder or add images)"
            )
    return ScanResult(tuple(walk.found), tuple(classes), tuple(walk.skipped), walk.ignored, top)


def scan_paths(
    paths: Sequence[str | os.PathLike[str]],
    *,
    labels: Sequence[int] | None = None,
    root: str | os.PathLike[str] | None = None,
    on_error: OnError = "raise",
) -> ScanResult:
    """Check an explicit list of image files (kept in the given order).

    ``rel`` is the path relative to ``root`` when given, else to the paths' common directory.
    Non-image extensions are bad entries here (the caller named them), not ignored ones.
    """
    _check_on_error(on_error)
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError(f"paths must be a sequence of paths, not a single path; got {paths!r}")
    texts = [os.fspath(p) for p in paths]
    if not texts:
        raise SourceError("no image paths given (expected a non-empty sequence)")
    if labels is not None:
        labels = [_check_label(lab, i) for i, lab in enumerate(labels)]
        if len(labels) != len(texts):
            raise ValueError(f"labels must match paths: {len(texts)} paths, {len(labels)} labels")
    base = (
        os.fspath(root)
        if root is not None
        else os.path.commonpath([os.path.dirname(os.path.abspath(t)) for t in texts])
    )
    walk = _Walk(on_error=on_error, root=base)
    for i, path in enumerate(texts):
        label = None if labels is None else labels[i]
        if os.path.isdir(path):
            walk.bad(path, "is a directory, not an image file")
        elif not _is_image_name(path):
            walk.bad(path, f"extension not one of {sorted(IMAGE_EXTENSIONS)}")
        elif not os.path.lexists(path):
            walk.bad(path, "no such file")
        else:
            _visit_file(walk, path, os.path.basename(path), label)
    if not walk.found:
        raise SourceError(f"none of the {len(texts)} given paths is a usable image")
    return ScanResult(tuple(walk.found), None, tuple(walk.skipped), walk.ignored, base)


def _check_label(label: object, i: int) -> int:
    if isinstance(label, bool):
        raise TypeError(f"labels must be integers; label {i} is {label!r}")
    try:
        return operator.index(label)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"labels must be integers; label {i} is {label!r}") from None


def _check_on_error(on_error: object) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip'; got {on_error!r}")
