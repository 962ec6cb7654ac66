"""Every collective command as a user types it, under mpirun (3 ranks, in place, another root,
another reduction) and under torchrun with gloo; exact results, result files that validate,
nccl-tests' size and count, and its bus-bandwidth factors. The commands run in one launch
(conftest.batch); the standalone launch itself is test_cli's, and every impl's exact results at 1 to 4
ranks mpi_correctness.py's."""

import os
import subprocess

import pytest
from conftest import BIN, COMMBENCH, batch, in_process, mpi_env

from commbench import collectives
from commbench.collectives.dtypes import DTYPES, REDOPS
from commbench.collectives.impls import impl_name, split_impl
from commbench.results import document as results
from commbench.transports import gpu_only, impls_for, parse_impls

COLLECTIVES = collectives.names()
# nccl-tests' spellings are accepted too; the result files use the registry's names.
TYPED = {"allgather": "all_gather", "reducescatter": "reduce_scatter"}
SIZES = "8,1000,64K"


def _table_rows(stdout: str) -> list:
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def _variant(coll, ranks) -> list:
    """Options that change what a run computes: another reduction, the last rank as root, in place
    where the collective has that form."""
    args = []
    if coll.reduces:
        args += ["--op", "max", "--dtype", "bfloat16"]
    if coll.rooted:
        args += ["--root", str(ranks - 1)]
    if coll.in_place:
        args += ["--place", "in"]
    return args


def _variant_case(name: str) -> list:
    coll = collectives.get(name)
    return [name, "--device", "cpu", "--impl", ",".join(impls_for(coll, "cpu")), "--sizes", "6,1004,65538",
            "--iters", "3", "--warmup", "1", *_variant(coll, 3), "-o", f"{name}-variant.json"]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Every command of this module that runs on 3 ranks, in one launch."""
    folder = str(tmp_path_factory.mktemp("three"))
    cases = {f"{name}-layout": [TYPED.get(name, name), "--device", "cpu", "--np", "3", "--sizes", SIZES, "--budget-ms",
                                "5", "--warmup", "1", "-o", f"{name}.json"] for name in COLLECTIVES}
    cases.update({f"{name}-variant": _variant_case(name) for name in COLLECTIVES})
    cases["all"] = ["reducescatter", "--device", "cpu", "--impl", "mpi,ring", "--dtype", "all", "--op", "all",
                    "--sizes", "1K,12K", "--iters", "2", "--warmup", "1", "--no-fit", "-o", "all.json"]
    cases["agg"] = ["allgather", "--device", "cpu", "--impl", "mpi,ring", "--agg", "4", "--sizes", "64K",
                    "--iters", "3", "--warmup", "1", "--no-fit", "-o", "agg.json"]
    cases["a2a"] = ["alltoall", "--device", "cpu", "--impl", "mpi,pairwise", "--sizes", "4K-256K:x4",
                    "--iters", "5", "--warmup", "1", "-o", "a2a.json"]
    return folder, batch(3, cases, folder)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_three_ranks_exact_in_nccl_tests_layout(name, three):
    coll = collectives.get(name)
    folder, ran = three
    out = os.path.join(folder, f"{name}.json")
    r = ran[f"{name}-layout"]
    assert r.returncode == 0, r.stderr
    assert "wrong elements in total: 0 OK" in r.stdout
    df = results.load(out)
    assert set(df["op"]) == {name} and set(df["impl"]) == set(impls_for(coll, "cpu"))
    assert (df["wrong"] == 0).all() and (df["ranks"] == 3).all()
    for size in (8, 1000, 65536):
        shape = coll.shape(size, 4, 3)
        got = df[df["size_bytes"] == shape.size]
        assert len(got) == len(impls_for(coll, "cpu")) and (got["count"] == shape.count).all(), (size, shape)
    moved = df[df["size_bytes"] > 0]  # 8 B split into 3 blocks of 4-byte elements leaves empty blocks
    assert ((moved["busbw_gbps"] / moved["algbw_gbps"] - coll.busbw_factor(3)).abs() < 1e-9).all()
    # The table prints the same size and count as the file.
    assert {(int(row[0]), int(row[1])) for row in _table_rows(r.stdout)} == set(zip(df["size_bytes"], df["count"]))


@pytest.mark.parametrize("name", COLLECTIVES)
def test_mpirun_variant_exact_in_nccl_tests_layout(name, three):
    coll = collectives.get(name)
    folder, ran = three
    ranks = 3
    out = os.path.join(folder, f"{name}-variant.json")
    r = ran[f"{name}-variant"]
    assert r.returncode == 0, r.stderr
    assert "wrong elements in total: 0 OK" in r.stdout
    df = results.load(out)
    assert (df["wrong"] == 0).all() and (df["ranks"] == ranks).all() and (df["iterations"] == 3).all()
    assert set(df["impl"]) == set(impls_for(coll, "cpu"))
    if coll.rooted:
        assert (df["root"] == ranks - 1).all()
    assert df.attrs["meta"]["config"]["place"] == ("in" if coll.in_place else "out") and set(df["in_place"]) == {coll.in_place}
    assert {(int(row[0]), int(row[1])) for row in _table_rows(r.stdout)} == set(zip(df["size_bytes"], df["count"]))


def test_under_torchrun_gloo(workdir):
    """The torchrun a user types, with 2 processes on this host. torchrun's launch is the same for every
    collective; gloo's call for each one is checked exactly under mpirun (mpi_correctness.py, and the
    impls of the runs above)."""
    name = "allgather"
    out = os.path.join(workdir, f"{name}.json")
    r = subprocess.run([os.path.join(BIN, "torchrun"), "--standalone", "--nproc-per-node", "2", "--no-python", COMMBENCH,
                        name, "--device", "cpu", "--sizes", "1K,1M", "--budget-ms", "10", "-o", out], env=mpi_env(),
                       cwd=workdir, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "wrong elements in total: 0 OK" in r.stdout
    df = results.load(out)
    assert list(df["impl"]) == ["gloo", "gloo"] and (df["wrong"] == 0).all() and (df["op"] == name).all()
    assert df.attrs["meta"]["machine"]["launcher"] == "torchrun"


def test_an_impl_has_one_name_whatever_was_typed():
    """algorithm@transport, or the transport alone for its call; a bare algorithm runs over its
    device's transport, and transport@transport is the transport's call."""
    coll = collectives.get("allreduce")
    assert [i.name for i in parse_impls("ring, tree@mpi,mpi@mpi,ring@mpi", coll, "cpu")] == ["ring@mpi", "tree@mpi", "mpi"]
    assert [(i.name, i.algorithm, i.transport.name) for i in parse_impls("ring,nccl@nccl", coll, "cuda")] == \
        [("ring@nccl", "ring", "nccl"), ("nccl", None, "nccl")]
    assert [split_impl(n) for n in ("chain@nccl", "gloo", "gloo@gloo")] == [("chain", "nccl"), (None, "gloo"), (None, "gloo")]
    assert impl_name("pairwise", "mpi") == "pairwise@mpi" and impl_name(None, "nccl") == "nccl"
    assert gpu_only("mpi,ring@nccl", coll) and gpu_only("nccl@nccl", coll) and not gpu_only("ring,tree@mpi,mpi", coll)


@pytest.mark.parametrize("args,needle", [
    (["alltoall", "--place", "in"], "No such option '--place'"),
    (["broadcast", "--root", "5", "--np", "2"], "--root 5: only 2 rank(s)"),
    (["allgather", "--op", "max"], "No such option '--op'"),
    (["reducescatter", "--impl", "tree"], "unknown impl 'tree' for reducescatter: choose from mpi, nccl, ring@mpi, ring@nccl"),
    (["reducescatter", "--impl", "gloo"], "unknown impl 'gloo' for reducescatter"),
])
def test_options_that_do_not_apply_are_refused_in_one_line(args, needle, workdir, monkeypatch, capsys):
    """Before any rank starts: one line, no launcher banner."""
    monkeypatch.chdir(workdir)
    code, _, err = in_process([*args, "--device", "cpu", "--sizes", "1K"], monkeypatch, capsys)
    assert code == 2, err
    assert err.startswith("commbench: error: ") and len(err.strip().splitlines()) == 1, err
    assert needle in err and not os.listdir(workdir)


def test_every_dtype_and_reduction_in_one_run(three):
    """--dtype all --op all: one invocation covers the whole matrix, as nccl-tests' -d all -o all."""
    folder, ran = three
    out, r = os.path.join(folder, "all.json"), ran["all"]
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert len(df) == 6 * 4 * 2 * 2 and (df["wrong"] == 0).all()
    assert set(df["dtype"]) == set(DTYPES) and set(df["redop"]) == set(REDOPS)
    assert "# impl ring@mpi bfloat16 prod:" in r.stdout


def test_aggregated_calls_per_iteration(three):
    folder, ran = three
    out, r = os.path.join(folder, "agg.json"), ran["agg"]
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert (df["agg"] == 4).all() and (df["wrong"] == 0).all()
    assert df.attrs["meta"]["config"]["agg"] == 4


def test_analysis_commands_take_any_collective(three, workdir, monkeypatch, capsys):
    """fit, compare, plot and report read an all-to-all result file as they read an all-reduce one,
    with the all-to-all's own cost model."""
    folder, ran = three
    out, r = os.path.join(folder, "a2a.json"), ran["a2a"]
    assert r.returncode == 0, r.stderr
    assert "pairwise: t = 2*alpha + 0.667*n/BW" in r.stdout
    code, fit, err = in_process(["fit", out], monkeypatch, capsys)
    assert code == 0 and "alltoall pairwise@mpi (3 ranks)" in fit, err
    assert in_process(["compare", out, out], monkeypatch, capsys)[0] == 0
    code, _, err = in_process(["plot", out, "-o", os.path.join(workdir, "a2a.png")], monkeypatch, capsys)
    assert code == 0 and os.path.getsize(os.path.join(workdir, "a2a.png")) > 0, err
    code, _, err = in_process(["report", out, "-o", os.path.join(workdir, "report")], monkeypatch, capsys)
    assert code == 0, err
