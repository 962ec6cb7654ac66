"""commbench scale: the analysis on exact synthetic sweeps (every figure recomputed here from the
cost model), and the command as a user types it: standalone, under mpirun, under torchrun, judged
again with --from, and refused in one line."""

import json
import os

import pytest
from cluster import measured_until
from conftest import COMMBENCH, commbench, mpirun, torchrun_style

from commbench import collectives
from commbench.analysis.fabrics import Expectation
from commbench.analysis.scaling import Workload, analyse, measured_overlap
from commbench.results import document as results
from docs import record, result_doc

SIZES = [1 << k for k in range(12, 25, 2)]  # 4K .. 16M
ALPHA, BW = 5e-6, 2e9
ALLREDUCE = collectives.get("allreduce")


def ring_time(p, n, alpha=ALPHA, bw=BW):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bw


def sweep(p, t_of_n, impl="ring@mpi"):
    """Noise-free records of one count: every sample is the model's time."""
    return [record("allreduce", impl, "float32", "sum", p, n, n // 4, [t_of_n(n)] * 5, 0) for n in SIZES]


def test_each_count_is_fitted_and_the_next_predicted_through_the_ring_model():
    recs = [r for p in (1, 2, 4) for r in sweep(p, lambda n, p=p: ring_time(p, n) if p > 1 else 1e-7)]
    work = Workload(compute_ms=10.0, grad_bytes=1 << 22)
    out = analyse(recs, ALLREDUCE, "ring@mpi", work, extrapolate=(8, 64))
    rows = {r["ranks"]: r for r in out["rows"]}
    assert sorted(rows) == [1, 2, 4, 8, 64]
    for p in (2, 4):
        assert rows[p]["alpha_us"] == pytest.approx(ALPHA * 1e6, rel=1e-6)
        assert rows[p]["bandwidth_gbps"] == pytest.approx(BW / 1e9, rel=1e-6)
        assert rows[p]["comm_ms"] == pytest.approx(ring_time(p, 1 << 22) * 1e3, rel=1e-9)  # a swept size: its median
        assert rows[p]["latency_term_ms"] == pytest.approx(2 * (p - 1) * ALPHA * 1e3, rel=1e-6)
        assert rows[p]["bandwidth_term_ms"] == pytest.approx(2 * (p - 1) / p * (1 << 22) / BW * 1e3, rel=1e-6)
    # 4 ranks predicted from the fit of 2: exact on an exact ring.
    assert rows[4]["predicted_comm_ms"] == pytest.approx(rows[4]["comm_ms"], rel=1e-6)
    assert rows[2]["predicted_comm_ms"] is None  # one rank's fit crosses no link: nothing to predict from
    for p in (8, 64):
        assert not rows[p]["measured"] and rows[p]["comm_ms"] is None
        assert rows[p]["predicted_comm_ms"] == pytest.approx(ring_time(p, 1 << 22) * 1e3, rel=1e-6)
        assert "fit of 4 ranks" in rows[p]["prediction"]
    # Weak scaling: p batches per step, each step compute + the all-reduce.
    for p, row in rows.items():
        comm = row["comm_ms"] if row["comm_ms"] is not None else row["predicted_comm_ms"]
        step = 10.0 + comm
        assert row["step_ms"] == pytest.approx(step)
        assert row["speedup"] == pytest.approx(p * 10.0 / step)
        assert row["efficiency"] == pytest.approx(10.0 / step)


def test_strong_scaling_and_overlap_enter_the_step():
    recs = [r for p in (1, 2) for r in sweep(p, lambda n, p=p: ring_time(p, n) if p > 1 else 1e-7)]
    work = Workload(compute_ms=8.0, grad_bytes=1 << 20, overlap=0.5, strong=True)
    [one, two] = analyse(recs, ALLREDUCE, "ring@mpi", work, extrapolate=())["rows"]
    comm = ring_time(2, 1 << 20) * 1e3
    assert two["step_ms"] == pytest.approx(8.0 / 2 + 0.5 * comm, rel=1e-9)
    assert two["speedup"] == pytest.approx(8.0 / two["step_ms"], rel=1e-9) and one["speedup"] == 1.0


def test_the_hidden_share_never_outlasts_the_compute_and_each_step_names_its_regime():
    """A step of 10 ms of compute: the collective's hidden share runs beside it, at most 10 ms of it;
    while they run together the compute is slowed by compute_slowdown."""
    work = Workload(compute_ms=10.0, grad_bytes=1 << 20, overlap=0.8, compute_slowdown=1.5)
    assert work.parts(1, 0.5) == pytest.approx((10.25, 0.1))  # 0.4 ms hidden, compute slowed for 0.5 ms
    assert work.parts(1, 40.0) == pytest.approx((15.0, 30.0))  # 32 ms would hide: the compute's 10 ms do
    assert [work.regime(1, c) for c in (0.5, 4.0, 40.0)] == \
        ["compute-bound", "hidden communication", "exposed communication"]
    # A guessed --overlap: no slowdown, the same step as before while the hidden share fits the compute.
    assert Workload(10.0, 1 << 20, overlap=0.5).step_ms(1, 4.0) == pytest.approx(12.0)


def test_scale_takes_the_overlap_measured_at_the_size_nearest_the_gradients(workdir, monkeypatch, capsys):
    """--overlap-from: an overlap result file's record of the collective nearest the gradients (log
    scale) gives overlap and the compute's slowdown; judged again --from a scale run as a user types it."""
    from conftest import in_process
    overlap = [record("allreduce", "mpi", "float32", "sum", 2, n, n // 4, [1e-4] * 5, 0) for n in (1 << 16, 1 << 22)]
    for rec, pct, slow in zip(overlap, (20.0, 70.0), (1.1, 1.3)):
        rec.update(overlap_pct=pct, slowdown_comm=1.2, slowdown_compute=slow)
    doc = {"results": overlap}
    got = measured_overlap(doc, ALLREDUCE, 3 << 20, "o.json")
    assert got == {"overlap": 0.7, "compute_slowdown": 1.3, "overlap_source": "o.json, allreduce mpi at 4M"}
    with pytest.raises(Exception, match="holds no overlap records of broadcast"):
        measured_overlap(doc, collectives.get("broadcast"), 1 << 20, "o.json")
    monkeypatch.chdir(workdir)
    runs = {"scale.json": [r for p in (1, 2) for r in sweep(p, lambda n, p=p: ring_time(p, n) if p > 1 else 1e-7)],
            "overlap.json": overlap}
    for name, recs in runs.items():
        with open(name, "w") as f:
            json.dump(result_doc(recs), f)
    code, out, err = in_process(["scale", "--from", "scale.json", "--overlap-from", "overlap.json", "--grad-bytes", "4M",
                                 "--compute-ms", "1", "--extrapolate", "4"], monkeypatch, capsys)
    assert code == 0, err
    assert "overlap 70% (measured: overlap.json, allreduce mpi at 4M; compute x1.30 beside it)" in out
    assert any(line.split()[:1] == ["2"] and "exposed communication" in line for line in out.splitlines()), out
    code, out, err = in_process(["scale", "--from", "scale.json", "--overlap-from", "overlap.json", "--overlap", "0.5"],
                                monkeypatch, capsys)
    assert code == 2 and "give --overlap (a guess) or --overlap-from" in err


@pytest.mark.parametrize("bw_by_ranks,verdict,bend", [
    ({2: 2e9, 4: 2e9, 8: 2e9}, "scaling well", None),
    ({2: 2e9, 4: 2e8, 8: 1e8}, "diminishing returns", 4),
    ({2: 2e9, 4: 2e7, 8: 5e6}, "slower than fewer ranks from 4", 4),
])
def test_regimes_and_the_bend(bw_by_ranks, verdict, bend):
    recs = sweep(1, lambda n: 1e-7)
    for p, bw in bw_by_ranks.items():
        recs += sweep(p, lambda n, p=p, bw=bw: ring_time(p, n, bw=bw))
    out = analyse(recs, ALLREDUCE, "ring@mpi", Workload(compute_ms=50.0, grad_bytes=1 << 22), extrapolate=())
    assert out["verdict"].startswith(verdict) and out["bend_at"] == bend
    effs = {r["ranks"]: r["efficiency"] for r in out["rows"]}
    assert out["bend_at"] == next((p for p in sorted(effs) if effs[p] < 0.8), None)


def test_counts_beyond_one_host_take_the_fabric():
    recs = [r for p in (1, 2, 4) for r in sweep(p, lambda n, p=p: ring_time(p, n) if p > 1 else 1e-7)]
    fabric = Expectation("slow-net", 1.0, (0.0, 20.0), "test")
    out = analyse(recs, ALLREDUCE, "ring@mpi", Workload(10.0, 1 << 22), extrapolate=(4, 8, 16), fabric=fabric,
                  ranks_per_host=8)
    rows = {r["ranks"]: r for r in out["rows"]}
    assert rows[8]["predicted_comm_ms"] == pytest.approx(ring_time(8, 1 << 22) * 1e3, rel=1e-6)  # within the host
    assert rows[16]["predicted_comm_ms"] == pytest.approx(ring_time(16, 1 << 22, alpha=20e-6, bw=1e9) * 1e3, rel=1e-9)
    assert "fabric slow-net" in rows[16]["prediction"]


def _analysis_consistent_with_rows(doc, counts, grad_bytes):
    [analysis] = doc["scale"]
    measured = [r for r in analysis["rows"] if r["measured"]]
    assert [r["ranks"] for r in measured] == counts
    for row in measured[1:]:
        [rec] = [r for r in doc["results"] if r["ranks"] == row["ranks"] and r["size_bytes"] == grad_bytes]
        assert row["comm_ms"] == pytest.approx(rec["time_us"]["median"] * 1e-3, rel=1e-9)
    return analysis


def test_standalone_run_measures_every_count_and_judges_it_again(workdir):
    out, png = os.path.join(workdir, "scale.json"), os.path.join(workdir, "scale.png")
    r = commbench(["scale", "--np", "3", "--ranks", "1,2,3", "--impl", "ring", "--device", "cpu", "--sizes",
                   "16K-1M:x4", "--budget-ms", "5", "--warmup", "1", "--compute-ms", "5", "--grad-bytes", "256K",
                   "--extrapolate", "8", "-o", out, "--plot", png], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "wrong elements in total: 0 OK" in r.stdout and "# scale: allreduce ring@mpi" in r.stdout
    doc = results.load_document(out)
    assert sorted({x["ranks"] for x in doc["results"]}) == [1, 2, 3] and all(x["wrong"] == 0 for x in doc["results"])
    assert doc["config"]["scale"]["ranks"] == [1, 2, 3]
    analysis = _analysis_consistent_with_rows(doc, [1, 2, 3], 256 << 10)
    assert analysis["rows"][-1]["ranks"] == 8 and not analysis["rows"][-1]["measured"]
    assert os.path.getsize(png) > 0
    # The same rows judged for another workload: only the step changes.
    again = commbench(["scale", "--from", out, "--compute-ms", "50", "--grad-bytes", "1M", "--json",
                       "--extrapolate", "16"], cwd=workdir)
    assert again.returncode == 0, again.stderr
    [judged] = json.loads(again.stdout)
    [rec] = [x for x in doc["results"] if x["ranks"] == 3 and x["size_bytes"] == 1 << 20]
    row3 = next(x for x in judged["rows"] if x["ranks"] == 3)
    assert row3["step_ms"] == pytest.approx(50 + rec["time_us"]["median"] * 1e-3)


def test_under_mpirun_one_launch_gives_every_count(workdir):
    out = os.path.join(workdir, "scale.json")
    r = mpirun(3, [COMMBENCH, "scale", "--ranks", "1,3", "--impl", "mpi,tree", "--device", "cpu", "--sizes", "64K-4M:x4",
                   "--iters", "3", "--warmup", "1", "--grad-bytes", "1M", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    doc = results.load_document(out)
    assert {(x["impl"], x["ranks"]) for x in doc["results"]} == {(i, p) for i in ("mpi", "tree@mpi") for p in (1, 3)}
    assert [a["impl"] for a in doc["scale"]] == ["mpi", "tree@mpi"]


def test_under_torchrun_gloo_subgroups(workdir):
    out = os.path.join(workdir, "scale.json")
    ends = torchrun_style(["scale", "--ranks", "1,2", "--device", "cpu", "--sizes", "64K-1M:x4", "--iters", "3",
                           "--warmup", "1", "--grad-bytes", "256K", "-o", out], cwd=workdir)
    assert [rc for rc, _, _ in ends] == [0, 0], ends
    doc = results.load_document(out)
    assert {(x["impl"], x["ranks"]) for x in doc["results"]} == {("gloo", 1), ("gloo", 2)}
    assert all(x["wrong"] == 0 for x in doc["results"])
    _analysis_consistent_with_rows(doc, [1, 2], 256 << 10)


@pytest.mark.parametrize("args,line", [
    (["--np", "2", "--ranks", "1,4"], "--ranks asks for 4 ranks but 2 are started: launch 4 (--np 4 without a launcher) "
                                      "or lower --ranks"),
    (["--ranks", "0,2"], "bad count '0' in --ranks: give positive integers up to 16,777,216, e.g. 1,2,4,8"),
    (["--ranks", "1,2", "--json"], "--json prints the analysis of --from RUN; a run keeps it in its result file ('scale')"),
    (["--ranks", "1,2", "--grad-bytes", "1M", "--params", "10"], "give --grad-bytes or --params, not both"),
    (["--ranks", "1,2", "--overlap", "1.5"], "Invalid value for '--overlap': 1.5 is not in the range 0<=x<=1."),
])
def test_bad_input_is_one_line_before_any_rank(args, line, workdir):
    r = commbench(["scale", "--device", "cpu", "--sizes", "1K", *args], cwd=workdir)
    assert r.returncode == 2 and r.stderr == f"commbench: error: {line}\n", r.stderr
    assert not os.listdir(workdir)


@pytest.mark.cluster
@pytest.mark.quiet
def test_four_hosts_predicted_from_two_on_shaped_links(make_cluster, workdir):
    """Ground truth: 4 namespaces whose links are shaped to one rate (tests/cluster.py), one gloo
    process each, torchrun-style. The 4-rank all-reduce time that scale predicts from the 2-rank fit
    through the ring model lands within 15 % of the measured one at the large sizes.

    gloo, not MPI: between two namespaces Open MPI's TCP transport runs the two directions of an
    exchange only partly at once, in some launches and not others (2-rank ring all-reduce 1.43-1.48x
    the full-duplex time at every size from 512K to 8M, measured over 10 launches; 4 ranks, where
    each connection carries one direction, stay on the model). A 2-rank fit from such a launch
    describes that transport, not the link the 4-rank ring runs on; gloo's exchanges stay full-duplex."""
    c = make_cluster(4, 200)

    def measure(attempt: int) -> dict:
        out = os.path.join(workdir, f"scale{attempt}.json")
        outs = c.run_gloo(["scale", "--ranks", "1,2,4", "--impl", "gloo", "--device", "cpu", "--sizes", "512K-8M:x2",
                           "--budget-ms", "100", "--min-iters", "5", "--warmup", "1", "--grad-bytes", "4M", "-o", out],
                          timeout=240, cwd=workdir, port=29571 + attempt)
        assert [code for code, _, _ in outs] == [0] * 4, [err[-2000:] for _, _, err in outs]
        again = commbench(["scale", "--from", out, "--json", "--grad-bytes", "8M"], cwd=workdir)
        assert again.returncode == 0, again.stderr
        return {"4M": results.load_document(out)["scale"][0], "8M": json.loads(again.stdout)[0]}

    def fours(analyses: dict) -> dict:
        return {grad: next(row for row in a["rows"] if row["ranks"] == 4) for grad, a in analyses.items()}

    analyses = measured_until(measure, lambda analyses: all(
        four["predicted_comm_ms"] == pytest.approx(four["comm_ms"], rel=0.15) for four in fours(analyses).values()))
    for grad, four in fours(analyses).items():
        assert four["predicted_comm_ms"] == pytest.approx(four["comm_ms"], rel=0.15), (grad, four)
