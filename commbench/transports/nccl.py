"""NCCL: the library's call for each collective and our algorithms over NCCL point-to-point, on
each rank's GPU, timed with CUDA events in native code (commbench._cuda)."""

from __future__ import annotations

import os
import re
import tempfile
import typing
from typing import Optional

import numpy as np

from .. import trace
from ..collectives.impls import ALGORITHM_TRANSPORT
from ..launch import watchdog
from ..results import nccl_knobs
from . import nccl_choices
from .base import Transport

# NCCL says which transport each connection took only in its INFO log, in a line per connection:
# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"
# (no connection index), and across the network one line at each end, "Channel 00/0 : 0[0] -> 8[0]
# [send] via NET/IB/0/GDRDMA" and its "[receive]" twin (NCCL 2.28, src/transport/*.cc). The receive
# lines are left out, so that each connection counts once. Where the user has not asked for NCCL's
# log, each rank asks for its INIT part in a file of its own, and reads the connections back after the
# sweep.
_CONNECTION = re.compile(r"Channel \d+(?:/\d+)? : \d+\[\w+\] -> \d+\[\w+\](?: \[send\])? via (\S+)")


# The file has no name: NCCL opens it through this process's /proc link to it (NCCL_DEBUG_FILE has no
# %h or %p to expand), so that no ending, SIGKILL included, leaves a log behind in $TMPDIR.
_log: Optional[typing.IO[bytes]] = None


def _log_path() -> Optional[str]:
    return f"/proc/self/fd/{_log.fileno()}" if _log is not None else None


def log_connections() -> None:
    """Before NCCL starts in this process: its connections logged to _log_path(), unless the user
    set NCCL's log up."""
    global _log
    if "NCCL_DEBUG" not in os.environ and "NCCL_DEBUG_FILE" not in os.environ:
        _log = tempfile.TemporaryFile()
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT", NCCL_DEBUG_FILE=_log_path())


def _read_log() -> Optional[str]:
    """This rank's own NCCL log (None where the user set NCCL's log up)."""
    if _log is None or os.environ.get("NCCL_DEBUG_FILE") != _log_path():
        return None
    with open(_log_path(), errors="replace") as f:
        return f.read()


_WARN = re.compile(r"\bNCCL WARN (.*)$", re.MULTILINE)


def warnings_said(beside: str = "", most: int = 3) -> str:
    """NCCL's WARN lines in this rank's own log (the one commbench asked for), the last `most` of
    those not already in `beside` (an error's text holds NCCL's last one), joined: NCCL warns of a
    failure's cause and remedy (NCCL_NVLS_ENABLE=0) before the error it returns."""
    text = _read_log()
    said = [m.group(1).strip() for m in _WARN.finditer(text or "")]
    fresh = [line for line in dict.fromkeys(said) if line and line not in beside]
    return "; ".join(fresh[-most:])


def chosen_transports(world) -> Optional[dict]:
    """{transport: connections} over every rank, on rank 0 (None elsewhere, and where a rank's NCCL log
    is the user's). Collective."""
    text = _read_log()
    mine: Optional[dict] = None
    if text is not None:
        mine = {}
        for m in _CONNECTION.finditer(text):
            mine[m.group(1)] = mine.get(m.group(1), 0) + 1
    every = world.gather(mine)
    if world.rank != 0 or any(t is None for t in every):
        return None
    return {name: sum(t.get(name, 0) for t in every) for name in sorted({n for t in every for n in t})}


# NCCL's channel counts of a communicator, in one INFO line of its initialisation (2.27-2.30, src/init.cc):
# "32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 4 p2p channels per peer".
# On several nodes every point-to-point peer gets the same few channels (1-4 from 2.29 on), so a flow
# between two ranks carries a fraction of what its NIC could.
_CHANNELS = re.compile(r"(\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels, (\d+) p2p channels, "
                       r"(\d+) p2p channels per peer")
CHANNEL_FIELDS = ("coll", "collnet", "nvls", "p2p", "p2p_per_peer")


# NCCL names its network devices in one INFO line of its initialisation, "NET/IB : Using [0]mlx5_0:1/IB
# [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>" (net_ib/init.cc; the socket transport's "NET/Socket : Using
# [0]eth0:10.0.0.1<0>"), and each connection's device by its index in that list: "[send] via
# NET/IB/1/GDRDMA" (net.cc; "NET/IB/1(3)" through a proxy rank).
_NET_DEVICES = re.compile(r"NET/(\w+) : Using((?: \[\d+\][^\s;]+)+)")
_NET_DEVICE = re.compile(r"\[(\d+)\]([^:\s/<;]+)")
_NET_SEND = re.compile(r"\[send\] via NET/(\w+)/(\d+)")


def used_nic(text: Optional[str]) -> Optional[str]:
    """The network device this rank's NCCL sent through most, by name, as its log `text` says; None
    where it sent through none or named none."""
    names = {(m.group(1), int(d.group(1))): d.group(2) for m in _NET_DEVICES.finditer(text or "")
             for d in _NET_DEVICE.finditer(m.group(2))}
    counts: dict[tuple[str, int], int] = {}
    for m in _NET_SEND.finditer(text or ""):
        key = (m.group(1), int(m.group(2)))
        counts[key] = counts.get(key, 0) + 1
    return next((names[k] for k in sorted(counts, key=counts.__getitem__, reverse=True) if k in names), None)


def used_nics(world) -> Optional[list]:
    """By rank, the network device each rank's NCCL sent through most (used_nic), on rank 0; None
    elsewhere and where no rank's log names one. Collective."""
    every = world.gather(used_nic(_read_log()))
    return every if world.rank == 0 and any(every) else None


def init_channels(world) -> Optional[dict]:
    """The channel counts of this process's first communicator (the world's) as NCCL's INIT line says
    them, {field of CHANNEL_FIELDS: the least over the ranks}, on rank 0 (None elsewhere, where a rank's
    NCCL log is the user's, and where NCCL said none). Collective."""
    text = _read_log()
    found = _CHANNELS.search(text or "")
    every = world.gather(dict(zip(CHANNEL_FIELDS, map(int, found.groups()))) if found else None)
    if world.rank != 0 or any(c is None for c in every):
        return None
    return {name: min(c[name] for c in every) for name in CHANNEL_FIELDS}


# A flow of `links --level host` carries the channels it would have alone: across nodes NCCL gives every
# point-to-point peer one count, fewer the more nodes (1 from 32 nodes on, 2.29-2.30), and a flow of a
# channel or two runs too far below its NIC for a NIC at half rate to show.
FLOW_CHANNELS = 8


def channels_of_a_flow_alone() -> str:
    """NCCL_NCHANNELS_PER_NET_PEER, which NCCL reads as each network peer's channel count where set:
    FLOW_CHANNELS unless the user set it, before NCCL starts. Returns the value NCCL is given."""
    return os.environ.setdefault("NCCL_NCHANNELS_PER_NET_PEER", str(FLOW_CHANNELS))


def communicator(world, timeout_s: Optional[float] = None):
    """This rank's NCCL communicator, created on first use on the GPU the rank takes (one GPU per
    rank); `timeout_s`, when given, bounds every later wait of it for its peers."""
    def make():
        from ..node.gpu import DEFAULT_TIMEOUT_S, device_comm, take_gpu
        # The initialisation waits for every peer: it must end within --timeout like any size.
        watchdog.arm("NCCL initialisation")
        made = device_comm(world, take_gpu(world), timeout_s or DEFAULT_TIMEOUT_S)
        trace.phase("nccl-init")
        return made
    comm = world.attached("nccl", make)
    if timeout_s:
        comm.set_timeout(timeout_s)
    return comm


def forced_communicator(world, variant: dict, timeout_s: Optional[float] = None):
    """A communicator over all ranks on which NCCL's choice is restricted as `variant` says
    (nccl_knobs.variants): split from the world's (which keeps the communicator it splits from,
    World.subsets), each knob's variable set while the split is made, as NCCL reads them in each
    communicator's initialisation, and restored after it."""
    base = communicator(world, timeout_s)

    def make():
        saved = {name: os.environ.get(name) for name in nccl_knobs.environment(variant)}
        try:
            for name, value in nccl_knobs.environment(variant).items():
                _set(name, value)
            return base.split(world.size)
        finally:
            for name, value in saved.items():
                _set(name, value)
    comm = world.attached("nccl " + " ".join(f"{k}={v}" for k, v in sorted(variant.items())), make)
    if timeout_s:
        comm.set_timeout(timeout_s)
    return comm


def _set(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class NcclTransport(Transport):
    name = "nccl"
    p2p_device = "cuda"
    p2p_summary = "GPU buffers, native loops"
    captures_graphs = True  # --graph: its calls are enqueued on the rank's stream, which a CUDA graph can capture

    def impls(self, coll, device: str) -> dict[Optional[str], str]:
        """Our algorithm (None: NCCL's call) -> what it is."""
        if ALGORITHM_TRANSPORT[device] != self.name:
            return {}
        return {None: f"NCCL's {coll.title}",
                **{name: f"{text} over NCCL send/recv" + (", reduction kernel" if coll.reduces else "")
                   for name, text in coll.algorithms.items()}}

    def library_choice(self, coll, send_bytes: int, recv_bytes: int) -> Optional[dict]:
        """The algorithm, protocol and channels NCCL reported since the last size for its call on
        buffers of these bytes (nccl_choices.py): on the rank that writes the records."""
        return nccl_choices.choice_for(nccl_choices.take(), coll, send_bytes, recv_bytes)

    def choice_reported(self):
        """NCCL reports its choice to the plugin inside this scope alone (nccl_choices.listening)."""
        return nccl_choices.listening()

    def prepare(self, world, cfg, what: str) -> None:
        communicator(world, cfg.timeout_s)

    def times(self, world, coll, algorithm: Optional[str], send, recv, op: int, iters: int, cfg, agg: int,
              delay_s: float, loop: int = 1, gated: bool = True) -> np.ndarray:
        # NCCL's calls are fused into one group per iteration, ours run one after another. The
        # per-iteration timing is launch-free (the stream held while the call is enqueued); a loop is
        # timed as nccl-tests times it, its enqueue overlapping the device's work.
        from ..node.gpu import cuda_module
        _cuda = cuda_module()
        from .native import native_call
        return np.asarray(self.comm(world).collective_times(
            *native_call(_cuda, coll, algorithm), send, recv, op=op, root=cfg.root, iters=iters, chunk_bytes=cfg.chunk_bytes,
            graph=cfg.graph, agg=agg, delay_s=delay_s, loop=loop, launch_free=gated and cfg.policy.timing == "per-iteration"))

    def comm(self, world):
        """The communicator its calls run on: the world's."""
        return communicator(world)

    def open_pairs(self, world, pairs, window: int) -> Optional[NcclPair]:
        mine = next((pair for pair in pairs if world.rank in pair), None)
        return NcclPair(world, mine, window) if mine is not None else None


class NcclPair:
    """A rank pair over the rank's NCCL communicator, on GPU buffers, timed in native loops."""

    def __init__(self, world, pair, window: int):
        self.comm, self.window = communicator(world), window
        self.first, self.peer = world.rank == pair[0], pair[1] if world.rank == pair[0] else pair[0]
        self.device = f"cuda:{world.device}"

    def times(self, test: str, send, recv, size: int, iters: int, loop: int = 1) -> np.ndarray:
        if test == "pingpong":
            return np.asarray(self.comm.pingpong_times(send, recv, bytes=size, peer=self.peer, iters=iters, loop=loop))
        return np.asarray(self.comm.bandwidth_times(send, recv, bytes=size, peer=self.peer, window=self.window, iters=iters,
                                                    loop=loop))

    def close(self) -> None:
        """The communicator is the world's, closed with it."""


class ForcedNccl(NcclTransport):
    """NCCL's call on a communicator whose choice of algorithm and protocol NCCL_ALGO and NCCL_PROTO
    restrict (--nccl-algo, --nccl-proto): `variant` is what its records carry of it."""

    def __init__(self, variant: dict):
        self.variant = variant

    def prepare(self, world, cfg, what: str) -> None:
        forced_communicator(world, self.variant, cfg.timeout_s)

    def comm(self, world):
        return forced_communicator(world, self.variant)

    def refusal(self, error: Exception) -> Optional[str]:
        """NCCL's warning where it serves this variant's collective by nothing NCCL_ALGO and NCCL_PROTO
        allow: its call fails with ncclInvalidUsage and "No algorithm/protocol available" (NCCL 2.28's
        enqueue.cc; NVLS without NVSwitch, Tree beside all-reduce), on every rank alike. None for
        any other failure."""
        said = _REFUSED.search(str(error))
        return said.group(0).rstrip(".)") if said else None


# NCCL's warning as the error text carries it ("... (NCCL's last warning: No algorithm/protocol ...)").
_REFUSED = re.compile(r"No algorithm/protocol available[^()]*")

NCCL = NcclTransport()
