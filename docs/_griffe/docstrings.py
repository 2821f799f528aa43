"""A griffe extension for the API reference, applied to each docstring as griffe loads it.

* Sphinx roles (``:class:`X```, ``:func:`~a.b```) become inline code, where mkdocstrings'
  Markdown would show the raw role.
* A numpydoc entry naming several untyped parameters (``seed, shuffle, drop_last``) becomes
  one entry per parameter: griffe gives every name of such an entry the type and default of
  the first one (``shuffle: int = 0``), while one entry each takes its own from the signature.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")
_GROUP = re.compile(r"^\w+(?:, \w+)+$")
_PARAMETER_SECTIONS = {"Parameters", "Other Parameters"}


def _code(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"``{target.rsplit('.', 1)[-1] if match.group(1) else target}``"


def split_grouped_parameters(text: str) -> str:
    """One entry per name in the Parameters sections of a (dedented) numpydoc docstring; a
    long description is kept by the first name, the others point to it."""
    lines = text.split("\n")
    out: list[str] = []
    section = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and line.strip():
            section = line.strip()
        if section in _PARAMETER_SECTIONS and _GROUP.match(line):
            body = []
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                body.append(lines[j])
                j += 1
            while body and not body[-1].strip():
                j -= 1
                body.pop()
            names = line.split(", ")
            for k, name in enumerate(names):
                out.append(name)
                out.extend(body if len(body) <= 2 or k == 0 else [f"    As ``{names[0]}``."])
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class Docstrings(griffe.Extension):
    """Rewrites each docstring once, when griffe loads its object."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _ROLE.sub(_code, obj.docstring.value)
            obj.docstring.value = split_grouped_parameters(text)
