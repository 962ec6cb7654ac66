import numpy as np
import pytest

from commbench.collectives import bandwidths
from commbench.results.stats import flag_lines, record_flags, sample_flags, summarize
from commbench.run.policy import Policy, measure, measure_loop


def test_summary_matches_numpy():
    rng = np.random.default_rng(1)
    s = rng.uniform(1e-6, 5e-6, size=1001)
    t = summarize(s)
    us = s * 1e6
    assert t["median"] == pytest.approx(np.median(us))
    assert t["mean"] == pytest.approx(us.mean())
    assert t["min"] == pytest.approx(us.min()) and t["max"] == pytest.approx(us.max())
    assert t["p95"] == pytest.approx(np.percentile(us, 95))
    assert t["p99"] == pytest.approx(np.percentile(us, 99))
    assert t["stdev"] == pytest.approx(us.std(ddof=1))
    assert t["cv"] == pytest.approx(us.std(ddof=1) / us.mean())


def test_single_sample_has_zero_spread():
    t = summarize(np.array([2e-6]))
    assert t["stdev"] == 0 and t["cv"] == 0 and t["median"] == pytest.approx(2.0)


@pytest.mark.parametrize("op,p,factor", [
    ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
    ("reducescatter", 4, 0.75), ("allgather", 8, 0.875), ("alltoall", 2, 0.5),
    ("broadcast", 8, 1.0), ("reduce", 3, 1.0), ("sendrecv", 2, 1.0),
])
def test_busbw_factors(op, p, factor):
    algbw, busbw = bandwidths(op, 1_000_000, 1e-3, p)
    assert algbw == pytest.approx(1.0)
    assert busbw == pytest.approx(factor)


def test_busbw_is_undefined_on_one_rank():
    assert bandwidths("allreduce", 1 << 20, 1e-3, 1)[1] is None


def test_flags():
    rng = np.random.default_rng(0)
    calm = 1000 + rng.uniform(-5, 5, size=200)  # microseconds
    assert sample_flags(calm, 20e-9) == []
    spiky = calm.copy()
    spiky[:10] = 50_000  # 5% of iterations hit by interference
    assert sample_flags(spiky, 20e-9) == ["outliers"]
    wide = 1000 + rng.uniform(-300, 300, size=200)
    assert sample_flags(wide, 20e-9) == ["noisy"]
    assert "timer_floor" in sample_flags(np.full(10, 0.1), 20e-9)


def test_a_sample_over_many_operations_is_judged_by_its_whole_interval():
    """A loop's sample is one interval over its calls (and --agg's, and a window's messages): 6 us a
    call of a 20-call loop spans 120 us, far above the CUDA events' 10 us floor (20 x 0.5 us); the
    same 6 us as one call's own interval lies under it."""
    floor = 0.5e-6
    one_call = {"samples_us": [6.0, 6.1, 5.9]}
    assert "timer_floor" in record_flags(one_call, floor)
    for many in ({"loop_calls": 20}, {"agg": 4}, {"window": 64}):
        assert "timer_floor" not in record_flags({**one_call, **many}, floor), many


class FakeTimer:
    """Stands in for a native loop: each iteration takes `per_iter` seconds."""

    def __init__(self, per_iter):
        self.per_iter = per_iter
        self.calls = []

    def __call__(self, n):
        self.calls.append(n)
        return np.full(n, self.per_iter)


def test_policy_reuses_an_iteration_already_run():
    t = FakeTimer(0.5)
    out = measure(t, Policy(warmup=5, budget_ms=200), first=np.array([0.5]))
    assert len(out) == 5 and t.calls == [5]


def test_policy_many_iterations_for_small_messages():
    t = FakeTimer(1e-6)
    out = measure(t, Policy(warmup=5, budget_ms=100, min_iters=5, max_iters=2000))
    assert len(out) == 2000 and t.calls == [1, 4, 2000]


def test_policy_few_iterations_for_large_messages():
    t = FakeTimer(0.5)
    out = measure(t, Policy(warmup=5, budget_ms=200, min_iters=5, max_iters=2000))
    # Warm-up stops after the first iteration (half the budget is already spent).
    assert len(out) == 5 and t.calls == [1, 5]


def test_policy_a_first_iteration_that_was_set_up_is_not_the_estimate():
    """The check's call took 45 ms (NCCL connected its peers in it), the call itself takes 10 us: the 5
    iterations that estimate allowed are warm-ups, and the budget's worth is timed."""
    t = FakeTimer(10e-6)
    out = measure(t, Policy(warmup=5, budget_ms=200, min_iters=5, max_iters=2000), first=np.array([0.045]))
    assert len(out) == 2000 and t.calls == [5, 2000]
    # Where the first iteration was the call's time, its count stands.
    t = FakeTimer(0.045)
    assert len(measure(t, Policy(warmup=5, budget_ms=200), first=np.array([0.045]))) == 5 and t.calls == [5]


def test_policy_budget_counts_every_aggregated_call():
    """--agg 4: the timer gives seconds per call, an iteration is 4 calls, the budget holds 100 ms of them."""
    t = FakeTimer(1e-3)
    assert len(measure(t, Policy(warmup=3, budget_ms=100), ops=4)) == 25 and t.calls == [1, 2, 25]
    calls = []

    def loops(n, per_loop):
        calls.append((n, per_loop))
        return np.full(n, 1e-3)
    samples, n = measure_loop(loops, Policy(warmup=5, budget_ms=100, loops=5), ops=4)
    assert n == 5 and len(samples) == 5 and calls == [(1, 5), (5, 5)]


def test_policy_budget_in_between():
    t = FakeTimer(1e-3)
    out = measure(t, Policy(warmup=3, budget_ms=100))
    assert len(out) == 100 and t.calls == [1, 2, 100]


def test_policy_fixed_iterations():
    t = FakeTimer(1.0)
    out = measure(t, Policy(warmup=3, iters=7))
    assert len(out) == 7 and t.calls == [1, 2, 7]


def test_warnings_are_one_line_per_kind_with_every_impl_and_size_and_the_remedy_once():
    def t(median, mx):
        return {"min": median / 2, "median": median, "p99": mx / 2, "max": mx}
    flagged = {("mpi", "noisy"): [("1K", t(3.0, 9.0)), ("4K", t(4.0, 40.0))],
               ("ring@mpi", "noisy"): [("64K", t(20.0, 30.0))],
               ("mpi", "timer_floor"): [("1K", t(3.0, 9.0))]}
    noisy, floor = flag_lines(flagged)
    assert noisy == ("interquartile range above 10% of the median: mpi at 1K, 4K; ring@mpi at 64K (e.g. mpi 4K: "
                     "min 2.00 / median 4.00 / p99 20.00 / max 40.00 us); remedy: stop other load on the node, raise "
                     "--budget-ms or --iters, or pin ranks to cores")
    assert floor.startswith("median within 20x of the clock step: mpi at 1K (e.g. mpi 1K: ")
    assert flag_lines({}) == []
    # A fine sweep flags hundreds of sizes: the first three and the last, and how many.
    many = [(str(1024 + 8 * i), t(3.0, 9.0)) for i in range(385)]
    [line] = flag_lines({("ring@mpi", "noisy"): many})
    assert line.startswith("interquartile range above 10% of the median: ring@mpi at 1024, 1032, 1040, ... 4096 "
                           "(385 sizes) (e.g. ring@mpi 1024: ")
    [line] = flag_lines({("ring@mpi", "noisy"): many[:8]})
    assert "ring@mpi at 1024, 1032, 1040, 1048, 1056, 1064, 1072, 1080 (e.g." in line
