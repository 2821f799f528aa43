"""Names whose module moved still import, for one release, with a warning at the caller's line.

``chunkio.convert.stores`` (``convert_arrays`` and its block sizes, now in
:mod:`chunkio.convert.arrays`, beside ``write_arrays``).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import chunkio

#: (old module, name, new module)
MOVED = [
    ("chunkio.convert.stores", "convert_arrays", "chunkio.convert.arrays"),
    ("chunkio.convert.stores", "STORE_BLOCK_BYTES", "chunkio.convert.arrays"),
    ("chunkio.convert.stores", "STORE_READ_BYTES", "chunkio.convert.arrays"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_moved_name_warns_at_the_importing_line_and_is_the_new_one(
    old: str, name: str, new: str
) -> None:
    module = importlib.import_module(old)
    message = f"{old}.{name} is deprecated; import it from {new}"
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as record:
        value = getattr(module, name)
    assert [w.filename for w in record] == [__file__]  # the caller's line
    assert value is getattr(importlib.import_module(new), name)


def test_from_import_of_a_moved_name_warns_at_the_import_statement() -> None:
    with pytest.warns(DeprecationWarning, match="chunkio.convert.arrays") as record:
        from chunkio.convert.stores import convert_arrays
    assert [(w.filename, w.lineno) for w in record] == [
        (__file__, _line("from chunkio.convert.stores"))
    ]
    assert convert_arrays is importlib.import_module("chunkio.convert.arrays").convert_arrays


def test_an_unknown_name_of_a_moved_module_is_an_attribute_error() -> None:
    with pytest.raises(
        AttributeError, match=re.escape("'chunkio.convert.stores' has no attribute 'nope'")
    ):
        importlib.import_module("chunkio.convert.stores").nope  # noqa: B018


def _line(text: str) -> int:
    """The line of this file where ``text`` first appears in code (not in this helper)."""
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.lstrip().startswith(text))


def test_chunkio_imports_nothing_from_a_moved_module() -> None:
    """chunkio's own code (type-checking imports and lazy tables included) names the new homes:
    an import through the old module would warn at every user's line."""
    package = Path(chunkio.__file__).parent
    old = {m for m, _, _ in MOVED}
    found = []
    for path in sorted(package.rglob("*.py")):
        here = ".".join(("chunkio", *path.relative_to(package).with_suffix("").parts))
        if here in old:
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                base = here.rsplit(".", node.level)[0] if node.level else ""
                target = f"{base}.{node.module}" if node.level else node.module
                target = target.removesuffix(".__init__")
                if target in old:
                    found.append(f"{path.relative_to(package)}:{node.lineno} imports {target}")
        found += [f"{path.relative_to(package)} names {m}" for m in old if f'".{m[8:]}"' in text]
    assert found == []
