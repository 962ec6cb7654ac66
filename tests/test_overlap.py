"""overlap: a collective's non-blocking call beside a computation. OSU's overlap figure, the
computation's exact check, every collective of the registry on one rank in this process and on two
ranks as a user types the command, and its refusals before any rank starts."""

import os
import signal
import subprocess
import time

import pytest
from conftest import COMMBENCH, batch, in_process, mpi_env, rank_pids, room, wait_for_rows
from test_one_rank import overlapping

from commbench import collectives
from commbench.errors import CommbenchError
from commbench.results import document as results
from commbench.run.overlap import COMPUTE, Compute, default_compute, overlap_figures


def test_the_overlap_is_osus_and_the_slowdowns_are_each_sides_time_beside_over_alone():
    """OSU (osu_util_mpi.c, print_stats_nbc): 100 - (overall - (compute - tests)) / pure communication
    x 100, at least 0; `compute_beside_us` is already without the tests."""
    def pct(total):
        return overlap_figures(comm_us=100, compute_us=80, total_us=total, compute_beside_us=100,
                               comm_beside_us=150)["overlap_pct"]
    assert [pct(t) for t in (100, 150, 200, 260)] == [100, 50, 0, 0]  # hidden, half, none, worse than none
    figures = overlap_figures(comm_us=100, compute_us=80, total_us=150, compute_beside_us=100, comm_beside_us=150)
    assert figures == {"overlap_pct": 50, "slowdown_comm": 1.5, "slowdown_compute": 1.25}


def test_a_device_without_a_computation_is_refused_in_one_line():
    with pytest.raises(CommbenchError, match="overlap has no computation for --device cuda yet: choose from loop"):
        default_compute("cuda")
    assert default_compute("cpu") == "loop"


@pytest.mark.gpu
def test_gpus_are_refused_in_one_line_before_any_rank_starts(workdir):
    """Where GPUs are visible (emulated here), --device cuda is refused, not a traceback."""
    from test_emulated_gpu import emu_env
    r = subprocess.run([COMMBENCH, "overlap", "allreduce", "--device", "cuda", "-o", "x.json"], env=emu_env(2),
                       cwd=workdir, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("commbench: error: overlap allreduce --device cuda: no library "
                                                     "call with a non-blocking form") and len(r.stderr.splitlines()) == 1, r.stderr
    assert not os.listdir(workdir)


def test_the_computation_is_named_by_kind_and_an_optional_size():
    assert Compute.parse("loop", "cpu") == Compute("loop") and Compute.parse("loop:40", "cpu") == Compute("loop", 40)
    for text, said in (("gemm", "unknown --compute 'gemm': choose from " + ", ".join(COMPUTE)),
                       ("loop:0", "must be a whole number from 1"), ("loop:３", "must be a whole number from 1"),
                       ("loop:x", "must be a whole number from 1"), ("loop", "runs with --device cpu, not --device cuda")):
        with pytest.raises(CommbenchError, match=said):
            Compute.parse(text, "cuda" if text == "loop" else "cpu")


CASES = {name: ["overlap", name, "--device", "cpu", "--sizes", "1K,64K", "--iters", "5", "--warmup", "1", "-o",
                f"{name}.json"] for name in collectives.names()}
CASES["probes"] = ["overlap", "all_reduce", "--device", "cpu", "--sizes", "256K", "--iters", "5", "--probes", "8",
                   "--compute", "loop:300", "--place", "both", "-o", "probes.json"]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Every overlap command of this module on 2 ranks, in one launch."""
    folder = str(tmp_path_factory.mktemp("two"))
    return folder, batch(2, CASES, folder)


@pytest.mark.parametrize("name", collectives.names())
def test_two_ranks_exact_with_both_sides_figures(name, two):
    folder, ran = two
    r = ran[name]
    assert r.returncode == 0, r.stderr
    assert "wrong elements in total: 0 OK" in r.stdout
    doc = results.load_document(os.path.join(folder, f"{name}.json"))
    assert doc["config"]["overlap"] == {"kind": "loop", "size": None, "probes": 0}
    records = doc["results"]
    assert [r["impl"] for r in records] == [i.name for i in overlapping(collectives.get(name))] * 2
    for rec in records:
        assert rec["wrong"] == 0 and rec["overlap"]["compute_wrong"] == 0 and rec["iterations"] == 5
        assert 0 <= rec["overlap_pct"] <= 100 and rec["slowdown_comm"] > 0 and rec["slowdown_compute"] > 0
        assert rec["overlap"]["sweeps"] >= 1 and len(rec["per_rank"]) == 2
        # The record's time: the whole overlapped iteration, never shorter than its computation.
        assert rec["overlap"]["total_us"] >= rec["overlap"]["compute_beside_us"]


def test_probes_a_fixed_computation_and_both_placements(two):
    folder, ran = two
    assert ran["probes"].returncode == 0, ran["probes"].stderr
    doc = results.load_document(os.path.join(folder, "probes.json"))
    assert doc["config"]["overlap"] == {"kind": "loop", "size": 300, "probes": 8}
    assert [(r["op"], r["in_place"]) for r in doc["results"]] == [("allreduce", False), ("allreduce", True)]
    assert all(r["overlap"]["sweeps"] == 300 and r["overlap"]["probes"] == 8 for r in doc["results"])


def test_the_analysis_commands_read_an_overlap_file(two, monkeypatch, capsys):
    """export (each format of the registry), report, baseline and compare take the file as any other;
    csv flattens the overlap figures into columns, console prints them beside each row."""
    from commbench import formats
    folder, _ = two
    monkeypatch.chdir(folder)
    for name in formats.names():
        code, out, err = in_process(["export", "allreduce.json", "--format", name, "-o", f"x.{name}"], monkeypatch, capsys)
        assert code == 0, (name, err)
    with open("x.csv") as f:
        head = f.readline().strip().split(",")
    assert {"overlap_pct", "slowdown_comm", "slowdown_compute", "overlap_comm_us", "overlap_compute_wrong"} <= set(head)
    with open("x.console") as f:
        table = f.read()
    assert "alone" in table and "compute x" in table
    code, out, err = in_process(["report", "allreduce.json", "-o", "rep"], monkeypatch, capsys)
    assert code == 0, err
    code, out, err = in_process(["baseline", "save", "allreduce.json", "--name", "ov", "--dir", "bl"], monkeypatch, capsys)
    assert code == 0, err
    code, out, err = in_process(["compare", os.path.join("bl", "ov.json"), "allreduce.json"], monkeypatch, capsys)
    assert code == 0, out + err


@pytest.mark.parametrize("args,said", [
    (["--compute", "gemm"], "unknown --compute 'gemm': choose from loop"),
    (["--compute", "loop:0"], "--compute loop:0: the sweeps after 'loop:' must be a whole number from 1"),
    (["--impl", "ring"], "--impl ring@mpi has none; choose from mpi"),
    (["--timing", "loop"], "overlap times one call at a time"),
    (["--agg", "2"], "No such option '--agg'"),
    (["--probes", "-1"], "--probes"),
])
def test_bad_input_is_one_line_before_any_rank_starts(args, said, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    code, out, err = in_process(["overlap", "allreduce", "--device", "cpu", "--np", "2", *args, "-o", "x.json"],
                                monkeypatch, capsys)
    assert code == 2 and said in err and len(err.strip().splitlines()) <= 3, err
    assert not os.listdir(workdir)


def test_a_rank_killed_beside_the_computation_ends_the_run_naming_it(workdir):
    """Killed while the ranks compute beside their calls: the run ends as any sweep does, its rows kept,
    the file closed as peer-lost naming the rank."""
    timeout = 2
    out = os.path.join(workdir, "killed.json")
    p = subprocess.Popen([COMMBENCH, "overlap", "allreduce", "--device", "cpu", "--np", "3", "--sizes", "1K-4K:+8",
                          "--iters", "20", "--warmup", "1", "--compute", "loop:2000", "--timeout", str(timeout),
                          "-o", out], env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        wait_for_rows(out, p)
        t = time.monotonic()
        os.kill(rank_pids(out)[2], signal.SIGKILL)
        _, err = p.communicate(timeout=timeout + 60)
        elapsed = time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1 and elapsed < room(timeout + 5), (p.returncode, elapsed, err)
    doc = results.load_document(out)
    assert doc["results"] and doc["status"] == "peer-lost", doc["error"]
    assert doc["error"].startswith("overlap allreduce mpi ") and "rank 2 did not arrive: its process ended" in doc["error"]
