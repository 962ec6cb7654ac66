"""Ranks slow to start: on this directory first in PYTHONPATH, a launched rank (Open MPI's rank
variable set) sleeps COMMBENCH_STUB_SLOW_START_S seconds as it imports commbench's command line,
as one loading torch on a busy node does, so that a signal is sure to come amid the start-up; with
COMMBENCH_STUB_SLOW_START_AT=commbench.launch.watchdog, as it imports the start-up guard itself (the
first tenth of a second of a rank, before the guard is set). As the sleep starts it makes the file
COMMBENCH_STUB_SLOW_START_MARK.<rank>: a test signals once every rank has one, not after a guess at
how long an interpreter takes to start on a busy host. With COMMBENCH_STUB_SLOW_START_COMMAND=1 it
holds the command a user typed instead (no rank variable), its mark COMMBENCH_STUB_SLOW_START_MARK.command.
With COMMBENCH_STUB_SLOW_START_AT=site it holds the rank in the interpreter's own start-up (this
module is site's import), before any of commbench's code runs. With COMMBENCH_STUB_SLOW_START_DEAF=1
a held rank ignores SIGINT and SIGTERM, as one held in a C call (an import's, MPI's start-up) does not
act on them."""

import importlib.abc
import os
import signal
import sys
import time


def _hold() -> None:
    mark = os.environ.get("COMMBENCH_STUB_SLOW_START_MARK")
    if mark:
        open(f"{mark}.{os.environ.get('OMPI_COMM_WORLD_RANK', 'command')}", "w").close()
    if os.environ.get("COMMBENCH_STUB_SLOW_START_DEAF") == "1":
        for deaf in (signal.SIGINT, signal.SIGTERM):
            signal.signal(deaf, signal.SIG_IGN)
    time.sleep(float(os.environ["COMMBENCH_STUB_SLOW_START_S"]))


class _SlowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == os.environ.get("COMMBENCH_STUB_SLOW_START_AT", "commbench.cli"):
            sys.meta_path.remove(self)
            _hold()
        return None


if ("OMPI_COMM_WORLD_RANK" in os.environ) != (os.environ.get("COMMBENCH_STUB_SLOW_START_COMMAND") == "1"):
    if os.environ.get("COMMBENCH_STUB_SLOW_START_AT") == "site":
        _hold()
    else:
        sys.meta_path.insert(0, _SlowImport())
