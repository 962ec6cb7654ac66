"""Stragglers: per-rank times and arrival skew, the finding that names the rank the others wait for,
and --delay, which makes one rank late on purpose (on any machine, so the finding can be checked)."""

import json
import os

import numpy as np
import pytest
from conftest import COMMBENCH, commbench, in_process, mpirun, stub_gpu_env

from commbench.analysis import stragglers
from commbench.errors import CommbenchError
from commbench.results import arrival
from commbench.results import document as results
from commbench.run.collective import Timings

# Far above how late a rank descheduled on 2 shared cores arrives (over 5 ms, medians, with `make
# test`'s two workers beside 3 ranks), so that the delay and nothing else makes the straggler.
DELAY_US = 50000.0
HOSTS = ["h0", "h1", "h2"]


def test_per_rank_arithmetic():
    # Rank 2 is fast at every iteration (it arrived late); the slowest rank sets the pace.
    ranks_s = np.array([[10, 12, 30, 11], [11, 10, 31, 10], [2, 3, 1, 2]]) * 1e-6
    got = arrival.per_rank(ranks_s, HOSTS)
    assert [p["rank"] for p in got] == [0, 1, 2] and [p["host"] for p in got] == HOSTS
    assert [p["median_us"] for p in got] == [11.5, 10.5, 2.0]
    # skew = max over ranks - own: rank 0 [1, 0, 1, 0], rank 1 [0, 2, 0, 1], rank 2 [9, 9, 30, 9]
    assert [p["skew_median_us"] for p in got] == [0.5, 0.5, 9.0]
    assert got[2]["skew_p90_us"] == pytest.approx(np.percentile([9, 9, 30, 9], 90))
    found = arrival.finding(got, median_us=11.5, clock_floor_s=1e-8)
    assert found == {"rank": 2, "host": "h2", "waited_us": 9.0}


@pytest.mark.parametrize("skews,median,floor_s,named", [
    ([0, 0, 9], 100.0, 1e-8, False),  # 9 % of the time per call: noise
    ([0, 0, 11], 100.0, 1e-8, True),
    ([0, 6, 11], 100.0, 1e-8, False),  # two ranks late: the barrier's release order, not one straggler
    ([0, 5, 11], 100.0, 1e-8, True),
    ([0, 0, 11], 100.0, 1e-6, False),  # within 20x of the clock step
])
def test_finding_rules(skews, median, floor_s, named):
    ranks = [{"rank": r, "host": f"h{r}", "median_us": median, "skew_median_us": s, "skew_p90_us": s}
             for r, s in enumerate(skews)]
    assert (arrival.finding(ranks, median, floor_s) is not None) == named


def test_one_rank_is_never_a_straggler():
    assert arrival.finding(arrival.per_rank(np.ones((1, 5)), ["h"]), 1e6, 1e-9) is None


def test_a_rooted_collective_names_no_straggler():
    # A broadcast's root only sends: its own time is short by its role, not by arriving late.
    ranks_s = np.array([[100e-6] * 5, [10e-6] * 5, [100e-6] * 5])
    assert "straggler" in arrival.figures(ranks_s, ["h"] * 3, 100.0, 1e-9)
    found = arrival.figures(ranks_s, ["h"] * 3, 100.0, 1e-9, same_work=False)
    assert "straggler" not in found and found["per_rank"][1]["skew_median_us"] == pytest.approx(90.0)


def test_the_timer_measure_drives_is_the_slowest_rank():
    timings = Timings(lambda n: np.array([[1.0] * n, [3.0] * n]))
    assert list(timings(2)) == [3.0, 3.0] and timings.last.shape == (2, 2)


def test_summary_names_the_delayed_rank_once_per_series():
    def rec(size, waited):
        return {"op": "allreduce", "impl": "ring@mpi", "dtype": "float32", "redop": "sum", "ranks": 3, "size_bytes": size,
                "time_us": {"median": 2100.0}, "straggler": {"rank": 1, "host": "h1", "waited_us": waited}}
    doc = {"config": {"delay": {"rank": 1, "us": 2000.0}}, "results": [rec(1024, 1990.0), rec(65536, 2010.0)]}
    assert stragglers.summary_lines(doc) == [
        "straggler: allreduce ring@mpi (3 ranks): rank 1 (host h1) arrives 2.0 ms late at every size; the others wait "
        "for it (= 2.0 ms of the 2.1 ms per call); it is the rank --delay holds back"]


@pytest.mark.parametrize("text", ["1", "a:5", "1:x", "-1:5", "1:-5", "1:inf", "1:nan", "1:300000000"])
def test_parse_delay_refuses(text):
    with pytest.raises(CommbenchError, match="--delay"):
        stragglers.parse_delay(text, 300.0)


@pytest.mark.parametrize("text,wrong", [("3:100", "no rank 3"), ("1:-1", "finite"), ("1:inf", "finite"),
                                        ("one:5", "RANK:US")])
def test_bad_delay_is_one_line_and_exit_2(text, wrong, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = in_process(["allreduce", "--np", "3", "--delay", text, "--sizes", "1K"], monkeypatch, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: ") and wrong in lines[0]
    assert os.listdir(tmp_path) == []


def _doc(path: str) -> dict:
    with open(path) as f:
        doc = json.load(f)
    results.validate(doc)
    return doc


def test_delayed_rank_is_named_and_costs_the_others_its_delay(workdir):
    common = [COMMBENCH, "allreduce", "--device", "cpu", "--impl", "mpi,ring", "--sizes", "1K,64K", "--no-fit"]
    late = os.path.join(workdir, "late.json")
    r = mpirun(3, [*common, "--delay", f"1:{DELAY_US:g}", "--budget-ms", "60", "-o", late], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert (f"# note: rank 1 delayed by {DELAY_US:g} us before each call: the others' time grows by about that much"
            in r.stdout)
    doc = _doc(late)
    assert doc["config"]["delay"] == {"rank": 1, "us": DELAY_US}
    for rec in doc["results"]:
        assert [p["rank"] for p in rec["per_rank"]] == [0, 1, 2]
        assert rec["straggler"]["rank"] == 1, rec["per_rank"]
        assert 0.7 * DELAY_US < rec["straggler"]["waited_us"] < 1.4 * DELAY_US
        # What the delay costs a call: the pace (the slowest rank's time) against the delayed rank's
        # own call, which it starts last and so waits least in. Taken within the run, so that the
        # load of the machine, which changes between two runs, stays out of it; below twice the
        # delay (a delay counted twice).
        cost = rec["time_us"]["median"] - rec["per_rank"][1]["median_us"]
        assert 0.6 * DELAY_US < cost < 1.8 * DELAY_US, (rec["impl"], rec["size_bytes"], rec["per_rank"])
    for impl in ("mpi", "ring@mpi"):
        assert f"# straggler: allreduce {impl} (3 ranks): rank 1 " in r.stdout and "at every size" in r.stdout

    steady = os.path.join(workdir, "steady.json")
    r = mpirun(3, [*common, "--budget-ms", "20", "-o", steady], cwd=workdir)
    assert r.returncode == 0, r.stderr
    undelayed = _doc(steady)
    assert undelayed["config"]["delay"] is None
    # Noise may make one rank a little late, never by anything near the delay.
    assert all(rec.get("straggler", {}).get("waited_us", 0) < 0.5 * DELAY_US for rec in undelayed["results"])


def test_gloo_names_the_delayed_rank(workdir):
    out = os.path.join(workdir, "gloo.json")
    r = commbench(["allreduce", "--device", "cpu", "--impl", "gloo", "--np", "3", "--delay", f"2:{DELAY_US:g}", "--sizes", "1K,64K",
                   "--budget-ms", "100", "--no-fit", "-o", out], cwd=workdir, env=stub_gpu_env())
    assert r.returncode == 0, r.stderr  # on the CPU though GPUs are visible (a stub that fails GPU work)
    for rec in _doc(out)["results"]:
        assert rec["straggler"]["rank"] == 2, rec["per_rank"]
        assert 0.7 * DELAY_US < rec["straggler"]["waited_us"] < 1.4 * DELAY_US


def test_gpu_delay_arguments_parse():
    from test_gpu_arguments import parse
    params = parse(["allreduce", "--device", "cuda", "--impl", "nccl,ring", "--delay", "1:500", "--sizes", "1K-1M:x8"])
    assert stragglers.parse_delay(params["delay"], 300.0) == (1, 500.0)


def _code(*parts) -> str:
    from test_cuda_static import ROOT, _without_comments
    with open(os.path.join(ROOT, "csrc", *parts)) as f:
        return _without_comments(f.read())


def test_gpu_loop_returns_own_times_and_delays_before_the_start_event():
    """No GPU here: read the CUDA loop. Each timed iteration (plain or graph) starts with the barrier
    then the delay, both before event_times records its start event; nothing reduces the times over
    ranks any more (Python gathers them); the graph's capture holds no delay."""
    text = _code("cuda", "device_comm.h")
    timed = text[text.index("std::vector<double> timed("):text.index("struct Graph")]
    start = timed[timed.index("auto start"):timed.index("};", timed.index("auto start"))]
    assert start.index("barrier()") < start.index("spin_for(delay_s)")
    assert timed.count("spin_for") == 1 and timed.count("event_times(stream_.s, iters, where_, start,") == 2
    assert "ncclMax" not in text and "max_over_ranks" not in text
    events = _code("cuda", "resources.h")
    loop = events[events.index("std::vector<double> event_times("):]
    assert loop.index("sync();") < loop.index("cudaEventRecord(ev[2 * i].e")


def test_host_loop_delays_between_barrier_and_clock():
    text = _code("host", "module.cpp")
    loop = text[text.index("std::vector<double> time_iterations_with("):text.index("std::vector<double> per_call(")]
    assert loop.index("sync();") < loop.index("spin_for(delay_s") < loop.index("Clock::now()")
    assert "MPI_Allreduce" not in loop
    # Every rank of a collective's communicator is the barrier; a pair's, its own exchange.
    assert "MPI_Barrier(comm)" in loop[loop.index("std::vector<double> time_iterations("):]


def test_a_gpu_run_across_hosts_shows_the_median_rank_beside_the_slowest():
    """The headline is the slowest rank's time per iteration, which across hosts carries the device
    barrier's finishing skew at small sizes: where it exceeds the median rank's own time by a quarter
    or more, a line gives both. One host, or CPU ranks, say nothing of it."""
    from docs import record, result_doc

    def rec(size, ranks_s):
        r = record("allreduce", "nccl", "float32", "sum", 4, size, size // 4, np.max(ranks_s, axis=0), 0)
        return {**r, **arrival.figures(ranks_s, ["a", "a", "b", "b"], r["time_us"]["median"], 1e-9)}
    # At 1K rank 3 (host b) finishes 10 us after the others' 10 us every iteration; at 1M all take 100 us.
    small = np.array([[10e-6] * 5, [10e-6] * 5, [10e-6] * 5, [20e-6] * 5])
    large = np.full((4, 5), 100e-6)
    doc = {**result_doc([rec(1024, small), rec(1 << 20, large)])}
    doc["config"] = {**doc["config"], "device": "cuda"}
    doc["machine"] = {**doc["machine"], "hosts": ["a", "b"]}
    [line] = stragglers.median_rank_lines(doc)
    assert line.startswith("median rank: allreduce nccl (4 ranks): at 1K the median rank took 10.0 us where the "
                           "slowest took 20.0 us (the time shown): across hosts"), line
    assert stragglers.median_rank_lines({**doc, "machine": {**doc["machine"], "hosts": ["a"]}}) == []
    assert stragglers.median_rank_lines({**doc, "config": {**doc["config"], "device": "cpu"}}) == []
