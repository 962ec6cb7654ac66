"""The command line as a user types it: errors, standalone runs, MPI and torchrun launches."""

import glob
import os
import socket

import pytest
from conftest import HERE, batch, commbench, in_process, mpi_env, stub_gpu_env, torchrun_style

from commbench.node.machine import recorded_env
from commbench.results import document as results

# CPU runs name --device cpu: allreduce's default, auto, takes the GPU wherever one is visible.


@pytest.fixture(params=["as is", "GPU visible"])
def cpu_env(request):
    """The environment of a CPU run, as is and with a GPU made visible by a stub that fails any GPU
    work: a CPU run must stay on the CPU when the node has GPUs."""
    return mpi_env() if request.param == "as is" else stub_gpu_env()


@pytest.mark.parametrize("args,needle", [
    (["allreduce", "--sizes", "1Q"], "bad size '1Q'"),
    (["allreduce", "--sizes", "8-1"], "start exceeds the end"),
    (["allreduce", "--impl", "ring,bogus"], "unknown impl 'bogus'"),
    (["allreduce", "--device", "cpu", "--impl", "ring@nccl"],
     "commbench: error: impl 'ring@nccl' of allreduce runs with --device cuda, not --device cpu"),
    (["allreduce", "--device", "cpu", "--impl", "mpi,nccl@nccl"],
     "commbench: error: impl 'nccl@nccl' of allreduce runs with --device cuda, not --device cpu"),
    (["allreduce", "--device", "cpu", "--impl", "ring@gloo"], "unknown impl 'ring@gloo' for allreduce: choose from "
     "gloo, mpi, nccl, ring@mpi, ring@nccl, tree@mpi, tree@nccl"),
    (["allreduce", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["allreduce", "--op", "avg"], "unknown op 'avg'"),
    (["allreduce", "--chunk", "1", "--dtype", "float64"], "smaller than one float64 element"),
    (["allreduce", "--min-iters", "10", "--max-iters", "5"], "exceeds --max-iters"),
    (["p2p", "--sizes", "x"], "bad size 'x'"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    code, _, err = in_process(args, monkeypatch, capsys)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(os.path.join(workdir, "commbench-results"))


def test_click_usage_errors_exit_2(workdir):
    r = commbench(["allreduce", "--iters", "zero"], cwd=workdir)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_more_memory_than_the_host_has_is_refused(workdir):
    r = commbench(["allreduce", "--device", "cpu", "--sizes", "4T", "--impl", "ring", "--np", "2"], cwd=workdir)
    assert r.returncode == 2
    assert "GiB is available" in r.stderr and "Traceback" not in r.stderr


IMPLS = ["mpi", "ring@mpi", "tree@mpi", "gloo"]


def test_standalone_run_as_typed(cpu_env, workdir):
    # A bare algorithm runs over the CPU's transport, MPI, and is named so: ring is ring@mpi.
    r = commbench(["allreduce", "--device", "cpu", "--sizes", "1K-64K:x4", "--impl", "mpi,ring,tree@mpi,gloo@gloo",
                   "--budget-ms", "20"], cwd=workdir, env=cpu_env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for impl in IMPLS:
        assert f"# impl {impl}:" in out
    assert "2 rank(s) on 1 host(s)" in out and "launcher: standalone" in out
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert len(rows) == 4 * 4
    assert {r[0] for r in rows} == {"1024", "4096", "16384", "65536"}
    assert all(r[8] == "0" for r in rows)  # #wrong
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in r.stderr  # set for its own mpirun as root, nothing to say
    files = glob.glob(os.path.join(workdir, "commbench-results", "*_allreduce.json"))
    assert len(files) == 1
    df = results.load(files[0])
    assert len(df) == 16 and set(df["impl"]) == set(IMPLS) and df.attrs["meta"]["config"]["impls"] == IMPLS
    assert (df["ranks"] == 2).all() and (df["wrong"] == 0).all()
    # busbw = algbw * 2(p-1)/p = algbw for two ranks; time is the median of the samples.
    assert (abs(df["busbw_gbps"] - df["algbw_gbps"]) < 1e-9).all()
    meta = df.attrs["meta"]
    assert meta["status"] == "complete" and meta["machine"]["launcher"] == "standalone"
    assert meta["config"]["device"] == "cpu"
    assert meta["machine"]["mpi"].startswith("Open MPI")
    assert meta["topology_fingerprint"] == meta["topology"]["fingerprint"]
    assert meta["topology"]["host"]["cores"] == os.cpu_count()
    assert meta["env"] == recorded_env(meta["env"]) and "OMPI_COMM_WORLD_RANK" not in meta["env"]


def test_standalone_inside_a_slurm_allocation_starts_every_rank_on_this_host(workdir):
    """In `salloc` or `srun --pty bash` the job's variables say one task on this node, and PRRTE's
    Slurm support (awake where an srun answers; tests/stubs/slurm) would refuse the second rank."""
    env = mpi_env()
    env.update(PATH=os.pathsep.join([os.path.join(HERE, "stubs", "slurm"), env["PATH"]]), SLURM_JOBID="7",
               SLURM_JOB_ID="7", SLURM_NODELIST=socket.gethostname(), SLURM_TASKS_PER_NODE="1")
    r = commbench(["allreduce", "--device", "cpu", "--np", "2", "--sizes", "1K", "--impl", "ring", "-o", "s.json"],
                  cwd=workdir, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "2 rank(s) on 1 host(s)" in r.stdout


def test_existing_output_is_never_overwritten(workdir):
    out = os.path.join(workdir, "keep.json")
    with open(out, "w") as f:
        f.write("precious")
    r = commbench(["allreduce", "--device", "cpu", "--sizes", "1K", "--impl", "ring", "-o", out], cwd=workdir)
    assert r.returncode == 2 and "already exists" in r.stderr
    assert open(out).read() == "precious"


def test_one_rank_reports_busbw_as_na(workdir):
    out = os.path.join(workdir, "one.json")
    r = commbench(["allreduce", "--device", "cpu", "--np", "1", "--sizes", "4K", "--impl", "ring,mpi", "-o", out],
                  cwd=workdir)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and not line.startswith("#")]
    assert all(row[7] == "n/a" for row in rows)
    assert results.load(out)["busbw_gbps"].isna().all()


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """This module's 3-rank runs, in one mpirun launch, with a GPU visible (a stub that fails any GPU
    work): a CPU run must stay on the CPU when the node has GPUs."""
    folder = str(tmp_path_factory.mktemp("three"))
    return folder, batch(3, {
        "odd": ["allreduce", "--device", "cpu", "--impl", "ring,tree", "--sizes", "4,12,1004,40004,1M-3M:+1M",
                "--dtype", "float32", "--chunk", "4K", "--budget-ms", "20", "-o", "three.json"],
        "p2p": ["p2p", "--sizes", "1,1K,64K", "--pairs", "all", "--budget-ms", "10", "-o", "p2p.json"],
        "gloo-p2p": ["p2p", "--impl", "gloo", "--pairs", "1:2", "--sizes", "1K,64K", "--budget-ms", "10", "-o", "g3.json"],
    }, folder, env=stub_gpu_env())


DTYPE_OPS = [("bfloat16", "prod"), ("float16", "max"), ("int64", "min"), ("float64", "sum")]


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """Every dtype with every reduction, in place, on 4 ranks: one command of comma lists."""
    folder = str(tmp_path_factory.mktemp("four"))
    dtypes, ops = (",".join(x) for x in zip(*DTYPE_OPS))
    ran = batch(4, {"dtypes": ["allreduce", "--device", "cpu", "--impl", "mpi,ring,tree", "--sizes", "10,1000,65538",
                               "--dtype", dtypes, "--op", ops, "--place", "in", "--iters", "3", "--warmup", "1",
                               "-o", "d.json"]}, folder)
    return folder, ran["dtypes"]


def test_mpirun_three_ranks_odd_sizes_exact(three):
    folder, ran = three
    out, r = os.path.join(folder, "three.json"), ran["odd"]
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert (df["ranks"] == 3).all() and (df["wrong"] == 0).all()
    assert sorted(set(df["count"])) == [1, 3, 251, 10001, 262144, 524288, 786432]
    assert df.attrs["meta"]["machine"]["launcher"] == "mpi" and df.attrs["meta"]["config"]["device"] == "cpu"
    # busbw = algbw * 2(p-1)/p with p = 3.
    assert ((df["busbw_gbps"] / df["algbw_gbps"] - 4 / 3).abs() < 1e-9).all()


@pytest.mark.parametrize("dtype,op", DTYPE_OPS)
def test_mpirun_dtypes_and_ops_in_place(dtype, op, four):
    folder, r = four
    assert r.returncode == 0, r.stderr
    df = results.load(os.path.join(folder, "d.json"))
    df = df[(df["dtype"] == dtype) & (df["redop"] == op)]
    assert len(df) == 3 * 3 and (df["wrong"] == 0).all() and (df["iterations"] == 3).all()
    assert df.attrs["meta"]["config"]["place"] == "in" and df["in_place"].all()


def test_a_host_memory_rank_over_mpi_never_loads_torch(four):
    """Host buffers are NumPy arrays and commbench._host links no torch: a rank that runs MPI's call
    and our algorithms over MPI, bfloat16 included, and writes the result file never imports it
    (seconds of every rank's start, hundreds of MB of its memory)."""
    folder, r = four
    assert r.returncode == 0 and r.torch_loaded is False, r.stderr
    meta = results.load(os.path.join(folder, "d.json")).attrs["meta"]
    assert meta["topology"]["libraries"]["torch"] and meta["topology"]["libraries"]["nccl"] is None


def test_p2p_all_pairs(three):
    folder, ran = three
    out, r = os.path.join(folder, "p2p.json"), ran["p2p"]
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    pairs = {tuple(p) for p in df["pair"]}
    assert pairs == {(0, 1), (0, 2), (1, 2)}
    assert set(df["op"]) == {"pingpong", "bandwidth"} and (df["wrong"] == 0).all()
    assert len(df) == 3 * 2 * 3
    bw = df[df["op"] == "bandwidth"]
    assert (bw["algbw_gbps"] > 0).all()


def test_p2p_standalone_default_pair(workdir):
    """With a GPU visible (a stub that fails any GPU work), p2p's default stays on the host."""
    r = commbench(["p2p", "--sizes", "8,1M", "--budget-ms", "10"], cwd=workdir, env=stub_gpu_env())
    assert r.returncode == 0, r.stderr
    assert "# impl mpi pingpong 0->1" in r.stdout and "# impl mpi bandwidth 0->1" in r.stdout
    [out] = glob.glob(os.path.join(workdir, "commbench-results", "*_p2p.json"))
    assert results.load(out).attrs["meta"]["config"]["device"] == "cpu"


def test_gpu_stub_makes_a_gpu_visible(workdir):
    r = commbench(["version", "-v"], cwd=workdir, env=stub_gpu_env())
    assert r.returncode == 0, r.stderr
    assert "GPUs visible: 1\n" in r.stdout and "CUDA runtime 13.0, NCCL 2.30.7" in r.stdout


def test_auto_device_takes_the_stubbed_gpu_and_fails_without_hanging(workdir):
    """Without --device cpu, allreduce goes to the (stubbed) GPU: the stub works, and a GPU run that
    cannot work ends instead of waiting."""
    r = commbench(["allreduce", "--sizes", "1K", "--budget-ms", "10"], cwd=workdir, env=stub_gpu_env(), timeout=120)
    assert r.returncode != 0


def test_p2p_bad_pair_is_refused(workdir):
    r = commbench(["p2p", "--pairs", "0:5"], cwd=workdir)
    assert r.returncode == 2 and "bad pair '0:5'" in r.stderr and "Traceback" not in r.stderr


def test_torchrun_style_gloo_two_processes(workdir):
    out = os.path.join(workdir, "tr.json")
    ends = torchrun_style(["allreduce", "--device", "cpu", "--sizes", "1K,1M", "--budget-ms", "20", "-o", out],
                          cwd=workdir)
    assert [rc for rc, _, _ in ends] == [0, 0], ends
    assert "# impl gloo:" in ends[0][1] and "launcher: torchrun" in ends[0][1]
    df = results.load(out)
    assert list(df["impl"]) == ["gloo", "gloo"] and (df["wrong"] == 0).all() and (df["ranks"] == 2).all()


def test_torchrun_style_mpi_impl_says_it_needs_mpi(workdir):
    ends = torchrun_style(["allreduce", "--device", "cpu", "--impl", "ring", "--sizes", "1K"], cwd=workdir)
    assert [rc for rc, _, _ in ends] == [2, 2]
    assert ends[0][2] == ("commbench: error: --impl ring@mpi needs an MPI launch (mpirun/srun, or no launcher at all); "
                          "under torchrun use --impl gloo\n")
    assert ends[1][2] == "" and os.listdir(workdir) == []


def test_gloo_p2p_with_a_rank_outside_the_pair(three):
    """Every rank joins the gloo group, including one that takes no part in the pair."""
    folder, ran = three
    out, r = os.path.join(folder, "g3.json"), ran["gloo-p2p"]
    assert r.returncode == 0, r.stderr
    df = results.load(out)
    assert {tuple(p) for p in df["pair"]} == {(1, 2)} and set(df["impl"]) == {"gloo"} and (df["wrong"] == 0).all()


def test_nccl_tests_spellings_of_the_sweep(workdir):
    """nccl-tests' -b/-e/-f (sizes), -n (iterations), -w (warm-up), -m (aggregation) and -c 1 (the
    check) mean what they mean there."""
    out = os.path.join(workdir, "nt.json")
    r = commbench(["allreduce", "--device", "cpu", "--np", "1", "--impl", "mpi", "-b", "8", "-e", "64K", "-f", "4", "-n", "3",
                   "-w", "1", "-m", "2", "-c", "1", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    cfg = results.load_document(out)["config"]
    assert cfg["sizes"] == [8, 32, 128, 512, 2048, 8192, 32768] and cfg["agg"] == 2
    assert (cfg["policy"]["iters"], cfg["policy"]["warmup"]) == (3, 1)


def test_our_algorithms_over_nccl_say_a_reduction_kernel_where_they_reduce():
    """pairwise@nccl (all-to-all) moves data and reduces nothing: its description named a reduction
    kernel, as every algorithm over NCCL's did."""
    from commbench import collectives
    from commbench.transports import impls_for
    for coll in collectives.all_collectives():
        ours = [i for i in impls_for(coll, "cuda").values() if i.transport.name == "nccl" and i.algorithm]
        assert all(("reduction kernel" in i.description) == coll.reduces for i in ours), coll.name
    assert collectives.get("alltoall").algorithms  # pairwise, the one in question
