"""Names of a package imported on first use (PEP 562), so that importing it stays cheap."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["declared_names", "lazy_names"]


def declared_names(path: str | Path) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` block of the module at ``path`` imports, mapped to
    the module it comes from (relative, as written): a package lists its public names once,
    as imports type checkers and IDEs read, and takes its lazy table from them.

    >>> import chunkio
    >>> declared_names(chunkio.__file__)["ChunkDataset"]
    '.dataset'
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    module = "." * stmt.level + (stmt.module or "")
                    found.update({a.asname or a.name: module for a in stmt.names})
    return found


def lazy_names(
    package: str, lazy: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``.

    ``lazy`` maps each public name to the module (relative to ``package``) defining it; a name
    is imported on first access and then kept in ``namespace`` (the package's ``globals()``).

    >>> ns: dict[str, Any] = {}
    >>> getattr_, dir_ = lazy_names("chunkio", {"ceil_div": ".util.numeric"}, ns)
    >>> getattr_("ceil_div")(7, 2), "ceil_div" in ns, dir_()
    (4, True, ['ceil_div'])
    >>> getattr_("nothing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'chunkio' has no attribute 'nothing'
    """

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *lazy})

    return __getattr__, __dir__
