"""Fit, fabric verdicts, baselines, compare, plots, reports, export and import."""

import copy
import json
import os

import numpy as np
import pytest

from commbench import compare as cmp
from commbench import fabrics, fit, importers, results
from commbench.errors import CommbenchError
from commbench.sweep import record
from conftest import commbench

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
            "config": {"op": "allreduce", "impls": ["ring"], "sizes": SIZES, "dtype": "float32", "redop": "sum",
                       "in_place": False, "policy": {}}, "machine": m, "env": {}, "status": "complete", "error": None,
            "results": recs}


# ---- fit --------------------------------------------------------------------------------------------

def test_ring_fit_recovers_alpha_and_link_bandwidth():
    [f] = fit.fit_records(synthetic("allreduce", "ring", 4, ring(4, 3e-6, 10e9)))
    assert f["alpha_us"] == pytest.approx(3.0, rel=0.05)
    assert f["bandwidth_gbps"] == pytest.approx(10.0, rel=0.02)
    top = f["segments"][-1]
    assert top["bandwidth_gbps_ci"][0] <= 10.0 * 1.01 and top["bandwidth_gbps_ci"][1] >= 10.0 * 0.99
    assert top["r2"] > 0.99 and not f["effective"] and len(f["segments"]) == 1


def test_library_fit_is_marked_effective():
    [f] = fit.fit_records(synthetic("allreduce", "mpi", 4, ring(4, 3e-6, 10e9)))
    assert f["effective"] and f["bandwidth_gbps"] == pytest.approx(10.0, rel=0.02)


def test_tree_and_hockney_models():
    [tree] = fit.fit_records(synthetic("allreduce", "tree", 2, lambda n: 2 * 4e-6 + 2 * n / 5e9))
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
    one = fit.fit_records(synthetic("allreduce", "ring", 1, ring(2, 1e-6, 1e9)))
    few = fit.fit_records(synthetic("allreduce", "ring", 2, ring(2, 1e-6, 1e9), sizes=[8, 16]))
    assert one[0]["skipped"].startswith("one rank") and "at least 3" in few[0]["skipped"]


# ---- fabrics and verdicts ---------------------------------------------------------------------------

def test_catalog_rows_have_sources_and_figures():
    rows = fabrics.catalog()
    assert {"nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5", "ib-hdr", "ib-ndr", "ib-xdr", "eth-10g",
            "eth-400g", "tcp-loopback", "shm"} <= set(rows)
    for r in rows.values():
        assert r["source"] and len(r["alpha_us"]) == 2 and (r.get("measured") or r["bandwidth_gbps"] > 0)
    assert rows["nvlink4"]["bandwidth_gbps"] == 450 and rows["pcie4"]["bandwidth_gbps"] == 31.5


@pytest.mark.parametrize("measured,status", [(400, "PASS"), (360, "PASS"), (359, "WARN"), (270, "WARN"),
                                             (269, "FAIL"), (None, "FAIL")])
def test_verdict_thresholds(measured, status):
    assert fabrics.verdict(measured, fabrics.expectation("nvlink4"))[0] == status


def test_measured_fabrics_measure_this_node():
    shm = fabrics.expectation("shm")
    assert shm.bandwidth_gbps > 0.1 and "here" in shm.source
    assert fabrics.expectation(None, expect_gbps=7.5, expect_us=3).bandwidth_gbps == 7.5
    with pytest.raises(CommbenchError, match="unknown fabric"):
        fabrics.expectation("token-ring")


# ---- compare ----------------------------------------------------------------------------------------

def _base_and_run(slow_bw=1.0, slow_lat=1.0, **machine):
    base = doc_of(synthetic("allreduce", "ring", 4, ring(4, 3e-6, 10e9), seed=1))
    run = doc_of(synthetic("allreduce", "ring", 4, ring(4, 3e-6 * slow_lat, 10e9 / slow_bw), seed=2), **machine)
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


def test_within_tolerance_passes_and_metadata_differences_warn():
    result = cmp.compare(*_base_and_run(slow_bw=1.05, cpu_model="other cpu", ranks=4), 0.10, 0.25)
    assert result["status"] == "pass"
    assert result["warnings"] == ["CPU model differs: baseline cpu, run other cpu"]


def test_nothing_in_common_is_unusable():
    base, run = _base_and_run()
    for r in run["results"]:
        r["impl"] = "tree"
    with pytest.raises(CommbenchError, match="share no"):
        cmp.compare(base, run, 0.1, 0.25)


# ---- import ------------------------------------------------------------------------------------------

def _read(name):
    with open(os.path.join(IMPORTS, name)) as f:
        return f.read()


def test_osu_imports_keep_their_figures():
    lat = importers.import_osu(_read("osu_latency-7.4-2ranks-shm.txt"), "lat")
    results.validate(lat)
    by = {r["size_bytes"]: r for r in lat["results"]}
    assert by[8]["op"] == "pingpong" and by[8]["time_us"]["median"] == 0.41 and len(by) == 21
    bw = importers.import_osu(_read("osu_bw-7.4-2ranks-shm.txt"), "bw")
    top = max(bw["results"], key=lambda r: r["size_bytes"])
    assert top["op"] == "bandwidth" and top["algbw_gbps"] == pytest.approx(11.98861, rel=1e-4)
    ar = importers.import_osu(_read("osu_allreduce-7.4-2ranks-shm.txt"), "ar")
    last = ar["results"][-1]
    assert (last["size_bytes"], last["time_us"]["median"], last["time_us"]["min"], last["iterations"]) == \
        (67108864, 46869.14, 46826.95, 100)
    assert last["busbw_gbps"] == pytest.approx(67108864 / 46869.14e-6 / 1e9)


def test_nccl_tests_table_and_json_agree():
    table = importers.import_nccl_tests(_read("nccl-tests-all_reduce_perf-8gpu.txt"), "t")
    js = importers.import_nccl_tests(_read("nccl-tests-all_reduce_perf-8gpu.json"), "j")
    for d in (table, js):
        results.validate(d)
        assert d["machine"]["ranks"] == 8 and d["machine"]["hosts"] == ["hgx-a01"]
        assert {r["impl"] for r in d["results"]} == {"nccl", "nccl-in-place"}
    t_times = [r["time_us"]["median"] for r in table["results"]]
    j_times = [r["time_us"]["median"] for r in js["results"]]
    assert t_times == pytest.approx(j_times, abs=0.006)
    [f_out, _] = fit.fit_records(js["results"])
    assert f_out["alpha_us"] == pytest.approx(5.5, rel=0.01) and f_out["bandwidth_gbps"] == pytest.approx(360, rel=0.01)


def test_import_errors_are_one_line():
    with pytest.raises(CommbenchError, match="cannot tell which collective"):
        importers.import_nccl_tests(_read("nccl-tests-all_reduce_perf-8gpu.txt").replace("all_reduce_perf", "x"), "t")
    with pytest.raises(CommbenchError, match="no result rows"):
        importers.import_nccl_tests("# nothing here\n", "t", op="allreduce")
    with pytest.raises(CommbenchError, match="which OSU test"):
        importers.import_osu("hello\n", "x")


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
    assert "| allreduce | ring | 4 |" in md and "PASS (" in md and "![plot](plot.png)" in md
    assert "<table>" in open(os.path.join(workdir, "rep", "report.html")).read()

    r = commbench(["export", files["run"], "--csv"], cwd=workdir)
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
    recs = synthetic("allreduce", "ring", 4, ring(4, 3e-6, 10e9), sizes=[0] + SIZES)
    recs[0]["time_us"]["median"] = 0.0
    [f] = fit.fit_records(recs)
    assert f["segments"][0]["size_min"] == SIZES[0]
    base, run = doc_of(recs), doc_of(copy.deepcopy(recs))
    assert all(r["size_bytes"] > 0 for r in cmp.compare(base, run, 0.1, 0.25)["series"][0]["rows"])


def test_bad_import_inputs_say_what_is_wrong():
    with pytest.raises(CommbenchError, match="broken nccl-tests JSON"):
        importers.import_nccl_tests('{"results": [', "j")
    with pytest.raises(CommbenchError, match="osu_bibw"):
        importers.import_osu("# OSU MPI Bi-Directional Bandwidth Test v7.4\n1 2.0\n", "b")
    with pytest.raises(CommbenchError, match="cannot read 'x1.5'"):
        importers.import_osu("# OSU MPI Latency Test v7.4\n# Size Avg Latency(us)\n8 x1.5\n", "l")
