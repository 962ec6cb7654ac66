"""commbench's NCCL profiler plugin (csrc/profiler/nccl_choices.cpp) driven as NCCL drives it, through
the layouts of NCCL's own headers (src/include/plugin/profiler/profiler_v4.h and _v5.h, NCCL 2.30):
the plugin object each version's symbol names, its init (whose arguments' order differs), and a
collective's event descriptor, whose type field is 1 byte wide in v4 and 8 in v5."""

import ctypes
import os

import pytest

from commbench import collectives
from commbench.transports import nccl_choices

COLL_EVENT, GROUP_EVENT = 1 << 1, 1 << 0


class Coll(ctypes.Structure):
    _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]


def descr(type_field):
    class Descr(ctypes.Structure):
        _fields_ = [("type", type_field), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int), ("coll", Coll)]
    return Descr


DescrV4, DescrV5 = descr(ctypes.c_uint8), descr(ctypes.c_uint64)
START = {v: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(d))
         for v, d in ((4, DescrV4), (5, DescrV5))}
INIT = {4: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                            ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p),
        5: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.POINTER(ctypes.c_int),
                            ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)}


def plugin(version):
    class Plugin(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("init", INIT[version]), ("startEvent", START[version]),
                    ("stopEvent", ctypes.c_void_p), ("recordEventState", ctypes.c_void_p),
                    ("finalize", ctypes.c_void_p)]
    # The same file as the one record() loaded: one library, one table.
    return Plugin.in_dll(ctypes.CDLL(nccl_choices.plugin_path()), f"ncclProfiler_v{version}")


@pytest.fixture(autouse=True)
def loaded(monkeypatch):
    if nccl_choices.plugin_path() is None:
        pytest.fail("commbench._nccl_choices is not built: run `make install`")
    monkeypatch.delenv("NCCL_PROFILER_PLUGIN", raising=False)
    nccl_choices.record()
    nccl_choices.take()


@pytest.mark.parametrize("version", [4, 5])
def test_the_plugin_keeps_each_collectives_choice_as_nccl_hands_it(version):
    p = plugin(version)
    ctx, mask = ctypes.c_void_p(), ctypes.c_int(GROUP_EVENT)
    rc = (p.init(ctypes.byref(ctx), ctypes.byref(mask), b"world", 0xABC, 1, 4, 0, None) if version == 4 else
          p.init(ctypes.byref(ctx), 0xABC, ctypes.byref(mask), b"world", 1, 4, 0, None))
    assert rc == 0 and ctx.value and mask.value == GROUP_EVENT | COLL_EVENT
    Descr = DescrV4 if version == 4 else DescrV5
    group_handle, handle = ctypes.c_void_p(12345), ctypes.c_void_p(12345)
    group = Descr(type=GROUP_EVENT)
    assert p.startEvent(ctx, ctypes.byref(group_handle), ctypes.byref(group)) == 0
    # NCCL 2.27 (v4) starts a plan's collective events only under a group handle that is not null
    # (ncclProfilerStartTaskEvents); 2.28 (v5) starts them whatever it is.
    assert (group_handle.value is not None) if version == 4 else (group_handle.value is None)
    for seq, (count, algo, proto, channels) in enumerate([(256, b"RING", b"LL", 2), (256, b"RING", b"LL", 2),
                                                           (1 << 20, b"NVLS", b"SIMPLE", 16)]):
        coll = Descr(type=COLL_EVENT, rank=0, coll=Coll(seqNumber=seq, func=b"AllReduce", count=count,
                                                        datatype=b"ncclFloat32", nChannels=channels, algo=algo,
                                                        proto=proto))
        assert p.startEvent(ctx, ctypes.byref(handle), ctypes.byref(coll)) == 0 and handle.value is None
    # Not listening (a sweep's timed calls): NCCL's mask loses collective events, which NCCL then skips.
    with nccl_choices.listening():
        assert mask.value & COLL_EVENT
    assert mask.value == GROUP_EVENT
    ctypes.CDLL(nccl_choices.plugin_path()).commbench_nccl_choices_listen(1)
    taken = nccl_choices.take()
    assert sorted(taken, key=lambda c: c.count) == [
        nccl_choices.Choice("AllReduce", "ncclFloat32", 256, "RING", "LL", 2, 2),
        nccl_choices.Choice("AllReduce", "ncclFloat32", 1 << 20, "NVLS", "SIMPLE", 16, 1)]
    assert nccl_choices.take() == []  # taken once


def test_a_record_takes_the_choice_of_its_own_call():
    """By the function and the bytes of the call's count (an all-gather's per-rank send, counted in
    bytes of ncclInt8 by NCCL 2.28); the most frequent where several calls match; none for a
    collective that NCCL runs as sends and receives."""
    allgather, allreduce, alltoall = (collectives.get(n) for n in ("allgather", "allreduce", "alltoall"))
    C = nccl_choices.Choice
    seen = [C("AllGather", "ncclInt8", 4096, "RING", "LL", 1, 7), C("AllReduce", "ncclInt32", 1, "RING", "LL", 1, 30),
            C("AllReduce", "ncclFloat32", 1, "TREE", "LL", 2, 40), C("AllReduce", "ncclFloat32", 1024, "RING", "LL128", 4, 9)]
    assert nccl_choices.choice_for(seen, allgather, 4096, 4 * 4096) == {"algo": "RING", "proto": "LL", "channels": 1}
    assert nccl_choices.choice_for(seen, allreduce, 4096, 4096) == {"algo": "RING", "proto": "LL128", "channels": 4}
    assert nccl_choices.choice_for(seen, allreduce, 4, 4) == {"algo": "TREE", "proto": "LL", "channels": 2}
    assert nccl_choices.choice_for(seen, allreduce, 8, 8) is None
    assert nccl_choices.choice_for(seen, alltoall, 4096, 4096) is None and not alltoall.nccl_function
    named = {c.name: c.nccl_function for c in collectives.all_collectives()}
    assert all(bool(f) != c.peer_to_peer for c, f in zip(collectives.all_collectives(), named.values())), named


def test_a_plugin_path_longer_than_nccl_reads_is_said_not_set(monkeypatch):
    """NCCL reads 254 characters of NCCL_PROFILER_PLUGIN and loads nothing from a path cut short,
    saying so at INFO level alone: such a path is not handed to NCCL, and the run says why."""
    long = "/" + "d" * 240 + "/_nccl_choices.so"
    monkeypatch.setattr(nccl_choices, "_lib", None)
    monkeypatch.setattr(nccl_choices, "plugin_path", lambda: long)
    monkeypatch.delenv("NCCL_PROFILER_PLUGIN", raising=False)
    assert nccl_choices.record() == (
        f"commbench's profiler plugin lies at a path of {len(long)} bytes, more than the 254 NCCL reads of "
        "NCCL_PROFILER_PLUGIN: NCCL's choices are not recorded (install commbench at a shorter path)")
    assert "NCCL_PROFILER_PLUGIN" not in os.environ and nccl_choices.unreported() is None
