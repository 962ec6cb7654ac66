"""Ranks slow to start: on this directory first in PYTHONPATH, a launched rank (Open MPI's rank
variable set) sleeps COMMBENCH_STUB_SLOW_START_S seconds as it imports commbench's command line,
as one loading torch on a busy node does, so that a signal is sure to come amid the start-up."""

import importlib.abc
import os
import sys
import time


class _SlowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "commbench.cli":
            sys.meta_path.remove(self)
            time.sleep(float(os.environ["COMMBENCH_STUB_SLOW_START_S"]))
        return None


if "OMPI_COMM_WORLD_RANK" in os.environ:
    sys.meta_path.insert(0, _SlowImport())
