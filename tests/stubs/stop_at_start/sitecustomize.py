"""A rank stopped in the set-up, before the first size arms the watchdog: on this directory first in
PYTHONPATH, rank COMMBENCH_STUB_STOP_RANK stops itself (SIGSTOP) as soon as its watchdog runs, and
every other rank then waits in a barrier, as it would in a set-up collective (a subgroup, a
communicator) that needs every rank. With COMMBENCH_STUB_STOP_BEFORE=1 it stops before its watchdog
starts instead: the others wait in the collectives that set the watchdogs' side channel up."""

import importlib.abc
import importlib.util
import os
import signal
import sys


def _patch(module) -> None:
    real = module.start

    def start(world, timeout_s, reporter):
        stops = world.rank == int(os.environ["COMMBENCH_STUB_STOP_RANK"])
        before = os.environ.get("COMMBENCH_STUB_STOP_BEFORE") == "1"
        if stops and before:
            os.kill(os.getpid(), signal.SIGSTOP)
        real(world, timeout_s, reporter)
        if stops and not before:
            os.kill(os.getpid(), signal.SIGSTOP)
        world.comm.Barrier()

    module.start = start


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "commbench.launch.watchdog":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchOnImport())
