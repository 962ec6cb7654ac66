"""Faults: a dead (kill -9) or stopped (SIGSTOP) rank, or an interrupted run, ends every rank within
--timeout and a few seconds, with one line naming the size and the rank, exit 1, the rows measured
before kept in a valid result file whose status says what happened, and no process left."""

import contextlib
import glob
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import (
    COMMBENCH,
    MPIRUN,
    commbench,
    error_lines,
    free_port,
    left_behind,
    mpi_env,
    own_session,
    rank_faults_env,
    rank_pids,
    room,
    torchrun_env,
    wait_for_rows,
)

from commbench.accept import runner
from commbench.launch import startup
from commbench.launch.events import EVENTS_NAME
from commbench.launch.world import SESSION_BASE
from commbench.results import document as results
from commbench.sizes import parse_sizes

TIMEOUT_S = 2
# --timeout bounds one size (its check, warm-up and timed calls): 50 calls of a gloo all-reduce across
# the test cluster's shaped links take about 0.1-0.5 s even with a second cluster's test beside it
# (200 took past 2 s), and 385 sizes keep the run going long after the fault.
# Many small sizes and a fixed count of iterations: a sweep that lasts, made of cheap sizes.
SWEEP = ["allreduce", "--device", "cpu", "--impl", "ring", "--sizes", "1K-4K:+8", "--iters", "50", "--warmup", "1",
         "--timeout", str(TIMEOUT_S)]
# The same on (emulated) GPUs, NCCL's all-reduce: a rank ends in the middle of a NCCL collective.
GPU_SWEEP = ["allreduce", "--device", "cuda", "--impl", "nccl", *SWEEP[5:]]


def _env(device: str, **extra) -> dict:
    """mpi_env(), with three emulated GPUs a host for the GPU sweep (tests/emu)."""
    env = {**mpi_env(), **extra}
    if device == "cuda":
        env["COMMBENCH_GPU_EMULATION"] = "3"
    return env


@pytest.mark.parametrize("launch", ["standalone", "mpirun"])
@pytest.mark.parametrize("fault,device", [("kill", "cpu"), ("stop", "cpu"), ("interrupt", "cpu"),
                                          pytest.param("kill", "cuda", marks=pytest.mark.gpu),
                                          pytest.param("stop", "cuda", marks=pytest.mark.gpu)])
def test_a_fault_ends_every_rank_with_one_line_and_keeps_the_rows(launch, fault, device, workdir):
    out = os.path.join(workdir, f"{fault}-{launch}.json")
    args = [*(SWEEP if device == "cpu" else GPU_SWEEP), "-o", out]
    argv = ([COMMBENCH, *args, "--np", "3"] if launch == "standalone" else
            [MPIRUN, *own_session(), "--np", "3", "--oversubscribe", "--bind-to", "none", COMMBENCH, *args])
    tmp = os.path.join(workdir, "tmp")  # the ranks' temporary folder: NCCL's logs would be left in it
    os.mkdir(tmp)
    p = subprocess.Popen(argv, env=_env(device, TMPDIR=tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        wait_for_rows(out, p)
        ranks = rank_pids(out)
        assert sorted(ranks) == [0, 1, 2]
        t = time.monotonic()
        if fault == "kill":
            os.kill(ranks[2], signal.SIGKILL)
        elif fault == "stop":
            os.kill(ranks[2], signal.SIGSTOP)
        else:  # Ctrl-C reaches the command; a user's mpirun gets SIGTERM from its job's end
            os.kill(p.pid, signal.SIGINT if launch == "standalone" else signal.SIGTERM)
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
        elapsed = time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert elapsed < room(TIMEOUT_S + 5), elapsed
    doc = results.load_document(out)
    assert doc["results"], "the rows measured before are kept"
    status = {"kill": "peer-lost", "stop": "timeout", "interrupt": "interrupted"}[fault]
    assert doc["status"] == status, doc["error"]
    assert doc["error"].startswith("allreduce ring@mpi " if device == "cpu" else "allreduce nccl ")
    if fault == "kill":
        assert "rank 2 did not arrive: its process ended" in doc["error"]
    elif fault == "stop":
        assert f"rank 2 did not arrive within --timeout {TIMEOUT_S} s" in doc["error"]
    else:
        assert "interrupted" in doc["error"]
    lines = [line for line in err.splitlines() if line.startswith("commbench: error")]
    if launch == "standalone":
        assert p.returncode == 1
        assert lines == [f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
        assert err.splitlines()[-1] == lines[0], err  # the launch's own mpirun says nothing after it
    else:
        # mpirun's own status: the first failed process's (docs/launching.md); a signalled mpirun
        # stops relaying its ranks' output.
        assert p.returncode in ((137, 1) if fault == "kill" else (1,)) if fault != "interrupt" else p.returncode != 0, \
            p.returncode
        assert len(lines) <= 1 and (fault == "interrupt" or lines), err
    time.sleep(0.5)
    assert left_behind(out) == []
    assert os.listdir(tmp) == []


@pytest.mark.gpu
def test_a_rank_killed_in_nccl_initialisation_ends_every_rank(workdir):
    """kill -9 of a rank that the emulated NCCL holds in its initialisation: the others, waiting in
    theirs, end at once with one line, and the result file says so."""
    out = os.path.join(workdir, "init.json")
    p = subprocess.Popen([COMMBENCH, *GPU_SWEEP, "--np", "3", "-o", out], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=_env("cuda", COMMBENCH_EMU_NCCL_FAULT="init-stall:2"))
    try:
        until = time.monotonic() + 60
        while len(rank_pids(out)) < 3 or not os.path.exists(out):
            assert time.monotonic() < until and p.poll() is None, "".join(p.communicate())
            time.sleep(0.1)
        time.sleep(0.5)  # every rank in its initialisation
        os.kill(rank_pids(out)[2], signal.SIGKILL)
        t = time.monotonic()
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
        elapsed = time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert elapsed < room(TIMEOUT_S + 5) and p.returncode == 1, err
    doc = results.load_document(out)
    assert doc["status"] == "peer-lost" and doc["error"] == "NCCL initialisation: rank 2 did not arrive: its process ended"
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == \
        [f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


KILLED = {"allreduce": [*SWEEP, "--np", "3"],
          "links": ["links", "--np", "3", "--timeout", "5"],
          # (one case takes about 2 s alone, past 20 s on a loaded CI machine; the kill, not the
          # timeout, ends the run, so a generous one costs nothing)
          "numerics": ["numerics", "--device", "cpu", "--ranks", "2", "--impl", "ring,tree", "--dtype", "float32,float64",
                       "--count", "256K", "--repeats", "500", "--timeout", "120"]}


@pytest.mark.parametrize("command", list(KILLED))
def test_the_ranks_end_with_a_killed_command(command, workdir):
    """kill -9 of the command a user typed (the standalone parent, which can pass nothing on): its
    mpirun passes the news on to every rank (SIGUSR1), rank 0 closes the file as interrupted, and
    mpirun ends with them, its session folder gone; numerics' rank 0 was aborted by Open MPI before it
    could, when mpirun itself was ended first."""
    out = os.path.join(workdir, "orphans.json")
    p = subprocess.Popen([COMMBENCH, *KILLED[command], "-o", out], env=mpi_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, p, rows=lambda doc: doc["results"] or (doc.get("numerics") or {}).get("rows"))
        ranks = rank_pids(out)
        assert sorted(ranks) == list(range(2 if command == "numerics" else 3))
        [mpirun] = [pid for pid in {int(pid) for pid in left_behind(out)} - {p.pid, *ranks.values()}
                    if _command_name(pid) in ("mpirun", "prterun")]
        with open(f"/proc/{mpirun}/environ", "rb") as f:
            base = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)[SESSION_BASE.encode()].decode()
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        until = time.monotonic() + TIMEOUT_S + 10
        while left_behind(out) and time.monotonic() < until:
            time.sleep(0.2)
        assert left_behind(out) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the parent's group; mpirun and the ranks have their own
        for pid in left_behind(out):
            os.kill(int(pid), signal.SIGKILL)
    doc = results.load_document(out)
    assert doc["status"] == "interrupted", (doc["status"], doc.get("error"))
    assert doc["error"].endswith(": interrupted (the command that launched the ranks ended)"), doc["error"]
    # mpirun removed its session folder; the launch's own, holding the ranks' events alone, the next
    # launch removes (another test's, running beside this one, may have been first, or be removing it).
    assert not os.path.exists(base) or os.listdir(base) in ([], [EVENTS_NAME]), os.listdir(base)
    if command != "allreduce":
        return  # the same folder whatever the command: one next launch tells
    r = commbench(["allreduce", "--device", "cpu", "--impl", "ring", "--np", "2", "--sizes", "1K", "--iters", "2", "--warmup",
                   "1", "-o",
                   os.path.join(workdir, "next.json")])
    assert r.returncode == 0 and not os.path.exists(base), r.stderr


def test_a_launch_killed_whole_leaves_its_folders_to_the_next_launch(workdir):
    """The command, its mpirun and its ranks SIGKILLed at once (a job's end, the OOM killer, a cgroup's
    kill): mpirun's session folder (`ompi.<pid>`) stayed in the launch's folder, and no later launch
    removed it, as it removes one holding rank 0's notes alone. Nor the temporary file of the result
    file that rank 0 was rewriting (2 runs in 25 of a command SIGKILLed after the last row): the
    next launch removes it where its writer no longer runs."""
    out = os.path.join(workdir, "whole.json")
    p = subprocess.Popen([COMMBENCH, *SWEEP, "--np", "2", "-o", out], env=mpi_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, p)
        # as rank 0 leaves one killed mid-write (results/atomic.py's name), and one of a writer still alive
        dead, alive = (os.path.join(workdir, f".whole.{pid}-abc123.partial.json") for pid in (rank_pids(out)[0], os.getpid()))
        for left in (dead, alive):
            with open(left, "w") as f:
                f.write('{"sch')
        [mpirun] = [int(pid) for pid in left_behind(out) if _command_name(int(pid)) in ("mpirun", "prterun")]
        with open(f"/proc/{mpirun}/environ", "rb") as f:
            base = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)[SESSION_BASE.encode()].decode()
        for pid in left_behind(out):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        p.communicate(timeout=30)
        until = time.monotonic() + 10
        while left_behind(out) and time.monotonic() < until:
            time.sleep(0.1)
    finally:
        for pid in left_behind(out):
            os.kill(int(pid), signal.SIGKILL)
    assert f"ompi.{mpirun}" in os.listdir(base), os.listdir(base)
    r = commbench(["allreduce", "--device", "cpu", "--impl", "ring", "--np", "2", "--sizes", "1K", "--iters", "2", "--warmup",
                   "1", "-o",
                   os.path.join(workdir, "next.json")])
    assert r.returncode == 0 and not os.path.exists(base), (r.stderr, os.listdir(base))
    assert not os.path.exists(dead) and os.path.exists(alive)


def _command_name(pid: int) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
        return f.read().strip()
    return ""


@pytest.mark.parametrize("fault", ["kill", "stop", "interrupt"])
def test_a_fault_under_torchrun_style_gloo_ends_every_rank(fault, workdir):
    """No launcher to end the rest here: each rank's own watchdog does. A stopped rank leaves once
    resumed."""
    out = os.path.join(workdir, f"{fault}-gloo.json")
    args = [*SWEEP, "--impl", "gloo", "-o", out]
    port = free_port()
    procs = [subprocess.Popen([COMMBENCH, *args], env=torchrun_env(rank, 3, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) for rank in range(3)]
    try:
        wait_for_rows(out, procs[0])
        t = time.monotonic()
        if fault == "kill":
            os.kill(procs[2].pid, signal.SIGKILL)
        elif fault == "stop":
            os.kill(procs[2].pid, signal.SIGSTOP)
        else:  # Ctrl-C in the terminal reaches every rank
            for p in procs:
                os.kill(p.pid, signal.SIGINT)
        ends = [p.communicate(timeout=TIMEOUT_S + 30) for p in procs[:2]]
        elapsed = time.monotonic() - t
        if fault == "stop":
            os.kill(procs[2].pid, signal.SIGCONT)
        procs[2].communicate(timeout=TIMEOUT_S + 10)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert elapsed < room(TIMEOUT_S + 5), elapsed
    assert [p.returncode for p in procs[:2]] == [1, 1]
    doc = results.load_document(out)
    assert doc["results"]
    status = {"kill": "peer-lost", "stop": "timeout", "interrupt": "interrupted"}[fault]
    assert doc["status"] == status, doc["error"]
    assert doc["error"].startswith("allreduce gloo ")
    if fault != "interrupt":
        assert "rank 2 did not arrive" in doc["error"]
    assert [line for _, err in ends for line in error_lines(err)] == \
        [f"commbench: error: {doc['error']} (measured rows kept in {out})"], ends
    assert left_behind(out) == []


def _signal_amid_the_sweep(out: str, env: dict, rank: int, signum: int) -> tuple[int, str]:
    """The standalone sweep on 3 ranks writing `out`, `signum` sent to `rank` once a row is in: the
    command's exit status and stderr."""
    p = subprocess.Popen([COMMBENCH, *SWEEP, "-o", out, "--np", "3"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, p)
        os.kill(rank_pids(out)[rank], signum)
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return p.returncode, err


@pytest.mark.parametrize("rank_1", ["says its line", "killed before its line"])
def test_a_killed_rank_0_leaves_its_file_closed_by_the_launch(rank_1, workdir):
    """Rank 0 owns the result file: SIGKILLed, it cannot close it, and the file said `running` for
    ever. The standalone launch, once every rank ended, closes a file its rank 0 left so (peer-lost,
    rows kept) with what rank 1 said for it, its one line (the command added a second one). mpirun,
    which saw rank 0 die, may kill rank 1 between its words and its line (once in a loaded first
    pass): the command says that line then."""
    out = os.path.join(workdir, "kill0.json")
    env = _env("cpu") if rank_1 == "says its line" else rank_faults_env(COMMBENCH_STUB_KILLED_AFTER_SPEAKING="1")
    code, err = _signal_amid_the_sweep(out, env, 0, signal.SIGKILL)
    doc = results.load_document(out)
    assert code != 0 and doc["results"] and doc["status"] == "peer-lost", (doc["status"], err)
    assert re.fullmatch(r"allreduce ring@mpi \d+: rank 0 did not arrive: its process ended", doc["error"]), doc["error"]
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error on rank 1: {doc['error']}"], err
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_rank_0_killed_as_it_reports_a_lost_rank_leaves_that_rank_named(workdir):
    """The launcher that saw a rank die sends the others SIGTERM, and SIGKILL a quarter of a second
    later: a rank 0 still gathering the news (half a second) died unheard (numerics, 2 runs in 10),
    its file left `running`, and the command's line blamed rank 0. Rank 0 closes the file at the
    first news now: killed as it reports (tests/stubs/rank_faults), the file names the rank lost and
    the command prints its error, the one line."""
    out = os.path.join(workdir, "kill-at-report.json")
    code, err = _signal_amid_the_sweep(out, rank_faults_env(COMMBENCH_STUB_KILLED_AT_REPORT="1"), 2, signal.SIGKILL)
    doc = results.load_document(out)
    assert code == 1 and doc["status"] == "peer-lost" and doc["results"], (doc["status"], err)
    assert doc["error"].startswith("allreduce ring@mpi ") and "rank 2 did not arrive: its process ended" in doc["error"], doc
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_rank_0_resumed_past_its_deadline_closes_its_file_as_the_timeout_it_missed(workdir):
    """Rank 0 stopped amid a size: rank 1 says the size timed out, rank 0 not answering, and the
    launch ends the job, resuming rank 0 (SIGCONT, then SIGTERM). Rank 0 then finds the SIGTERM, rank
    1's report and its deadline long past: its file said `interrupted (SIGTERM)`, or named the ranks
    it had not heard from while it was stopped. It says what rank 1 said, or that it did not run for
    the time it was stopped; where Open MPI ends it first (a peer's connection closed), the command
    closes the file with rank 1's words. The one line is rank 1's, or rank 0's own where mpirun passes
    the resumed rank 0's line on before rank 1's (it reads their pipes in no set order): the file's."""
    out = os.path.join(workdir, "stop0.json")
    p = subprocess.Popen([COMMBENCH, *SWEEP, "-o", out, "--np", "3"], env=_env("cpu"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, p)
        os.kill(rank_pids(out)[0], signal.SIGSTOP)
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
        until = time.monotonic() + 30
        while left_behind(out) and time.monotonic() < until:
            time.sleep(0.1)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert left_behind(out) == []
    lines = [line for line in err.splitlines() if line.startswith("commbench: error")]
    said = f"did not finish within --timeout {TIMEOUT_S} s; rank 0 did not answer"
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and doc["results"] and doc["error"].startswith("allreduce ring@mpi "), doc
    # Rank 0's own words, or rank 1's where Open MPI ended the resumed rank 0 before it wrote.
    assert doc["error"].endswith(said) or re.search(f"{said}: its process did not run for \\d+ s$", doc["error"]), doc
    assert len(lines) == 1, err
    rank_1s = lines[0].removeprefix("commbench: error on rank 1: ")
    if rank_1s != lines[0]:
        assert rank_1s.startswith("allreduce ring@mpi ") and rank_1s.endswith(said), err
        assert doc["error"].endswith(said) == (doc["error"] == rank_1s), (lines, doc)
    else:
        assert lines[0] == f"commbench: error: {doc['error']} (measured rows kept in {out})", (lines, doc)


# A lost or stopped rank on another host, named through the network; an interrupt names no rank, and
# ends every rank the same way on one host or several (the tests above).
@pytest.mark.cluster
@pytest.mark.parametrize("launch", ["mpirun", "gloo"])
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_fault_on_a_cluster_names_the_rank_of_the_other_host(launch, fault, make_cluster, workdir):
    # The host names resolve to 127.0.1.1 (Debian's default): rank 0 finds the address the other hosts
    # reach for the watchdogs' side channel by itself, or rank 2 could not be named.
    c = make_cluster(3, 400, loopback_names=True)
    out = os.path.join(workdir, f"{fault}-{launch}.json")
    args = [*SWEEP, "-o", out]
    if launch == "mpirun":
        procs = [c.popen([*c.mpirun_prefix(), COMMBENCH, *args], cwd=workdir)]
    else:
        procs = c.spawn_gloo([*args, "--impl", "gloo"], cwd=workdir)
    wait_for_rows(out, procs[0], 120)
    victim = rank_pids(out)[2] if launch == "mpirun" else procs[2].pid
    t = time.monotonic()
    os.kill(victim, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    ends = [p.communicate(timeout=TIMEOUT_S + 30) for p in procs[:2]]
    elapsed = time.monotonic() - t
    if launch == "gloo":
        if fault == "stop":
            os.kill(victim, signal.SIGCONT)
        procs[2].communicate(timeout=TIMEOUT_S + 10)
    assert elapsed < room(TIMEOUT_S + 5), elapsed
    assert all(p.returncode != 0 for p in procs)
    doc = results.load_document(out)
    assert doc["results"]
    told = "".join(err for _, err in ends)
    # Open MPI over TCP aborts a rank whose connection to a peer closed, at once but for the delay the
    # ranks ask for (launch/world.py init_world): rank 0 names rank 2 first.
    assert doc["status"] == {"kill": "peer-lost", "stop": "timeout"}[fault], (doc["error"], told)
    assert ": rank 2 did not arrive" in doc["error"], (doc["error"], told)
    assert [line for _, err in ends for line in error_lines(err)] == \
        [f"commbench: error: {doc['error']} (measured rows kept in {out})"], ends
    time.sleep(0.5)
    assert left_behind(out) == []


# Under a user's mpirun, two ranks a host: a rank of another host killed or stopped is named with its
# host by rank 0's line and its file, which is never left `running`. Open MPI aborts a rank whose TCP
# peer died milliseconds after it did (rank 0 itself, or one whose abort ended the job first): the
# ranks delay that abort (launch/world.py init_world) while rank 0 says it. A host's first rank is
# its watchdog leader: its own loss cuts its host's other rank off (unheard, not known dead), and a
# leader still running must not vouch for a second rank that stopped.
@pytest.mark.cluster
@pytest.mark.parametrize("victim, sig, said", [
    (5, signal.SIGKILL, "peer-lost: rank 5 did not arrive: its process ended"),
    (4, signal.SIGKILL, "peer-lost: rank 4 did not arrive: its process ended; rank 5 did not answer"),
    (5, signal.SIGSTOP, f"timeout: rank 5 did not arrive within --timeout {TIMEOUT_S} s")],
    ids=["second rank killed", "leader killed", "second rank stopped"])
def test_a_rank_of_another_host_is_named_with_its_host(victim, sig, said, make_cluster, workdir):
    c = make_cluster(3, 400, loopback_names=True)
    out = os.path.join(workdir, "remote.json")
    p = c.popen([*c.mpirun_prefix(ranks_per_host=2), COMMBENCH, *SWEEP, "-o", out], cwd=workdir)
    wait_for_rows(out, p, 120)
    pid = rank_pids(out)[victim]
    t = time.monotonic()
    os.kill(pid, sig)
    try:
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - t < room(TIMEOUT_S + 5) and p.returncode != 0, err
    doc = results.load_document(out)
    status, _, text = said.partition(": ")
    assert doc["status"] == status and doc["error"].endswith(f": {text} (host {c.hosts[2].name})"), (doc["error"], err)
    assert error_lines(err) == [f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


# A host that drops its packets mid-run, or loses 30 % of them from the start: the run ends within
# --timeout + 15 s of the fault, with a line naming the host. mpirun waits for ever for the daemon
# of a host that stopped answering, after every rank has ended: accept, which launches the steps,
# stops a launch that outlives its ranks' line (accept/runner.py); a user's mpirun needs the same
# (docs/launching.md).
LOSSY_TIMEOUT_S = 5
HOST = socket.gethostname()


@pytest.mark.cluster
@pytest.mark.mpi
@pytest.mark.parametrize("loss", ["all mid-run", "30 % from the start"])
def test_a_host_that_loses_its_packets_ends_the_run_naming_it(loss, make_cluster, tmp_path):
    c = make_cluster(3, 400)
    lossy = c.hosts[2].name
    (tmp_path / "plan.toml").write_text(
        'description = "one sweep"\nscope = "cluster"\n[[step]]\nname = "sweep"\ncommand = "allreduce"\n'
        f'options = {{ device = "cpu", impl = "ring", sizes = "1K-4K:+8", iters = 50, warmup = 1, '
        f'timeout = {LOSSY_TIMEOUT_S} }}\n')
    if loss != "all mid-run":
        c.lose(2, 30)
    t = time.monotonic()
    p = c.popen([COMMBENCH, "accept", "--plan", str(tmp_path / "plan.toml"), "--launch", shlex.join(c.mpirun_prefix()),
                 "-o", str(tmp_path / "out")], cwd=str(tmp_path))
    if loss == "all mid-run":
        wait_for_rows(str(tmp_path / "out" / HOST / "sweep.json"), p, 120)
        c.lose(2)
        t = time.monotonic()
    _, err = p.communicate(timeout=120)
    elapsed = time.monotonic() - t
    assert p.returncode == 1, err
    with open(tmp_path / "out" / HOST / "sweep.log") as f:
        log = f.read()
    # Rank 0 names the host (a rank that did not arrive, or the packets resent to it); at start-up
    # the host's own first rank names it, as only its kernel knows what it resent.
    named = [line for line in log.splitlines() if line.startswith("commbench: error")
             and (lossy in line or re.search(rf"\b{re.escape(c.hosts[2].addr)}\b", line))]
    assert named, log
    # A size's --timeout, and at start-up the ranks' own deadline (--timeout with a floor:
    # launch/startup.py) after the launcher's start of them (accept's LAUNCH_S); then the step's end
    # after its error line, or accept's stop of it (OUTLIVES_ITS_LINE_S, then its SIGTERM and SIGKILL).
    started = 0 if loss == "all mid-run" else startup.deadline_s(LOSSY_TIMEOUT_S) + runner.LAUNCH_S
    bound = started + LOSSY_TIMEOUT_S + runner.OUTLIVES_ITS_LINE_S + 2 * runner.OUTLIVED_STOP_S + 5
    assert elapsed < room(bound), (elapsed, log)


def test_a_wait_past_the_deadline_inside_a_call_is_a_timeout(workdir):
    """The GPU path's NCCL waits end with DeadlineExceeded, a TimeoutError, when peers do not come
    within --timeout (csrc/cuda/device_comm.h): the run reports a timeout, like the watchdog's own
    deadline, not some failure. tests/stubs/deadline raises it on rank 0's fourth timed call."""
    out = os.path.join(workdir, "deadline.json")
    env = mpi_env()
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(os.path.dirname(__file__), "stubs", "deadline"),
                                                         env.get("PYTHONPATH")])),
               COMMBENCH_STUB_DEADLINE_RANK="0", COMMBENCH_STUB_DEADLINE_CALL="4")
    start = time.monotonic()
    r = subprocess.run([COMMBENCH, "allreduce", "--device", "cpu", "--impl", "mpi", "--sizes", "1K-64K",
                        "--iters", "3", "--warmup", "1", "--timeout", "30", "--np", "2", "-o", out],
                       env=env, capture_output=True, text=True, timeout=120, cwd=workdir)
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - start < 30
    # Per size: the check call, then one call for the timed iterations: the fourth is 2K's timed one.
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert lines == ["commbench: error: allreduce mpi 2K: did not finish within --timeout 30 s; every rank was "
                     f"alive in it (measured rows kept in {out})"], r.stderr
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and [x["size_bytes"] for x in doc["results"]] == [1024]
    assert not left_behind(out)


def _stop_rank_1(p, out: str, ready) -> tuple[str, float]:
    """Once ready() returns, SIGSTOP of rank 1 of the standalone run `p` (writing `out`): what `p` said
    on stderr and the seconds it took to end after; nothing of it is left running."""
    try:
        ready()
        os.kill(rank_pids(out)[1], signal.SIGSTOP)
        t = time.monotonic()
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
        return err, time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def test_a_stopped_rank_ends_links_too(workdir):
    """links arms the watchdog for every test of every round, on the ranks of no pair too: a rank
    stopped amid the rounds ends the run within --timeout, one line naming the round, the rows kept."""
    out = os.path.join(workdir, "links.json")
    # At most 100 iterations a test: the budget alone, from a warm-up median taken while another test
    # ran beside it, once made a test outlast --timeout by itself.
    p = subprocess.Popen([COMMBENCH, "links", "--np", "3", "--latency-size", "8", "--bandwidth-size", "64K",
                          "--budget-ms", "300", "--max-iters", "100", "--timeout", str(TIMEOUT_S), "-o", out],
                         env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    err, elapsed = _stop_rank_1(p, out, lambda: wait_for_rows(out, p))
    assert p.returncode == 1 and elapsed < room(TIMEOUT_S + 5), (elapsed, err)
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and doc["results"], doc["error"]
    assert doc["error"].startswith("links mpi ") and f"did not arrive within --timeout {TIMEOUT_S} s" in doc["error"]
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_stopped_rank_ends_numerics_too(workdir):
    """numerics runs under the same watchdog: a rank stopped amid its calls ends the run within
    --timeout, one line, a valid result file saying so, no process left."""
    out = os.path.join(workdir, "numerics.json")
    # One deadline spans all 5000 calls (tens of seconds): the stop must fall after the set-up (which
    # took past a second beside another test) and a second before the deadline.
    timeout_s = 6
    p = subprocess.Popen([COMMBENCH, "numerics", "--device", "cpu", "--ranks", "2", "--impl", "ring", "--dtype", "float32",
                          "--count", "1M", "--repeats", "5000", "--timeout", str(timeout_s), "-o", out],
                         env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)

    def amid_the_calls():
        until = time.monotonic() + 60
        while not os.path.exists(out) and time.monotonic() < until:
            time.sleep(0.1)
        time.sleep(3)  # rank 0 made the file once every rank was up; now both are amid the calls
        assert p.poll() is None, p.communicate()
    err, elapsed = _stop_rank_1(p, out, amid_the_calls)
    assert p.returncode == 1 and elapsed < room(timeout_s + 5), (elapsed, err)
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and doc["numerics"]["rows"] == []
    assert doc["error"] == f"numerics ring@mpi float32 on 2 ranks: rank 1 did not arrive within --timeout {timeout_s} s"
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_rank_left_out_of_numerics_stopped_is_named_once_the_others_end(workdir):
    """A rank of no measured count (--ranks 2 of 3) waits in the barrier that ends a count. Stopped
    there, it can hold rank 1 in that barrier while the algorithm lets rank 0 through: rank 0 called
    the run complete and rank 1 timed out alone, blaming rank 0. Rank 0 now waits for every rank's
    goodbye: one line naming rank 2, the rows kept, the file saying timeout."""
    out = os.path.join(workdir, "numerics.json")
    # tree's 500 calls take about 2 s alone, past 4 s beside another test's ranks, and the ring's did
    # not end within 8 s once beside a test cluster's ranks (nice -10) and two workers' tests.
    timeout_s = 15
    p = subprocess.Popen([COMMBENCH, "numerics", "--device", "cpu", "--ranks", "2", "--impl", "ring,tree", "--dtype",
                          "float32", "--count", "256K", "--repeats", "500", "--timeout", str(timeout_s), "--np", "3",
                          "-o", out], env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for_rows(out, p, rows=lambda doc: doc["numerics"]["rows"])  # ring measured; rank 2 idle, tree next
        os.kill(rank_pids(out)[2], signal.SIGSTOP)
        _, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1, err
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and [r["impl"] for r in doc["numerics"]["rows"]] == ["ring@mpi", "tree@mpi"]
    # Where rank 0 is held in that barrier too, it names the last measurement rather than the end.
    assert re.fullmatch(rf"(after the last size|numerics tree@mpi float32 on 2 ranks): rank 2 did not arrive within "
                        rf"--timeout {timeout_s} s", doc["error"]), doc["error"]
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


def _signalled_in_start_up(argv: list, workdir: str, marks: tuple, sent: int, **held) -> tuple:
    """Starts `argv` with tests/stubs/slow_start holding it (`held`: its variables), sends the command
    `sent` once each of `marks` (a rank's number, or `command`) is held there, and returns (the ended
    process, its stdout, its stderr)."""
    mark = os.path.join(workdir, "importing")
    env = mpi_env()
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(os.path.dirname(__file__), "stubs", "slow_start"),
                                                         env.get("PYTHONPATH")])),
               COMMBENCH_STUB_SLOW_START_MARK=mark, **held)
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir,
                         start_new_session=True)
    try:
        until = time.monotonic() + 60
        while not all(os.path.exists(f"{mark}.{m}") for m in marks):
            assert time.monotonic() < until and p.poll() is None, p.communicate()
            time.sleep(0.05)
        os.kill(p.pid, sent)
        return (p, *p.communicate(timeout=30))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.parametrize("held_at", ["commbench.cli", "commbench.launch.watchdog"])
def test_ctrl_c_while_the_ranks_start_is_the_one_line(workdir, held_at):
    """A Ctrl-C while the ranks still import (tests/stubs/slow_start holds them there: in the command
    line's imports, or in the start-up guard's own, before it is set): no traceback from any rank,
    no launcher banner, the line of an interrupted run, no file, nothing left."""
    out = os.path.join(workdir, "start.json")
    # Held in the guard's imports, a rank acts on the signal once they end (in a tenth of a second,
    # unheld): 3 s; held after the guard, at once, however long the hold.
    p, _, err = _signalled_in_start_up([COMMBENCH, *SWEEP, "--np", "2", "-o", out], workdir, ("0", "1"), signal.SIGINT,
                                       COMMBENCH_STUB_SLOW_START_AT=held_at,
                                       COMMBENCH_STUB_SLOW_START_S="3" if held_at == "commbench.launch.watchdog" else "30")
    assert p.returncode == 1, err
    assert err == "commbench: error: before the first size: interrupted (SIGINT)\n"
    assert not os.path.exists(out)
    time.sleep(0.5)
    assert left_behind(out) == []


def test_ctrl_c_while_the_ranks_start_their_interpreter_is_no_traceback(workdir):
    """A Ctrl-C passed on to ranks still in the interpreter's own start-up (held here in site's import
    of sitecustomize, before any of commbench's code): each printed `Fatal Python error:
    init_import_site` and a KeyboardInterrupt traceback above the line (4 runs in 9 of a Ctrl-C
    0.3 s in). Such a rank gets SIGTERM, and the command says why the ranks ended."""
    out = os.path.join(workdir, "site.json")
    p, _, err = _signalled_in_start_up([COMMBENCH, *SWEEP, "--np", "2", "-o", out], workdir, ("0", "1"), signal.SIGINT,
                                       COMMBENCH_STUB_SLOW_START_AT="site", COMMBENCH_STUB_SLOW_START_S="30")
    assert p.returncode == 1 and "Traceback" not in err and "Fatal Python error" not in err, err
    assert [line for line in err.splitlines() if line.startswith("commbench:")] == [
        "commbench: error: the ranks ended before any result was written: the command was interrupted (SIGINT)"], err
    time.sleep(0.5)
    assert left_behind(out) == [] and not os.path.exists(out)


def test_ranks_deaf_to_the_interrupt_are_ended_within_the_stop_time(workdir):
    """SIGHUP to a standalone scale while its ranks started (held in a C call, deaf to the SIGTERM
    passed on): the command, mpirun and the ranks ran on for good (2 runs in 5), its wait for mpirun
    untimed when the signal came. The launch is killed whole STOP_WITHIN_S after the interrupt."""
    from commbench.launch.backstop import STOP_WITHIN_S
    out = os.path.join(workdir, "deaf.json")
    start = time.monotonic()
    p, _, err = _signalled_in_start_up([COMMBENCH, *SWEEP, "--np", "2", "-o", out], workdir, ("0", "1"), signal.SIGHUP,
                                       COMMBENCH_STUB_SLOW_START_S="60", COMMBENCH_STUB_SLOW_START_DEAF="1")
    assert p.returncode == 1 and time.monotonic() - start < 30 + STOP_WITHIN_S, err
    assert [line for line in err.splitlines() if line.startswith("commbench:")] == [
        "commbench: error: the ranks ended before any result was written: the command was interrupted (SIGHUP)"], err
    time.sleep(0.5)
    assert left_behind(out) == [] and not os.path.exists(out)


def test_an_interrupt_heard_first_by_a_rank_left_out_of_a_count_names_where_the_run_was(workdir):
    """scale on 1 rank of 3: ranks 1 and 2 wait unarmed. SIGTERM reaching rank 2 first made the line
    `before the first size: interrupted (SIGTERM)` with rows kept (4 runs in 6 of a SIGTERM to the
    command); rank 0 now names its own measurement."""
    out = os.path.join(workdir, "scale.json")
    p = subprocess.Popen([COMMBENCH, "scale", "--device", "cpu", "--ranks", "1,3", "--np", "3", "--impl", "ring",
                          "--sizes", "1K-4K:+8", "--iters", "2000", "--warmup", "1", "--timeout", "30", "-o", out],
                         env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir)
    try:
        wait_for_rows(out, p)
        os.kill(rank_pids(out)[2], signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    doc = results.load_document(out)
    assert {r["ranks"] for r in doc["results"]} == {1}, "rank 2 was still left out when it was signalled"
    assert p.returncode == 1 and doc["status"] == "interrupted", (doc["status"], err)
    assert re.fullmatch(r"allreduce ring@mpi \(1 ranks\) \d+K?: interrupted \(SIGTERM\)", doc["error"]), doc["error"]
    assert [line for line in err.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_a_command_signalled_while_the_ranks_start_is_not_blamed_on_a_rank(workdir, sent):
    """SIGTERM or a hang-up to the command while the ranks import, before they handle SIGTERM: they end
    on it, mpirun's notice names one, and the line blamed that rank (8 runs in 8). The signal was the
    command's: its line says so."""
    out = os.path.join(workdir, "start.json")
    p, _, err = _signalled_in_start_up([COMMBENCH, *SWEEP, "--np", "2", "-o", out], workdir, ("0", "1"), sent,
                                       COMMBENCH_STUB_SLOW_START_AT="commbench.launch.watchdog",
                                       COMMBENCH_STUB_SLOW_START_S="30")
    assert p.returncode == 1 and not os.path.exists(out), err
    assert [line for line in err.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: the ranks ended before any result was written: the command was interrupted ({sent.name})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


@pytest.mark.parametrize("sent,said", [(signal.SIGINT, (130, "commbench: aborted\n")),
                                       (signal.SIGTERM, (143, "commbench: terminated\n")),
                                       (signal.SIGHUP, (129, "commbench: terminated\n"))])
@pytest.mark.parametrize("entry,held_at", [([COMMBENCH], "commbench.cli"), ([sys.executable, "-m", "commbench"], "commbench.cli"),
                                           ([COMMBENCH], "commbench.launch.watchdog")])
def test_ctrl_c_while_the_command_imports_is_one_line(workdir, entry, held_at, sent, said):
    """A Ctrl-C in the command's own first tenths of a second (its command line's imports, held here
    by tests/stubs/slow_start) printed a KeyboardInterrupt traceback: now the line of an aborted
    command, exit 130, whether started as the console script or as `python -m commbench`. A SIGTERM
    there ended it on the signal without a word: the line of a terminated command, exit 143; a
    hang-up too (exit 129). So did one in the start-up guard's own imports, before the guard is set
    (8 runs in 15 of a SIGTERM 0.1 to 0.3 s in): the signal is kept until they end (a tenth of a
    second unheld; held, 3 s)."""
    p, out, err = _signalled_in_start_up([*entry, *SWEEP, "--np", "2"], workdir, ("command",), sent,
                                         COMMBENCH_STUB_SLOW_START_COMMAND="1", COMMBENCH_STUB_SLOW_START_AT=held_at,
                                         COMMBENCH_STUB_SLOW_START_S="3" if held_at == "commbench.launch.watchdog" else "30")
    assert (p.returncode, err, out) == (*said, "")


@pytest.mark.parametrize("when", ["watchdog-up", "before-the-watchdog"])
def test_a_rank_stopped_before_the_first_size_ends_the_run(workdir, when):
    """Nothing is armed before the first size, yet the set-up's collectives wait for every rank:
    a rank silent for --timeout there ends the run too (tests/stubs/rank_faults stops rank 1 as
    its watchdog starts and holds rank 0 in a barrier). Stopped before its watchdog started, no
    rank's watchdog can see it: the standalone launch's backstop ends it, --timeout and its margin
    later (launch/backstop.py), where it held the ranks for good before."""
    from commbench.launch.backstop import MARGIN_S
    out = os.path.join(workdir, "set-up.json")
    env = rank_faults_env(COMMBENCH_STUB_STOP_RANK="1", COMMBENCH_STUB_STOP_BEFORE=str(int(when == "before-the-watchdog")))
    start = time.monotonic()
    r = subprocess.run([COMMBENCH, *SWEEP, "--np", "2", "-o", out], env=env, capture_output=True, text=True,
                       timeout=120, cwd=workdir)
    assert r.returncode == 1 and time.monotonic() - start < 60 + MARGIN_S, r.stderr
    doc = results.load_document(out)
    assert doc["status"] == "timeout" and doc["results"] == []
    assert doc["error"] == (f"before the first size: rank 1 did not arrive within --timeout {TIMEOUT_S} s" if when == "watchdog-up"
                            else f"rank 1 stopped for more than --timeout {TIMEOUT_S} s while the ranks started or ended, where no "
                                 f"watchdog sees it: the launch ended it")
    assert "prterun noticed" not in r.stderr, r.stderr  # mpirun's account of the rank the launch ended: not the cause
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], r.stderr
    time.sleep(0.5)
    assert left_behind(out) == []


def test_rank_0_killed_before_the_first_size_is_said_where(workdir):
    """Rank 0 killed once the watchdogs were up and its file made, before the first size (0-100 ms
    after the file appeared): rank 1 said `commbench: error on rank 1: : rank 0 did not arrive`, its
    place empty, and the file kept it so (13 runs in 16). Where no size has started the line says
    so (tests/stubs/rank_faults kills rank 0 as its watchdog starts)."""
    out = os.path.join(workdir, "rank-0-killed.json")
    env = rank_faults_env(COMMBENCH_STUB_STOP_RANK="0", COMMBENCH_STUB_STOP_SIGNAL="SIGKILL")
    r = subprocess.run([COMMBENCH, *SWEEP, "--np", "2", "-o", out], env=env, capture_output=True, text=True,
                       timeout=120, cwd=workdir)
    said = "before the first size: rank 0 did not arrive: its process ended"
    assert r.returncode == 1 and [line for line in r.stderr.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error on rank 1: {said}"], r.stderr
    doc = results.load_document(out)
    assert (doc["status"], doc["error"], doc["results"]) == ("peer-lost", said, []), doc
    time.sleep(0.5)
    assert left_behind(out) == []


@pytest.mark.parametrize("where,signame", [("file made", "SIGKILL"), ("file made", "SIGTERM"), ("in MPI's start-up", "SIGKILL"),
                                          ("in Python's start-up", "SIGKILL")])
def test_a_rank_killed_before_the_watchdogs_are_up_is_named_from_mpirun_s_account(workdir, where, signame):
    """Killed in the ranks' start-up (tests/stubs/rank_faults), before any watchdog could see it, a rank
    left rank 0's file `running`, the launch ended rank 0, and the command's line blamed rank 0
    (numerics, 2 runs in 12, killed 2.5 s in); killed before the file was made, the run ended with
    `commbench: terminated`, rank 0's, alone or before the command's line (4 runs in 10). The command
    names the rank from mpirun's notice, in the one line. A SIGTERM there held the run for good: the
    rank unwound, and its exit waited in MPI's finalize for rank 0, which waited for it in the set-up
    (1 run in 3 of a SIGTERM to a rank 0.4-0.65 s in). The rank ends on the signal now."""
    out = os.path.join(workdir, "start-up.json")
    file_made = where == "file made"
    env = rank_faults_env(COMMBENCH_STUB_STOP_RANK="1", COMMBENCH_STUB_STOP_BEFORE="1", COMMBENCH_STUB_STOP_SIGNAL=signame) \
        if file_made else rank_faults_env(COMMBENCH_STUB_KILLED_AT_START="1",
                                          **({"COMMBENCH_STUB_WAIT_AT_START_S": "30"} if "Python" in where else {}))
    r = subprocess.run([COMMBENCH, *SWEEP, "--np", "2", "-o", out], env=env, capture_output=True, text=True,
                       timeout=120, cwd=workdir)
    cause = f"rank 1's process ended on signal {signame} on host {socket.gethostname()} (mpirun's account), and the launch " \
            f"ended the others"
    if not file_made:
        assert r.returncode == 1 and not os.path.exists(out), r.stderr
        # Rank 0's `commbench: terminated` (the launch's SIGTERM) is not a second line beside it.
        assert [line for line in r.stderr.splitlines() if line.startswith("commbench:")] == [
            f"commbench: error: the ranks ended before any result was written: {cause}"], r.stderr
        return
    doc = results.load_document(out)
    assert r.returncode == 1 and doc["status"] == "peer-lost", (doc["status"], r.stderr)
    assert doc["error"] == f"the ranks ended (status 1) with this file still open: {cause}; the rows measured before are kept"
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: the ranks ended with {out} still open: {cause} (measured rows kept)"], r.stderr
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_sigterm_as_torch_loads_ends_the_rank_on_it_without_an_abort(workdir):
    """A SIGTERM that reached a rank as torch loaded (numerics 1.5 s in, the command interrupted)
    raised its Terminated inside torch's C++ (torch.distributed's `_c10d_init` calls back into
    Python), which cannot pass it on: the rank aborted, `terminate called after throwing an instance
    of 'python_error'` and a page of backtrace on stderr, mpirun's account SIGABRT (1 run in 69).
    torch's import holds the signal until it ends now (launch/held.py): the rank ends on the SIGTERM,
    named, and nothing else is said."""
    out = os.path.join(workdir, "torch-loading.json")
    r = subprocess.run([COMMBENCH, "numerics", "--device", "cpu", "--np", "2", "--timeout", "5", "-o", out],
                       env=rank_faults_env(COMMBENCH_STUB_SIGNAL_IN_TORCH="1"), capture_output=True, text=True, timeout=120,
                       cwd=workdir)
    assert r.returncode == 1 and not os.path.exists(out), r.stderr
    assert "terminate called" not in r.stderr and "Process received signal" not in r.stderr, r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: the ranks ended before any result was written: rank 1's process ended on signal SIGTERM on "
        f"host {socket.gethostname()} (mpirun's account), and the launch ended the others"], r.stderr
    time.sleep(0.5)
    assert left_behind(out) == []


def test_a_rank_killed_after_the_run_was_complete_is_named_and_the_file_stands(workdir):
    """Killed as the ranks closed (MPI's finalize), after rank 0 closed its file whole: the command
    exited 1 without a word. It names the rank now, and the file stays as rank 0 closed it."""
    out = os.path.join(workdir, "finalize.json")
    r = subprocess.run([COMMBENCH, *SWEEP[:5], "--sizes", "1K", "--iters", "5", "--np", "2", "-o", out],
                       env=rank_faults_env(COMMBENCH_STUB_KILLED_AT_CLOSE="1"), capture_output=True, text=True, timeout=120,
                       cwd=workdir)
    doc = results.load_document(out)
    assert r.returncode == 1 and doc["status"] == "complete" and len(doc["results"]) == 1, (doc["status"], r.stderr)
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: the run was complete ({out} holds all of it), but then rank 1's process ended on signal SIGKILL "
        f"on host {socket.gethostname()} (mpirun's account), and the launch ended the others"], r.stderr


@pytest.mark.parametrize("where,signum", [("before", signal.SIGTERM), ("before", signal.SIGINT), ("after", signal.SIGTERM)],
                         ids=["before-SIGTERM", "before-SIGINT", "after-SIGTERM"])
def test_an_interrupt_after_the_last_size_leaves_the_file_closed(workdir, where, signum):
    """Every size measured and the watchdog stopped, rank 0 about to close its file whole (links
    judges its pairs there): a SIGTERM to the command ended rank 0 on its own `commbench:
    terminated`, which the command took for rank 0's closing word, the file left `running` (links, 3
    runs in 10 of a SIGTERM 3-5 ms after its last row). The command closes it now and says why."""
    out = os.path.join(workdir, "links-end.json")
    p = subprocess.Popen([COMMBENCH, "links", "--np", "2", "--bandwidth-size", "64K", "-o", out],
                         env=rank_faults_env(COMMBENCH_STUB_HELD_AT_FINISH=where), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=workdir)
    try:
        said = []
        while not said or not said[-1].startswith("rank 0 holds"):
            said.append(p.stderr.readline())
            assert said[-1], said  # the stub's line, before the command ends
        p.send_signal(signum)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    doc = results.load_document(out)
    lines = [line for line in err.splitlines() if line.startswith("commbench:")]
    name = signal.Signals(signum).name
    assert p.returncode == 1 and len(doc["results"]) == 4 and "links" in doc, (p.returncode, doc["status"], err)
    if where == "before":
        assert doc["status"] == "interrupted", (doc["status"], err)
        assert lines == [f"commbench: error: the ranks ended with {out} still open: the command was interrupted ({name}) "
                         "(measured rows kept)"], err
    else:
        assert doc["status"] == "complete", (doc["status"], err)
        assert lines == [f"commbench: error: the run was complete ({out} holds all of it), but then the command was "
                         f"interrupted ({name})"], err
    assert left_behind(out) == []


def test_a_command_killed_after_the_last_size_leaves_the_file_whole(workdir):
    """The command SIGKILLed once every size was measured, rank 0 about to close its file whole: the
    launch's word that its command ended (mpirun's SIGUSR1) met no watchdog and ended rank 0 on the
    signal, the file left `running` (6 runs in 13 of a SIGKILL 0-30 ms after the last row), at times
    with a half-written temporary file beside it. Rank 0 closes it whole now, and the ranks end."""
    out = os.path.join(workdir, "killed-at-the-end.json")
    p = subprocess.Popen([COMMBENCH, "links", "--np", "2", "--bandwidth-size", "64K", "-o", out],
                         env=rank_faults_env(COMMBENCH_STUB_HELD_AT_FINISH="before", COMMBENCH_STUB_HELD_S="2"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir)
    try:
        said = []
        while not said or not said[-1].startswith("rank 0 holds"):
            said.append(p.stderr.readline())
            assert said[-1], said
        p.kill()
        p.wait(10)
        until = time.monotonic() + 60
        while left_behind(out) and time.monotonic() < until:
            time.sleep(0.2)
    finally:
        for pid in left_behind(out):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert left_behind(out) == []
    doc = results.load_document(out)
    assert doc["status"] == "complete" and len(doc["results"]) == 4 and "links" in doc, doc["status"]
    assert sorted(os.listdir(workdir)) == ["killed-at-the-end.json"]


def test_mpirun_killed_after_the_last_size_leaves_the_line_and_the_file_agreeing(workdir):
    """mpirun SIGKILLed once every row was in the file: its ranks live on, orphaned, and rank 0's next
    line met its output closed. The command said the file was `still open` while rank 0 went on to
    close it `failed` (`Input/output error at gloo 4M`), or printed that error alone (5 runs in 13).
    The command waits for the ranks that outlived mpirun before its last word, and rank 0 takes its
    closed output for the interrupt it is, as it does mid-run (tests/stubs/rank_faults holds rank 0
    before it closes its file whole)."""
    out = os.path.join(workdir, "mpirun-killed-at-the-end.json")
    p = subprocess.Popen([COMMBENCH, *SWEEP, "--np", "2", "-o", out],
                         env=rank_faults_env(COMMBENCH_STUB_HELD_AT_FINISH="before", COMMBENCH_STUB_HELD_S="2"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir, start_new_session=True)
    try:
        said = []
        while not said or not said[-1].startswith("rank 0 holds"):
            said.append(p.stderr.readline())
            assert said[-1], said
        [mpirun] = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        os.kill(int(mpirun), signal.SIGKILL)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert left_behind(out) == []
    doc = results.load_document(out)
    sizes = parse_sizes(SWEEP[SWEEP.index("--sizes") + 1])
    assert doc["status"] == "interrupted" and len(doc["results"]) == len(sizes), (doc["status"], err)
    assert re.fullmatch(r"after the last size: interrupted \(the launch closed this rank's output: "
                        r"(Input/output error|Broken pipe)\)", doc["error"]), doc["error"]
    assert p.returncode == 1 and [line for line in err.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: {doc['error']} (measured rows kept in {out})"], err


def test_a_watchdog_stopped_ends_nothing_more():
    """A signal the watchdog's thread read just as the main thread stopped it (the last size ended):
    the thread closed the file `interrupted` while the main thread closed it whole, the file
    `complete` and the line `interrupted` (links, 1 run in 24 of a SIGTERM 2 ms after its last
    row). stop() waits for an ending under way; an ending after it is dropped (in a process of its
    own: an ending that is not dropped leaves the process)."""
    script = """
from commbench.launch import watchdog
from commbench.launch.world import local_world
class Output:
    def fail(self, *args):
        print("closed as", args[1])
        return "kept"
dog = watchdog.Watchdog(local_world(), 5, Output())
dog.stop()
dog.end("interrupted", "allreduce 1K: interrupted (SIGTERM)")
print("dropped")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "dropped\n", "")


@pytest.mark.parametrize("args,signum", [(["version"], signal.SIGINT), (["--np", "2"], signal.SIGTERM),
                                         (["--np", "2"], signal.SIGINT)], ids=["version-SIGINT", "ranks-SIGTERM", "ranks-SIGINT"])
def test_a_signal_in_the_last_milliseconds_leaves_the_exit_status(workdir, args, signum):
    """A signal once a process has done and said everything, as it exits (the interpreter's exit
    handlers, a rank's MPI finalize): the command ended without a word on the signal, or a
    rank's exit handler printed a traceback of the signal's exception. The process ends with its
    own status now."""
    out = os.path.join(workdir, "at-exit.json")
    argv = args if args == ["version"] else [*SWEEP[:5], "--sizes", "1K", "--iters", "5", *args, "-o", out]
    r = subprocess.run([COMMBENCH, *argv], env=rank_faults_env(COMMBENCH_STUB_SIGNAL_AT_EXIT=signal.Signals(signum).name),
                       capture_output=True, text=True, timeout=120, cwd=workdir)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "commbench:" not in r.stderr, (r.returncode, r.stderr)
    if args != ["version"]:
        assert results.load_document(out)["status"] == "complete"


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_a_command_terminated_in_the_ranks_start_up_says_so_once(workdir, sent):
    """The ranks' `commbench: terminated` is held back until they end (for a line that names a rank
    a signal ended instead). Where no rank was, the command said rank 0's `commbench: terminated`,
    exit 1, no file (11 runs in 12 of a SIGTERM or hang-up 0.85-1.25 s in), where ranks still in their
    imports gave `the ranks ended before any result was written: the command was interrupted
    (SIGTERM)`: the same interrupt, told the same way now, once, by the signal the command got."""
    out = os.path.join(workdir, "terminated.json")
    p = subprocess.Popen([COMMBENCH, *SWEEP, "--np", "2", "-o", out], env=rank_faults_env(COMMBENCH_STUB_WAIT_AT_START_S="30"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir)
    try:
        said = [p.stderr.readline() for _ in range(2)]  # both ranks wait, SIGTERM's handler in place
        assert all(line.endswith("waits at start\n") for line in said), said
        p.send_signal(sent)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1 and not os.path.exists(out), err
    assert [line for line in err.splitlines() if line.startswith("commbench:")] == [
        f"commbench: error: the ranks ended before any result was written: the command was interrupted ({sent.name})"], err
    time.sleep(0.5)
    assert left_behind(out) == []


@pytest.mark.parametrize("named", [True, False])
def test_numerics_killed_on_rank_0_keeps_the_rows_it_wrote(workdir, named):
    """numerics writes each row into its result file as it comes: a SIGKILL of rank 0, which owns the
    file, after the first row leaves a valid file holding that row, closed by the command. Without -o
    (a name rank 0 chose) it was left `running`: rank 0 tells the command the name now."""
    out = os.path.join(workdir, "numerics-killed.json")
    p = subprocess.Popen([COMMBENCH, "numerics", "--device", "cpu", "--ranks", "2", "--impl", "ring,tree", "--dtype", "float32,float64",
                          "--count", "256K", "--repeats", "500", "--timeout", "30", *(["-o", out] if named else [])],
                         env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=workdir)
    try:
        until = time.monotonic() + 90
        rows = []
        while not rows and time.monotonic() < until and p.poll() is None:
            if not named:
                out = next(iter(glob.glob(os.path.join(workdir, results.DEFAULT_DIR, "*.json"))), out)
            try:
                rows = results.read_json(out, "result file")["numerics"]["rows"]
            except Exception:  # noqa: BLE001 - not there yet, or replaced as we read it
                pass
            time.sleep(0.05)
        assert rows, p.communicate()
        os.kill(rank_pids(workdir)[0], signal.SIGKILL)
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    doc = results.load_document(out)
    kept = doc["numerics"]["rows"]
    assert len(kept) >= 1 and kept[0] == rows[0]
    assert len(kept) < 4, "rank 0 died before the last row"
    assert doc["status"] != "running" and p.returncode == 1, (doc["status"], err)
    said = [line for line in err.splitlines() if line.startswith("commbench:")]
    assert len(said) == 1 and said[0].startswith("commbench: error") and "rank 0" in said[0], err
    time.sleep(0.5)
    assert rank_pids(workdir) == {}


SLOW_REPORT = """
import sys, time
from commbench.cli import main
from commbench.run.reporter import Reporter
from commbench.transports.mpi import MpiTransport
from mpi4py import MPI

# Rank 0's last write takes 5 s (a busy host), longer than a failing rank's grace of 3 s.
fail = Reporter.fail
Reporter.fail = lambda self, *a, **k: (time.sleep(5), fail(self, *a, **k))[1]
# Rank 1 fails at its fourth call (the second size's check and first timed calls came before).
times, calls = MpiTransport.times, []
def failing(self, *a, **k):
    calls.append(1)
    if MPI.COMM_WORLD.rank == 1 and len(calls) == 4:
        raise RuntimeError("rank 1 broke")
    return times(self, *a, **k)
MpiTransport.times = failing
sys.argv = ["commbench", *sys.argv[1:]]
main()
"""


def test_a_failure_on_another_rank_leaves_rank_0_time_to_close_its_file(workdir):
    """The rank that failed waits while rank 0 reports, not a fixed grace: on a busy host rank 0's
    last write took longer, mpirun ended it, and the file said `running` beside that rank's line."""
    out = os.path.join(workdir, "r.json")
    r = subprocess.run([MPIRUN, *own_session(), "--np", "2", sys.executable, "-c", SLOW_REPORT, "allreduce", "--device", "cpu",
                        "--impl", "mpi", "--sizes", "1K,2K,4K,8K", "--iters", "2", "--warmup", "1", "--no-fit",
                        "-o", out], capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=workdir)
    doc = results.load_document(out)
    assert doc["status"] == "failed" and "rank 1 broke" in doc["error"], (doc["status"], r.stderr)
    assert "commbench: error" in r.stderr and "error on rank 1" not in r.stderr, r.stderr


def test_a_hang_up_ends_the_ranks_as_sigterm_does(workdir):
    """SIGHUP to a standalone run (its terminal or ssh session closed): the command died of it, no
    line, the file saying its output was closed, and Open MPI's session folder left in $TMPDIR. It
    now ends the ranks as SIGTERM does, and says it was a hang-up (it said SIGTERM)."""
    out = os.path.join(workdir, "hup.json")
    tmp = os.path.join(workdir, "tmp")
    os.mkdir(tmp)
    p = subprocess.Popen([COMMBENCH, *SWEEP, "-o", out, "--np", "2"], env=_env("cpu", TMPDIR=tmp),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_rows(out, p)
        os.kill(p.pid, signal.SIGHUP)
        _, err = p.communicate(timeout=TIMEOUT_S + 30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    doc = results.load_document(out)
    assert p.returncode == 1 and doc["status"] == "interrupted" and doc["error"].endswith(": interrupted (SIGHUP)"), \
        (doc["error"], err)
    assert [line for line in err.splitlines() if line.startswith("commbench: error")] == \
        [f"commbench: error: {doc['error']} (measured rows kept in {out})"], err
    time.sleep(0.5)
    assert left_behind(out) == [] and os.listdir(tmp) == []


def test_a_run_started_to_ignore_hang_ups_outlives_one(workdir):
    """`nohup commbench ...`: started with SIGHUP ignored, the run must outlive its terminal, yet the
    command's own hang-up handler (which ends the ranks as SIGTERM does) replaced the ignoring."""
    out = os.path.join(workdir, "nohup.json")
    p = subprocess.Popen([COMMBENCH, *SWEEP, "-o", out, "--np", "2"], env=_env("cpu"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for_rows(out, p)
        os.kill(p.pid, signal.SIGHUP)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0 and "commbench: error" not in err, err
    assert results.load_document(out)["status"] == "complete"


def test_a_signal_as_mpirun_starts_leaves_no_launch_folder(workdir):
    """SIGHUP to the command just as its mpirun appeared, before the command's forwarding handler was
    set: its own handler's Terminated raised out of the launch, which removed its folder, and the
    starting ranks' marks made it again (6 runs in 8). The handler is set before mpirun starts."""
    import glob
    for _ in range(3):
        p = subprocess.Popen([COMMBENCH, *SWEEP, "--np", "2"], env=mpi_env(), cwd=workdir, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            until = time.monotonic() + 60
            while not any(_command_name(pid) in ("mpirun", "prterun") for pid in _children(p.pid)):
                assert p.poll() is None and time.monotonic() < until, p.communicate()
                time.sleep(0.001)
            p.send_signal(signal.SIGHUP)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        time.sleep(1)
        assert glob.glob(os.path.join(tempfile.gettempdir(), f"commbench-mpirun-{p.pid}-*")) == [], err


def _children(pid: int) -> list:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]
    return []
