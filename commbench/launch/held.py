"""torch's first import, held from the signals whose handlers raise. Its C++ calls back into Python
as it loads (torch.distributed's `_c10d_init`), and a handler that raised there (a SIGTERM's
Terminated, a Ctrl-C's KeyboardInterrupt) threw through C++ that cannot pass it on: the process
aborted with `terminate called after throwing an instance of 'python_error'` and a page of
backtrace, on a rank 1.5 s into `numerics` as the command was interrupted. A signal that comes during
the import is acted on as it ends, where only Python runs; the import takes a second or two, well
inside the standalone launch's STOP_WITHIN_S for ranks that do not end at once."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import signal
import sys
import threading
from collections.abc import Iterator

# The import held: torch's, whichever module of commbench comes to it first.
HELD_IMPORT = "torch"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """The block runs with this process's signal handlers of Python's held: a signal that comes is
    raised again once it ends, so its handler runs in Python's own code. A signal left to its default
    action or ignored is not held: the default ends the process at once, without running Python.
    Only the main thread runs handlers (and may set them): another thread's block holds nothing."""
    came: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    held = {s: h for s in _SIGNALS if main and callable(h := signal.getsignal(s))}
    for s in held:
        signal.signal(s, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(came):  # each once, in the order they came
            signal.raise_signal(s)


class _HeldImport(importlib.abc.MetaPathFinder):
    """Finds the held module as Python would, and runs its loading under signals_held()."""

    def find_spec(self, name, path, target=None):
        if name != HELD_IMPORT:
            return None
        sys.meta_path.remove(self)  # held once, at the first import; the lookup below is Python's own
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            with signals_held():
                run(module)

        spec.loader.exec_module = exec_module
        return spec


def hold_import() -> None:
    """From here on, the held module's first import runs under signals_held()."""
    if HELD_IMPORT not in sys.modules and not any(isinstance(finder, _HeldImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _HeldImport())
