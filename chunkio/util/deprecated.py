"""Keyword arguments moved into option objects: still accepted for one release, with a warning.

:func:`moved_keywords` wraps an entry point whose flat keywords became fields of frozen option
objects (``make_loader(pool_bytes=...)`` becomes
``make_loader(ordering=Ordering(pool_bytes=...))``).
The wrapper takes the old keywords, warns once per call with a :class:`DeprecationWarning`
that names the new spelling and points at the caller's line, and calls the function with the
option object built (or, when the caller passed one too, updated with
:func:`dataclasses.replace`). The wrapped function's own signature is the one
:func:`inspect.signature` and the API reference show; it is called through the wrapper's
``__wrapped__`` attribute.

:func:`moved_names` is the same for names whose module moved: the old module's ``__getattr__``
(PEP 562) returns the name from its new home, with the warning at the importing line.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from ..errors import caller_stacklevel

__all__ = ["Moved", "keyword_moved_to_method", "moved_keywords", "moved_names"]

F = TypeVar("F", bound=Callable[..., Any])


class Moved(NamedTuple):
    """An old keyword's new place: field ``field`` of the option object passed as ``param``
    (an instance of ``cls``, made with its defaults when the caller passed none)."""

    param: str
    cls: type[Any]
    field: str


def moved_keywords(function: str, moves: Mapping[str, Moved]) -> Callable[[F], F]:
    """Accept the old keywords ``moves`` names, each with a :class:`DeprecationWarning`.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Opts:
    ...     size: int = 1
    >>> @moved_keywords("f", {"old_size": Moved("opts", Opts, "size")})
    ... def f(*, opts: Opts | None = None) -> int:
    ...     return (opts or Opts()).size
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     f(old_size=3), str(seen[0].message)
    (3, 'f(old_size=...) is deprecated; use opts=chunkio.Opts(size=...)')
    """

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = [name for name in kwargs if name in moves]
            if old:
                _move(function, moves, old, kwargs)
            # looked up on each call, so that a test can stand in for the function and see
            # that an old spelling makes the very call the new one does
            return wrapper.__dict__["__wrapped__"](*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return wrap


def _move(
    function: str, moves: Mapping[str, Moved], old: list[str], kwargs: dict[str, Any]
) -> None:
    """Replace the keywords ``old`` of ``kwargs`` by their option objects, warning once."""
    fields: dict[str, dict[str, Any]] = {}
    for name in old:
        move = moves[name]
        fields.setdefault(move.param, {})[move.field] = kwargs.pop(name)
    spelled = "; ".join(
        f"{function}({name}=...) is deprecated; use "
        f"{moves[name].param}=chunkio.{moves[name].cls.__name__}({moves[name].field}=...)"
        for name in old
    )
    warnings.warn(spelled, DeprecationWarning, stacklevel=caller_stacklevel())
    for param, values in fields.items():
        cls = next(m.cls for m in moves.values() if m.param == param)
        given = kwargs.get(param)
        kwargs[param] = cls(**values) if given is None else dataclasses.replace(given, **values)


def moved_names(old: str, moves: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of module ``old``, whose names ``moves`` (name -> the
    absolute name of the module now defining it) moved: each access, ``from old import
    name`` included, warns with a :class:`DeprecationWarning` at the caller's line.

    >>> getattr_ = moved_names("chunkio.old", {"ceil_div": "chunkio.util.numeric"})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     getattr_("ceil_div")(7, 2), str(seen[0].message)
    (4, 'chunkio.old.ceil_div is deprecated; import it from chunkio.util.numeric')
    >>> getattr_("nothing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'chunkio.old' has no attribute 'nothing'
    """

    def __getattr__(name: str) -> Any:
        home = moves.get(name)
        if home is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is deprecated; import it from {home}",
            DeprecationWarning,
            stacklevel=caller_stacklevel(),
        )
        return getattr(importlib.import_module(home), name)

    return __getattr__


def keyword_moved_to_method(keyword: str, method: str) -> Callable[[F], F]:
    """A method's keyword that became a method of its own, still accepted for one release:
    ``obj.f(keyword=x)`` warns (a :class:`DeprecationWarning` at the caller's line) and
    returns ``obj.method(x)`` (``x`` ``None``: ``obj.f()``).

    >>> class Position:
    ...     @keyword_moved_to_method("done", "state_at")
    ...     def state_dict(self) -> dict[str, int]:
    ...         return {"done": 0}
    ...     def state_at(self, done: int) -> dict[str, int]:
    ...         return {"done": done}
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     Position().state_dict(done=3), str(seen[0].message)
    ({'done': 3}, 'Position.state_dict(done=...) is deprecated; use Position.state_at(...)')
    """

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if keyword in kwargs:
                value = kwargs.pop(keyword)
                cls = type(self).__name__
                warnings.warn(
                    f"{cls}.{func.__name__}({keyword}=...) is deprecated; use {cls}.{method}(...)",
                    DeprecationWarning,
                    stacklevel=caller_stacklevel(),
                )
                if value is not None:
                    return getattr(self, method)(value, *args, **kwargs)
            return func(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return wrap
