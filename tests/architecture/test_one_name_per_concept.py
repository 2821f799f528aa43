"""One name per concept (issue 37).

On the read side a *reader* is a backend handle on a store's files (``chunkio.backends.Reader``
and its implementations, opened by ``ReaderOptions``); the read core, a field's reads, a
batch's read request and a dataset's per-process handle have names of their own. (There were
four different "readers", and ``ReaderOptions`` beside ``ReadOptions``.)

*Field*: ``chunkio.Field`` is the one class so named, a field of the samples as the user
declares it (its arrays, stacked, and its steps); ``FieldInfo`` a stored field's description,
``FieldReads`` the protocol that serves one field in a process (its implementations are
``<Kind>Reads``; they were ``<Kind>Field``), ``FieldSpec`` a field's region of a ring slot,
``FieldTransform`` a transform of one field, ``CFFieldCoding`` how a field is CF-decoded (was
``CFField``). *Source*: four contracts, each named by what it yields (``BlockSource``: blocks
to convert; ``RowSource``: rows by index, to shuffle; ``BatchSource``: batches for transport
workers; ``ByteSource``: a store's bytes), the classes implementing them named by what they
read (``ArraySource``, ``StoreSource``, ``ImageSource``, ``ShuffledSource``, ``SpilledSource``).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Protocol

import chunkio
from chunkio.read.core import FIELD_KINDS

PACKAGE = Path(chunkio.__file__).parent


def _classes() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out += [(path, n.name) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    return out


def test_only_backend_readers_are_called_readers() -> None:
    named = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path, name in _classes()
        if "Reader" in name and "backends" not in path.relative_to(PACKAGE).parts
    ]
    assert named == []


def test_no_read_options_beside_reader_options() -> None:
    names = {name for _, name in _classes()}
    assert "ReaderOptions" in names and "ReadOptions" not in names


def test_one_class_named_output() -> None:
    """``chunkio.Output`` is how a dataset is stored; the engine's "where finished tasks go"
    is a ``TaskSink`` (there were two ``Output`` classes)."""
    named = [str(path.relative_to(PACKAGE)) for path, name in _classes() if name == "Output"]
    assert named == ["convert/options.py"]
    assert [name for _, name in _classes() if name.endswith("Output")] == ["Output"]


def test_image_code_has_one_home_per_layer() -> None:
    """Codecs in ``images/``, augmentation in ``transforms/image.py``, conversion in
    ``convert/images.py`` (the entry point) over ``convert/image/`` (its steps): a fifth
    module or package named for images is a second home for one of them."""
    homes = {
        str(
            path.relative_to(PACKAGE).parent
            if path.name == "__init__.py"
            else path.relative_to(PACKAGE)
        )
        for path in PACKAGE.rglob("*.py")
        if "image" in (path.parent.name if path.name == "__init__.py" else path.stem)
    }
    assert homes == {"images", "transforms/image.py", "convert/images.py", "convert/image"}


def test_each_converters_steps_sit_below_its_entry_point() -> None:
    """``convert/<kind>/`` holds the steps of ``convert/<kind>s.py``'s ``convert_<kind>s``,
    and says so first (images and volumes alike; the entry points stay at the top of
    ``convert/``, whose parts import no entry point)."""
    for kind in ("image", "volume"):
        steps = PACKAGE / "convert" / kind / "__init__.py"
        assert (PACKAGE / "convert" / f"{kind}s.py").exists(), kind
        first = ast.get_docstring(ast.parse(steps.read_text(encoding="utf-8"))) or ""
        assert first.startswith(f"The steps of :func:`~chunkio.convert.{kind}s.convert_{kind}s`")


def test_only_the_users_field_is_named_field() -> None:
    named = sorted(f"{p.relative_to(PACKAGE)}: {n}" for p, n in _classes() if n.endswith("Field"))
    assert named == ["format/windows.py: Field"]


def test_the_readers_of_field_kinds_are_named_reads() -> None:
    names = {kind: getattr(make, "__name__", "") for kind, make in FIELD_KINDS.items()}
    assert all(n.endswith("Reads") or n.endswith("_reads") for n in names.values()), names


def test_four_source_contracts_each_named_by_what_it_yields() -> None:
    contracts = set()
    for path, name in _classes():
        if name.endswith("Source"):
            module = ".".join(("chunkio", *path.relative_to(PACKAGE).with_suffix("").parts))
            cls = getattr(__import__(module, fromlist=[name]), name, None)
            if inspect.isclass(cls) and Protocol in getattr(cls, "__bases__", ()):
                contracts.add(name)
    assert contracts == {"BlockSource", "RowSource", "BatchSource", "ByteSource"}
