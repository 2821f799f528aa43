"""Whether chunkio's optional compiled parts are built, and a check that fails CI without them.

``setup.py`` builds them with ``optional=True``: a ``pip install`` without libjpeg-turbo's
headers (or without a C compiler) goes on, and chunkio computes the same pixels without them
(whole-image JPEG decodes; NumPy's yuv420 conversion; NumPy's scatter of sparse rows),
slower. The test suite then skips what needs them, so a C edit that does not compile, or a CI
machine without the headers, would leave every run green. Hence:

* ``python -m chunkio.testing.compiled`` (``make check-extensions``, a step of ``make test``)
  prints one line per compiled part and exits 1 when one is missing, stale or older than its C
  source, if the ``CI`` environment variable is set or ``CHUNKIO_REQUIRE_EXTENSIONS=1``;
  elsewhere it warns and exits 0.
* :mod:`chunkio.testing.skips` ends every pytest run with :func:`summary`: which parts are
  missing and how many tests skipped for each.
* :func:`report` is what users see (``chunkio --version``, ``chunkio doctor``): each part
  active (the JPEG one: which headers and which libjpeg-turbo), or missing with the fix.

``_jpegcrop`` can be built and still unusable: built against the vendored headers, it binds
a libjpeg-turbo at import (:mod:`chunkio.images.libjpeg`), and there may be none to bind.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .servers import in_ci

__all__ = ["PARTS", "CompiledPart", "main", "problems", "report", "required", "summary"]

#: how to rebuild them once what they need is installed
REBUILD = (
    "make venv, or: python setup.py build_ext --inplace (its output shows the compiler's errors)"
)
#: what a user does about a missing part (the headers are vendored: a compiler is enough)
FIX = (
    "install a C compiler (Debian: apt-get install gcc), then reinstall chunkio from its "
    "checkout: pip install --force-reinstall --no-deps . (a development checkout: " + REBUILD + ")"
)


@dataclass(frozen=True)
class CompiledPart:
    """One extension module ``setup.py`` builds."""

    #: its short name, as runs report it
    name: str
    module: str
    #: what building it needs besides Python's own headers
    needs: str
    #: names a build of the current C source defines (an older build lacks them)
    defines: tuple[str, ...]
    #: what a skip's reason says for a test that needs it (besides :attr:`name`)
    mentions: tuple[str, ...] = ()
    #: what it speeds up, as reports say
    does: str = ""
    #: ``module:attribute`` of a built part's state: its ``problem`` says why the part cannot
    #: be used (None: it can), its ``describe()`` what it runs on
    state: str = ""

    def mentioned_in(self, reason: str) -> bool:
        return any(word in reason for word in (self.name, *self.mentions))


PARTS = (
    CompiledPart(
        "_jpegcrop",
        "chunkio.images._jpegcrop",
        "a C compiler; with libjpeg-turbo's headers (jpeglib.h; Debian: apt-get install "
        "libjpeg62-turbo-dev, Ubuntu: libjpeg-turbo8-dev, Fedora: dnf install "
        "libjpeg-turbo-devel, macOS: brew install jpeg-turbo) it links the system's libjpeg, "
        "without them it takes its vendored headers and binds Pillow's libjpeg-turbo at import",
        ("decode_region", "add_restarts", "RGBX"),
        ("libjpeg-turbo extension", "crop-region extension"),
        "partial JPEG decode of crops",
        "chunkio.images.jpeg:LIBJPEG",
    ),
    CompiledPart(
        "_yuv",
        "chunkio.images._yuv",
        "a C compiler (Debian: apt-get install build-essential)",
        ("rgbx_to_rgb",),
        ("yuv420 extension",),
        "yuv420 colour conversion",
    ),
    CompiledPart(
        "_fletcher",
        "chunkio.backends._fletcher",
        "a C compiler (Debian: apt-get install build-essential)",
        ("sums",),
        ("fletcher32 extension",),
        "HDF5 fletcher32 checksums",
    ),
    CompiledPart(
        "_sparse_rows",
        "chunkio.read._sparse_rows",
        "a C compiler (Debian: apt-get install build-essential)",
        ("dense",),
        ("sparse-rows extension",),
        "sparse rows scattered into dense batches",
    ),
)


def _state(part: CompiledPart) -> Any:
    """The object :attr:`CompiledPart.state` names, or None."""
    if not part.state:
        return None
    module, _, name = part.state.partition(":")
    return getattr(importlib.import_module(module), name)


def problems(parts: Iterable[CompiledPart] = PARTS) -> dict[CompiledPart, str]:
    """What is wrong with each part that is not built from its current C source: it does not
    import, it lacks a name the source defines, or (in a source checkout) its C file is newer."""
    found: dict[CompiledPart, str] = {}
    for part in parts:
        try:
            module = importlib.import_module(part.module)
        except ImportError as err:
            found[part] = f"not built ({err})"
            continue
        lacking = [name for name in part.defines if not hasattr(module, name)]
        if lacking:
            found[part] = f"a stale build (it lacks {', '.join(lacking)})"
            continue
        unusable = getattr(_state(part), "problem", None)
        if unusable is not None:
            found[part] = f"built, but unusable: {unusable}"
            continue
        where = getattr(module, "__file__", None)
        if where is None:
            continue
        built = Path(where)
        source = built.with_name(f"{part.name}.c")
        if source.is_file() and built.is_file() and source.stat().st_mtime > built.stat().st_mtime:
            found[part] = f"older than {source} (edited since the build)"
    return found


def required() -> bool:
    """Whether a missing part fails the check: under CI, or ``CHUNKIO_REQUIRE_EXTENSIONS=1``."""
    return in_ci() or os.environ.get("CHUNKIO_REQUIRE_EXTENSIONS", "").strip() == "1"


def summary(
    skipped_reasons: Sequence[str] | None = None, found: Mapping[CompiledPart, str] | None = None
) -> list[str]:
    """The lines a test run ends with: every part built, or each one that is not (``found``:
    :func:`problems`), with what building it needs and how many of the skipped tests (by their
    reasons, when given) needed it."""
    found = problems() if found is None else found
    if not found:
        return [f"compiled parts: {', '.join(p.name for p in PARTS)} built"]
    lines = []
    for part, problem in found.items():
        tests = ""
        if skipped_reasons is not None:
            count = sum(part.mentioned_in(reason) for reason in skipped_reasons)
            tests = f" ({count} test{'' if count == 1 else 's'} skipped)"
        lines.append(
            f"compiled parts: {part.name} missing{tests}: {problem}; "
            f"it needs {part.needs}; then {REBUILD}"
        )
    return lines


def report(found: Mapping[CompiledPart, str] | None = None) -> list[str]:
    """One line per compiled part, for users (``chunkio --version``, ``chunkio doctor``):
    ``active`` (with what it runs on), or ``missing``: why, what chunkio does instead, and
    the fix. ``found``: :func:`problems` (default: computed)."""
    found = problems() if found is None else found
    lines = []
    for part in PARTS:
        head = f"{part.name} ({part.does})"
        problem = found.get(part)
        if problem is None:
            state = _state(part)
            lines.append(f"{head}: {state.describe() if state is not None else 'active'}")
        elif problem.startswith("built, but"):  # the state's problem says its own fix
            lines.append(f"{head}: missing, slower without it: {problem}")
        else:
            lines.append(f"{head}: missing, slower without it: {problem}; fix: {FIX}")
    return lines


def main() -> int:
    """Print the state of every compiled part; 1 if one is missing and :func:`required`."""
    found = problems()
    lines = summary(found=found)
    if not found:
        print(lines[0])
        return 0
    for line in lines:
        print(line, file=sys.stderr)
    if required():
        print(
            "compiled parts: CI (or CHUNKIO_REQUIRE_EXTENSIONS=1) needs every one built; "
            "a build that failed left the suite to skip its tests",
            file=sys.stderr,
        )
        return 1
    print("compiled parts: going on without them (chunkio falls back, slower)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
