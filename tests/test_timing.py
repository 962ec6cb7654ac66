"""The two timing conventions (run/policy.py TIMINGS): per-iteration, commbench's default, and loop,
nccl-tests' and OSU's; what each run says it did, and what the analyses make of a loop."""

import os

import numpy as np
import pytest
from conftest import commbench

from commbench.results import document as results
from commbench.run.policy import Policy, measure_loop


class FakeLoops:
    """A timer for measure_loop: `per_call` seconds a call, the calls it was asked for kept."""

    def __init__(self, per_call: float):
        self.per_call, self.asked = per_call, []

    def __call__(self, loops: int, calls: int) -> np.ndarray:
        self.asked.append((loops, calls))
        return np.full(loops, self.per_call)


def test_a_loop_takes_its_calls_from_the_budget_or_from_iters():
    timer = FakeLoops(1e-4)  # 100 us a call: a 200 ms budget over 5 loops is 400 calls a loop
    samples, calls = measure_loop(timer, Policy(warmup=3, budget_ms=200, timing="loop", loops=5))
    assert timer.asked == [(1, 3), (5, 400)] and calls == 400 and len(samples) == 5
    timer = FakeLoops(1e-4)
    _, calls = measure_loop(timer, Policy(warmup=1, iters=7, timing="loop", loops=3))
    assert timer.asked == [(1, 1), (3, 7)] and calls == 7
    # Clamped: a slow call still gets min_iters calls, a fast one no more than max_iters.
    for per_call, expected in ((1.0, 5), (1e-9, 2000)):
        _, calls = measure_loop(FakeLoops(per_call), Policy(timing="loop"))
        assert calls == expected


def _run(workdir: str, name: str, *extra: str):
    out = os.path.join(workdir, f"{name}.json")
    r = commbench(["allreduce", "--device", "cpu", "--np", "2", "--impl", "mpi,ring", "--sizes", "1K,64K",
                   "--budget-ms", "20", "-o", out, *extra], cwd=workdir)
    assert r.returncode == 0, r.stderr
    return r, results.load_document(out), out


@pytest.mark.mpi
def test_loop_timing_is_reported_as_nccl_tests_reports_it(workdir):
    r, doc, loop_file = _run(workdir, "loop", "--timing", "loop", "--loops", "4", "--iters", "6")
    assert "# timing: loop (nccl-tests')" in r.stdout and "slowest" in r.stdout
    assert doc["config"]["policy"]["timing"] == "loop" and results.timing_of(doc) == "loop"
    for rec in doc["results"]:
        assert rec["timing"] == "loop" and rec["loop_calls"] == 6 and rec["iterations"] == 4
        assert rec["wrong"] == 0 and len(rec["samples_us"]) == 4
        # Each loop's figure is the mean over the ranks; the slowest rank's is at least that.
        assert rec["rank_max_us"] >= rec["time_us"]["median"] > 0
        assert "per_rank" not in rec and "straggler" not in rec

    r, doc, step_file = _run(workdir, "step")
    assert "# timing: per-iteration" in r.stdout and results.timing_of(doc) == "per-iteration"
    assert all("per_rank" in rec and "timing" not in rec for rec in doc["results"])

    # compare: the conventions differ, so the figures do: refused, then compared when forced.
    r = commbench(["compare", step_file, loop_file], cwd=workdir)
    assert r.returncode == 2 and r.stderr.startswith("commbench: error: the baseline was timed per-iteration and the "
                                                     "run loop (--timing)") and len(r.stderr.splitlines()) == 1
    r = commbench(["compare", step_file, loop_file, "--force", "--tolerance-bw", "99%", "--tolerance-lat", "10000%"],
                  cwd=workdir)
    # Compared, not refused; the verdict is the machine's: on a loaded one a latency-bound size of one
    # run moved past 100 times the other's (a scheduler tick against microseconds): REGRESSION, exit 1.
    assert r.returncode in (0, 1) and "# warning: timing differs: baseline per-iteration, run loop" in r.stdout, r.stderr

    # fit and report read a loop's file; where it has no per-iteration samples, they say so.
    r = commbench(["fit", loop_file], cwd=workdir)
    assert r.returncode == 0 and "ring@mpi" in r.stdout, r.stderr
    r = commbench(["report", loop_file, "-o", os.path.join(workdir, "report")], cwd=workdir)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(workdir, "report", "report.md")) as f:
        text = f.read()
    assert "- **timing**: loop" in text and "not measured: loop timing has no per-iteration samples" in text


@pytest.mark.mpi
def test_p2p_loop_timing_records_each_loops_time_per_message(workdir):
    out = os.path.join(workdir, "p2p.json")
    r = commbench(["p2p", "--impl", "mpi", "--sizes", "8,64K", "--timing", "loop", "--loops", "3", "--iters", "40",
                   "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "# timing: loop (nccl-tests'): N iterations back to back" in r.stdout
    doc = results.load_document(out)
    assert doc["config"]["policy"]["timing"] == "loop" and results.timing_of(doc) == "loop"
    assert sorted({rec["op"] for rec in doc["results"]}) == ["bandwidth", "pingpong"]
    for rec in doc["results"]:
        assert (rec["timing"], rec["loop_calls"], rec["iterations"], rec["wrong"]) == ("loop", 40, 3, 0)
        # The figures come from the loops' recorded times: the median loop, and the bytes over it.
        assert rec["time_us"]["median"] == pytest.approx(float(np.median(rec["samples_us"])), abs=1e-3)
        assert rec["algbw_gbps"] == pytest.approx(rec["size_bytes"] / (rec["time_us"]["median"] * 1e3), rel=1e-3)


@pytest.mark.mpi
def test_links_loop_timing_judges_the_loops(workdir):
    out = os.path.join(workdir, "links.json")
    r = commbench(["links", "--np", "3", "--timing", "loop", "--loops", "2", "--iters", "10", "--judge", "bandwidth",
                   "--threshold-pct", "5", "--bandwidth-size", "256K", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = results.load_document(out)
    # 3 pairs, each alone and in its round, each ping-pong and bandwidth: 12 rows, all loops.
    assert len(doc["results"]) == 12 and {rec["timing"] for rec in doc["results"]} == {"loop"}
    assert all(rec["loop_calls"] == 10 and len(rec["samples_us"]) == 2 for rec in doc["results"])
    assert doc["links"]["findings"] == []


@pytest.mark.parametrize("args,needle", [
    (["p2p", "--loops", "3"], "--loops counts the loops of --timing loop; give --timing loop too"),
    (["links", "--loops", "3"], "--loops counts the loops of --timing loop; give --timing loop too"),
    (["p2p", "--device", "cuda", "--timing", "loop"], "p2p --device cuda times each copy alone: --timing loop is for "
                                                      "rank pairs"),
])
def test_loop_options_that_do_not_apply_are_refused(args, needle, workdir):
    r = commbench(args, cwd=workdir)
    assert r.returncode == 2 and r.stderr == f"commbench: error: {needle}\n" and r.stdout == ""
