"""The GPU path on the emulated CUDA runtime and NCCL (tests/emu, `make emu`): the emulation's own
strictness, and what only a run of the GPU path shows (the review's defects, faults in the middle of a
NCCL collective). Marked `gpu`: `make test` runs these with COMMBENCH_GPU_EMULATION set."""

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import COMMBENCH, HERE, HUNG_S, MPIRUN, ROOT, bounded, commbench, mpi_env, own_session, traced_phases

from commbench.collectives import all_collectives
from commbench.node.gpu import EMULATION, cuda_module
from commbench.results import document as results

pytestmark = pytest.mark.gpu

SELFTEST = os.path.join(ROOT, "build", "emu", "selftest")


EMU_NVML = os.path.join(ROOT, "tests", "stubs", "emu_nvml")


def emu_env(gpus: int = 2, **extra) -> dict:
    """mpi_env() with `gpus` emulated GPUs per host, NVML answering for them (tests/stubs/emu_nvml),
    and the emulation's switches in `extra`."""
    env = mpi_env()
    env[EMULATION] = str(gpus)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != EMU_NVML]
    env["PYTHONPATH"] = os.pathsep.join([EMU_NVML, *paths])
    env.update(extra)
    return env


def _cases() -> list:
    if not os.path.exists(SELFTEST):
        return ["the emulated build is missing: run `make emu`"]
    return subprocess.run([SELFTEST], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.parametrize("case", _cases())
def test_the_emulation_is_strict_where_hardware_is(case):
    """Streams asynchronous and ordered, events, legacy-stream rules, device memory that host code
    cannot touch, graphs and what a capture forbids, injectable launch failures, the calls CUDA refuses
    across devices, and NCCL's groups, duplicate-GPU refusal, abort and split (tests/emu/selftest.cpp)."""
    extra = {"launch_failure": {"COMMBENCH_EMU_FAIL_LAUNCH": "selftest"},
             "nccl_destroy_in_error": {"COMMBENCH_EMU_NCCL_FAULT": "error:0:1"}}.get(case, {})
    r = subprocess.run([SELFTEST, case], capture_output=True, text=True, timeout=60, env=emu_env(2, **extra))
    assert r.returncode == 0, r.stderr


# Two ranks on DeviceComm directly, the second stalled by the emulated NCCL in its 40th group (inside the
# timed iterations): rank 0 prints how its call ended.
_PAIR = textwrap.dedent("""
    import sys, time
    from commbench.node.gpu import cuda_module
    from commbench.run.device_arrays import DeviceArray
    m = cuda_module()
    rank, uid = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
    comm = m.DeviceComm(uid, rank, 2, rank, 2.0)
    send, recv = DeviceArray.empty(256, "float32", rank), DeviceArray.empty(256, "float32", rank)
    t = time.monotonic()
    try:
        comm.collective_times(m.Collective.__members__["allreduce"], m.Algorithm.__members__["library"], send, recv, op=0,
                              root=0, iters=100, chunk_bytes=65536, graph=True)
        print("finished")
    except TimeoutError as e:
        print(f"timeout after {time.monotonic() - t:.1f} s: {e}")
""")


def test_a_stalled_peer_in_graph_mode_ends_within_the_timeout():
    """Defect 1: the deadline passed inside a CUDA graph's iterations. ncclCommAbort waits for every
    graph that holds the communicator, so aborting before the graph is destroyed hung for ever."""
    uid = cuda_module().nccl_unique_id().hex()
    env = emu_env(2, COMMBENCH_EMU_NCCL_FAULT="stall:1:40")
    procs = [subprocess.Popen([sys.executable, "-c", _PAIR, str(rank), uid], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=30) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for out, err in outs:
        assert "timeout after" in out and "did not finish within --timeout 2 s" in out, (out, err)
        assert float(out.split("after ")[1].split(" s")[0]) < 4


def test_a_peer_that_never_joins_ends_nccl_initialisation_within_the_timeout(workdir):
    """Defect 3: ncclCommInitRank blocked with the GIL held and no deadline. Now the initialisation is
    non-blocking, polled against --timeout with the GIL released, under the watchdog."""
    out = os.path.join(workdir, "init.json")
    t = time.monotonic()
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K", "--timeout", "3",
                   "-o", out], env=emu_env(2, COMMBENCH_EMU_NCCL_FAULT="init-stall:1"), cwd=workdir, timeout=120)
    # The ranks' start grows with the machine's load (at a load of 19 it took past 15 s): so does the bound.
    assert time.monotonic() - t < 3 + 15 * max(1.0, os.getloadavg()[0] / 2)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1 and "NCCL initialisation" in lines[0], r.stderr
    assert results.load_document(out)["status"] == "timeout"


def test_an_aggregated_call_connects_before_the_gated_samples(workdir):
    """With --agg, NCCL may connect the algorithm of the aggregated group (chosen by the group's bytes)
    on the host in its first call, which the single call's check never made: that first call runs
    ungated, or the connect (COMMBENCH_EMU_NCCL_CONNECT_S, past the gate's 2 s) expires the gate."""
    out = os.path.join(workdir, "agg.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--agg", "4", "--sizes", "1K",
                   "--iters", "3", "-o", out], env=emu_env(2, COMMBENCH_EMU_NCCL_CONNECT_S="2.5"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert results.load(out)["wrong"].tolist() == [0]


def test_a_gate_that_expires_behind_nccls_host_side_wait_names_it(workdir):
    """NCCL waits on the host inside an enqueue (here rank 1's every group takes 2.5 s,
    COMMBENCH_EMU_NCCL_ENQUEUE_US, past the gate's 2 s): the held stream is let go, and the run stops
    rather than time the enqueue. The line asked whether CUDA_LAUNCH_BLOCKING was set, and named
    nothing of NCCL's own waits."""
    out = os.path.join(workdir, "gate.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K", "--iters", "1",
                   "--warmup", "0", "-o", out], env=emu_env(2, COMMBENCH_EMU_NCCL_ENQUEUE_US="1:2500000"), cwd=workdir)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "and let go: the samples would include the enqueue (the host waited inside it: NCCL connecting its peers " \
           "or an algorithm on the host, or waiting for its own stream; or CUDA_LAUNCH_BLOCKING=1); use --timing " \
           "loop" in lines[0], lines


@pytest.mark.parametrize("command", [["allreduce", "--np", "3"], ["p2p", "--np", "2"]], ids=["allreduce", "p2p"])
def test_every_rank_s_sample_starts_once_the_last_rank_s_stream_is_released(command, workdir):
    """Each rank lets its held stream go once its own enqueue is done, and one rank's host may be slower
    (here rank 1 takes 20 ms more to enqueue each of NCCL's groups, COMMBENCH_EMU_NCCL_ENQUEUE_US, so
    its release comes 20 ms after the others', which waited for it inside the call). The ranks'
    device-side barrier between the gate and the start event (an all-reduce of one element; a pair's
    exchange of one) keeps that spread out of every rank's samples: the p2p pingpong read 20 ms. A loop
    (--timing loop, ungated, as nccl-tests times) holds the slow host's enqueue: 20 ms a call."""
    out = os.path.join(workdir, "late.json")
    env = emu_env(3, COMMBENCH_EMU_NCCL_ENQUEUE_US="1:20000")
    args = [*command, "--device", "cuda", "--impl", "nccl", "--sizes", "4K", "--iters", "5", "--warmup", "1", "-o", out]
    r = commbench(args, env=env, cwd=workdir)
    assert r.returncode == 0, r.stderr
    records = results.load_document(out)["results"]
    assert len(records) == (1 if command[0] == "allreduce" else 2), records
    for rec in records:
        assert rec["wrong"] == 0 and rec["time_us"]["median"] < 10_000, rec["per_rank"]
    if command[0] == "allreduce":
        loop = os.path.join(workdir, "loop.json")
        r = commbench([*args[:-1], loop, "--timing", "loop"], env=env, cwd=workdir)
        assert r.returncode == 0, r.stderr
        [rec] = results.load_document(loop)["results"]
        assert rec["wrong"] == 0 and rec["time_us"]["median"] >= 20_000, rec


@pytest.mark.parametrize("command", [["allreduce", "--np", "2", "--impl", "nccl"], ["p2p", "--device", "cuda"]])
def test_a_time_below_what_the_bytes_take_fails_the_run_as_a_defect(command, workdir):
    """Emulated GPUs whose memory moves about 9 MB/s (COMMBENCH_EMU_MEMORY_GBPS: a clock of 7 kHz over
    5120 bits): a 1M call cannot take less than 58 ms, far more than the emulated calls take. The run
    stops on the first such record, kept in the file, as a defect of the timing (at the default 3,352
    GB/s every other test passes the check)."""
    out = os.path.join(workdir, "floor.json")
    r = commbench([*command, "--sizes", "1M", "--iters", "3", "--warmup", "0", "-o", out],
                  env=emu_env(2, COMMBENCH_EMU_MEMORY_GBPS="0.01"), cwd=workdir)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert ": TimingDefect: " in lines[0] and "(0.00896 GB/s) plus a launch; the timing is wrong, a defect of commbench" in lines[0]
    assert lines[0].endswith(f"(measured rows kept in {out})"), lines
    doc = results.load_document(out)
    assert len(doc["results"]) == 1 and doc["config"]["gpus"][0]["memory_gbps"] == 0.00896, doc["config"]["gpus"]


@pytest.mark.parametrize("command", [["allreduce", "--np", "2", "--impl", "nccl"], ["copy", "--src", "0", "--dst", "1"]],
                         ids=["allreduce", "copy"])
def test_events_that_enclose_nothing_fail_the_run_at_a_small_size(command, workdir):
    """Events recorded out of order read 0.1-0.5 us at every size (COMMBENCH_EMU_ELAPSED_US=0.3 at the
    H100's 3,352 GB/s): at 4K the bytes alone take a nanosecond, but no kernel or copy between two
    events reads under a launch's 1 us, so the run fails as a defect of the timing."""
    out = os.path.join(workdir, "early.json")
    r = commbench([*command, "--sizes", "4K", "--iters", "3", "--warmup", "0", "-o", out],
                  env=emu_env(2, COMMBENCH_EMU_ELAPSED_US="0.3"), cwd=workdir)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "at 4K: a median of 0.30 us, below the 1.00 us its bytes take" in lines[0], lines


def test_a_gpu_runs_phases_name_nccls_initialisation(workdir):
    """COMMBENCH_TRACE_START on a GPU run: NCCL's communicator is a phase of its own, made as the
    measuring begins (the emulated NCCL's start is not a GPU's: docs/method.md)."""
    r = commbench(["allreduce", "--device", "cuda", "--impl", "nccl", "--sizes", "1K", "--iters", "3", "--warmup", "0",
                   "--no-fit", "-o", "t.json"], env=emu_env(1, COMMBENCH_TRACE_START="1"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert [p for p, _ in traced_phases(r.stderr)["0"]] == ["started", "imports", "mpi-init", "topology", "before-measuring",
                                                     "nccl-init", "nccl-log", "measured", "written"]


def test_a_delayed_rank_holds_its_device_after_the_ranks_barrier(workdir):
    """--delay on GPUs: rank 1's device spins 20 ms after the ranks' device-side barrier and before its
    start event: its own samples leave the delay out, the others wait for it inside the call."""
    out = os.path.join(workdir, "late.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "3", "--impl", "nccl", "--sizes", "1K", "--iters", "5",
                   "--warmup", "1", "--delay", "1:20000", "-o", out], env=emu_env(3), cwd=workdir)
    assert r.returncode == 0, r.stderr
    [rec] = results.load_document(out)["results"]
    medians = {p["rank"]: p["median_us"] for p in rec["per_rank"]}
    assert medians[1] < 10_000 and min(medians[0], medians[2]) > 15_000, medians
    assert rec["straggler"]["rank"] == 1, rec["per_rank"]


@pytest.mark.parametrize("op", ["sum", "prod"])
def test_graph_mode_in_place_is_exact(op, workdir):
    """Defect 5: the checked call ran the body three times on one buffer (before the capture, after
    the upload, timed), so an in-place sum or product read as nearly all wrong."""
    out = os.path.join(workdir, "g.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl,ring", "--graph", "--place", "in",
                   "--op", op, "--dtype", "int32", "--sizes", "64,4K", "--budget-ms", "10", "-o", out],
                  env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert len(df) == 4 and (df["wrong"] == 0).all()


@pytest.mark.parametrize("variable,command", [("NCCL_COMM_BLOCKING", ["allreduce", "--impl", "nccl", "--sizes", "1K"]),
                                              ("NCCL_COMM_SPLIT_SHARE_RESOURCES", ["p2p", "--impl", "nccl", "--sizes", "8"])])
def test_nccl_variables_that_override_the_communicators_mode_are_refused(variable, command, workdir):
    """NCCL lets these variables override every communicator's configuration: blocking ones cannot be
    made within --timeout, non-blocking ones put a thread's start in every timed call, shared ones
    share one abort. Refused in one line, no result file."""
    r = commbench([*command, "--device", "cuda", "--np", "2", "-o", "x.json"], env=emu_env(2, **{variable: "1"}),
                  cwd=workdir)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"commbench: error: {variable}=1 is set: commbench chooses each NCCL communicator's mode itself (non-blocking "
        f"to make it within --timeout, blocking to time its calls, resources of its own); unset {variable}"], r.stderr
    assert not os.path.exists(os.path.join(workdir, "x.json"))


def test_one_dtypes_buffers_at_a_time(workdir):
    """Two dtypes of 200M on 1 GiB GPUs: the memory check counts one dtype's buffers, and the first
    dtype's were still held while the second's were allocated (out of memory after the first)."""
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--dtype", "float32,int32",
                   "--sizes", "200M", "--iters", "1", "--warmup", "0", "-o", "m.json"],
                  env=emu_env(2, COMMBENCH_EMU_MEMORY_GIB="1", NCCL_BUFFSIZE="65536", NCCL_MAX_NCHANNELS="1"),
                  cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stderr
    assert list(results.load(os.path.join(workdir, "m.json"))["dtype"]) == ["float32", "int32"]


@pytest.mark.parametrize("place", ["out", "in"])
def test_what_the_graph_computes_is_checked(place, workdir):
    """The check ran without the graph, so a replay that computed nothing read 0 wrong; now one launch
    of the graph is checked as well, on buffers filled again (nccl-tests' -G). The replays that do
    nothing also read below the physical floor, which stops the run there."""
    for impl in ("nccl", "ring"):
        out = os.path.join(workdir, f"{impl}.json")
        r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", impl, "--graph", "--place", place,
                       "--sizes", "4K", "--budget-ms", "10", "-o", out],
                      env=emu_env(2, COMMBENCH_EMU_SKIP_LAUNCH="graph launch"), cwd=workdir)
        assert r.returncode == 1 and ": TimingDefect: " in r.stderr, r.stderr
        df = results.load(out)
        assert len(df) == 1 and (df["wrong"] > 0).all()


@pytest.mark.parametrize("graph", [False, True], ids=["stream", "graph"])
def test_a_known_cost_per_call_is_enclosed_by_the_timing(graph, workdir):
    """Each NCCL group costs the emulated device 3 ms (COMMBENCH_EMU_NCCL_GROUP_US): a call's time is at
    least that, graph replays included. Only the physical floor (about a microsecond at 4K) stood
    between a replay that enclosed nothing and a figure."""
    out = os.path.join(workdir, "cost.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", *(["--graph"] if graph else []),
                   "--sizes", "4K", "--iters", "5", "--warmup", "1", "-o", out],
                  env=emu_env(2, COMMBENCH_EMU_NCCL_GROUP_US="3000"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    [rec] = results.load_document(out)["results"]
    assert rec["time_us"]["min"] >= 3000 and rec["time_us"]["median"] < 3000 * 20, rec["time_us"]


def test_graph_mode_refuses_what_it_cannot_capture(workdir):
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl,mpi", "--graph", "--sizes", "4K"],
                  env=emu_env(2), cwd=workdir)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "commbench: error: --graph captures NCCL's calls and commbench's algorithms over NCCL; --impl mpi cannot be "
        "captured in a CUDA graph"], r.stderr


@pytest.mark.parametrize("command", [
    ["scale", "--device", "cuda", "--impl", "nccl", "--ranks", "1,2,3", "--sizes", "1K,64K", "--budget-ms", "10"],
    ["numerics", "--device", "cuda", "--impl", "nccl", "--ranks", "1,3", "--count", "64"]])
def test_rank_counts_split_the_world_communicator(command, workdir, tmp_path):
    """Defect 11: scale and numerics made a whole NCCL communicator per rank count while the world's
    stayed alive. Now each rank initialises one and splits it."""
    log = tmp_path / "nccl.log"
    r = commbench([*command, "--np", "3", "-o", os.path.join(workdir, "out.json")],
                  env=emu_env(3, COMMBENCH_EMU_NCCL_LOG=str(log)), cwd=workdir)
    assert r.returncode == 0, r.stderr
    made = [line.split() for line in log.read_text().splitlines()]
    inits = [pid for how, pid, *_ in made if how == "init"]
    assert len(inits) == 3 and len(set(inits)) == 3, made
    assert any(how == "split" for how, *_ in made)
    for pid in inits:  # the communicator split from stays while rank counts follow
        mine = [(how, blocking) for how, p, _, _, blocking in made if p == pid]
        last_split = max(i for i, (how, _) in enumerate(mine) if how == "split")
        assert mine.index(("destroy", "nonblocking")) > last_split, mine


def test_the_calls_run_on_a_blocking_communicator(workdir, tmp_path):
    """NCCL runs each group of a non-blocking communicator's calls on a thread it makes per group
    (about 25 us of host time per call on an H100 host, which a loop of back-to-back calls timed):
    the communicator is made non-blocking, against the deadline, and the calls run on a blocking one
    split from it, as nccl-tests' do. Where no rank count follows, the non-blocking one goes as soon as
    the split is made: no second full communicator is held during the run."""
    log = tmp_path / "nccl.log"
    r = commbench(["alltoall", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K", "--timing", "loop",
                   "--iters", "5", "-o", os.path.join(workdir, "out.json")], env=emu_env(2, COMMBENCH_EMU_NCCL_LOG=str(log)),
                  cwd=workdir)
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    for pid in {pid for _, pid, *_ in lines}:
        mine = [(how, blocking) for how, p, _, _, blocking in lines if p == pid]
        assert mine == [("init", "nonblocking"), ("split", "blocking"), ("destroy", "nonblocking"), ("call", "blocking"),
                        ("destroy", "blocking")], mine


def test_a_failure_seen_as_a_communicator_is_destroyed_aborts_it(workdir, tmp_path):
    """A peer's failure that NCCL sees between commbench's check of a communicator's state and its
    destroy makes ncclCommDestroy return at once with its group left open on the thread (NCCL 2.28's
    init.cc): every later NCCL call of the rank would be deferred and the communicator never freed.
    The group is closed and the communicator aborted."""
    log = tmp_path / "nccl.log"
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K", "--iters", "5",
                   "--timeout", "20", "-o", os.path.join(workdir, "out.json")],
                  env=emu_env(2, COMMBENCH_EMU_NCCL_LOG=str(log), COMMBENCH_EMU_NCCL_FAULT="destroy-error:0"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    ranks = {rank: [(how, blocking) for how, p, rank_, _, blocking in lines if p == pid]
             for pid, rank in {(pid, rank) for how, pid, rank, *_ in lines if how == "init"}}
    assert ranks["0"] == [("init", "nonblocking"), ("split", "blocking"), ("abort", "nonblocking"), ("call", "blocking"),
                          ("abort", "blocking")], ranks
    assert ranks["1"][-1] == ("destroy", "blocking"), ranks


@pytest.mark.parametrize("op,calls", [("alltoall", {"ncclAlltoAll"}), ("sendrecv", {"ncclSend", "ncclRecv"})])
def test_nccls_own_alltoall_where_the_library_has_it(workdir, tmp_path, op, calls):
    """`nccl` all-to-all is NCCL's ncclAlltoAll (2.28 and later, as the emulated NCCL declares itself),
    as nccl-tests calls it, not a group of point-to-point calls (on one H100: 10 us a call against 7.5);
    send-recv has no collective of NCCL's and stays the group. Exact either way."""
    log = tmp_path / "calls.log"
    out = os.path.join(workdir, "out.json")
    r = commbench([op, "--device", "cuda", "--np", "3", "--impl", "nccl", "--sizes", "12,1000,1M", "--iters", "3", "-o",
                   out], env=emu_env(3, COMMBENCH_EMU_NCCL_CALLS=str(log)), cwd=workdir)
    assert r.returncode == 0, r.stderr
    made = set(log.read_text().split())
    assert calls <= made and not ({"ncclAlltoAll", "ncclSend", "ncclRecv"} - calls) & made, made
    with open(out) as f:
        assert [rec["wrong"] for rec in json.load(f)["results"]] == [0, 0, 0]


@pytest.mark.long
@pytest.mark.parametrize("gpus", [1, 8])
def test_gpu_check_passes_on_emulated_gpus(gpus, tmp_path):
    """`make gpu-check`'s plan (accept --plan gpu-node --quick: small sizes; the GPU tests being this
    suite) on one GPU (its steps of ranks sharing it) and on 8 GPUs a host, the largest node (every
    step of two GPUs or more; the rest of this suite runs on 2)."""
    r = commbench(["accept", "--plan", "gpu-node", "--quick", "-o", str(tmp_path / "out"),
                   "--junit", str(tmp_path / "junit.xml")], env=emu_env(gpus), cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    [host] = os.listdir(tmp_path / "out")
    with open(tmp_path / "out" / host / "summary.json") as f:
        summary = json.load(f)
    assert summary["gpus"] == gpus and summary["status"] in ("PASS", "WARN")
    assert all(s["status"] in ("PASS", "WARN") for s in summary["steps"] if s["counted"])
    with open(tmp_path / "out" / host / "topo.json") as f:  # NVML's view, from the stand-in beside the emulation
        assert len(json.load(f)["gpus"]["devices"]) == gpus
    names = {step["step"] for step in summary["steps"]}
    assert {"allreduce graph", "copy", "p2p matrix"} <= names
    assert gpus == 1 or {"p2p nccl", "links nccl"} <= names
    # One GPU: the multi-rank NCCL path on ranks that share it (COMMBENCH_SHARED_GPU).
    assert gpus > 1 or {"shared GPU 2 ranks allreduce", "shared GPU 3 ranks links nccl"} <= names


def test_the_gpu_plans_fit_their_limits_on_8_gpus(workdir):
    """Every gpu-node step at 8 GPUs a host (the peer matrix: every ordered pair of 8), and every
    gpu-cluster step (links at host level on 64 such nodes), as its command counts its measurements:
    the estimate of accept/sizing.py within half of each step's limit (accept refuses a node plan
    otherwise)."""
    from commbench.accept import plan as plans
    from commbench.accept.sizing import LIMIT_SHARE
    from commbench.run.copies import ACCESS
    from commbench.sizes import parse_sizes
    r = commbench(["accept", "--plan", "gpu-node", "--dry-run"], env=emu_env(8), cwd=workdir)
    assert r.returncode == 0, r.stderr
    rows = {line[3:35].strip(): line[35:].split() for line in r.stdout.splitlines() if not line.startswith("#")}
    matrix = next(s for s in plans.load("gpu-node").steps if s.name == "p2p matrix")
    assert rows["p2p matrix"][1] == f"{2 * len(ACCESS['write']) * 8 * 8 * len(parse_sizes(matrix.options['sizes'])):,}"
    assert all(float(row[2]) <= LIMIT_SHARE * float(row[3]) for row in rows.values()), rows
    # In a process of its own with 8 emulated GPUs (this one may have loaded 2); host level: several hosts.
    r = subprocess.run([sys.executable, "-c", _CLUSTER_STEPS], capture_output=True, text=True, env=emu_env(8),
                       cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stderr
    checked = json.loads(r.stdout)
    assert [name for name, *_ in checked] == [s.name for s in plans.load("gpu-cluster").steps if s.measuring]
    assert all(ranks in (8, 64 * 8) and estimate <= LIMIT_SHARE * limit for _, ranks, estimate, limit in checked), checked


# gpu-cluster's steps as their commands count them on one node of 8 GPUs; links at host level (which
# needs several hosts to check) as a healthy allocation of 64 such nodes runs it (accept/sizing.py's
# host_links_s): its rounds inside the hosts, the host matchings and a healthy cluster's confirmation,
# each window of the step's bandwidth size at the slowest healthy flow's rate, under the policy its
# command takes (checked at rank level).
_CLUSTER_STEPS = textwrap.dedent("""
    import json
    from commbench.accept import plan as plans
    from commbench.accept.sizing import estimate_s, host_links_s
    from commbench.analysis.host.level import Layout, first_rounds
    from commbench.analysis.host.schedule import default_rounds
    from commbench.cli.accept import checked_step
    from commbench.sizes import parse_size
    out = []
    for s in (s for s in plans.load("gpu-cluster").steps if s.measuring):
        if s.options.get("level") != "host":
            c = checked_step(s.arguments(8))
            out.append((s.name, c.ranks, estimate_s(c), s.timeout_s))
            continue
        policy = checked_step(["rank" if a == "host" else a for a in s.arguments(8)]).policy
        rounds = first_rounds(Layout([f"node{h}" for h in range(64) for _ in range(8)]), default_rounds(64, False), 0)
        estimate = host_links_s(rounds, policy, 64, parse_size(s.options["bandwidth-size"]))
        out.append((s.name, 64 * 8, estimate, s.timeout_s))
    print(json.dumps(out))
""")


_CHECK = textwrap.dedent("""
    from commbench.node.gpu import cuda_module
    from commbench.run.device_arrays import DeviceArray
    m = cuda_module()
    a = DeviceArray.empty(100000, "float32", 0)
    m.fill_pattern(a, 0, 0, 1)
    print(m.count_wrong(a, 0, 1))
""")


_COPY = textwrap.dedent("""
    import numpy as np
    from commbench.node.gpu import cuda_module
    from commbench.run.device_arrays import DeviceArray
    m = cuda_module()
    a = DeviceArray.empty(1000, "float32", 0)
    m.fill(a, 7.0)
    whole, every_other = np.zeros(1000, np.float32), np.zeros(2000, np.float32)[::2]
    m.copy_to_host(a, whole)
    try:
        m.copy_to_host(a, every_other)
    except ValueError as e:
        print(e)
    print(whole.min(), whole.max(), every_other.max())
""")


_GATED_COPIES = textwrap.dedent("""
    from commbench.node.gpu import cuda_module
    m = cuda_module()
    for bidi in (False, True):
        rig = m.PeerCopy(1, 0, 1 << 16, "sm", bidi)
        print(sorted(rig.times(5))[2] * 1e3, rig.wrong())  # the median: a loaded host's thread stalls one
""")


def test_peer_copies_leave_the_hosts_launches_out():
    """Each kernel launch costs the host 20 ms here: a peer copy's samples, held behind the gate while
    its copy kernels (one per direction) are launched, are the device's time alone (they read 20 and
    40 ms before, every one), and every byte arrives. On a loaded machine one sample of the emulated
    device read 33 ms: the median of five is judged."""
    r = subprocess.run([sys.executable, "-c", _GATED_COPIES], capture_output=True, text=True, timeout=120,
                       env=emu_env(2, COMMBENCH_EMU_LAUNCH_DELAY_US="20000"))
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert len(rows) == 2 and all(float(ms) < 10 and wrong == "0" for ms, wrong in rows), rows

@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to stand for 2 sockets")
def test_each_rank_runs_on_its_gpu_s_cpus_or_the_run_says_it_does_not(workdir):
    """Two sockets (emulated NVML): GPU 0 local to the second CPU, GPU 1 to the first, so that Open
    MPI's binding by slot puts each rank beside the other's GPU. Standalone, every rank moves onto its
    GPU's CPUs, which the header and the file say, and so does every rank of a user's `mpirun --bind-to
    none` (what the warning's remedy says); under a user's mpirun that binds by core (as its report of
    the bindings shows) the binding stands and the run warns, naming a rank away from its GPU."""
    cpus = [str(c) for c in sorted(os.sched_getaffinity(0))[:2]]
    env = emu_env(2, COMMBENCH_EMU_GPU_CPUS=f"{cpus[1]};{cpus[0]}")
    args = ["allreduce", "--device", "cuda", "--impl", "nccl", "--sizes", "1K", "--iters", "3", "--warmup", "0"]
    r = commbench([*args, "--np", "2", "-o", "own.json"], env=env, cwd=workdir)
    assert r.returncode == 0, r.stderr
    config = results.load_document(os.path.join(workdir, "own.json"))["config"]
    assert [(g["cpus"], g["gpu_cpus"], g["local"]) for g in config["gpus"]] == [(cpus[1], cpus[1], True),
                                                                                (cpus[0], cpus[0], True)]
    assert "cpu_binding_warning" not in config and "cuda:0 commbench emulated GPU (" in r.stdout
    assert f", CPUs {cpus[1]}, local to the GPU" in r.stdout
    r = subprocess.run([MPIRUN, *own_session(), "--np", "2", "--bind-to", "none", COMMBENCH, *args, "-o", "unbound.json"],
                       capture_output=True, text=True, env=env, cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stderr
    config = results.load_document(os.path.join(workdir, "unbound.json"))["config"]
    assert [(g["cpus"], g["local"]) for g in config["gpus"]] == [(cpus[1], True), (cpus[0], True)], config["gpus"]
    assert "cpu_binding_warning" not in config
    r = subprocess.run([MPIRUN, *own_session(), "--np", "2", "--bind-to", "core", "--report-bindings", COMMBENCH, *args,
                        "-o", "user.json"], capture_output=True, text=True, env=env, cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"Rank \d+ bound to", r.stderr + r.stdout)) == 2, r.stderr
    config = results.load_document(os.path.join(workdir, "user.json"))["config"]
    assert [g["local"] for g in config["gpus"]] == [False, False], config["gpus"]
    assert config["cpu_binding_warning"].startswith("2 rank(s) run on CPUs away from their GPU, e.g. rank 0 (")
    assert f"warning: {config['cpu_binding_warning']}" in r.stderr
    assert f", CPUs {cpus[0]}, none local to the GPU (its CPUs: {cpus[1]})" in r.stdout



@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to stand for 2 sockets")
def test_copies_allocate_host_memory_on_the_cpus_local_to_their_gpu(workdir):
    """GPU 0 local to CPU 0, GPU 1 to CPU 1 (emulated NVML), the emulated driver logging the CPUs of
    each pinned allocation: copies from GPU 1 allocate on CPU 1 and say so; a user's binding to the
    other socket stands, with a warning; where NVML cannot say, the line says that; the process's
    CPUs are its own again after."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    log = os.path.join(workdir, "pinned.log")
    env = emu_env(2, COMMBENCH_EMU_GPU_CPUS=f"{cpus[0]};{cpus[1]}", COMMBENCH_EMU_PINNED_LOG=log)
    args = ["copy", "--src", "1", "--dst", "0", "--sizes", "4K,64K", "--budget-ms", "5"]

    def run(out, prefix=(), env=env):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log)
        r = subprocess.run([*prefix, COMMBENCH, *args, "-o", out], capture_output=True, text=True, timeout=120,
                           env=env, cwd=workdir)
        assert r.returncode == 0, r.stderr
        with open(log) as f:
            allocated = {line.split()[1] for line in f}
        doc = results.load_document(os.path.join(workdir, out))
        # The header lists the GPUs the copies drive (not GPU 0 as a rank's own).
        assert [g["device"] for g in doc["config"]["gpus"]] == [0, 1] and " cuda:1 commbench emulated GPU" in r.stdout
        [placement] = doc["host_memory"]
        assert placement.pop("device") == 1
        return r, placement, allocated

    r, placement, allocated = run("near.json")
    assert placement == {"cpus": str(cpus[1]), "gpu_local_cpus": str(cpus[1]), "local": True}
    assert allocated == {str(cpus[1])}
    assert f"# note: host buffers allocated from CPUs {cpus[1]}, local to cuda:1\n" in r.stdout

    r, placement, allocated = run("far.json", prefix=("taskset", "-c", str(cpus[0])))
    assert placement == {"cpus": str(cpus[0]), "gpu_local_cpus": str(cpus[1]), "local": False}
    assert allocated == {str(cpus[0])}
    assert (f"warning: host buffers allocated from CPUs {cpus[0]}, none of them local to cuda:1 (its CPUs: "
            f"{cpus[1]}): the host copies also cross the link between the CPU sockets") in r.stderr

    no_nvml = {**env, "PYTHONPATH": os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if p != EMU_NVML)}
    r, placement, allocated = run("unknown.json", env=no_nvml)
    assert placement["gpu_local_cpus"] is None and placement["local"] is None and len(allocated) == 1
    assert "which CPUs are local to cuda:1 is unknown (NVML unavailable: " in r.stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to stand for 2 sockets")
def test_copy_from_every_gpu_names_the_one_whose_host_copies_fall_behind(workdir):
    """--src all: every GPU in turn, each on its own CPUs, copying to the next; the per-GPU table at
    the largest size; a GPU whose work takes 20 ms more (emulated) is named, the others are not."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    log = os.path.join(workdir, "pinned.log")
    out = os.path.join(workdir, "all.json")
    r = commbench(["copy", "--src", "all", "--sizes", "4K,1M", "--budget-ms", "5", "-o", out], cwd=workdir,
                  env=emu_env(2, COMMBENCH_EMU_GPU_CPUS=f"{cpus[0]};{cpus[1]}", COMMBENCH_EMU_PINNED_LOG=log,
                              COMMBENCH_EMU_SLOW_DEVICE="1:20000"))
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    assert [(p["device"], p["cpus"], p["local"]) for p in doc["host_memory"]] == [(0, str(cpus[0]), True),
                                                                              (1, str(cpus[1]), True)]
    with open(log) as f:
        assert {line.split()[1] for line in f} == {str(cpus[0]), str(cpus[1])}
    pairs = {(rec["op"], tuple(rec["pair"])) for rec in doc["results"]}
    assert {("h2d", (0, 1)), ("h2d", (1, 0)), ("staged", (0, 1)), ("peer_copy", (1, 0))} <= pairs
    table = r.stdout[r.stdout.index("# host<->device bandwidth per GPU (GB/s), 1M"):].splitlines()
    assert table[1].split()[1:] == ["GPU", "h2d", "pinned", "d2h", "pinned", "h2d", "pageable", "d2h", "pageable"]
    assert [row.split()[1] for row in table[2:4]] == ["0", "1"]
    named = [line for line in r.stderr.splitlines() if "GB/s at 1M" in line]
    assert len(named) == 2 and all(line.startswith("warning: cuda:1: ") for line in named), r.stderr
    assert sorted(tuple(line.split()[2:4]) for line in named) == [("d2h", "pinned"), ("h2d", "pinned")], named
    # Kept in the file, where acceptance judges it.
    kept = doc["host_copies"]
    assert kept["size_bytes"] == 1 << 20 and kept["table"][1:] == table[:4]
    assert sorted((f["device"], f["op"]) for f in kept["findings"]) == [(1, "d2h"), (1, "h2d")]
    from commbench.accept.judge import result_checks
    [host] = [c for c in result_checks(doc, {}, None) if c["check"] == "host copies"]
    assert host["status"] == "FAIL" and host["evidence"].startswith("cuda:1: ")


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_near_gpu_gives_the_cpus_back():
    r = subprocess.run([sys.executable, "-c", _NEAR], capture_output=True, text=True, timeout=60,
                       env=emu_env(2, COMMBENCH_EMU_GPU_CPUS="0;1"))
    assert r.returncode == 0 and r.stdout.split() == ["1", "True", "True"], r.stdout + r.stderr


_NEAR = textwrap.dedent("""
    import os
    from commbench.node.affinity import near_gpu
    before = os.sched_getaffinity(0)
    with near_gpu(1) as placement:
        inside = os.sched_getaffinity(0)
    print(placement["cpus"], inside == {1}, os.sched_getaffinity(0) == before)
""")


_ISSUERS = textwrap.dedent("""
    from commbench.node.gpu import cuda_module
    m = cuda_module()
    for engine in ("ce", "sm"):
        for read in (False, True):
            for src, dst in ((0, 1), (1, 0)):
                rig = m.PeerCopy(dst, src, 1 << 16, engine, False, read)
                print(engine, read, src, dst, sorted(rig.times(3))[1] * 1e3)
            print(engine, read, "wrong", m.PeerCopy(1, 0, 3000, engine, False, read).wrong(),
                  m.PeerCopy(1, 0, 3000, engine, True, read).wrong())
""")


def test_a_read_copy_is_issued_by_the_gpu_that_reads():
    """Work issued by GPU 1 takes 30 ms more here: a written copy is GPU 1's to issue where it is the
    source, a read one where it is the destination; every byte arrives, one way and both at once."""
    r = subprocess.run([sys.executable, "-c", _ISSUERS], capture_output=True, text=True, timeout=120,
                       env=emu_env(2, COMMBENCH_EMU_SLOW_DEVICE="1:30000"))
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in r.stdout.splitlines()]
    slow = {(engine, read == "True", int(src), int(dst)): float(ms) >= 30 for engine, read, src, dst, ms in
            (line for line in lines if line[2] != "wrong")}
    assert slow == {(engine, read, src, dst): (dst if read else src) == 1
                    for engine in ("ce", "sm") for read in (False, True) for src, dst in ((0, 1), (1, 0))}, r.stdout
    assert [line[3:] for line in lines if line[2] == "wrong"] == [["0", "0"]] * 4, r.stdout


def test_a_staged_copy_downloads_one_chunk_while_it_uploads_the_last(workdir):
    """Every device's memory work takes 10 ms more (COMMBENCH_EMU_SLOW_DEVICE=all): a staged copy of 4
    chunks, double-buffered, takes about 5 of those (each chunk's upload beside the next one's
    download), not the 8 of a download and an upload in turn."""
    out = os.path.join(workdir, "staged.json")
    r = commbench(["copy", "--src", "0", "--dst", "1", "--sizes", "1M", "--staging-chunk", "256K", "--iters", "3",
                   "--warmup", "1", "-o", out], cwd=workdir, env=emu_env(2, COMMBENCH_EMU_SLOW_DEVICE="all:10000"))
    assert r.returncode == 0, r.stderr
    [staged] = [rec for rec in results.load_document(out)["results"] if rec["op"] == "staged"]
    assert 50_000 <= staged["time_us"]["median"] < 65_000, staged["time_us"]


def test_the_gpu_tests_copy_rigs_pass_without_peer_access():
    """The hardware suite's copy test on a PCIe host without P2P (it built every peer copy and failed
    there): the copies that need peer access are refused as the matrix marks them, the rest exact."""
    r = bounded([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                 os.path.join(HERE, "test_gpu.py"), "-k", "every_copy_mode"], HUNG_S,
                env=emu_env(2, COMMBENCH_EMU_NO_PEER="1"), cwd=HERE)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_both_directions_of_a_peer_copy_are_timed_without_crossing_between_the_gpus(workdir):
    """Each direction is timed by events on the stream of the GPU that issues it, both released
    together: a wait on the other GPU's event (here 20 ms late, COMMBENCH_EMU_EVENT_HOP_US) is in no
    sample. Timed across a fork and a join, each bidirectional sample took two of them."""
    out = os.path.join(workdir, "bidi.json")
    r = commbench(["p2p", "--device", "cuda", "--access", "both", "--sizes", "4", "--budget-ms", "5", "-o", out],
                  cwd=workdir, env=emu_env(2, COMMBENCH_EMU_EVENT_HOP_US="20000"))
    assert r.returncode == 0, r.stderr
    both = [rec for rec in results.load_document(out)["results"] if rec["bidirectional"]]
    assert len(both) == 4 * 4 and all(rec["wrong"] == 0 for rec in both)  # 4 modes x 4 ordered pairs of 2 GPUs
    assert max(rec["time_us"]["median"] for rec in both) < 10_000, [rec["time_us"] for rec in both]


def test_without_peer_access_only_the_written_copy_engine_cells_are_measured(workdir):
    """No peer access: the driver stages a written copy-engine copy through the host (marked s);
    nothing reads across, so every read cell is N/A with the reason, and the run still passes."""
    out = os.path.join(workdir, "m.json")
    r = commbench(["p2p", "--device", "cuda", "--access", "both", "--sizes", "4,64K", "--budget-ms", "5", "-o", out],
                  cwd=workdir, env=emu_env(2, COMMBENCH_EMU_NO_PEER="1"))
    assert r.returncode == 0, r.stderr
    matrix = r.stdout[r.stdout.index("# unidirectional ce-read bandwidth"):].splitlines()[2:4]
    cells = [row.split()[2:] for row in matrix]
    assert cells[0][1] == cells[1][0] == "N/A" and all(float(cells[i][i]) > 0 for i in range(2)), r.stdout
    df = results.load(out)
    pairs = {(m, tuple(p)) for m, p in zip(df["mode"], df["pair"])}
    assert {m for m, _ in pairs} == {"ce", "sm", "ce-read", "sm-read"}
    assert {p for m, p in pairs if m == "ce-read"} == {(0, 0), (1, 1)}, pairs  # a GPU reads itself
    assert "# N/A: peer access between cuda:0 and cuda:1 is not supported" in r.stdout
    assert "# unidirectional ce latency (us)" in r.stdout and "# unidirectional ce-read latency (us)" in r.stdout


def test_a_copy_into_a_strided_host_view_is_refused():
    r = subprocess.run([sys.executable, "-c", _COPY], capture_output=True, text=True, timeout=60, env=emu_env(1))
    assert r.returncode == 0 and r.stdout.splitlines() == ["copy: the host buffer is not contiguous", "7.0 7.0 0.0"], \
        r.stdout + r.stderr


@pytest.mark.parametrize("skipped,expected", [("", "0"), ("check kernel", "391")])
def test_a_check_kernel_that_never_ran_reads_as_wrong(skipped, expected):
    """The sentinel: a check kernel that never ran leaves the count at its number of blocks (here
    ceil(100000 / 256)), never a false 0."""
    r = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60,
                       env=emu_env(1, COMMBENCH_EMU_SKIP_LAUNCH=skipped) if skipped else emu_env(1))
    assert r.returncode == 0 and r.stdout.split() == [expected], r.stderr


def test_per_iteration_timing_leaves_the_hosts_launches_out(workdir):
    """Each kernel launch costs the host 20 ms here: the per-iteration samples, held behind the gate
    while the call is enqueued, are the device's time alone; a loop's enqueue is in its time per call
    (as in nccl-tests), and each of ring's calls launches a reduction kernel. A rank's own sample also
    holds the time it waited for its peer to let its stream go, which a host descheduled under load
    makes long (29 ms seen with 4 test workers on a 16-core machine); the last of the two to arrive
    waits for no one, so of 5 samples one rank's own median is the device's time alone."""
    medians = {}
    for timing in ("per-iteration", "loop"):
        out = os.path.join(workdir, f"{timing}.json")
        r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "ring", "--sizes", "1K", "--iters", "5",
                       "--timing", timing, "-o", out], env=emu_env(2, COMMBENCH_EMU_LAUNCH_DELAY_US="20000"), cwd=workdir)
        assert r.returncode == 0, r.stderr
        [rec] = results.load_document(out)["results"]
        assert rec["wrong"] == 0
        medians[timing] = min(p["median_us"] for p in rec["per_rank"]) if timing == "per-iteration" else \
            rec["time_us"]["median"]
    assert medians["per-iteration"] < 10000 <= 20000 <= medians["loop"], medians


@pytest.mark.parametrize("command", [["p2p", "--sizes", "8,64K"], ["links", "--latency-size", "8", "--bandwidth-size", "64K",
                                                                   "--judge", "bandwidth", "--threshold-pct", "1"]])
def test_nccl_pairs_time_loops_of_back_to_back_messages(command, workdir):
    """p2p and links over NCCL with --timing loop: each sample is N round trips or windows enqueued
    back to back (not held behind the gate), its figure per message, every byte checked."""
    out = os.path.join(workdir, "loop.json")
    r = commbench([*command, "--impl", "nccl", "--np", "2", "--timing", "loop", "--loops", "2", "--iters", "6",
                   "-o", out], env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = results.load_document(out)["results"]
    assert recs and all((rec["timing"], rec["loop_calls"], rec["iterations"], rec["wrong"]) == ("loop", 6, 2, 0)
                        for rec in recs)
    assert {rec["op"] for rec in recs} == {"pingpong", "bandwidth"}


def test_a_sample_longer_than_the_launch_queue_is_let_go_in_time(workdir):
    """tree over 2,048 pipeline chunks enqueues thousands of steps a call, more than the emulated
    launch queue holds (1,024, as a GPU's): the gate lets the stream go after its first operations
    instead of holding it until the host blocks, and the run completes exact."""
    out = os.path.join(workdir, "long.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "tree", "--chunk", "256", "--sizes", "512K",
                   "--iters", "2", "--warmup", "1", "-o", out], env=emu_env(2), cwd=workdir, timeout=120)
    assert r.returncode == 0, r.stderr
    [rec] = results.load_document(out)["results"]
    assert rec["wrong"] == 0 and rec["iterations"] == 2


def test_a_failed_kernel_launch_ends_the_run_in_one_line(workdir):
    out = os.path.join(workdir, "launch.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "ring", "--sizes", "1K", "-o", out],
                  env=emu_env(2, COMMBENCH_EMU_FAIL_LAUNCH="reduce kernel"), cwd=workdir)
    # mpirun's output forwarding at times puts a NUL byte before a rank's line (the ranks' stderr
    # reaches the terminal through it; a relay of commbench's own would break with a killed command).
    lines = [line for line in r.stderr.replace("\0", "").splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "reduce kernel launch failed: unspecified launch failure" in lines[0]


def test_ranks_share_one_gpu_only_under_the_functional_test_switch(workdir):
    """Two ranks on one GPU measure contention and are refused; COMMBENCH_SHARED_GPU=1 lets them run
    for correctness (each its own NCCL host), named in the header and the result file."""
    out = os.path.join(workdir, "shared.json")
    args = ["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl,ring", "--sizes", "1K,64K", "--budget-ms", "10"]
    r = commbench([*args, "-o", out], env=emu_env(1), cwd=workdir)
    assert r.returncode == 2 and "ranks 0 and 1 on host" in r.stderr and not os.path.exists(out), r.stderr
    r = commbench([*args, "-o", out], env=emu_env(1, COMMBENCH_SHARED_GPU="1"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "# shared GPU: 2 ranks on 1 GPU(s)" in r.stdout and "# fit:" not in r.stdout
    doc = results.load_document(out)
    cfg = doc["config"]
    assert cfg["shared_gpu"] is True and len({g["uuid"] for g in cfg["gpus"]}) == 1 and len(cfg["gpus"]) == 2
    assert all(row["wrong"] == 0 for row in doc["results"])


def test_scale_on_ranks_sharing_a_gpu_draws_no_verdict(workdir):
    """On one H100, 2 and 3 ranks sharing it read 4.5 ms an all-reduce (NCCL's sockets and the GPU's
    time slices between processes) and scale called that "scaling well": the rank-count
    sub-communicators run, every element exact, and no verdict is drawn, in the table or the file."""
    from commbench.analysis.scaling import SHARED_GPU_VERDICT
    out = os.path.join(workdir, "scale.json")
    r = commbench(["scale", "--device", "cuda", "--np", "3", "--ranks", "1,2,3", "--impl", "nccl", "--sizes", "1K-64K:x8",
                   "--budget-ms", "5", "-o", out], env=emu_env(1, COMMBENCH_SHARED_GPU="1"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert f"# verdict: {SHARED_GPU_VERDICT}" in r.stdout, r.stdout
    doc = results.load_document(out)
    assert [a["verdict"] for a in doc["scale"]] == [SHARED_GPU_VERDICT]
    assert sorted({row["ranks"] for row in doc["results"]}) == [1, 2, 3] and all(row["wrong"] == 0 for row in doc["results"])


@pytest.mark.parametrize("bound", [True, False])
def test_one_gpu_per_rank_on_a_multi_gpu_host_is_warned_of(bound, tmp_path):
    """Defect 7: per-rank binding (each rank's CUDA_VISIBLE_DEVICES names one GPU, as
    --gpus-per-task=1 does) can cost NCCL its NVLink path: the run says so; every GPU visible to every
    rank does not."""
    wrapper = tmp_path / "bind.sh"
    wrapper.write_text("#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK\nexec \"$@\"\n")
    wrapper.chmod(0o755)
    out = str(tmp_path / "bound.json")
    command = [COMMBENCH, "allreduce", "--device", "cuda", "--impl", "nccl", "--sizes", "1K", "--budget-ms", "10",
               "-o", out]
    r = subprocess.run([MPIRUN, *own_session(), "--np", "2", "--oversubscribe", *([str(wrapper)] if bound else []), *command],
                       capture_output=True, text=True, timeout=120, env=emu_env(2))
    assert r.returncode == 0, r.stderr
    said = "warning: every rank sees one GPU of a host with 2" in r.stdout + r.stderr
    assert said == bound
    assert ("binding_warning" in results.load_document(out)["config"]) == bound


def test_the_gpu_tests_pass_in_exclusive_process_compute_mode(tmp_path):
    """Defect 10: on a GPU in EXCLUSIVE_PROCESS mode one process at a time may hold a context. The
    GPU tests that drive commbench._cuda directly run in a process of their own, so the ranks that the
    next test starts find the GPU free (the emulated runtime enforces the mode)."""
    r = bounded([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                 f"--basetemp={tmp_path}", "-m", "gpu", os.path.join(ROOT, "tests", "test_gpu.py"),
                 "-k", "matches_torch or graph_mode or copy_mode"], HUNG_S,
                env=emu_env(2, COMMBENCH_EMU_COMPUTE_MODE="exclusive-process"))
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:]


@pytest.mark.parametrize("name", [c.name for c in all_collectives()])
def test_the_exact_matrix_on_gpus(name, workdir):
    """Every collective by NCCL's call and each of commbench's algorithms over NCCL, every dtype and
    every reduction, in place and out of place, from the last rank where it has a root, on 3 ranks
    at counts they do not divide: every element exact. The tree pipelines over several chunks (--chunk
    16K: 65544 bytes in 5), and NCCL's calls aggregated two to a group (--agg 2), as the hardware suite
    runs them (test_gpu.py at 1M-4M). A step that hangs (a ring step receiving from the wrong
    neighbour passes at 2 ranks and hangs at 3) ends at --timeout 30, not the default 300."""
    from commbench import collectives
    from commbench.transports import impls_for
    coll = collectives.get(name)
    expected = {n for n, i in impls_for(coll, "cuda").items() if i.transport.name == "nccl"}
    place = ["--place", "both"] if coll.in_place else []  # both placements in one run
    out = os.path.join(workdir, f"{name}.json")
    r = commbench([name, "--device", "cuda", "--np", "3", "--dtype", "all", *(["--op", "all"] if coll.reduces else []),
                   *place, *(["--root", "2"] if coll.rooted else []), "--sizes", "8,1000,65544", "--iters", "3",
                   "--warmup", "1", *(["--chunk", "16K"] if coll.pipelined else []), "--agg", "2", "--timeout", "30",
                   "-o", out], env=emu_env(3), cwd=workdir)
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert set(df["impl"]) == expected and (df["wrong"] == 0).all() and len(set(df["dtype"])) == 6
    assert set(df["in_place"]) == ({False, True} if coll.in_place else {False})
    assert not coll.reduces or len(set(df["redop"])) == 4


_MPI_ON_GPU = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    from commbench import _host, collectives
    from commbench.launch.world import World
    from commbench.run.collective import run_collective
    from commbench.run.config import RunConfig
    from commbench.transports import Impl, impls_for

    class Copy(Impl):  # the MPI library's all-reduce of one rank, on GPU buffers: its input
        def rank_times(self, world, coll, send, recv, op, iters, cfg, agg=1, delayed=False, loop=1, gated=True):
            recv[:] = send.to_numpy()
            return np.full((1, iters), 1e-5)

    _host.mpi_cuda_aware = lambda: True  # a CUDA-aware MPI, as far as the transport asks
    world = World(rank=0, size=1, hosts=["h"], launcher="local", comm=MPI.COMM_SELF)
    coll = collectives.get("allreduce")
    cfg = RunConfig(op="allreduce", impls=("mpi",), sizes=(4096, 65536), device="cuda", dtype="float32,int64")
    mpi = impls_for(coll, "cuda")["mpi"]
    mpi.prepare(world, cfg)
    print(run_collective(world, cfg, coll, [Copy(mpi.transport, None, "one rank's all-reduce")], None), world.device)
""")


def test_an_mpi_run_on_gpu_buffers_makes_no_nccl_communicator(tmp_path):
    """Defect 13: a run of the MPI library's calls on GPU buffers made a NCCL communicator only to fill
    and check its data; the pattern's kernels need none. (The MPI call itself is stood in for: no
    CUDA-aware MPI is at hand.)"""
    log = tmp_path / "nccl.log"
    r = subprocess.run([sys.executable, "-c", _MPI_ON_GPU], capture_output=True, text=True, timeout=120,
                       env=emu_env(1, COMMBENCH_EMU_NCCL_LOG=str(log)))
    assert r.returncode == 0 and r.stdout.split() == ["0", "0"], r.stdout + r.stderr
    assert not log.exists(), log.read_text()


def test_an_asynchronous_nccl_error_ends_the_run_in_one_line(workdir, tmp_path):
    """NCCL's asynchronous error (injected on rank 1 in its 30th group): every rank ends with one line
    in NCCL's words, the rows before kept; the communicator in error is aborted, not destroyed (NCCL's
    destroy of one returns at once with its group left open on the thread, and the emulated NCCL logs
    no end of it)."""
    out, log = os.path.join(workdir, "async.json"), tmp_path / "nccl.log"
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K-4K:+8", "--iters", "5",
                   "--warmup", "1", "--timeout", "10", "-o", out],
                  env=emu_env(2, COMMBENCH_EMU_NCCL_FAULT="error:1:30", COMMBENCH_EMU_NCCL_LOG=str(log)),
                  cwd=workdir, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "unhandled system error" in lines[0] and "injected failure" in lines[0] and \
        "NCCL communicator aborted" in lines[0], lines
    doc = results.load_document(out)
    assert doc["results"] and doc["status"] != "running"
    ended = [line.split() for line in log.read_text().splitlines() if line.split()[0] in ("destroy", "abort")]
    assert [(how, blocking) for how, _, rank, _, blocking in ended if rank == "1"][-1] == ("abort", "blocking"), ended


@pytest.mark.parametrize("case", ["one host", "shared GPU", "user's log"])
def test_the_transports_nccl_chose_are_recorded(case, workdir):
    """Defect 7: which transport NCCL took for each connection (its INFO log's "via ..." in NCCL's own
    line formats), summed over the ranks into the result file and the summary: shared memory between
    the GPUs of one host (a line without a connection index), the network between ranks that are hosts
    of their own (a [send] and a [receive] line per connection, counted once); a user's own NCCL_DEBUG
    is left alone and then nothing is recorded. No log file is left behind."""
    out = os.path.join(workdir, "t.json")
    tmp = os.path.join(workdir, "tmp")  # the ranks' temporary folder: no other test's logs in it
    os.mkdir(tmp)
    env = {"one host": emu_env(3, TMPDIR=tmp), "shared GPU": emu_env(1, TMPDIR=tmp, COMMBENCH_SHARED_GPU="1"),
           "user's log": emu_env(3, TMPDIR=tmp, NCCL_DEBUG="WARN")}[case]
    r = commbench(["allreduce", "--device", "cuda", "--np", "3", "--impl", "nccl,ring", "--sizes", "1K", "--budget-ms", "10",
                   "-o", out], env=env, cwd=workdir)
    assert r.returncode == 0, r.stderr
    recorded = results.load_document(out).get("nccl_transports")
    if case == "user's log":
        assert recorded is None and "NCCL's transports" not in r.stdout
    else:
        # 3 ranks, each connected to both others
        transport = "SHM/direct/direct" if case == "one host" else "NET/Socket/0"
        assert recorded == {transport: 6}
        assert f"# NCCL's transports (connections): {transport} 6" in r.stdout
    assert os.listdir(tmp) == []


@pytest.mark.parametrize("command", [
    ["allreduce", "--device", "cuda", "--impl", "nccl", "--sizes", "1K", "--budget-ms", "10"],
    ["p2p", "--impl", "nccl", "--sizes", "1K", "--budget-ms", "10"],
    ["links", "--impl", "nccl", "--bandwidth-size", "1K", "--budget-ms", "10"],
    ["scale", "--device", "cuda", "--impl", "nccl", "--ranks", "1,2", "--sizes", "1K", "--budget-ms", "10"],
    ["numerics", "--device", "cuda", "--impl", "nccl", "--ranks", "1,2", "--count", "64"]], ids=lambda c: c[0])
def test_every_nccl_command_records_nccl_s_channels(command, workdir):
    """NCCL's INIT line of its channel counts ("8 coll channels, ..., 8 p2p channels per peer": one host,
    every p2p channel to each peer), read from every rank's log into the result file, by every command
    that runs NCCL; and the summary line where the command prints one."""
    out = os.path.join(workdir, "c.json")
    r = commbench([*command, "--np", "2", "-o", out], env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    assert doc["nccl_channels"] == {"coll": 8, "collnet": 8, "nvls": 0, "p2p": 8, "p2p_per_peer": 8}
    if command[0] != "numerics":
        assert "# NCCL's channels: 8 for collectives, 8 for point-to-point, 8 to each peer" in r.stdout


@pytest.mark.parametrize("fault", ["timeout", "failure"])
def test_a_failed_run_leaves_no_nccl_log_behind(fault, workdir):
    """NCCL's log of connections, asked for in a temporary file of each rank, goes however the run
    ends: a watchdog's ending (os._exit) and a failure's MPI abort skip Python's atexit."""
    tmp = os.path.join(workdir, "tmp")
    os.mkdir(tmp)
    # The ring's reduction kernel fails to launch after NCCL's own call made and logged its connections.
    args = {"timeout": ["--impl", "nccl", "--timeout", "2", "--delay", "1:4000000"], "failure": ["--impl", "nccl,ring"]}
    env = emu_env(2, TMPDIR=tmp, **({"COMMBENCH_EMU_FAIL_LAUNCH": "reduce kernel"} if fault == "failure" else {}))
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--sizes", "1K", "--iters", "3", *args[fault],
                   "-o", os.path.join(workdir, "r.json")], env=env, cwd=workdir)
    assert r.returncode != 0, r.stdout + r.stderr
    assert os.listdir(tmp) == [], r.stderr


def test_what_nccl_warned_of_before_its_error_is_in_the_error(workdir):
    """NCCL warns of a failure's cause and remedy (NCCL_NVLS_ENABLE=0) before the error it returns,
    whose text holds only its last warning: the earlier ones reach the line and the file too (the
    emulated NCCL warns so before its injected failure)."""
    out = os.path.join(workdir, "e.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "1K,2K", "--iters", "3",
                   "-o", out], env=emu_env(2, COMMBENCH_EMU_NCCL_FAULT="error:1:3"), cwd=workdir)
    said = "NCCL warned: the injected fault's cause, on rank 1 (set COMMBENCH_EMU_NCCL_FAULT= to disable it)"
    assert r.returncode == 1 and said in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert said in results.load_document(out)["error"]


CUDA_AWARE_MPI = os.path.join(ROOT, "build", "emu", "libcommbench_emu_mpi.so")


@pytest.mark.parametrize("name", [c.name for c in all_collectives()])
def test_the_mpi_librarys_calls_on_gpu_buffers(name, workdir):
    """`--impl mpi --device cuda` under the emulated CUDA-aware MPI (tests/emu/src/cuda_aware_mpi.c: the
    MPI calls reach device memory, host code still may not): every dtype and reduction, both
    placements, exact. Defect 9: a host memcpy of the broadcast root's input or of the in-place
    reduce-scatter's result faulted here."""
    from commbench import collectives
    coll = collectives.get(name)
    place = ["--place", "both"] if coll.in_place else []  # both placements in one run
    out = os.path.join(workdir, f"{name}.json")
    r = commbench([name, "--device", "cuda", "--impl", "mpi", "--np", "3", "--dtype", "all",
                   *(["--op", "all"] if coll.reduces else []), *place, *(["--root", "2"] if coll.rooted else []),
                   "--sizes", "8,1000,65544", "--iters", "3", "--warmup", "1", "-o", out],
                  env=emu_env(3, LD_PRELOAD=CUDA_AWARE_MPI), cwd=workdir)
    assert r.returncode == 0, r.stderr[-2000:]
    df = results.load(out)
    assert set(df["impl"]) == {"mpi"} and (df["wrong"] == 0).all() and len(set(df["dtype"])) == 6
    assert set(df["in_place"]) == ({False, True} if coll.in_place else {False})


# The emulated NCCL's documented choice (tests/emu/src/nccl.cpp, docs/testing.md): all-reduce on 3 ranks
# or more below 64 KiB by Tree, else Ring; LL below 64 KiB, LL128 below 1 MiB, Simple above; 1, 4, 8
# channels with them.
EMULATED_CHOICE = {4096: ("TREE", "LL", 1), 262144: ("RING", "LL128", 4), 2097152: ("RING", "SIMPLE", 8)}


def test_nccls_choice_is_recorded_per_size_as_nccl_reports_it(workdir):
    """NCCL hands each collective's algorithm, protocol and channels to a profiler plugin
    (NCCL_PROFILER_PLUGIN); commbench's (csrc/profiler) gives them to the record of NCCL's call
    (nccl_choice), the table's algo/proto column and export. Our algorithms over NCCL choose nothing
    of NCCL's; NCCL runs all-to-all as sends and receives."""
    out = os.path.join(workdir, "ar.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "3", "--impl", "nccl,ring", "--sizes", "4K,256K,2M",
                   "--iters", "5", "-o", out], env=emu_env(3), cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    got = {(x["impl"], x["size_bytes"]): x.get("nccl_choice") for x in doc["results"]}
    assert {size: got[("nccl", size)] for size in EMULATED_CHOICE} == \
        {size: {"algo": a, "proto": p, "channels": c} for size, (a, p, c) in EMULATED_CHOICE.items()}
    assert all(got[("ring@nccl", size)] is None for size in EMULATED_CHOICE)
    for printed in (r.stdout, commbench(["export", out, "--format", "console"], cwd=workdir).stdout):
        nccl_block, ring_block = printed.split("# impl nccl")[1].split("# impl ring@nccl")
        assert nccl_block.splitlines()[1].split()[-1] == "algo/proto" and "algo/proto" not in ring_block
        rows = [line.split() for line in nccl_block.splitlines()[1:] if line and not line.startswith("#")]
        assert [(int(row[0]), row[-1]) for row in rows] == [(s, f"{a}/{p}") for s, (a, p, _) in EMULATED_CHOICE.items()]
    csv = commbench(["export", out, "--format", "csv"], cwd=workdir).stdout.splitlines()
    assert {"nccl_choice_algo", "nccl_choice_proto", "nccl_choice_channels"} <= set(csv[0].split(","))
    out = os.path.join(workdir, "a2a.json")
    r = commbench(["alltoall", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "4K", "--iters", "3",
                   "-o", out], env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stderr
    [rec] = results.load_document(out)["results"]
    assert "nccl_choice" not in rec and r.stdout.split("# impl nccl")[1].splitlines()[3].split()[-1] == "p2p"


@pytest.mark.parametrize("timing", ["per-iteration", "loop"])
def test_nccls_choice_under_agg_is_the_aggregated_groups(timing, workdir):
    """NCCL chooses for a group's collectives on their bytes together: --agg 4 of 32 KiB all-reduces
    run as 128 KiB do (LL128 on 4 channels, where one call alone takes LL on 1). The record carried
    the single call's choice from the size's check, not the one its timed calls ran."""
    out = os.path.join(workdir, "agg.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--agg", "4", "--sizes", "32K",
                   "--iters", "3", "--timing", timing, "-o", out], env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stderr
    [rec] = results.load_document(out)["results"]
    assert rec["agg"] == 4 and rec["nccl_choice"] == {"algo": "RING", "proto": "LL128", "channels": 4}, rec


def test_an_nccl_that_reports_no_choice_at_all_is_warned_of(workdir):
    """An NCCL that loads commbench's plugin without calling it (2.26 and older ask for interfaces it
    does not offer, COMMBENCH_EMU_NCCL_PROFILER=none): the records carried no choice, and nothing said
    why."""
    out = os.path.join(workdir, "ar.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "4K,64K", "--iters", "3",
                   "-o", out], env=emu_env(2, COMMBENCH_EMU_NCCL_PROFILER="none"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "warning: NCCL reported no choice to commbench's profiler plugin: NCCL older than 2.27 offers no " \
           "interface the plugin has, or NCCL did not load it" in r.stderr, r.stderr
    assert all("nccl_choice" not in rec for rec in results.load_document(out)["results"])


def test_a_profiler_plugin_of_the_users_keeps_its_place(workdir):
    """NCCL loads one profiler plugin: where NCCL_PROFILER_PLUGIN names the user's, it stays, and the
    run says that NCCL's choices are not recorded."""
    out = os.path.join(workdir, "ar.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "2", "--impl", "nccl", "--sizes", "4K", "--iters", "3",
                   "-o", out], env=emu_env(2, NCCL_PROFILER_PLUGIN="none"), cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "# note: NCCL_PROFILER_PLUGIN names the user's own profiler plugin: NCCL's choices are not recorded" \
        in r.stdout.splitlines()
    [rec] = results.load_document(out)["results"]
    assert "nccl_choice" not in rec and r.stdout.split("# impl nccl")[1].splitlines()[3].split()[-1] == "-"


def test_forced_algorithms_and_protocols_are_measured_beside_nccls_default(workdir):
    """--nccl-algo and --nccl-proto: every combination of the values given, each on a communicator of
    its own split with NCCL_ALGO and NCCL_PROTO set (NCCL reads them at each initialisation), beside
    NCCL's unforced default; each variant's records carry what was forced, and NCCL's report of what it
    ran agrees. A summary puts the default beside the best forced combination at each size."""
    out = os.path.join(workdir, "v.json")
    r = commbench(["allreduce", "--device", "cuda", "--np", "3", "--impl", "nccl", "--nccl-algo", "Ring,TREE",
                   "--nccl-proto", "ll,simple", "--sizes", "4K,2M", "--iters", "3", "-o", out], env=emu_env(3),
                  cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    assert doc["config"]["nccl_variants"] == [{"nccl_algo": a, "nccl_proto": p} for a in ("ring", "tree")
                                              for p in ("ll", "simple")]
    by = {(x.get("nccl_algo"), x.get("nccl_proto"), x["size_bytes"]): x for x in doc["results"]}
    assert len(by) == 10 and all(x["impl"] == "nccl" and x["wrong"] == 0 for x in by.values())
    for (algo, proto, size), x in by.items():
        expected = EMULATED_CHOICE[4096 if size == 4096 else 2097152] if algo is None else \
            (algo.upper(), proto.upper(), {"ll": 1, "simple": 8}[proto])
        assert (x["nccl_choice"]["algo"], x["nccl_choice"]["proto"], x["nccl_choice"]["channels"]) == expected, x
    assert "# impl nccl algo=tree proto=simple: NCCL's call with NCCL_ALGO=tree, NCCL_PROTO=simple" in r.stdout
    summary = r.stdout.split("# NCCL's default against the best forced choice: allreduce nccl (3 ranks)\n")[1]
    lines = summary.splitlines()[:2]
    for line, size in zip(lines, (4096, 2097152)):
        default = by[(None, None, size)]["time_us"]["median"]
        best = min((x for (a, _, s), x in by.items() if a and s == size), key=lambda x: x["time_us"]["median"])
        assert line.startswith(f"#   {'4K' if size == 4096 else '2M'}: default ({'/'.join(EMULATED_CHOICE[size][:2])}) "
                               f"{default:.2f} us, best algo={best['nccl_algo']} proto={best['nccl_proto']}"), line
        assert line.endswith(f"default slower by {100 * (default / best['time_us']['median'] - 1):.0f} %") == \
            (default > 1.1 * best["time_us"]["median"]), line


def test_a_combination_nccl_refuses_is_reported_and_the_rest_measured(workdir):
    """NCCL serves all-gather by no Tree (all-reduce alone has one) and the emulation has no NVLS: those
    variants' calls fail on every rank with NCCL's warning, which the run reports (and the file keeps,
    nccl_refused) while it measures the others."""
    out = os.path.join(workdir, "v.json")
    r = commbench(["allgather", "--device", "cuda", "--np", "2", "--impl", "nccl", "--nccl-algo", "tree,ring",
                   "--sizes", "4K", "--iters", "3", "-o", out], env=emu_env(2), cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    said = "No algorithm/protocol available for function AllGather with datatype ncclFloat32. NCCL_ALGO was set to tree"
    assert doc["nccl_refused"] == {"nccl algo=tree": said} and doc["status"] == "complete"
    assert f"# note: nccl algo=tree: NCCL refuses it: {said}" in r.stdout.splitlines()
    assert sorted(str(x.get("nccl_algo")) for x in doc["results"]) == ["None", "ring"]
    # The environment forcing NCCL already would leave no default to compare with.
    r = commbench(["allgather", "--device", "cuda", "--np", "2", "--impl", "nccl", "--nccl-algo", "ring", "--sizes", "4K",
                   "-o", os.path.join(workdir, "x.json")], env=emu_env(2, NCCL_ALGO="ring"), cwd=workdir)
    assert (r.returncode, r.stderr) == (2, "commbench: error: NCCL_ALGO=ring is set: impl nccl would not be NCCL's own "
                                           "choice beside the forced ones of --nccl-algo; unset NCCL_ALGO\n")
    assert not os.path.exists(os.path.join(workdir, "x.json"))
