"""COMMBENCH_TRACE_START=1: one line per phase of a command on stderr, from the top-level process and
from every rank it launches, on one clock (the command's start); nothing without it."""

import os
import subprocess

import pytest
from conftest import COMMBENCH, commbench, mpi_env, torchrun_style
from conftest import traced_phases as phases

ARGS = ["allreduce", "--impl", "mpi", "--np", "2", "--sizes", "1K", "--iters", "5", "--warmup", "1", "--no-fit"]


@pytest.mark.mpi
def test_every_phase_of_a_standalone_run_on_one_clock(workdir):
    """The ranks of commbench's own launch say when they started (the launcher's time before it; the
    kernel records a start in clock ticks of 10 ms)."""
    r = commbench([*ARGS, "-o", "t.json"], cwd=workdir, env={**mpi_env(), "COMMBENCH_TRACE_START": "1"})
    assert r.returncode == 0, r.stderr
    seen = phases(r.stderr)
    assert [p for p, _ in seen["top"]] == ["imports", "checks", "ranks-ended"]
    for rank in ("0", "1"):
        assert [p for p, _ in seen[rank]] == ["started", "imports", "mpi-init", "topology", "before-measuring",
                                              "measured", *(["written"] if rank == "0" else [])]
    # One clock: each process's phases in order, the ranks' after the top's checks, before its end.
    for listed in seen.values():
        assert [ms for _, ms in listed] == sorted(ms for _, ms in listed)
    top = dict(seen["top"])
    assert all(top["checks"] - (20 if p == "started" else 0) <= ms <= top["ranks-ended"]
               for rank in ("0", "1") for p, ms in seen[rank])


@pytest.mark.mpi
def test_no_phase_line_without_the_variable(workdir):
    r = commbench([*ARGS, "-o", "t.json"], cwd=workdir)
    assert r.returncode == 0 and "# start " not in r.stderr, r.stderr


@pytest.mark.mpi
def test_a_fabric_measured_on_the_spot_is_a_phase_of_its_own(workdir):
    args = [a for a in ARGS if a != "--no-fit"]
    r = commbench([*args, "--fabric", "tcp-loopback", "-o", "t.json"], cwd=workdir,
                  env={**mpi_env(), "COMMBENCH_TRACE_START": "1"})
    assert r.returncode == 0, r.stderr
    rank0 = [p for p, _ in phases(r.stderr)["0"]]
    assert rank0[rank0.index("topology") + 1] == "fabric-on-the-spot", rank0


def test_ranks_of_a_users_launcher_count_from_their_own_start(workdir):
    """Under torchrun (torchrun-style: its variables, no torchrun) a rank joins by `world-init` and
    counts from its own start: no `started` line, since no commbench process launched it."""
    outs = torchrun_style(["allreduce", "--impl", "gloo", "--sizes", "1K", "--iters", "5", "--warmup", "1", "--no-fit",
                           "-o", "t.json"], ranks=1, cwd=workdir, env_extra={"COMMBENCH_TRACE_START": "1"})
    for rank, (code, _, err) in enumerate(outs):
        assert code == 0, err
        seen = phases(err)
        assert list(seen) == [str(rank)]
        names = [p for p, _ in seen[str(rank)]]
        assert names[:3] == ["imports", "world-init", "topology"] and "started" not in names, names


@pytest.mark.parametrize("value", ["0", "false", "No", "off", " "])
def test_a_value_that_says_off_prints_no_phase(value, workdir):
    r = commbench(["version"], cwd=workdir, env={"COMMBENCH_TRACE_START": value})
    assert r.returncode == 0 and "# start " not in r.stderr, r.stderr


def test_a_stderr_that_cannot_take_the_trace_changes_nothing(workdir):
    """The trace is a diagnostic: a full device on stderr (2>/dev/full) neither stops the command nor
    changes its exit status."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([COMMBENCH, "version"], cwd=workdir, stdout=subprocess.PIPE, stderr=full, text=True,
                           env={**os.environ, "COMMBENCH_TRACE_START": "1"}, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("commbench "), r.stdout
