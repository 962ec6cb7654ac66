import os

import pytest
from conftest import commbench, mpi_env, rank_faults_env

from commbench.launch.world import detect_launcher, launcher_free_env, standalone_command
from commbench.results import document as results

ENVS = [
    ({}, None),
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"}, "mpi"),  # Open MPI mpirun
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "mpi"),  # MPICH hydra, srun --mpi=pmi2
    ({"PMIX_RANK": "1"}, "mpi"),  # srun --mpi=pmix, prterun
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "8"}, "mpi"),  # plain srun
    ({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}, None),  # a batch script is not a launch
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "torchrun"),
    ({"RANK": "0", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
    ({"MV2_COMM_WORLD_SIZE": "2", "MV2_COMM_WORLD_RANK": "1"}, "mpi"),  # MVAPICH
    ({"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "0"}, "mpi"),  # Hydra's node-local variables
]


@pytest.mark.parametrize("env,expected", ENVS)
def test_detect_launcher(env, expected):
    assert detect_launcher(env) == expected


@pytest.mark.parametrize("env,expected", ENVS)
def test_launcher_free_env_is_no_launch(env, expected):
    """What commbench starts from inside a launch (gpu-check under `srun --pty bash`) runs standalone;
    the job's and the user's settings stay."""
    kept = {"PATH": "/bin", "SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "1", "OMPI_MCA_btl": "self,tcp",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "PMIX_MCA_gds": "hash"}
    assert launcher_free_env({**env, **kept}) == kept and detect_launcher(kept) is None


def test_standalone_command_sets_root_variables_only_for_root():
    argv, env = standalone_command(["allreduce", "--sizes", "1K"], 2, cores=2)
    assert argv[1:3] == ["--np", "2"] and argv[-3:] == ["allreduce", "--sizes", "1K"]
    assert "--oversubscribe" not in argv
    assert env["COMMBENCH_STANDALONE"] == "1"
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    else:
        assert "OMPI_ALLOW_RUN_AS_ROOT" not in env


@pytest.mark.mpi
def test_a_standalone_run_says_nothing_of_root_on_stderr(workdir):
    """Set for commbench's own mpirun, the variables are nothing the user must do: no line about them
    (the run's stderr is the table's warnings alone)."""
    r = commbench(["allreduce", "--impl", "mpi", "--sizes", "1K", "--iters", "3", "-o",
                   os.path.join(workdir, "r.json")], cwd=workdir)
    assert r.returncode == 0 and "OMPI_ALLOW_RUN_AS_ROOT" not in r.stderr and "root" not in r.stderr, r.stderr


def test_standalone_leaves_libfabric_out_unless_the_user_chose_btls(monkeypatch):
    """Its provider probe is a second of every rank's MPI_Init and carries nothing on one host; a
    user's own OMPI_MCA_btl is theirs."""
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert standalone_command(["p2p"], 2, cores=2)[1]["OMPI_MCA_btl"] == "^ofi"
    monkeypatch.setenv("OMPI_MCA_btl", "self,tcp")
    assert standalone_command(["p2p"], 2, cores=2)[1]["OMPI_MCA_btl"] == "self,tcp"


def test_standalone_oversubscribes_beyond_the_cores():
    argv, _ = standalone_command(["p2p"], 8, cores=2)
    assert "--oversubscribe" in argv and argv[argv.index("--bind-to") + 1] == "none"


@pytest.mark.parametrize("env,rank", [({}, None), ({"OMPI_COMM_WORLD_RANK": "3"}, 3), ({"MV2_COMM_WORLD_RANK": "0"}, 0),
                                      ({"SLURM_PROCID": "7"}, 7), ({"RANK": "1"}, 1)])
def test_launch_rank(env, rank):
    from commbench.launch.world import launch_rank
    assert launch_rank(env) == rank


def test_root_call_raises_rank_zero_failures_everywhere():
    from commbench.errors import CommbenchError
    from commbench.launch.world import World
    w = World(rank=0, size=1, hosts=["h"], launcher="local")
    assert w.root_call(lambda: 41 + 1) == 42
    with pytest.raises(CommbenchError, match="OSError: disk gone"):
        w.root_call(lambda: (_ for _ in ()).throw(OSError("disk gone")))


def test_rank_0_does_not_publish_a_loopback_address_to_other_hosts(monkeypatch):
    """Debian's /etc/hosts maps the host name to 127.0.1.1: the other hosts cannot reach that. Without
    a route to another host's address either, the failure names the way out (the cluster tests show
    the route taken: test_faults.py, a cluster whose names resolve so)."""
    import socket

    from commbench.errors import CommbenchError
    from commbench.launch import rendezvous
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    monkeypatch.setattr(rendezvous, "interface_addresses", lambda: ["10.0.0.1"])
    with pytest.raises(CommbenchError, match=r"resolves to 127\.0\.1\.1, a loopback address.*COMMBENCH_MASTER_ADDR"):
        rendezvous._reached_address(["10.0.0.1"])  # another host listing this host's own address: skipped
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "10.1.2.3")
    assert rendezvous._reached_address([]) == "10.1.2.3"


def test_this_hosts_interface_addresses_are_what_ip_lists_but_loopback():
    import shutil
    import subprocess

    from commbench.launch.rendezvous import interface_addresses
    if shutil.which("ip") is None:
        pytest.skip("no ip command to compare with")
    listed = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    addresses = {line.split()[3].split("/")[0] for line in listed.splitlines()}
    assert set(interface_addresses()) == {a for a in addresses if not a.startswith("127.")}


def test_a_launch_that_fails_before_any_rank_ends_with_a_line_of_its_own(tmp_path):
    """mpirun failing before any rank starts (here: its session folder's base is a file; in the wild,
    PMIx's listener failing to start) said only mpirun's box, and the command exited 1 with no
    line of commbench's."""
    base = tmp_path / "a-file"
    base.write_text("")
    r = commbench(["allreduce", "--device", "cpu", "--np", "2", "--sizes", "1K", "-o", str(tmp_path / "r.json")],
                  env={**mpi_env(), "PRTE_MCA_prte_tmpdir_base": str(base)})
    assert r.returncode == 1 and not (tmp_path / "r.json").exists(), r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench: error")] == [
        "commbench: error: the launch ended with status 1 before any rank ran (mpirun's account above)"], r.stderr


def test_a_run_that_finds_a_wrong_element_exits_1_without_mpirun_s_box(tmp_path):
    """Exit 1 for what a run found (a wrong element, a flagged pair) came from every rank's exit
    status, and mpirun printed its box of a failed job below a run that ended as it should. Under
    commbench's own launch the ranks exit 0 and rank 0 hands the status to the command."""
    env = rank_faults_env(COMMBENCH_STUB_WRONG_RANK="1")
    out = tmp_path / "r.json"
    r = commbench(["allreduce", "--device", "cpu", "--np", "2", "--impl", "mpi", "--sizes", "1K", "--iters", "2",
                   "--warmup", "1", "-o", str(out)], env=env)
    assert r.returncode == 1 and "wrong elements in total: 1 FAILED" in r.stdout, r.stdout + r.stderr
    assert "commbench: error" not in r.stderr and "non-zero status" not in r.stderr, r.stderr
    assert results.load_document(str(out))["status"] == "complete"


def test_a_signal_held_in_the_block_reaches_its_handler_as_the_block_ends():
    """launch/held.py: a signal in the block (as torch loads) runs its handler once the block ends,
    each signal once, in Python's own code; one left to its default action is not held."""
    import signal

    from commbench.launch.held import signals_held
    heard = []
    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL), signal.signal(signal.SIGTERM, lambda s, f: heard.append(s))
    try:
        with signals_held():
            assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            assert heard == []
        assert heard == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGUSR1, before[0])
        signal.signal(signal.SIGTERM, before[1])
