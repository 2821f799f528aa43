"""Parts of error messages: lists capped to a length a person reads, and the options that
fix an error spelled for the interface that raised it.

A message that joins names (fields, arrays, steps, files) joins them with :func:`listing`, so
a store with 300 arrays or a series of 501 steps gives one readable line, not 4,000
characters: no chunkio message is longer than :data:`MESSAGE_LIMIT` characters.

A message that tells the user which option to pass spells it with :func:`keyword` (or
:data:`OVERWRITE`), in Python syntax: ``on_error='skip'``. The ``chunkio`` command shows its
errors through :func:`as_flags`, which rewrites exactly those spellings into the flags the user
typed (``--on-error skip``), from one table of keywords and their flags (:data:`FLAGS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "FLAGS",
    "MESSAGE_LIMIT",
    "OVERWRITE",
    "as_flags",
    "keyword",
    "listing",
    "short_repr",
]

#: the most characters an error message of chunkio may have (a worker's traceback, which a
#: loader appends to a worker's error, aside): tests/architecture/test_message_limits.py and the
#: autouse check of tests/support/message_limit.py
MESSAGE_LIMIT = 600

#: the Python keyword of each option a message may advise, and the ``chunkio`` command's flag
#: for it (``keyword=False`` is ``--no-...``: ``shuffle=False`` is ``--no-shuffle``); a
#: keyword the command has no flag for is left in Python syntax
FLAGS = {
    "on_error": "--on-error",
    "overwrite": "--overwrite",
    "shuffle": "--shuffle",
    "encoding": "--encoding",
    "mode": "--mode",
    "max_size": "--max-size",
    "on_overflow": "--on-overflow",
    "nan_policy": "--nan-policy",
    "trust_codecs": "--trust-codecs",
    "fields": "--fields",
}

#: the option that replaces an existing destination, in Python syntax (``--overwrite``)
OVERWRITE = "execution=chunkio.Execution(overwrite=True)"


def listing(
    items: Iterable[Any],
    *,
    limit: int = 10,
    budget: int = 240,
    show: Callable[[Any], str] = repr,
    sep: str = ", ",
    brackets: bool = True,
    total: int | None = None,
) -> str:
    """``items`` as a list for a message: ``['a', 'b', ... and 312 more]``.

    At most ``limit`` items are shown and at most about ``budget`` characters of them (an
    item longer than the budget is cut with ``...``); the rest are counted. A short list
    reads exactly as ``repr(list(items))`` does. ``total``: how many items there are, when
    ``items`` holds only the first of them (those worth describing).

    >>> listing(["a", "b"])
    "['a', 'b']"
    >>> listing(range(501), limit=3)
    '[0, 1, 2, ... and 498 more]'
    >>> listing(["x" * 300], budget=20)
    "['xxxxxxxxxxxxxxxx...]"
    >>> listing(["a (2,)", "b (3,)"], show=str, sep="; ", brackets=False, total=40)
    'a (2,); b (3,); ... and 38 more'
    """
    items = list(items)
    shown: list[str] = []
    used = 0
    for item in items[:limit]:
        text = show(item)
        if len(text) > budget:
            text = text[: max(budget - 3, 1)] + "..."
        if shown and used + len(text) > budget:
            break
        shown.append(text)
        used += len(text) + len(sep)
    rest = (len(items) if total is None else total) - len(shown)
    text = sep.join(shown + ([f"... and {rest} more"] if rest > 0 else []))
    return f"[{text}]" if brackets else text


def short_repr(value: Any, budget: int = 120) -> str:
    """``repr(value)``, cut to about ``budget`` characters (a list shown by :func:`listing`):
    what a message says it got, however large that was.

    >>> short_repr(list(range(100)), budget=20)
    '[0, 1, 2, 3, 4, 5, 6, ... and 93 more]'
    >>> short_repr("x" * 30, budget=10)
    "'xxxxxx..."
    """
    if isinstance(value, list | tuple | range) and len(repr(value)) > budget:
        return listing(value, budget=budget)
    text = repr(value)
    return text if len(text) <= budget else text[: max(budget - 3, 1)] + "..."


def keyword(name: str, value: Any) -> str:
    """The keyword argument ``name=value`` in Python syntax, as a message advises it (the
    ``chunkio`` command shows it as a flag, :func:`as_flags`).

    >>> keyword("on_error", "skip")
    "on_error='skip'"
    >>> as_flags(keyword("on_error", "skip")), as_flags(keyword("shuffle", False))
    ('--on-error skip', '--no-shuffle')
    """
    return f"{name}={value!r}"


_QUOTED = r"'[^']*'"
_KEYWORD = re.compile(
    r"\b(?P<name>" + "|".join(FLAGS) + r")=(?P<value>" + _QUOTED + r"|True|False|-?\d+)"
)
_OVERWRITE = re.compile(r"(execution=)?(chunkio\.)?Execution\(overwrite=True\)")
_FIELDS = re.compile(r"\bfields=\{(?P<pairs>[^{}]*)\}")
_FIELD_LIST = re.compile(r"\bfields=\[(?P<names>[^\[\]]*)\]")
_PAIR = re.compile(r"'(?P<name>[^']*)': *'(?P<path>[^']*)'")


def as_flags(text: str) -> str:
    """``text`` with the options it advises in Python syntax (:func:`keyword`,
    :data:`OVERWRITE`, a ``fields={...}`` mapping) written as the ``chunkio`` command's flags.

    >>> as_flags("d.zarr holds data; pass execution=chunkio.Execution(overwrite=True)")
    'd.zarr holds data; pass --overwrite'
    >>> as_flags("e.g. fields={'image': 'a/x', 'label': 'b/x'}")
    'e.g. --fields image=a/x label=b/x'
    >>> as_flags("select with a list, fields=['x', 'y']")
    'select with a list, --fields x y'
    >>> as_flags("pass trust_codecs=True, or shuffle=False")
    'pass --trust-codecs, or --no-shuffle'
    >>> as_flags("pass on_overflow='clip' or on_overflow='scale'")
    'pass --on-overflow clip or --on-overflow scale'
    """
    text = _OVERWRITE.sub(FLAGS["overwrite"], text)
    text = _FIELDS.sub(_fields_flag, text)
    text = _FIELD_LIST.sub(_field_list_flag, text)
    return _KEYWORD.sub(_flag, text)


def _fields_flag(match: re.Match[str]) -> str:
    pairs = [f"{m['name']}={m['path']}" for m in _PAIR.finditer(match["pairs"])]
    return " ".join([FLAGS["fields"], *pairs])


def _field_list_flag(match: re.Match[str]) -> str:
    names = [n.strip().strip(chr(39)) for n in match["names"].split(",") if n.strip()]
    return " ".join([FLAGS["fields"], *names])


def _flag(match: re.Match[str]) -> str:
    name, value = match["name"], match["value"]
    flag = FLAGS[name]
    if value == "True":
        return flag
    if value == "False":
        return "--no-" + flag[2:]
    return f"{flag} {value.strip(chr(39))}"
