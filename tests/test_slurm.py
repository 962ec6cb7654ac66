"""commbench under a real Slurm (tests/slurm.py: slurmctld, slurmd per host namespace, munge):
per-node acceptance on every node of an allocation at once, the fleet over their folders, and the
standalone launcher inside a 1-task allocation."""

import json
import os

import pytest
from conftest import COMMBENCH, commbench

pytestmark = [pytest.mark.cluster, pytest.mark.mpi]


def test_srun_runs_the_node_plan_on_every_node_and_the_fleet_reads_their_folders(make_slurm, tmp_path):
    s = make_slurm(4)
    out = tmp_path / "runs"
    r = s.run(["srun", "-N", "4", "--ntasks-per-node=1", COMMBENCH, "accept", "--plan", "cpu-node", "--quick",
               "-o", str(out)], timeout=900, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    hosts = sorted(h.ns for h in s.c.hosts)
    assert sorted(os.listdir(out)) == hosts
    for host in hosts:
        with open(out / host / "summary.json") as f:
            summary = json.load(f)
        assert summary["host"] == host and summary["status"] in ("PASS", "WARN"), summary
        with open(out / host / "allreduce.json") as f:  # each node's own ranks, not one rank of the srun
            doc = json.load(f)
        assert (doc["machine"]["hosts"], doc["machine"]["ranks"], doc["machine"]["launcher"]) == ([host], 2, "standalone")
    r = commbench(["fleet", str(out), "--json"], cwd=str(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    found = json.loads(r.stdout)
    assert sorted(found["nodes"]) == hosts


def test_the_standalone_launcher_runs_two_ranks_inside_a_one_task_allocation(make_slurm, tmp_path):
    s = make_slurm(2)
    out = tmp_path / "two.json"
    r = s.run(["salloc", "-N", "1", "-n", "1", COMMBENCH, "allreduce", "--np", "2", "--impl", "mpi", "--sizes", "1K,64K",
               "-o", str(out)], timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(out) as f:
        doc = json.load(f)
    assert doc["machine"]["ranks"] == 2 and doc["machine"]["launcher"] == "standalone"
    assert doc["status"] == "complete" and all(rec["wrong"] == 0 for rec in doc["results"])


def test_a_cluster_plan_inside_an_allocation_spans_its_nodes(make_slurm, tmp_path):
    """salloc -N 2 commbench accept --plan cpu-cluster: each measuring step started across both
    nodes by this environment's mpirun, which takes the allocation's tasks from Slurm."""
    s = make_slurm(2)
    r = s.run(["salloc", "-N", "2", "--ntasks-per-node=1", COMMBENCH, "accept", "--plan", "cpu-cluster", "--quick",
               "-o", str(tmp_path / "out")], timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    head = s.c.hosts[0].ns
    with open(tmp_path / "out" / head / "links.json") as f:
        doc = json.load(f)
    assert sorted(doc["machine"]["hosts"]) == sorted(h.ns for h in s.c.hosts) and doc["machine"]["ranks"] == 2


def test_srun_tasks_that_mpi_does_not_join_are_refused_in_one_line(make_slurm, tmp_path):
    """This environment's Open MPI takes no ranks from srun (no PMIx for it): each task would run
    alone, as a 1-rank run of its own, and all would write one file."""
    s = make_slurm(2)
    r = s.run(["salloc", "-N", "2", "--ntasks-per-node=1", "srun", COMMBENCH, "allreduce", "--sizes", "1K",
               "-o", str(tmp_path / "a.json")], timeout=300, cwd=str(tmp_path))
    assert r.returncode != 0 and not (tmp_path / "a.json").exists()
    lines = [x for x in r.stderr.splitlines() if x.startswith("commbench:")]
    assert lines == [lines[0]] and lines[0].startswith("commbench: error: the launcher started 2 tasks but MPI sees 1: ")
