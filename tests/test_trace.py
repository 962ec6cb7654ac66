"""COMMBENCH_TRACE_START=1: one line per phase of a command on stderr, from the top-level process and
from every rank it launches, on one clock (the command's start); nothing without it."""

import re

import pytest
from conftest import commbench, mpi_env

LINE = re.compile(r"^# start (top|\d+) ([a-z-]+) (\d+)$")
ARGS = ["allreduce", "--impl", "mpi", "--np", "2", "--sizes", "1K", "--iters", "5", "--warmup", "1", "--no-fit"]


@pytest.mark.mpi
def test_every_phase_of_a_standalone_run_on_one_clock(workdir):
    r = commbench([*ARGS, "-o", "t.json"], cwd=workdir, env={**mpi_env(), "COMMBENCH_TRACE_START": "1"})
    assert r.returncode == 0, r.stderr
    lines = [LINE.match(x) for x in r.stderr.splitlines() if x.startswith("# start ")]
    assert lines and all(lines), r.stderr
    seen: dict[str, list[tuple[str, int]]] = {}
    for m in lines:
        seen.setdefault(m.group(1), []).append((m.group(2), int(m.group(3))))
    assert [p for p, _ in seen["top"]] == ["imports", "checks", "ranks-ended"]
    for rank in ("0", "1"):
        assert [p for p, _ in seen[rank]] == ["imports", "mpi-init", "topology", "before-measuring", "measured",
                                              *(["written"] if rank == "0" else [])]
    # One clock: each process's phases in order, the ranks' after the top's checks, before its end.
    for phases in seen.values():
        assert [ms for _, ms in phases] == sorted(ms for _, ms in phases)
    top = dict(seen["top"])
    assert all(top["checks"] <= ms <= top["ranks-ended"] for rank in ("0", "1") for _, ms in seen[rank])


@pytest.mark.mpi
def test_no_phase_line_without_the_variable(workdir):
    r = commbench([*ARGS, "-o", "t.json"], cwd=workdir)
    assert r.returncode == 0 and "# start " not in r.stderr, r.stderr
