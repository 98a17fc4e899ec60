"""The ``multiprocessing`` context of tfopt's worker pools: spawn, without the caller's main.

Spawn makes each child import the parent's main module again (as ``__mp_main__``, by its
``__spec__`` name or ``__file__``: ``multiprocessing.spawn.get_preparation_data``), so that
functions defined there unpickle. tfopt's workers run tfopt's own functions and need none of
it, and it breaks them: a script without an ``if __name__ == "__main__":`` guard would start
the work again in every child (RuntimeError, then BrokenProcessPool), and ``python -`` has no
file to import. So each child starts while ``sys.modules["__main__"]`` is a copy of the main
module without its name and path, as under ``python -c`` or in Jupyter.

That takes overriding multiprocessing's private ``SpawnProcess._Popen``, done here alone: no
other tfopt module touches a private name of ``multiprocessing``. No TensorFlow is imported.

Example:
    >>> ProcessPoolExecutor(4, mp_context=worker_context())
"""

from __future__ import annotations

import contextlib
import multiprocessing.context
import sys
import threading
import types

_MAIN_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_module_hidden():
    """While the block runs, ``sys.modules["__main__"]`` names no module to import again.

    The stand-in holds the main module's objects (a copy of its namespace), so that another
    thread looking a name up in ``__main__`` meanwhile (pickle does, for a class defined there)
    still finds it. It is in place for the start of one child: a few milliseconds.
    """
    with _MAIN_SWAP_LOCK:
        main = sys.modules.get("__main__")
        if main is None or (getattr(getattr(main, "__spec__", None), "name", None) is None
                            and getattr(main, "__file__", None) is None):
            yield  # nothing to import again: python -c, a Jupyter kernel, an embedded one
            return
        stand_in = types.ModuleType("__main__")
        stand_in.__dict__.update(getattr(main, "__dict__", {}))
        stand_in.__dict__.pop("__file__", None)
        stand_in.__dict__.pop("__cached__", None)
        stand_in.__spec__ = None
        sys.modules["__main__"] = stand_in
        try:
            yield
        finally:
            if sys.modules.get("__main__") is stand_in:
                sys.modules["__main__"] = main


class _SpawnProcessWithoutMain(multiprocessing.context.SpawnProcess):
    """Spawned without importing the parent's ``__main__`` again (see the module docstring)."""

    @staticmethod
    def _Popen(process_obj):
        with _main_module_hidden():
            return multiprocessing.context.SpawnProcess._Popen(process_obj)


class _SpawnContextWithoutMain(multiprocessing.context.SpawnContext):
    Process = _SpawnProcessWithoutMain


_WORKER_CONTEXT = _SpawnContextWithoutMain()


def worker_context() -> multiprocessing.context.BaseContext:
    """The ``multiprocessing`` context of tfopt's worker pools (convert, demo-data).

    Spawn (fork is unsafe once TensorFlow, or any thread, runs in this process), with children
    that do not import the caller's main module again: tfopt works from a script without an
    ``if __name__ == "__main__":`` guard, from ``python -`` and ``python -c``, and in Jupyter.
    Only for workers whose functions and arguments come from importable modules (tfopt's):
    nothing defined in ``__main__`` can be unpickled in these children.

    Example:
        >>> ProcessPoolExecutor(4, mp_context=worker_context())
    """
    return _WORKER_CONTEXT
