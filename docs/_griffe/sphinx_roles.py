"""A griffe extension for the API reference: Sphinx roles in docstrings (``:class:`X```,
``:func:`~a.b```) become inline code, as mkdocstrings' Markdown would otherwise show the role."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"``{target.rsplit('.', 1)[-1] if match.group(1) else target}``"


class SphinxRoles(griffe.Extension):
    """Rewrites each docstring once, when griffe loads its object."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
