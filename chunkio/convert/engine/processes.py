"""The worker processes of the conversion engine (its process pool, :class:`WorkerProcesses`):
they skip the caller's script and die with the caller.

**Start method.** Never fork: zarr's event-loop thread, HDF5 state and the caller's threads
must not cross a fork. Pools use ``spawn`` or ``forkserver`` when the caller chose one with
:func:`multiprocessing.set_start_method`, otherwise ``forkserver`` where the platform has
it, else ``spawn`` (:func:`start_method`).

**The caller's** ``__main__``. Under both methods CPython starts a child by sending it
"preparation data" (:func:`multiprocessing.spawn.get_preparation_data`). When the caller was
started as ``python script.py`` that data names the file (``init_main_from_path``) and the
child runs the whole script again, as ``__mp_main__``, so that what the script defines can
be unpickled. A script without an ``if __name__ == "__main__":`` guard then starts the same
conversion again inside every worker: it finds the destination locked and the worker dies.

Conversion workers need nothing from ``__main__``: their tasks are chunkio functions applied
to chunkio values. So a chunkio worker is launched with preparation data that names no main
module, as CPython sends from an interactive session, and the child leaves its ``__main__``
alone. :func:`multiprocessing.spawn.get_preparation_data` (called by both the spawn and the
forkserver launcher) is wrapped, once, with a thread-local switch that only the ``start()``
of this module's Process classes turns on, in whichever thread starts the worker (the pool
may start workers lazily in ``submit`` or from its manager thread). Every other launch, the
caller's own pools included, gets CPython's data unchanged.

When a pool's initializer arguments do name something defined in ``__main__`` (a
``BlockSource`` class written in the script, a dask graph calling a function from it), the
workers need the script and are launched the standard way; that script needs its main
guard, as any multiprocessing code does (:data:`MAIN_GUARD_HINT`).

**No orphans.** A pool worker waits for tasks on a queue whose pipe it holds both ends of,
so it never notices the converting process die; it then keeps the forkserver (which runs
until every holder of its "alive" pipe is gone) and the resource tracker (likewise) running
as well, indefinitely. Each worker therefore starts a watchdog thread that waits on its
parent sentinel, a pipe whose write end only the converting process holds: it reads EOF the
moment that process is gone, SIGKILL included, and the worker exits with ``os._exit``; the
forkserver and the resource tracker follow by themselves. (Under forkserver a worker's OS
parent is the forkserver, and a killed process stays a zombie until reaped, so neither
``os.getppid()`` nor ``os.kill(pid, 0)`` would tell.)
"""

from __future__ import annotations

import copyreg
import functools
import multiprocessing
import os
import pickle
import sys
import threading
import types
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import context, spawn
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = [
    "MAIN_GUARD_HINT",
    "WorkerProcesses",
    "names_main",
    "worker_processes",
    "start_method",
    "warm_up",
]

#: Added to the error of a dead worker when the pool had to run the caller's script.
MAIN_GUARD_HINT = (
    "the workers import the calling script (it defines objects they use), so the script "
    'must start the conversion under `if __name__ == "__main__":`'
)

#: exit status of a worker whose converting process is gone
_ORPHANED = 70

_launch = threading.local()
_install_lock = threading.Lock()


def start_method() -> str:
    """``spawn`` or ``forkserver``: the caller's choice if it made one, else the safer default.

    >>> start_method() in ("spawn", "forkserver")
    True
    """
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen in ("spawn", "forkserver"):
        return chosen
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class WorkerProcesses(ProcessPoolExecutor):
    """A :class:`ProcessPoolExecutor` whose workers exit when the converting process dies."""

    def __init__(
        self,
        workers: int,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        #: whether the workers run the caller's ``__main__`` (their initializer needs it)
        self.imports_main = names_main((initializer, initargs))
        #: ``"spawn"`` or ``"forkserver"``
        self.start_method = start_method()
        ctx: Any = multiprocessing.get_context(self.start_method)
        if not self.imports_main:
            _install()
            ctx = _HIDING[self.start_method]()
        super().__init__(
            workers, mp_context=ctx, initializer=_start_worker, initargs=(initializer, initargs)
        )


def worker_processes(
    workers: int,
    *,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
) -> WorkerProcesses:
    """A pool of ``workers`` processes for conversion tasks (see the module docstring).

    Tasks submitted to it must be picklable without ``__main__``: only the initializer and
    its arguments are checked.
    """
    return WorkerProcesses(workers, initializer=initializer, initargs=initargs)


#: What conversion workers import before their first task (about 0.45 s in all). A forkserver
#: started by :func:`warm_up` imports them once; the workers it forks start with them.
WORKER_MODULES = (
    "chunkio.convert.images",
    "chunkio.convert.volumes",
    "chunkio.backends.zarr.backend",
    "simplejpeg",
)


def warm_up() -> None:
    """Start the forkserver now, in a background thread, with :data:`WORKER_MODULES` imported.

    A conversion calls this before its check pass when it may use a pool: the server's start
    and imports then overlap the check, and each worker forked from it starts in
    milliseconds, instead of importing for about half a second, one worker after another,
    while the converting process waits. Nothing happens under ``spawn`` or when the
    forkserver already runs (its imports cannot change then). The caller's ``__main__`` is
    hidden from the server as from the workers. A failure here is ignored: the pool starts
    the server itself, and reports what goes wrong.
    """
    if start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    server: Any = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", 0) is not None:
        return
    preload = [m for m in getattr(server, "_preload_modules", []) if m != "__main__"]
    server.set_forkserver_preload([*preload, *(m for m in WORKER_MODULES if m not in preload)])
    _install()

    def start() -> None:
        _launch.hiding = True
        try:
            server.ensure_running()
        except Exception:  # the pool starts it again, and reports what goes wrong
            pass
        finally:
            _launch.hiding = False

    threading.Thread(target=start, name="chunkio-forkserver-warm-up", daemon=True).start()


# -- hiding __main__ while a worker is launched ----------------------------------------------


def _hide_main(get_preparation_data: Callable[[str], dict[str, Any]]) -> Any:
    @functools.wraps(get_preparation_data)
    def wrapper(name: str) -> dict[str, Any]:
        data = get_preparation_data(name)
        if getattr(_launch, "hiding", False):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    wrapper.chunkio_hides_main = True  # type: ignore[attr-defined]
    return wrapper


def _install() -> None:
    """Wrap ``spawn.get_preparation_data``, unless already wrapped (possibly under others)."""
    with _install_lock:
        current = spawn.get_preparation_data
        seen: Any = current
        while seen is not None:
            if getattr(seen, "chunkio_hides_main", False):
                return
            seen = getattr(seen, "__wrapped__", None)
        spawn.get_preparation_data = _hide_main(current)


def _start_hiding_main(start: Callable[[], None]) -> None:
    _launch.hiding = True
    try:
        start()
    finally:
        _launch.hiding = False


class _SpawnProcess(context.SpawnProcess):
    def start(self) -> None:
        _start_hiding_main(super().start)


class _SpawnContext(context.SpawnContext):
    Process = _SpawnProcess


_HIDING: dict[str, Callable[[], context.BaseContext]] = {"spawn": _SpawnContext}

if sys.platform != "win32":

    class _ForkServerProcess(context.ForkServerProcess):
        def start(self) -> None:
            _start_hiding_main(super().start)

    class _ForkServerContext(context.ForkServerContext):
        Process = _ForkServerProcess

    _HIDING["forkserver"] = _ForkServerContext


class _Discard:
    def write(self, data: Any) -> int:
        return len(data)


class _NamesMain(Exception):
    pass


class _MainFinder(pickle.Pickler):
    """Pickles to nowhere, stopping at the first class or function defined in ``__main__``.

    Reduces as :class:`~multiprocessing.reduction.ForkingPickler` does (which itself takes
    no ``buffer_callback``).
    """

    def __init__(self) -> None:
        super().__init__(_Discard(), protocol=5, buffer_callback=lambda buf: None)
        extra = getattr(ForkingPickler, "_extra_reducers", {})
        self.dispatch_table = {**copyreg.dispatch_table, **extra}

    def reducer_override(self, obj: Any) -> Any:
        # classes and functions pickle by reference to their module: the child imports it
        by_reference = isinstance(obj, (type, types.FunctionType))
        if by_reference and getattr(obj, "__module__", None) in ("__main__", "__mp_main__"):
            raise _NamesMain
        return NotImplemented


def names_main(obj: Any) -> bool:
    """Whether pickling ``obj`` refers to a class or function defined in ``__main__``.

    Large buffers (NumPy arrays) are passed out of band, so the check copies no data.

    >>> import collections
    >>> names_main((collections.OrderedDict(a=1), [1, 2]))
    False
    """
    try:
        _MainFinder().dump(obj)
    except _NamesMain:
        return True
    except Exception:  # unpicklable: the pool reports it when it sends the object
        return False
    return False


# -- the worker side -------------------------------------------------------------------------


def _start_worker(initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    """Pool initializer: the watchdog first, then the pool's own initializer."""
    _watch_parent()
    if initializer is not None:
        initializer(*initargs)


def _watch_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:  # pragma: no cover - not a pool worker
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])  # EOF: the converting process is gone
        os._exit(_ORPHANED)

    threading.Thread(target=watch, name="chunkio-parent-watchdog", daemon=True).start()
