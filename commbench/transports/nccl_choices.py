"""NCCL's choice of algorithm, protocol and channel count for each collective, as NCCL itself reports
it: through its profiler plugin interface (NCCL 2.27 and later), to commbench's plugin
(csrc/profiler/nccl_choices.cpp, built as commbench._nccl_choices), which keeps the choices per
(function, datatype, count) until this module takes them, size by size.

NCCL loads the plugin named by NCCL_PROFILER_PLUGIN once its first communicator is made; this process
loads the same file too (ctypes), which is then one library, whose table both share, and which stays
loaded when NCCL lets it go with its last communicator. Where the user has set NCCL_PROFILER_PLUGIN,
NCCL's choices are not recorded: NCCL loads one plugin only."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from dataclasses import dataclass
from typing import Optional

# NCCL's datatype names in its profiler events, and their sizes.
NCCL_TYPE_BYTES = {"ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8, "ncclUint64": 8,
                   "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8, "ncclBfloat16": 2, "ncclFloat8e4m3": 1,
                   "ncclFloat8e5m2": 1}


@dataclass(frozen=True)
class Choice:
    """What NCCL chose for calls of one function, datatype and count, and how many calls it saw."""
    func: str
    datatype: str
    count: int
    algo: str
    proto: str
    channels: int
    calls: int

    @property
    def bytes(self) -> Optional[int]:
        size = NCCL_TYPE_BYTES.get(self.datatype)
        return None if size is None else self.count * size


_lib: Optional[ctypes.CDLL] = None
# Whether NCCL reported any choice since record(): none at all after a sweep of its calls is news.
_seen = False

# The characters of NCCL_PROFILER_PLUGIN that NCCL reads (a 255-byte buffer, plugin_open.cc): a longer
# path is cut short, and NCCL loads nothing, saying so at INFO level alone.
PLUGIN_PATH_MAX = 254


def plugin_path() -> Optional[str]:
    """The built plugin, beside this package's other native parts."""
    found = glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_nccl_choices*.so"))
    return found[0] if found else None


def record() -> Optional[str]:
    """Before NCCL starts in this process: its choices reported to commbench's plugin. Returns why they
    will not be, or None."""
    global _lib
    if _lib is not None:
        return None
    if os.environ.get("NCCL_PROFILER_PLUGIN"):
        return "NCCL_PROFILER_PLUGIN names the user's own profiler plugin: NCCL's choices are not recorded"
    path = plugin_path()
    if path is None:
        return "commbench._nccl_choices was not built: NCCL's choices are not recorded"
    if len(os.fsencode(path)) > PLUGIN_PATH_MAX:
        return (f"commbench's profiler plugin lies at a path of {len(os.fsencode(path))} bytes, more than the "
                f"{PLUGIN_PATH_MAX} NCCL reads of NCCL_PROFILER_PLUGIN: NCCL's choices are not recorded (install "
                f"commbench at a shorter path)")
    lib = ctypes.CDLL(path)
    lib.commbench_nccl_choices.restype = ctypes.c_size_t
    lib.commbench_nccl_choices.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.commbench_nccl_choices_listen.argtypes = [ctypes.c_int]
    _lib = lib
    os.environ["NCCL_PROFILER_PLUGIN"] = path
    return None


@contextlib.contextmanager
def listening():
    """NCCL's collectives reported inside (a size's untimed check), not after: the timed calls then
    run without the profiler's events on the host, as they would without the plugin."""
    if _lib is not None:
        _lib.commbench_nccl_choices_listen(1)
    try:
        yield
    finally:
        if _lib is not None:
            _lib.commbench_nccl_choices_listen(0)


def take() -> list[Choice]:
    """The choices NCCL reported since the last take (none where they are not recorded)."""
    if _lib is None:
        return []
    room = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(room)
        need = _lib.commbench_nccl_choices(buf, room)
        if need <= room:
            break
        room = need
    out = []
    for line in buf.value.decode(errors="replace").splitlines():
        func, datatype, count, algo, proto, channels, calls = line.split()
        out.append(Choice(func, datatype, int(count), algo, proto, int(channels), int(calls)))
    global _seen
    _seen = _seen or bool(out)
    return out


def unreported() -> Optional[str]:
    """After a sweep of NCCL's own calls of a collective that NCCL reports: why no record carries
    NCCL's choice, where the plugin was set up and NCCL reported none at all; else None."""
    if _lib is None or _seen:
        return None
    return ("NCCL reported no choice to commbench's profiler plugin: NCCL older than 2.27 offers no interface the "
            "plugin has, or NCCL did not load it (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT says why); the records "
            "carry no nccl_choice")


def choice_for(choices: list[Choice], coll, send_bytes: int, recv_bytes: int) -> Optional[dict]:
    """NCCL's choice for a call of `coll` whose buffers hold send_bytes and recv_bytes (its count, in
    NCCL's terms, is one of them: an all-gather's per-rank send, a reduce-scatter's per-rank result,
    both for the others; NCCL 2.28 reports an all-gather's and a broadcast's count in bytes of
    ncclInt8), as the record's nccl_choice; the most frequent where several calls matched (the ranks'
    one-element barrier is an all-reduce of 4 bytes too, and NCCL chooses alike for it). None where
    NCCL reported none: a collective it runs as sends and receives, one rank, nothing recorded."""
    if not coll.nccl_function:
        return None
    found = [c for c in choices if c.func == coll.nccl_function and c.bytes in (send_bytes, recv_bytes)]
    if not found:
        return None
    c = max(found, key=lambda c: c.calls)
    return {"algo": c.algo, "proto": c.proto, "channels": c.channels}
