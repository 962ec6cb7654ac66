"""Fit, fabric verdicts, baselines, compare, plots, reports, export and import."""

import copy
import io
import json
import os
import re

import numpy as np
import pytest
from conftest import commbench, in_process

from commbench.analysis import baseline, fabrics, fit
from commbench.analysis import compare as cmp
from commbench.errors import CommbenchError
from commbench.results import document as results
from commbench.results import importers
from docs import record

IMPORTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "imports")
SIZES = [1 << k for k in range(10, 27)]


def synthetic(op, impl, ranks, t_of_n, sizes=SIZES, noise=0.01, seed=1, iters=50):
    """Records whose per-iteration times follow t_of_n(n) with multiplicative noise."""
    rng = np.random.default_rng(seed)
    return [record(op, impl, "float32", "sum", ranks, n, n // 4, t_of_n(n) * (1 + noise * rng.standard_normal(iters)),
                   0) for n in sizes]


def ring(p, alpha, bw):
    return lambda n: 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bw


def doc_of(recs, **machine):
    m = {"hosts": ["h"], "ranks": recs[0]["ranks"], "launcher": "mpi", "cpu_model": "cpu", "cores": 2,
         "memory_bytes": 1, "os": "Linux", "python": "3.11", "torch": "2", "mpi": "Open MPI v5"}
    m.update(machine)
    return {"schema_version": 1, "tool": {"name": "commbench", "version": "0.1.0", "git_commit": None},
            "created": "2026-11-21T00:00:00+00:00", "argv": ["commbench"],
            "config": {"op": "allreduce", "impls": ["ring@mpi"], "sizes": SIZES, "dtype": "float32", "redop": "sum",
                       "place": "out", "policy": {}}, "machine": m, "env": {}, "status": "complete", "error": None,
            "results": recs}


# ---- fit --------------------------------------------------------------------------------------------

def test_times_at_the_end_of_the_float_range_fit_without_numpy_s_warnings():
    """A file whose samples of one size read 1e308 us: the weights' squares overflowed and numpy
    printed seven RuntimeWarnings on stderr before compare's lines. The weight is 0, said by no one."""
    import warnings
    recs = synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9))
    with np.errstate(over="ignore"):  # the file's own statistics of such samples (a mean of inf): not the fit's
        recs[0] = record("allreduce", "ring@mpi", "float32", "sum", 4, SIZES[0], SIZES[0] // 4, np.full(50, 1e302), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [f] = fit.fit_records(recs)
    assert f["bandwidth_gbps"] == pytest.approx(10.0, rel=0.05)


def test_ring_fit_recovers_alpha_and_link_bandwidth():
    [f] = fit.fit_records(synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9)))
    assert f["alpha_us"] == pytest.approx(3.0, rel=0.05)
    assert f["bandwidth_gbps"] == pytest.approx(10.0, rel=0.02)
    top = f["segments"][-1]
    assert top["bandwidth_gbps_ci"][0] <= 10.0 * 1.01 and top["bandwidth_gbps_ci"][1] >= 10.0 * 0.99
    assert top["r2"] > 0.99 and not f["effective"] and len(f["segments"]) == 1


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_the_bootstraps_medians_come_from_their_exact_distribution(k):
    """A resample's median is drawn from the exact distribution of its middle sorted positions: here
    against every one of the k**k resamples of k positions, counted."""
    import itertools
    counts: dict = {}
    for draw in itertools.product(range(k), repeat=k):
        middle = sorted(draw)[(k - 1) // 2], sorted(draw)[k // 2]
        counts[middle] = counts.get(middle, 0) + 1
    lower, upper, cdf = fit._middle_of_resamples(k)
    exact = dict(zip(zip(lower.tolist(), upper.tolist()), np.diff(cdf, prepend=0.0)))
    assert exact.keys() == counts.keys()
    for pair, n in counts.items():
        assert exact[pair] == pytest.approx(n / k ** k, rel=1e-9, abs=1e-15)


def test_library_fit_is_marked_effective():
    [f] = fit.fit_records(synthetic("allreduce", "mpi", 4, ring(4, 3e-6, 10e9)))
    assert f["effective"] and f["bandwidth_gbps"] == pytest.approx(10.0, rel=0.02)


def test_tree_and_hockney_models():
    [tree] = fit.fit_records(synthetic("allreduce", "tree@mpi", 2, lambda n: 2 * 4e-6 + 2 * n / 5e9))
    assert tree["alpha_us"] == pytest.approx(4.0, rel=0.05) and tree["bandwidth_gbps"] == pytest.approx(5.0, rel=0.02)
    [pp] = fit.fit_records(synthetic("pingpong", "mpi", 2, lambda n: 1.5e-6 + n / 12e9))
    assert pp["alpha_us"] == pytest.approx(1.5, rel=0.05) and pp["bandwidth_gbps"] == pytest.approx(12.0, rel=0.02)


def test_protocol_switch_is_found_as_a_segment():
    # Eager below 64 KiB (low alpha, low bandwidth), rendezvous above (high alpha, high bandwidth).
    switch = lambda n: (1e-6 + n / 2e9) if n < 65536 else (20e-6 + n / 20e9)  # noqa: E731
    [f] = fit.fit_records(synthetic("pingpong", "mpi", 2, switch, noise=0.002))
    assert len(f["segments"]) == 2
    low, high = f["segments"]
    assert low["size_max"] == 32768 and high["size_min"] == 65536
    assert high["alpha_us"] == pytest.approx(20.0, rel=0.1) and high["bandwidth_gbps"] == pytest.approx(20.0, rel=0.03)
    assert low["bandwidth_gbps"] == pytest.approx(2.0, rel=0.05)


def test_outlying_size_is_flagged():
    recs = synthetic("pingpong", "mpi", 2, lambda n: 1e-6 + n / 10e9, noise=0.001)
    recs[8] = record("pingpong", "mpi", "float32", "sum", 2, SIZES[8], 1, np.full(10, 3 * (1e-6 + SIZES[8] / 10e9)), 0)
    [f] = fit.fit_records(recs)
    assert f["outlier_sizes"] == [SIZES[8]]


def test_series_that_cannot_be_fitted_say_why():
    one = fit.fit_records(synthetic("allreduce", "ring@mpi", 1, ring(2, 1e-6, 1e9)))
    few = fit.fit_records(synthetic("allreduce", "ring@mpi", 2, ring(2, 1e-6, 1e9), sizes=[8, 16]))
    assert one[0]["skipped"].startswith("one rank") and "at least 3" in few[0]["skipped"]


# ---- fabrics and verdicts ---------------------------------------------------------------------------

def test_catalog_rows_have_sources_and_figures():
    rows = fabrics.catalog()
    assert {"nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5", "ib-hdr", "ib-ndr", "ib-xdr", "eth-10g",
            "eth-400g", "tcp-loopback", "shm"} <= set(rows)
    for r in rows.values():
        assert r["source"] and len(r["alpha_us"]) == 2 and (r.get("measured") or r["bandwidth_gbps"] > 0)
    assert rows["nvlink4"]["bandwidth_gbps"] == 450 and rows["pcie4"]["bandwidth_gbps"] == 31.5


@pytest.mark.parametrize("measured,status", [(562.5, "PASS"), (400, "PASS"), (360, "PASS"), (359, "WARN"), (270, "WARN"),
                                             (269, "FAIL"), (None, "FAIL"), (563, "WARN"), (1350, "WARN")])
def test_verdict_thresholds(measured, status):
    """80 % of nvlink4's 450 GB/s passes, below 60 % fails; above 125 % the expectation or the method
    is off: a warning, not a pass."""
    assert fabrics.verdict(measured, fabrics.expectation("nvlink4"))[0] == status


def test_measured_fabrics_come_from_the_run_never_from_the_reader():
    assert fabrics.measured_here("shm") and fabrics.measured_here("tcp-loopback") and not fabrics.measured_here("ib-ndr")
    spot = {"shm": {"bandwidth_gbps": 12.5, "host": "node7"}}
    shm = fabrics.expectation("shm", on_the_spot=spot)
    assert shm.bandwidth_gbps == 12.5 and "12.5 GB/s on node7, by the run" in shm.source
    with pytest.raises(CommbenchError, match="^--fabric tcp-loopback is measured on the spot by the run it judges, on "
                                             "the run's host, and run.json holds no such measurement"):
        fabrics.expectation("tcp-loopback", on_the_spot=spot, source="run.json")
    assert fabrics.expectation(None, expect_gbps=7.5, expect_us=3).bandwidth_gbps == 7.5
    with pytest.raises(CommbenchError, match="unknown fabric"):
        fabrics.expectation("token-ring")
    # What a run stores: this host's figure, measured now.
    assert fabrics.measure_on_the_spot("tcp-loopback", "h")["bandwidth_gbps"] > 0.01


@pytest.mark.mpi
def test_a_run_keeps_its_on_the_spot_figure_and_the_fit_reads_it_from_the_file(workdir):
    out = os.path.join(workdir, "p2p.json")
    r = commbench(["p2p", "--sizes", "1K,1M,4M", "--budget-ms", "20", "--fabric", "shm", "-o", out], cwd=workdir)
    assert r.returncode in (0, 1), r.stderr
    doc = results.load_document(out)
    spot = doc["on_the_spot"]["shm"]
    assert spot["bandwidth_gbps"] > 0.1 and spot["host"] == doc["machine"]["hosts"][0]
    # Judged later, elsewhere: the file's figure, whatever the reader's memory copies at.
    doc["on_the_spot"]["shm"]["bandwidth_gbps"] = 1e-3
    moved = os.path.join(workdir, "moved.json")
    with open(moved, "w") as f:
        json.dump(doc, f)
    r = commbench(["fit", moved, "--fabric", "shm"], cwd=workdir)
    assert r.returncode == 0 and "of 0.001 GB/s expected for shm" in r.stdout and "WARN" in r.stdout, r.stderr
    assert "above 125% of it: the expectation (a fabric the run did not cross) or the method" in r.stdout
    r = commbench(["fit", moved, "--fabric", "tcp-loopback"], cwd=workdir)
    assert r.returncode == 2 and r.stderr.startswith("commbench: error: --fabric tcp-loopback is measured on the spot")


# ---- compare ----------------------------------------------------------------------------------------

def _base_and_run(slow_bw=1.0, slow_lat=1.0, **machine):
    base = doc_of(synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9), seed=1))
    run = doc_of(synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6 * slow_lat, 10e9 / slow_bw), seed=2), **machine)
    return base, run


def test_same_machine_passes():
    result = cmp.compare(*_base_and_run(), 0.10, 0.25)
    assert result["status"] == "pass" and result["warnings"] == []
    checks = {c["check"] for c in result["series"][0]["checks"]}
    assert checks == {"latency sizes", "bandwidth sizes", "fitted bandwidth", "fitted alpha"}


def test_bandwidth_regression_is_caught_in_the_bandwidth_region_only():
    result = cmp.compare(*_base_and_run(slow_bw=1.25), 0.10, 0.25)
    checks = {c["check"]: c for c in result["series"][0]["checks"]}
    assert result["status"] == "regression"
    assert checks["bandwidth sizes"]["regression"] and checks["fitted bandwidth"]["regression"]
    assert not checks["latency sizes"]["regression"]


def test_latency_regression_is_caught_in_the_latency_region():
    result = cmp.compare(*_base_and_run(slow_lat=2.0), 0.10, 0.25)
    checks = {c["check"]: c for c in result["series"][0]["checks"]}
    assert checks["latency sizes"]["regression"] and not checks["bandwidth sizes"]["regression"]


@pytest.mark.parametrize("size,region", [(8, "latency"), (4096, "latency"), (4096 + 4, "bandwidth"), (4 << 20, "bandwidth")])
def test_a_series_of_one_size_is_judged_by_its_size(size, region):
    """links' 8-byte ping-pong and its bandwidth size are series of one size each: no best bandwidth
    to set them against, so a small message is judged as latency (its time, the latency tolerance),
    a large one as bandwidth. 20 % slower passes the latency tolerance, not the bandwidth one."""
    def one(t_us):
        return doc_of(synthetic("allreduce", "ring@mpi", 2, lambda n: t_us * 1e-6, sizes=[size], seed=1))
    result = cmp.compare(one(10.0), one(12.0), 0.10, 0.25)
    [row] = result["series"][0]["rows"]
    assert row["region"] == region
    assert result["status"] == ("pass" if region == "latency" else "regression")


def test_within_tolerance_passes_and_metadata_differences_warn():
    result = cmp.compare(*_base_and_run(slow_bw=1.05, cpu_model="other cpu", ranks=4), 0.10, 0.25)
    assert result["status"] == "pass"
    assert result["warnings"] == ["CPU model differs: baseline cpu, run other cpu"]


def test_nothing_in_common_is_unusable():
    base, run = _base_and_run()
    for r in run["results"]:
        r["impl"] = "tree@mpi"
    with pytest.raises(CommbenchError, match="share no"):
        cmp.compare(base, run, 0.1, 0.25)


# ---- result files of earlier versions ------------------------------------------------------------------

def _bare(doc, device=None):
    """doc as commbench wrote it before an impl named its transport: our algorithms bare."""
    old = copy.deepcopy(doc)
    old["config"]["impls"] = [i.split("@")[0] for i in old["config"]["impls"]]
    if device:
        old["config"]["device"] = device
    for r in old["results"]:
        r["impl"] = r["impl"].split("@")[0]
    return old


def _write(folder, name, doc):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def test_an_earlier_file_loads_in_todays_names_and_fits_and_compares_with_a_new_one(workdir, monkeypatch, capsys):
    base, run = _base_and_run()
    old = _write(workdir, "old.json", _bare(base))
    new = _write(workdir, "new.json", run)
    assert results.load_document(old) == base
    assert set(results.load(old)["impl"]) == {"ring@mpi"}
    code, out, err = in_process(["compare", old, new], monkeypatch, capsys)
    assert code == 0 and err == "" and "# allreduce ring@mpi (4 ranks, float32)" in out and "# compare: PASS" in out
    code, out, err = in_process(["fit", old, "--json"], monkeypatch, capsys)
    [f] = json.loads(out)
    assert code == 0 and f["impl"] == "ring@mpi" and not f["effective"] and f["model"].startswith("ring: ")
    # A GPU run's bare algorithm ran over NCCL.
    gpu = results.load_document(_write(workdir, "gpu.json", _bare(base, device="cuda")))
    assert gpu["config"]["impls"] == ["ring@nccl"] and {r["impl"] for r in gpu["results"]} == {"ring@nccl"}


def test_an_earlier_nccl_tests_import_loads_with_its_placement(workdir):
    new = _nccl(_read("nccl-tests-all_reduce_perf-8gpu.txt")).doc
    old = copy.deepcopy(new)
    old["config"]["impls"] = ["nccl", "nccl-in-place"]
    for r in old["results"]:
        r["impl"] = "nccl-in-place" if r.pop("in_place") else "nccl"
    assert results.load_document(_write(workdir, "old.json", old)) == new
    assert results.load_document(_write(workdir, "new.json", new)) == new


# ---- import ------------------------------------------------------------------------------------------

NCCL_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nccl-tests")


def _read(name, folder=IMPORTS):
    with open(os.path.join(folder, name)) as f:
        return f.read()


def _nccl(text, op=None):
    return importers.import_nccl_tests(io.StringIO(text), "log", op)


def test_osu_imports_keep_their_figures():
    lat = importers.import_osu(io.StringIO(_read("osu_latency-7.4-2ranks-shm.txt")), "lat").doc
    results.validate(lat)
    by = {r["size_bytes"]: r for r in lat["results"]}
    assert by[8]["op"] == "pingpong" and by[8]["time_us"]["median"] == 0.41 and len(by) == 21
    bw = importers.import_osu(io.StringIO(_read("osu_bw-7.4-2ranks-shm.txt")), "bw").doc
    top = max(bw["results"], key=lambda r: r["size_bytes"])
    assert top["op"] == "bandwidth" and top["algbw_gbps"] == pytest.approx(11.98861, rel=1e-4)
    ar = importers.import_osu(io.StringIO(_read("osu_allreduce-7.4-2ranks-shm.txt")), "ar").doc
    last = ar["results"][-1]
    assert (last["size_bytes"], last["time_us"]["median"], last["time_us"]["min"], last["iterations"]) == \
        (67108864, 46869.14, 46826.95, 100)
    assert last["busbw_gbps"] == pytest.approx(67108864 / 46869.14e-6 / 1e9)


def test_nccl_tests_table_and_json_agree():
    table = _nccl(_read("nccl-tests-all_reduce_perf-8gpu.txt")).doc
    js = _nccl(_read("nccl-tests-all_reduce_perf-8gpu.json")).doc
    for d in (table, js):
        results.validate(d)
        assert d["machine"]["ranks"] == 8 and d["machine"]["hosts"] == ["hgx-a01"] and d["status"] == "complete"
        assert {(r["impl"], r["in_place"]) for r in d["results"]} == {("nccl", False), ("nccl", True)}
    t_times = [r["time_us"]["median"] for r in table["results"]]
    j_times = [r["time_us"]["median"] for r in js["results"]]
    assert t_times == pytest.approx(j_times, abs=0.006)
    [f_out, _] = fit.fit_records(js["results"])
    assert f_out["alpha_us"] == pytest.approx(5.5, rel=0.01) and f_out["bandwidth_gbps"] == pytest.approx(360, rel=0.01)


def test_a_run_is_placed_in_the_reference_envelopes_of_its_node():
    """An 8-GPU H100 node's all-reduce (the fixture's figures) against the Ring envelope, its algorithm
    not recorded (an import); where NCCL's own report says NVLS, only the NVLS envelope places it, and a
    busbw above the range reads as the bus factor's doing. Another GPU, or another GPU count, names no
    envelope."""
    from commbench.analysis import envelopes
    from commbench.formats.report import facts
    doc = _nccl(_read("nccl-tests-all_reduce_perf-8gpu.json")).doc
    placed = {(p["series"], p["envelope"]): (p["placement"], round(p["peak"], 1), p["algo_known"])
              for p in envelopes.placements(doc)}
    assert placed == {("allreduce nccl (8 ranks)", "hgx-h100-allreduce-ring"): ("below", 354.8, False),
                      ("allreduce nccl in-place (8 ranks)", "hgx-h100-allreduce-ring"): ("within", 362.0, False)}
    assert ("envelope", "allreduce nccl (8 ranks): peak busbw 354.8 GB/s, below (which algorithm NCCL ran is not "
                        "recorded)") in facts(doc, "h100.json")
    nvls = copy.deepcopy(doc)
    big = copy.deepcopy(max(nvls["results"], key=lambda r: r["size_bytes"]))
    nvls["results"].append({**big, "size_bytes": 8 << 30, "busbw_gbps": 481.0, "in_place": True})
    for r in nvls["results"]:
        r["nccl_choice"] = {"algo": "NVLS", "proto": "SIMPLE", "channels": 16}
    [p] = envelopes.placements(nvls)
    assert (p["envelope"], p["series"], p["placement"], p["algo_known"]) == \
        ("hgx-h100-allreduce-nvls", "allreduce nccl in-place (8 ranks)", "within", True)
    nvls["results"][-1]["busbw_gbps"] = 520.0
    assert envelopes.placements(nvls)[0]["placement"] == "above: check the bus factor"
    other = copy.deepcopy(doc)
    other["machine"]["gpus"] = ["NVIDIA A100-SXM4-80GB"]
    four = copy.deepcopy(doc)
    four["machine"]["ranks"] = 4
    assert envelopes.placements(other) == [] and envelopes.placements(four) == []
    # A run of 4 ranks on a node whose snapshot shows 8 GPUs is not the 8-GPU figure; its 8-rank run is.
    snap = copy.deepcopy(doc)
    snap["topology"] = {"gpus": {"devices": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]}}
    assert {p["series"] for p in envelopes.placements(snap)} == {"allreduce nccl (8 ranks)", "allreduce nccl in-place (8 ranks)"}
    for r in snap["results"]:
        r["ranks"] = 4
    assert envelopes.placements(snap) == []
    # A copy above its range is above, no bus factor in it; a GH200's host link is no PCIe.
    copy_doc = {"machine": {"hosts": ["h"], "ranks": 1, "gpus": ["NVIDIA H100 80GB HBM3"]},
                "results": [{"op": "h2d", "impl": "cuda", "mode": "pinned", "ranks": 1, "size_bytes": 1 << 30,
                             "algbw_gbps": 60.0}]}
    assert [(p["envelope"], p["placement"]) for p in envelopes.placements(copy_doc)] == [("pcie5-h2d-pinned", "above")]
    copy_doc["machine"]["gpus"] = ["NVIDIA GH200 480GB"]
    assert envelopes.placements(copy_doc) == []
    assert all(e["source"] and e["range"][0] < e["range"][1] for e in envelopes.catalog())


def test_nccls_default_is_marked_where_the_best_forced_choice_beats_it_by_more_than_a_tenth():
    """The default-versus-best summary on fixed figures: at one size the default loses by 25 % (marked),
    at another by 5 % (shown, not marked), at a third it wins; a size no variant measured is left out."""
    from commbench.analysis import nccl_default
    base = {"op": "allreduce", "impl": "nccl", "ranks": 8, "dtype": "float32", "redop": "sum", "in_place": False}

    def rec(size, us, **forced):
        choice = {"algo": forced.get("nccl_algo", "nvls").upper(), "proto": forced.get("nccl_proto", "simple").upper()}
        return {**base, **forced, "size_bytes": size, "time_us": {"median": us}, "nccl_choice": choice}
    doc = {"results": [rec(1024, 12.5), rec(1 << 20, 21.0), rec(1 << 30, 2000.0), rec(4 << 30, 8000.0),
                       rec(1024, 10.0, nccl_algo="ring", nccl_proto="ll"), rec(1 << 20, 20.0, nccl_algo="ring", nccl_proto="ll"),
                       rec(1 << 30, 2500.0, nccl_algo="ring", nccl_proto="ll"),
                       rec(1024, 11.0, nccl_algo="tree", nccl_proto="ll"), rec(1 << 30, 2400.0, nccl_algo="tree", nccl_proto="ll")]}
    assert nccl_default.summary_lines(doc) == [
        "NCCL's default against the best forced choice: allreduce nccl (8 ranks)",
        "  1K: default (NVLS/SIMPLE) 12.50 us, best algo=ring proto=ll (RING/LL) 10.00 us: default slower by 25 %",
        "  1M: default (NVLS/SIMPLE) 21.00 us, best algo=ring proto=ll (RING/LL) 20.00 us",
        "  1G: default (NVLS/SIMPLE) 2000.00 us, best algo=tree proto=ll (TREE/LL) 2400.00 us"]
    assert nccl_default.summary_lines({"results": doc["results"][:4]}) == []


PER_ITER = "nccl-tests-all_reduce_perf-2proc-g2-I1.json"


def test_nccl_tests_per_iteration_json_keeps_each_iteration_and_each_process():
    """nccl-tests 2.19's -J file of a -I 1 -K 2 run on 2 processes of 2 GPUs each (-g 2), written as
    util.cu writes it (its devices list each process's first GPU only, ranks 0 and 2, so the ranks
    are the entries times -g): each iteration's time (the slowest GPU's) becomes a sample, the 2 skipped
    left out as nccl-tests leaves them out of its statistics; each process's own times make the
    per-rank figures, one entry per process (its slowest GPU's, not per rank), so that the late
    process is named as a run's straggler would be."""
    raw = json.loads(_read(PER_ITER))
    imported = _nccl(_read(PER_ITER))
    doc = imported.doc
    results.validate(doc)
    assert imported.warnings == [] and results.timing_of(doc) == "per-iteration (nccl-tests -I 1)"
    assert len(doc["results"]) == 6 and doc["machine"]["ranks"] == 4
    for rec in doc["results"]:
        [row] = [r for r in raw["results"] if r["size"] == rec["size_bytes"]]
        half = "in_place" if rec["in_place"] else "out_of_place"
        report = row[f"{half}_per_iter"]
        assert rec["samples_us"] == report["times_us"][2:] and rec["iterations"] == 6
        assert rec["time_us"]["median"] == pytest.approx(np.median(report["times_us"][2:]))
        assert rec["nccl_tests_time_us"] == row[half]["time"]
        assert [(p["rank"], p["process"], p["process_ranks"], p["host"]) for p in rec["per_rank"]] == \
            [(0, 0, 2, "node-a"), (2, 1, 2, "node-b")]
        assert rec["per_rank"][1]["skew_median_us"] == pytest.approx(20.0)
        assert rec["straggler"] == {"rank": 2, "host": "node-b", "waited_us": pytest.approx(20.0), "process": 1,
                                    "process_ranks": 2}
    from commbench.analysis import stragglers
    assert stragglers.summary_lines(doc)[0] == (
        "straggler: allreduce nccl (4 ranks): process 1 (ranks 2-3, host node-b) arrives 20.0 us late at every size; "
        "the others wait for it (= 20.0 us of the 31.2-62.2 us per call)")
    # One process of 8 GPUs (-g 8, no MPI): one device entry, 8 ranks, no per-process rows.
    one = copy.deepcopy(raw)
    one["config"].update(ngpus=8, devices=raw["config"]["devices"][:1])
    for row in one["results"]:
        for half in ("out_of_place_per_iter", "in_place_per_iter"):
            del row[half]["per_process_max_times_us"]
    doc = _nccl(json.dumps(one)).doc
    rec = doc["results"][0]
    assert doc["machine"]["ranks"] == rec["ranks"] == 8 and doc["machine"]["hosts"] == ["node-a"]
    assert "per_rank" not in rec and len(rec["samples_us"]) == 6
    assert rec["busbw_gbps"] == pytest.approx(rec["algbw_gbps"] * 2 * 7 / 8)
    # A file that lists every rank (not only each process's first) is counted as it lists them.
    every = copy.deepcopy(raw)
    every["config"]["devices"] = [dict(d, rank=d["rank"] + i, device=i) for d in raw["config"]["devices"] for i in (0, 1)]
    assert _nccl(json.dumps(every)).doc["machine"]["ranks"] == 4


def test_nccl_tests_per_iteration_json_that_does_not_add_up_is_refused_or_left_out(workdir):
    raw = json.loads(_read(PER_ITER))
    nan = copy.deepcopy(raw)
    nan["results"][1]["in_place_per_iter"]["times_us"][4] = "nan"
    imported = _nccl(json.dumps(nan))
    assert imported.warnings == ["log: left out 1 row(s) at 32K: nccl in-place has an iteration time that is not a "
                                 "number"]
    assert len(imported.doc["results"]) == 5
    rows = copy.deepcopy(raw)
    rows["results"][0]["out_of_place_per_iter"]["per_process_max_times_us"].pop()
    with pytest.raises(CommbenchError, match=r"^log: per_process_max_times_us holds 1 rows where 2 processes ran "
                                             r"\(4 ranks, 2 a process\), each of 8 iterations, in: "):
        _nccl(json.dumps(rows))
    mixed = copy.deepcopy(raw)
    del mixed["results"][2]["in_place_per_iter"]
    with pytest.raises(CommbenchError, match="some results carry nccl-tests' per-iteration times"):
        _nccl(json.dumps(mixed))
    path = os.path.join(workdir, "rows.json")
    with open(path, "w") as f:
        json.dump(rows, f)
    r = commbench(["import", "nccl-tests", path, "-o", os.path.join(workdir, "out.json")], cwd=workdir)
    assert r.returncode == 2 and r.stderr.startswith(f"commbench: error: {path}: per_process_max_times_us holds 1 rows")
    assert len(r.stderr.splitlines()) == 1 and not os.path.exists(os.path.join(workdir, "out.json"))


# Per log of tests/data/nccl-tests, in its expected.json: op, ranks, hosts, records, dtype, redop, root,
# rows as the log prints them (in place, size, count, time, algbw, busbw), and the sizes of in-place
# rows left out. Rooted collectives print their root, the others -1; collectives that reduce nothing
# print redop none (sendrecv prints the --op it was given); count is per rank where the buffers differ
# in size (all-gather, reduce-scatter, all-to-all, gather, scatter).
with open(os.path.join(NCCL_TESTS, "expected.json")) as _f:
    NCCL_LOGS = json.load(_f)


@pytest.mark.parametrize("log", NCCL_LOGS)
def test_every_nccl_tests_collective_is_imported_under_its_name(log):
    want = NCCL_LOGS[log]
    op, ranks, hosts, n, dtype, redop, root, left_out = (want[k] for k in ("op", "ranks", "hosts", "records", "dtype",
                                                                         "redop", "root", "left_out"))
    imported = _nccl(_read(log, NCCL_TESTS))
    doc = imported.doc
    results.validate(doc)
    assert (doc["config"]["op"], doc["machine"]["ranks"], doc["machine"]["hosts"], len(doc["results"])) == \
        (op, ranks, hosts, n)
    assert doc["status"] == "complete" and doc["imported"] == {"tool": "nccl-tests", "source": "log", "truncated": False}
    assert doc["machine"]["gpus"] == ["NVIDIA H100 80GB HBM3"]
    assert {r["impl"] for r in doc["results"]} == {"nccl"} and doc["config"]["impls"] == ["nccl"]
    recs = {(r["in_place"], r["size_bytes"]): r for r in doc["results"]}
    for row in want["rows"]:
        in_place, size, count, time_us, algbw, busbw = (row[k] for k in ("in_place", "size", "count", "time_us", "algbw",
                                                                          "busbw"))
        r = recs[(in_place, size)]
        assert (r["op"], r["count"], r["time_us"]["median"], r["samples_us"], r["wrong"]) == \
            (op, count, time_us, [time_us], 0)
        assert (r["dtype"], r["redop"], r.get("root"), r["ranks"]) == (dtype, redop, root, ranks)
        # From the printed time: equal to the printed figures up to their rounding.
        assert r["algbw_gbps"] == pytest.approx(algbw, abs=0.006)
        assert r["busbw_gbps"] == pytest.approx(busbw, abs=0.006)
    assert imported.warnings == ([] if left_out is None else [
        f"log: left out {n} row(s) at {left_out}: nccl in-place #wrong is N/A: nccl-tests did not check the result"])


@pytest.mark.parametrize("name", importers.NCCL_TESTS_REFUSED)
def test_collectives_commbench_does_not_measure_are_refused_by_name(name, workdir):
    from commbench import collectives
    out = os.path.join(workdir, "out.json")
    r = commbench(["import", "nccl-tests", os.path.join(NCCL_TESTS, f"{name}_perf-8gpu.txt"), "-o", out], cwd=workdir)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"is {name}_perf output: commbench does not import {name}, only the nccl-tests runs of " \
           f"{', '.join(collectives.names())}\n" in r.stderr
    assert os.listdir(workdir) == []


def _unnamed(text):
    """The log without the lines that name its binary (as nccl-tests before 2.13 prints it)."""
    return "".join(line for line in text.splitlines(keepends=True) if "_perf" not in line)


def test_the_log_names_the_collective_and_op_is_the_fallback():
    reduce_log = _read("reduce_perf-4gpu-root2-max-half.txt", NCCL_TESTS)
    with pytest.raises(CommbenchError, match="is reduce_perf output \\(reduce\\); --op broadcast disagrees"):
        _nccl(reduce_log, "broadcast")
    assert _nccl(reduce_log, "reduce").doc["config"]["op"] == "reduce"
    # Without the name, a table that fits one collective only is read as that one...
    assert _nccl(_unnamed(reduce_log)).doc["config"]["op"] == "reduce"
    assert _nccl(_unnamed(_read("reduce_scatter_perf-8gpu-bf16.txt", NCCL_TESTS))).doc["config"]["op"] == "reducescatter"
    # ...one that fits two needs --op, and --op must fit the table.
    gather = _unnamed(_read("all_gather_perf-8gpu.txt", NCCL_TESTS))
    with pytest.raises(CommbenchError, match="cannot tell which collective: .* its table fits allgather and alltoall; "
                                             "give --op"):
        _nccl(gather)
    assert _nccl(gather, "allgather").doc["config"]["op"] == "allgather"
    with pytest.raises(CommbenchError, match="not allreduce output: redop none, where allreduce reduces, in: +0 +0 +float"):
        _nccl(gather, "allreduce")
    with pytest.raises(CommbenchError, match="not broadcast output: 32 elements of float in 1024 bytes, where broadcast "
                                             "on 8 ranks has 256"):
        _nccl(_unnamed(_read("alltoall_perf-8gpu.txt", NCCL_TESTS)).replace("    none      -1", "    none       0"),
              "broadcast")


def test_the_op_choices_are_the_registry_names():
    from commbench import collectives
    from commbench.cli.analyze import import_cmd
    [option] = [p for p in import_cmd.params if p.name == "op"]
    assert list(option.type.choices) == collectives.names()


def test_figures_that_are_not_numbers_never_reach_the_file():
    log = _read("broadcast_perf-8gpu.txt", NCCL_TESTS)
    log = log.replace("float    none       0     9.49", "float    none       0      nan")
    log = log.replace("   0     9.51    0.00    0.00       0", "   0     9.51    0.00    0.00     N/A")
    imported = _nccl(log)
    assert imported.warnings == [
        "log: left out 1 row(s) at 8: nccl time is nan",
        "log: left out 1 row(s) at 8: nccl in-place #wrong is N/A: nccl-tests did not check the result"]
    assert len(imported.doc["results"]) == 18 and 8 not in {r["size_bytes"] for r in imported.doc["results"]}
    json.loads(json.dumps(imported.doc), parse_constant=lambda c: pytest.fail(f"{c} in the result file"))
    # The same from -J JSON, which writes NaN as "nan" and an unchecked #wrong as null.
    doc = json.loads(_read("nccl-tests-all_reduce_perf-8gpu.json"))
    doc["results"][0]["out_of_place"]["time"] = "nan"
    doc["results"][1]["in_place"]["nwrong"] = None
    imported = _nccl(json.dumps(doc))
    assert imported.warnings == ["log: left out 1 row(s) at 8: nccl time is nan",
                                 "log: left out 1 row(s) at 64: nccl in-place #wrong is null: nccl-tests did not check "
                                 "the result"]
    assert len(imported.doc["results"]) == 18
    osu = importers.import_osu(io.StringIO("# OSU MPI Latency Test v7.4\n# Size       Avg Latency(us)\n1 0.43\n2 -nan\n"),
                               "lat")
    assert osu.warnings == ["lat: left out 1 row(s) at 2: the figure is -nan"]
    assert [r["size_bytes"] for r in osu.doc["results"]] == [1]


@pytest.mark.parametrize("version", [999, None, "3"])
def test_an_unknown_nccl_tests_json_version_is_named_in_a_warning(version):
    doc = json.loads(_read("nccl-tests-all_reduce_perf-8gpu.json"))
    assert doc["version"] == 3 and _nccl(json.dumps(doc)).warnings == []
    if version is None:
        del doc["version"]
    else:
        doc["version"] = version
    imported = _nccl(json.dumps(doc))
    assert imported.warnings == [f"log: nccl-tests JSON version {version!r}, not one this commbench knows (1, 2, 3): "
                                 f"read as version 3; check its figures against the file"]
    assert len(imported.doc["results"]) == 20


def test_an_osu_log_cut_in_the_middle_of_a_row_is_a_failed_run():
    """OSU prints no closing line: a last row without its line end was cut short, and its figure
    (here 46869.14 cut to 468) is no figure of the run."""
    whole = _read("osu_allreduce-7.4-2ranks-shm.txt")
    assert _osu_import(whole).doc["status"] == "complete"
    last = whole.rstrip("\n").splitlines()[-1]
    cut = whole.rstrip("\n")[:-len(last)] + last[:last.index("46869.14") + 3]
    imported = _osu_import(cut)
    assert imported.doc["status"] == "failed" and imported.doc["results"][-1]["size_bytes"] == 33554432
    assert imported.warnings == [f"truncated: ar ends in the middle of a row ('{last[:last.index('46869.14') + 3]}', "
                                 f"no line end): the run was cut short; that row is left out and the run imported as "
                                 f"failed"]


def _osu_import(text):
    return importers.import_osu(io.StringIO(text), "ar")


def test_a_truncated_log_is_a_failed_run(workdir):
    lines = _read("all_gather_perf-8gpu.txt", NCCL_TESTS).splitlines(keepends=True)
    cut = "".join(lines[:lines.index(next(line for line in lines if line.startswith("      262144")))])
    imported = _nccl(cut)
    assert imported.doc["status"] == "failed" and imported.doc["imported"]["truncated"] is True
    assert len(imported.doc["results"]) == 10 and imported.doc["error"].startswith("truncated: log ends before")
    assert imported.warnings == ["truncated: log ends before nccl-tests' closing 'Avg bus bandwidth' line (the run "
                                 "was cut short after 5 size(s)); imported as a failed run"]
    path = os.path.join(workdir, "cut.log")
    with open(path, "w") as f:
        f.write(cut)
    r = commbench(["import", "nccl-tests", path, "-o", os.path.join(workdir, "cut.json")], cwd=workdir)
    assert r.returncode == 0 and r.stdout.startswith("imported 10 records")
    assert r.stderr == f"warning: truncated: {path} ends before nccl-tests' closing 'Avg bus bandwidth' line (the run " \
                       "was cut short after 5 size(s)); imported as a failed run\n"
    assert results.load_document(os.path.join(workdir, "cut.json"))["status"] == "failed"
    # -J JSON without its closing average bus bandwidth: a run that stopped early.
    doc = json.loads(_read("nccl-tests-all_reduce_perf-8gpu.json"))
    del doc["average_bus_bandwidth"]
    assert _nccl(json.dumps(doc)).doc["status"] == "failed"


def test_other_files_are_given_up_early():
    junk = io.StringIO("".join(f"{i} nothing like nccl-tests here\n" for i in range(100_000)))
    with pytest.raises(CommbenchError, match="^log is not nccl-tests output: none of its first 50 lines is$"):
        importers.import_nccl_tests(junk, "log")
    assert junk.tell() < 2000  # a few dozen lines read, not the whole file
    binary = io.StringIO("\x00\ufffd" * 5_000_000)  # no line breaks: read in pieces, given up all the same
    with pytest.raises(CommbenchError, match="not nccl-tests output"):
        importers.import_nccl_tests(binary, "log")
    assert binary.tell() <= importers.UNRECOGNISED_LIMIT * importers.MAX_LINE
    osu = io.StringIO("# just a log\n" * 100_000)
    with pytest.raises(CommbenchError, match="not OSU output"):
        importers.import_osu(osu, "log")
    assert osu.tell() < 2000


def test_a_log_is_read_only_as_far_as_the_tools_output_goes():
    """One recognised line in a long log does not make the whole log read: reading stops at the first
    UNRECOGNISED_LIMIT lines in a row that are not the tool's."""
    chatter = "".join(f"step {i} loss 0.5\n" for i in range(100_000))
    training = io.StringIO("host: NCCL INFO Bootstrap : Using eth0\n" + chatter)
    with pytest.raises(CommbenchError, match="no result rows"):
        importers.import_nccl_tests(training, "log")
    assert training.tell() < 5000
    after_a_run = io.StringIO(_read("all_gather_perf-8gpu.txt", NCCL_TESTS) + chatter)
    imported = importers.import_nccl_tests(after_a_run, "log")
    assert imported.doc["status"] == "complete" and imported.warnings == [] and after_a_run.tell() < 20_000
    osu = io.StringIO("# OSU MPI Latency Test v7.4\n# Size       Avg Latency(us)\n1 0.43\n" + chatter)
    assert len(importers.import_osu(osu, "lat").doc["results"]) == 1 and osu.tell() < 5000


def test_json_larger_than_nccl_tests_writes_is_refused_unread(monkeypatch):
    monkeypatch.setattr(importers, "MAX_JSON", 1000)
    huge = io.StringIO("{\n" + " " * 100_000 + "}")
    with pytest.raises(CommbenchError, match="^log: not the JSON of nccl-tests -J: larger than 1000 characters$"):
        importers.import_nccl_tests(huge, "log")
    assert huge.tell() <= 1002  # the first line, and one character more than allowed


def test_a_log_of_more_rows_than_a_sweep_may_have_is_refused(monkeypatch):
    """Imports get the sweeps' limit of sizes (MAX_SIZES): a log of more rows is refused, in every
    format, once the row past the limit is read."""
    monkeypatch.setattr(importers, "MAX_SIZES", 2)
    table = _read("nccl-tests-all_reduce_perf-8gpu.txt")
    line = "^log: more than 2 result rows, the most sizes a sweep may have; split the log$"
    with pytest.raises(CommbenchError, match=line):
        _nccl(table)
    with pytest.raises(CommbenchError, match=line):
        _nccl(_read("nccl-tests-all_reduce_perf-8gpu.json"))
    with pytest.raises(CommbenchError, match=line.replace("^log", "^lat")):
        importers.import_osu(io.StringIO(_read("osu_latency-7.4-2ranks-shm.txt")), "lat")
    monkeypatch.setattr(importers, "MAX_SIZES", 3)
    assert len(importers.import_osu(io.StringIO("# OSU MPI Latency Test v7.4\n# Size  Avg Latency(us)\n"
                                                "1 0.4\n2 0.4\n4 0.5\n"), "lat").doc["results"]) == 3


def test_nccl_tests_binaries_are_the_registry_names_and_aliases():
    """Each nccl-tests log of tests/data names its binary (<name>_perf): each is imported as the op
    its expected.json says, or refused by name."""
    from commbench import collectives
    binaries = {f.split("_perf")[0]: NCCL_LOGS.get(f, {}).get("op") for f in os.listdir(NCCL_TESTS) if "_perf" in f}
    assert {b: importers.NCCL_TESTS_OPS.get(b) for b in binaries} == binaries
    assert {b for b, op in binaries.items() if op is None} == set(importers.NCCL_TESTS_REFUSED)
    assert importers.NCCL_TESTS_OPS == {s: c.name for c in collectives.all_collectives() for s in (c.name, *c.aliases)}
    assert not set(importers.NCCL_TESTS_REFUSED) & set(importers.NCCL_TESTS_OPS)


def test_two_runs_in_one_log_are_refused():
    both = _read("all_gather_perf-8gpu.txt", NCCL_TESTS) + _read("alltoall_perf-8gpu.txt", NCCL_TESTS)
    with pytest.raises(CommbenchError, match="more than one nccl-tests run \\(all_gather_perf, then alltoall_perf\\)"):
        _nccl(both)


def test_import_errors_are_one_line():
    with pytest.raises(CommbenchError, match="cannot tell which collective"):
        _nccl(_read("nccl-tests-all_reduce_perf-8gpu.txt").replace("all_reduce_perf", "x"))
    with pytest.raises(CommbenchError, match="no result rows"):
        _nccl("# nccl-tests version 2.18.3 nccl-headers=22703 nccl-library=22703\n", op="allreduce")
    with pytest.raises(CommbenchError, match="which OSU test"):
        importers.import_osu(io.StringIO("# Size   Latency\n8 1.0\n"), "x")


# ---- the commands -------------------------------------------------------------------------------------

@pytest.fixture
def files(workdir):
    base, run = _base_and_run()
    slow = _base_and_run(slow_bw=1.5)[1]
    paths = {}
    for name, d in (("base", base), ("run", run), ("slow", slow)):
        paths[name] = os.path.join(workdir, f"{name}.json")
        with open(paths[name], "w") as f:
            json.dump(d, f)
    return paths


def test_baseline_compare_plot_report_export(files, workdir):
    r = commbench(["baseline", "save", files["base"], "--name", "node-a", "--dir", "bl"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    saved = os.path.join(workdir, "bl", "node-a.json")
    doc = results.load_document(saved)
    assert doc["baseline"]["name"] == "node-a" and all(r["samples_us"] == [] for r in doc["results"])
    again = commbench(["baseline", "save", files["run"], "--name", "node-a", "--dir", "bl"], cwd=workdir)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert results.load_document(saved)["baseline"]["source"] == "base.json"

    ok = commbench(["compare", saved, files["run"]], cwd=workdir)
    assert ok.returncode == 0 and "# compare: PASS" in ok.stdout, ok.stdout + ok.stderr
    bad = commbench(["compare", saved, files["slow"], "--tolerance-bw", "10%", "--json"], cwd=workdir)
    assert bad.returncode == 1 and json.loads(bad.stdout)["status"] == "regression"
    unusable = commbench(["compare", saved, os.path.join(workdir, "missing.json")], cwd=workdir)
    assert unusable.returncode == 2 and "Traceback" not in unusable.stderr

    png = os.path.join(workdir, "p.png")
    r = commbench(["plot", files["run"], "-o", png, "--baseline", saved, "--fabric", "eth-100g"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert commbench(["plot", files["run"], "-o", png], cwd=workdir).returncode == 2

    r = commbench(["report", files["run"], "-o", "rep", "--expect-gbps", "10"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    md = open(os.path.join(workdir, "rep", "report.md")).read()
    assert "| allreduce | ring@mpi | 4 |" in md and "PASS (" in md and "![plot](plot.png)" in md
    assert "<table>" in open(os.path.join(workdir, "rep", "report.html")).read()

    r = commbench(["export", files["run"], "--format", "csv"], cwd=workdir)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0].startswith("op,impl,dtype") and len(lines) == 1 + len(SIZES)
    assert "samples_us" not in lines[0]


def test_fit_command_json(files, workdir):
    r = commbench(["fit", files["run"], "--json", "--fabric", "eth-200g"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    [f] = json.loads(r.stdout)
    assert {"op", "impl", "ranks", "alpha_us", "bandwidth_gbps", "segments", "verdict"} <= set(f)
    seg = f["segments"][0]
    assert {"size_min", "size_max", "alpha_us", "bandwidth_gbps", "alpha_us_ci", "bandwidth_gbps_ci"} <= set(seg)
    assert f["verdict"] == "FAIL" and f["percent_of_expected"] == pytest.approx(40, rel=0.05)


def test_import_command(workdir):
    out = os.path.join(workdir, "osu.json")
    r = commbench(["import", "osu", os.path.join(IMPORTS, "osu_latency-7.4-2ranks-shm.txt"), "-o", out], cwd=workdir)
    assert r.returncode == 0 and "imported 21 records" in r.stdout
    assert len(results.load(out)) == 21
    again = commbench(["import", "osu", os.path.join(IMPORTS, "osu_latency-7.4-2ranks-shm.txt"), "-o", out], cwd=workdir)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_empty_messages_are_left_out_of_fits_and_comparisons():
    recs = synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9), sizes=[0] + SIZES)
    recs[0]["time_us"]["median"] = 0.0
    [f] = fit.fit_records(recs)
    assert f["segments"][0]["size_min"] == SIZES[0]
    base, run = doc_of(recs), doc_of(copy.deepcopy(recs))
    assert all(r["size_bytes"] > 0 for r in cmp.compare(base, run, 0.1, 0.25)["series"][0]["rows"])


def test_bad_import_inputs_say_what_is_wrong():
    with pytest.raises(CommbenchError, match="broken nccl-tests JSON"):
        importers.import_nccl_tests(io.StringIO('{"results": ['), "j")
    with pytest.raises(CommbenchError, match="osu_bibw"):
        importers.import_osu(io.StringIO("# OSU MPI Bi-Directional Bandwidth Test v7.4\n1 2.0\n"), "b")
    with pytest.raises(CommbenchError, match="cannot read 'x1.5'"):
        importers.import_osu(io.StringIO("# OSU MPI Latency Test v7.4\n# Size Avg Latency(us)\n8 x1.5\n"), "l")


@pytest.mark.parametrize("title", ["# OSU MPI All-to-All Personalized Exchange Latency Test v7.4",
                                   "# OSU MPI Broadcast Latency Test v7.4", "# OSU MPI-CUDA Latency Test v7.4 extra",
                                   "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4"])
def test_an_osu_test_that_is_not_imported_is_refused_by_its_title(title):
    """osu_alltoall's header is osu_latency's (Size, Avg Latency): its rows were stored as ping-pong."""
    log = f"{title}\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n1  1.20\n2  1.25\n"
    with pytest.raises(CommbenchError, match="is not an OSU test commbench imports"):
        importers.import_osu(io.StringIO(log), "a")
    with pytest.raises(CommbenchError, match="is not an OSU test commbench imports"):
        importers.import_osu(io.StringIO(log), "a", test="latency")


def test_a_test_named_against_the_logs_title_is_refused():
    log = "# OSU MPI Allreduce Latency Test v7.4\n# Size  Avg Latency(us)\n4  0.62\n"
    with pytest.raises(CommbenchError, match="--test latency given but the log's title says allreduce"):
        importers.import_osu(io.StringIO(log), "a", test="latency")
    assert importers.import_osu(io.StringIO(log), "a", test="allreduce").doc["results"][0]["op"] == "allreduce"


def test_a_record_repeated_in_a_result_file_is_refused(tmp_path):
    recs = synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9), sizes=SIZES[:4])
    doc = doc_of([*recs, copy.deepcopy(recs[2])])
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CommbenchError, match=r"dup.json: record 4 repeats record 2 \(the same series and size\)"):
        results.load_document(str(path))
    # Another placement of the same size is another series.
    other = copy.deepcopy(recs[2])
    other["in_place"] = True
    path.write_text(json.dumps(doc_of([*recs, other])))
    assert len(results.load_document(str(path))["results"]) == 5


@pytest.mark.parametrize("bad", [0, -1])
def test_a_bad_record_among_many_is_named_without_walking_the_others(bad, monkeypatch):
    """The error path's cost does not grow with the records: jsonschema walks the document without
    them, and the first record that the compiled check refuses (a file of 900,000 records lacking a
    field took minutes when every record's errors were collected and sorted)."""
    recs = synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9), sizes=SIZES[:1])
    many = [dict(recs[0], size_bytes=k + 1) for k in range(20_000)]
    index = bad % len(many)
    many[index] = {k: v for k, v in many[index].items() if k != "op"}
    walked = []
    real = results._validator()

    class Spy:
        def iter_errors(self, doc):
            walked.append(len(doc.get("results") or ()) if isinstance(doc, dict) else None)
            return real.iter_errors(doc)

        def descend(self, *args, **kwargs):
            walked.append(1)
            return real.descend(*args, **kwargs)
    monkeypatch.setattr(results, "_validator", lambda: Spy())
    with pytest.raises(CommbenchError) as err:
        results.validate(doc_of(many), "big.json")
    assert str(err.value) == f"big.json: invalid field 'results/{index}': 'op' is a required property"
    assert walked == [0, 1], walked


def test_wrong_results_make_no_baseline_and_pass_no_comparison(tmp_path):
    recs = synthetic("allreduce", "ring@mpi", 4, ring(4, 3e-6, 10e9))
    bad = copy.deepcopy(recs)
    bad[3]["wrong"] = 7
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc_of(bad)))
    with pytest.raises(CommbenchError, match="1 of its 17 records have wrong elements: a baseline is a correct run"):
        baseline.save(str(path), "b", str(tmp_path / "bl"))
    found = cmp.compare(doc_of(recs), doc_of(bad), 0.1, 0.25)
    assert found["status"] == "regression" and found["wrong"] == 7
    assert "# REGRESSION: the run has 7 wrong element(s)" in "\n".join(cmp.compare_lines(found))
    assert cmp.compare(doc_of(recs), doc_of(copy.deepcopy(recs)), 0.1, 0.25)["status"] == "pass"


def test_a_plot_of_equal_times_says_nothing_but_where_it_wrote(workdir):
    """Every size at one time, and no fitted line through them (a file's times, here far past any
    fit): matplotlib widened the time axis itself and printed its UserWarning that it did, twice, as
    noise on stderr."""
    from docs import result_doc
    doc = result_doc([record("allreduce", "ring@mpi", "float32", "sum", 2, size, size // 4, np.full(5, 1e5), 0)
                      for size in (1024, 4096)])
    path = os.path.join(workdir, "equal.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    r = commbench(["plot", path, "-o", os.path.join(workdir, "equal.png")], cwd=workdir)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("figure", ["1e308", "1e-320"])
def test_an_imported_figure_no_measurement_gives_is_refused_before_any_arithmetic(figure):
    """A printed time of 1e308 us made numpy warn of an overflow in the median of the -I 1 times, then
    the file was refused for a figure commbench computed; the printed figure is refused itself."""
    log = _read("all_gather_perf-8gpu.txt", NCCL_TESTS).replace("  11.33    0.05", f"  {figure}    0.05", 1)
    with pytest.raises(CommbenchError, match=re.escape(f"log: {figure} is no measured figure (0, or 1e-15 to 1e+12) "
                                                       f"in: ")):
        _nccl(log)


def _as_json(log: str, doc: dict) -> dict:
    """What nccl-tests -J writes for the run a log shows, from the log's import: its binary in args,
    its ranks and hosts in config.devices, one result per size with both halves."""
    binary = re.search(r"\b(\w+)_perf\b", log).group(1)
    types = {dtype: name for name, (dtype, _) in importers.NCCL_TYPES.items()}
    devices = [{"rank": r, "group": 0, "pid": 100 + r, "hostname": doc["machine"]["hosts"][0],
                "device": r, "device_hex": "0000:00:00", "device_info": doc["machine"]["gpus"][0]}
               for r in range(doc["machine"]["ranks"])]
    rows: dict = {}
    seen: dict = {}  # a size the log prints twice (sizes below a block per rank round to 0) is two rows
    for r in doc["results"]:
        nth = seen[(r["size_bytes"], r["in_place"])] = seen.get((r["size_bytes"], r["in_place"]), -1) + 1
        redop = "sum" if doc["config"]["op"] in importers.PRINTS_REDOP else r["redop"]
        row = rows.setdefault((r["size_bytes"], nth), {"size": r["size_bytes"], "count": r["count"],
                                                       "type": types[r["dtype"]], "redop": redop,
                                                       "root": f"    {r.get('root', -1)}"})
        row["in_place" if r["in_place"] else "out_of_place"] = {"time": r["time_us"]["median"], "alg_bw": r["algbw_gbps"],
                                                                 "bus_bw": r["busbw_gbps"], "nwrong": float(r["wrong"])}
    return {"version": 3, "args": [f"./build/{binary}_perf", "-J", "out.json"],
            "config": {"nthreads": 1, "ngpus": 1, "devices": devices}, "results": list(rows.values())}


@pytest.mark.parametrize("log", NCCL_LOGS)
def test_every_collective_s_nccl_tests_json_imports_as_its_log(log):
    """Each binary's -J JSON (made here from its log's figures) imports as its log does: same op,
    ranks, records and times."""
    text = _read(log, NCCL_TESTS)
    from_log = _nccl(text).doc
    from_json = importers.import_nccl_tests(io.StringIO(json.dumps(_as_json(text, from_log))), "json", None).doc
    results.validate(from_json)
    key = lambda d: sorted((r["size_bytes"], r["in_place"], r["time_us"]["median"], r["count"]) for r in d["results"])  # noqa: E731
    assert (from_json["config"]["op"], from_json["machine"]["ranks"], key(from_json)) == \
        (from_log["config"]["op"], from_log["machine"]["ranks"], key(from_log))
