"""Faults of one rank, put into commbench as its modules load: on this directory first in PYTHONPATH.

- COMMBENCH_STUB_STOP_RANK=R: a rank stopped in the set-up, before the first size arms the watchdog.
  Rank R stops itself (SIGSTOP) as soon as its watchdog runs, and every other rank then waits in a
  barrier, as it would in a set-up collective (a subgroup, a communicator) that needs every rank.
  With COMMBENCH_STUB_STOP_BEFORE=1 it stops before its watchdog starts instead: the others wait in
  the collectives that set the watchdogs' side channel up. COMMBENCH_STUB_STOP_SIGNAL=SIGKILL kills
  it (either there) instead of stopping it.
- COMMBENCH_STUB_WRONG_RANK=R: rank R finds one wrong element more in every check of a collective
  (a run that ends as it should, with exit status 1).
- COMMBENCH_STUB_KILLED_AT_START=R: rank R is killed (SIGKILL) before MPI's start-up, which holds
  the others: no result file is made.
- COMMBENCH_STUB_WAIT_AT_START_S=S: every rank (the others, with the above) spends S seconds in
  Python before MPI's start-up, where a SIGTERM ends it with rank 0's `commbench: terminated`; it
  says `waits at start` on stderr first.
- COMMBENCH_STUB_KILLED_AT_CLOSE=R: rank R is killed (SIGKILL) as the world closes, once every rank
  is there (rank 0 has closed its result file whole), as in MPI's finalize.
- COMMBENCH_STUB_KILLED_AT_REPORT=1: rank 0 is killed (SIGKILL) as its watchdog starts to report an
  ending, as the launcher that saw a rank die may kill it (SIGTERM, then SIGKILL).
- COMMBENCH_STUB_KILLED_AFTER_SPEAKING=1: rank 1 is killed (SIGKILL) once it has written its words
  for a rank 0 gone, before its line, as the launcher that saw rank 0 die may kill it.
- COMMBENCH_STUB_HELD_AT_FINISH=before|after: rank 0 holds for a minute (COMMBENCH_STUB_HELD_S
  seconds) once every size is measured and its watchdog has stopped, before it closes its result
  file whole or after; it says `holds before finish` (or after) on stderr first.
- COMMBENCH_STUB_SIGNAL_AT_EXIT=SIGTERM (or another signal's name): every process (the command and
  its ranks) sends itself that signal in its last exit handler, as a signal that comes in its last
  milliseconds.
- COMMBENCH_STUB_SIGNAL_IN_TORCH=R: rank R sends itself SIGTERM from the Python that torch's C++
  calls back as torch loads (torch.distributed's `_c10d_init`), as a SIGTERM that comes there."""

import atexit
import importlib.abc
import importlib.util
import os
import signal
import sys
import time


def _stop(module) -> None:
    real = module.start

    def start(world, timeout_s, reporter):
        stops = world.rank == int(os.environ["COMMBENCH_STUB_STOP_RANK"])
        before = os.environ.get("COMMBENCH_STUB_STOP_BEFORE") == "1"
        signum = getattr(signal, os.environ.get("COMMBENCH_STUB_STOP_SIGNAL", "SIGSTOP"))
        if stops and before:
            os.kill(os.getpid(), signum)
        real(world, timeout_s, reporter)
        if stops and not before:
            os.kill(os.getpid(), signum)
        world.comm.Barrier()

    module.start = start


def _wrong(module) -> None:
    real = module.count_wrong
    wrong_here = os.environ.get("OMPI_COMM_WORLD_RANK") == os.environ["COMMBENCH_STUB_WRONG_RANK"]

    def count_wrong(*args, **kwargs):
        return real(*args, **kwargs) + int(wrong_here)

    module.count_wrong = count_wrong


def _killed_at_start(module) -> None:
    real = module.init_world

    def init_world(*args, **kwargs):
        if os.environ.get("OMPI_COMM_WORLD_RANK") == os.environ["COMMBENCH_STUB_KILLED_AT_START"]:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    module.init_world = init_world


def _wait_at_start(module) -> None:
    real = module.init_world

    def init_world(*args, **kwargs):
        print(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK')} waits at start", file=sys.stderr, flush=True)
        time.sleep(float(os.environ["COMMBENCH_STUB_WAIT_AT_START_S"]))
        return real(*args, **kwargs)

    module.init_world = init_world


def _killed_at_close(module) -> None:
    real = module.World.close

    def close(self):
        if self.comm is not None and self.size == int(os.environ.get("OMPI_COMM_WORLD_SIZE", "0")):  # the world, not a part
            self.comm.Barrier()
            if self.rank == int(os.environ["COMMBENCH_STUB_KILLED_AT_CLOSE"]):
                os.kill(os.getpid(), signal.SIGKILL)
        real(self)

    module.World.close = close


def _killed_at_report(module) -> None:
    def report(self, status, text):
        os.kill(os.getpid(), signal.SIGKILL)

    module.Watchdog._report = report


def _killed_after_speaking(module) -> None:
    real = module.speak_for_rank_0

    def speak_for_rank_0(status, text):
        real(status, text)
        os.kill(os.getpid(), signal.SIGKILL)

    module.speak_for_rank_0 = speak_for_rank_0


def _held_at_finish(module) -> None:
    real = module.FileOutput.finish
    where = os.environ["COMMBENCH_STUB_HELD_AT_FINISH"]

    def finish(self):
        if where == "after":
            real(self)
        print(f"rank 0 holds {where} finish", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("COMMBENCH_STUB_HELD_S", "60")))
        if where == "before":
            real(self)

    module.FileOutput.finish = finish


# (module, the variable that asks for its fault, the patch)
PATCHES = [("commbench.launch.watchdog", "COMMBENCH_STUB_STOP_RANK", _stop),
           ("commbench.launch.watchdog", "COMMBENCH_STUB_KILLED_AT_REPORT", _killed_at_report),
           ("commbench.launch.watchdog", "COMMBENCH_STUB_KILLED_AFTER_SPEAKING", _killed_after_speaking),
           # (the wait first: the rank killed at start is killed before it)
           ("commbench.launch.world", "COMMBENCH_STUB_WAIT_AT_START_S", _wait_at_start),
           ("commbench.launch.world", "COMMBENCH_STUB_KILLED_AT_START", _killed_at_start),
           ("commbench.launch.world", "COMMBENCH_STUB_KILLED_AT_CLOSE", _killed_at_close),
           ("commbench.run.collective", "COMMBENCH_STUB_WRONG_RANK", _wrong),
           ("commbench.run.output", "COMMBENCH_STUB_HELD_AT_FINISH", _held_at_finish)]


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, pending: dict):
        self.pending = pending

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        patches = self.pending.pop(name)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("COMMBENCH_STUB_SIGNAL_AT_EXIT"):
    @atexit.register  # the first registered: the last to run
    def _signal_at_exit() -> None:
        os.kill(os.getpid(), getattr(signal, os.environ["COMMBENCH_STUB_SIGNAL_AT_EXIT"]))
        time.sleep(0.2)  # where a handler of Python's runs


def _signal_in_torch() -> None:
    # A call whose caller is the line of torch/distributed/__init__.py that calls _c10d_init, other
    # than that line's own is_available(): Python run from inside the C++ call.
    def tracer(frame, event, arg):
        caller = frame.f_back
        if event == "call" and caller is not None and frame.f_code.co_name != "is_available" \
                and caller.f_code.co_filename.endswith(os.path.join("torch", "distributed", "__init__.py")) \
                and "_c10d_init" in _line(caller):
            sys.settrace(None)
            os.kill(os.getpid(), signal.SIGTERM)

    sys.settrace(tracer)


def _line(frame) -> str:
    with open(frame.f_code.co_filename) as f:
        return f.read().splitlines()[frame.f_lineno - 1]


if os.environ.get("COMMBENCH_STUB_SIGNAL_IN_TORCH") == os.environ.get("OMPI_COMM_WORLD_RANK", "-"):
    _signal_in_torch()

_asked: dict = {}
for name, var, patch in PATCHES:
    if os.environ.get(var):
        _asked.setdefault(name, []).append(patch)
if _asked:
    sys.meta_path.insert(0, _PatchOnImport(_asked))
