"""Ground truth on the test cluster (tests/cluster.py): network namespaces on a bridge, each host's
link shaped with tbf to a known rate. commbench's fits must recover the shaped payload rate — for
gloo (one process per namespace, torchrun-style) and for MPI (the bundled mpirun with one PRRTE
daemon per namespace) — point-to-point and through the ring cost model of all-reduce on 3 and 4
hosts; compare must catch a link re-shaped to half.

The machine has 2 cores shared by up to 4 hosts' ranks: the rates are low enough (200-400 Mbit/s)
that the links, not the CPUs, set the times, and the sizes large enough (MBs) that the per-step
latency of ranks waiting for a core stays out of the fitted slope."""

import json
import os
import subprocess
import sys

import pytest
from cluster import measured_until
from conftest import COMMBENCH, commbench

from commbench.analysis import fit
from commbench.results import document as results

pytestmark = [pytest.mark.cluster, pytest.mark.mpi]

P2P_MBIT = 400
# Three or four ranks on 2 cores: a slower link keeps CPU scheduling out of the all-reduce's slope.
ALLREDUCE_MBIT = 200
FEW = ["--budget-ms", "100", "--min-iters", "3", "--warmup", "1"]
P2P = ["p2p", "--sizes", "256K-4M:x2", "--window", "4", *FEW]
# Open MPI's own all-reduce, pinned to its ring (tuned algorithm 4): its default for 3-4 ranks over
# TCP at these sizes is another algorithm (measured: 0.30 and 0.48 of the ring model's link rate).
MPI_RING = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4"]
# The ring's fitted link bandwidth against the payload rate, measured on 2 busy cores: 0.92-1.03.
# A wrong cost model would land outside: n/BW instead of 2(p-1)/p*n/BW reads 0.75 (p=3) or 0.67
# (p=4) of the rate, a tree's 2n/BW 1.5x lower still; and no all-reduce can beat the link.
RING_TOLERANCE = 0.15


def _fits(doc):
    return {(f["op"], f["impl"]): f for f in fit.fit_records(doc["results"]) if "skipped" not in f}


def _bandwidth(doc, op, impl, payload):
    """The fitted link bandwidth of one series, printed against the payload rate (pytest -rP)."""
    bw = _fits(doc)[(op, impl)]["bandwidth_gbps"]
    print(f"{op} {impl} on {doc['machine']['ranks']} hosts: fitted {bw:.4f} GB/s, shaped payload "
          f"{payload:.4f} GB/s, ratio {bw / payload:.3f}")
    return bw


def _run_gloo(cluster, args, out, port):
    outs = cluster.run_gloo([*args, "-o", out], port=port, timeout=180)
    assert [rc for rc, _, _ in outs] == [0] * len(outs), outs
    return results.load_document(out)


def _run_mpi(cluster, args, out, mca=(), hosts=None):
    r = cluster.mpirun([*mca, COMMBENCH, *args, "-o", out], hosts=hosts, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return results.load_document(out)


def test_cluster_runs_mpi_with_a_daemon_and_host_name_per_namespace_and_tears_down(make_cluster):
    c = make_cluster(3)
    # An MPI program, not `hostname`: processes that exit milliseconds after they start, two or more
    # per daemon, make prterun wait for ever about one run in five (a daemon never reports one
    # child's exit; seen only with such instant processes, never with MPI programs).
    hello = "from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; print(c.rank, socket.gethostname(), c.allreduce(1))"
    r = c.mpirun([sys.executable, "-c", hello], ranks_per_host=2, timeout=60)
    assert r.returncode == 0, r.stderr
    # Ranks by slot, two on each host, and all of them in one communicator (shared memory within a
    # host, TCP across).
    assert sorted(r.stdout.splitlines()) == [f"{rank} {c.hosts[rank // 2].name} 6" for rank in range(6)]
    # Something left running in a namespace is killed, and nothing of the cluster survives teardown:
    # nor the session folders of mpirun and its daemons, which a killed one never removes (in a
    # folder of the launch's own, so that no later mpirun of the same pid meets them).
    sleeper = c.popen(c.in_host(1, ["sleep", "600"]))
    prefix = c.mpirun_prefix(2)
    hanging = c.popen([*prefix, sys.executable, "-c",
                       "from mpi4py import MPI; import time; MPI.COMM_WORLD.barrier(); print(flush=True); time.sleep(600)"])
    assert hanging.stdout.readline() == "\n"  # every rank past the barrier
    base = prefix[prefix.index("prte_tmpdir_base") + 1]
    daemons = [pid for h in c.hosts for pid in subprocess.run(["ip", "netns", "pids", h.ns], capture_output=True,
                                                               text=True).stdout.split()]
    made = os.listdir(base)
    assert f"ompi.{hanging.pid}" in made, made  # mpirun's
    assert sum(name in {f"prted.{pid}" for pid in daemons} for name in made) == len(c.hosts), made  # one daemon a host
    c.teardown()
    assert sleeper.poll() is not None and hanging.poll() is not None
    assert not os.path.exists(base)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert c.tag not in left
    assert subprocess.run(["ip", "link", "show", c.bridge], capture_output=True).returncode != 0


@pytest.mark.quiet
def test_gloo_fit_recovers_the_shaped_link_and_compare_catches_half(make_cluster, workdir):
    c = make_cluster(2, P2P_MBIT)
    payload = c.payload_gbps(P2P_MBIT)
    # 0.885 of the shaped rate once, alone on a noisy host (0.9-1.0 as a rule), and 0.824 once in a
    # burst of the machine's neighbours: measured again then (measured_until; each run a port and a
    # file of its own); half the rate, which compare must catch below, reads 0.5.
    runs: list = []

    def measure(attempt):
        runs.append(os.path.join(workdir, f"p2p{attempt}.json"))
        return _run_gloo(c, P2P, runs[-1], 29564 + attempt)

    p2p = measured_until(measure, lambda doc: _bandwidth(doc, "bandwidth", "gloo", payload) == pytest.approx(payload, rel=0.15))
    assert all(r["wrong"] == 0 for r in p2p["results"]) and p2p["machine"]["launcher"] == "torchrun"
    assert _bandwidth(p2p, "bandwidth", "gloo", payload) == pytest.approx(payload, rel=0.15)
    saved = commbench(["baseline", "save", runs[-1], "--name", f"veth-{P2P_MBIT}mbit", "--dir", "bl"], cwd=workdir)
    assert saved.returncode == 0, saved.stderr

    # Half the rate, as compare reads it against the baseline: once -0.645 in a burst of the machine's
    # neighbours (the test alone on the machine), measured again then too.
    half = P2P_MBIT // 2
    c.shape(0, half)
    c.shape(1, half)

    def compared(attempt):
        _run_gloo(c, P2P, os.path.join(workdir, f"half{attempt}.json"), 29560 + attempt)
        r = commbench(["compare", os.path.join("bl", f"veth-{P2P_MBIT}mbit.json"), f"half{attempt}.json", "--json"],
                      cwd=workdir)
        assert r.returncode == 1, r.stdout + r.stderr
        verdict = json.loads(r.stdout)
        return [k for s in verdict["series"] if s["op"] == "bandwidth" for k in s["checks"] if k["check"] == "bandwidth sizes"]

    bw = measured_until(compared, lambda bw: bw and bw[0]["change"] == pytest.approx(-0.5, abs=0.1))
    assert bw and bw[0]["regression"] and bw[0]["change"] == pytest.approx(-0.5, abs=0.1)

    # All-reduce at the halved rate (gloo's all-reduce computes on the same 2 busy cores: at 400
    # Mbit/s its fit read 0.76-1.02 of the rate, at 200 Mbit/s 0.93-0.98, and at 100 Mbit/s
    # 0.93-0.98 too: what stays below the rate is not the cores but the link, whose shaped egress
    # carries the ACKs of the data flowing the other way at the same time, and gloo's own pauses).
    # Two ranks: the ring moves the whole buffer across the link once each way (2(p-1)/p = 1). Once
    # 0.777 in a clean clone's first pass, under load: measured again then, as the p2p sweep is.
    payload = c.payload_gbps(half)
    ar = measured_until(
        lambda attempt: _run_gloo(c, ["allreduce", "--device", "cpu", "--sizes", "512K-8M:x2", *FEW],
                                  os.path.join(workdir, f"ar{attempt}.json"), 29567 + attempt),
        lambda doc: _bandwidth(doc, "allreduce", "gloo", payload) == pytest.approx(payload, rel=RING_TOLERANCE))
    assert all(r["wrong"] == 0 for r in ar["results"])
    # RING_TOLERANCE still tells the ring from a tree, whose 2n/BW would read 0.5 of the rate.
    assert _bandwidth(ar, "allreduce", "gloo", payload) == pytest.approx(payload, rel=RING_TOLERANCE)


def _p2p_within(c, name, workdir, payload, rel):
    """The MPI p2p sweep's fitted bandwidth, measured until it lands within rel of payload (a burst of
    the machine's neighbours reads slow: measured_until)."""
    doc = measured_until(lambda attempt: _run_mpi(c, P2P, os.path.join(workdir, f"{name}{attempt}.json")),
                         lambda doc: _bandwidth(doc, "bandwidth", "mpi", payload) == pytest.approx(payload, rel=rel))
    assert doc["machine"]["launcher"] == "mpi" and all(r["wrong"] == 0 for r in doc["results"])
    assert _bandwidth(doc, "bandwidth", "mpi", payload) == pytest.approx(payload, rel=rel)


@pytest.mark.quiet
def test_mpi_p2p_fit_recovers_the_shaped_link_and_a_slow_receiver(make_cluster, workdir):
    c = make_cluster(2, P2P_MBIT)
    _p2p_within(c, "p2p", workdir, c.payload_gbps(P2P_MBIT), 0.10)
    # Only the receiver is slowed: rank 0 -> 1 crosses host 1's shaping on the bridge side.
    c.shape(1, P2P_MBIT // 2)
    _p2p_within(c, "half", workdir, c.payload_gbps(P2P_MBIT // 2), 0.10)


@pytest.mark.quiet
@pytest.mark.parametrize("hosts", [3, 4])
def test_mpi_allreduce_fits_the_ring_model_at_the_shaped_rate(make_cluster, workdir, hosts):
    c = make_cluster(hosts, ALLREDUCE_MBIT)
    payload = c.payload_gbps(ALLREDUCE_MBIT)
    doc = measured_until(
        lambda attempt: _run_mpi(c, ["allreduce", "--device", "cpu", "--impl", "ring@mpi,mpi", "--sizes", "1M-8M:x2", *FEW],
                                 os.path.join(workdir, f"ar{attempt}.json"), mca=MPI_RING),
        lambda doc: all(_bandwidth(doc, "allreduce", impl, payload) == pytest.approx(payload, rel=RING_TOLERANCE)
                        for impl in ("ring@mpi", "mpi")))
    assert all(r["wrong"] == 0 for r in doc["results"])
    # Each rank on its own host, as on a real cluster.
    assert doc["machine"]["hosts"] == [h.name for h in c.hosts] and doc["machine"]["ranks"] == hosts
    fits = _fits(doc)
    for impl in ("ring@mpi", "mpi"):
        f = fits[("allreduce", impl)]
        assert f["model"].startswith(f"ring: t = 2({hosts}-1)*alpha + 2({hosts}-1)/{hosts}*n/BW"), f["model"]
        assert _bandwidth(doc, "allreduce", impl, payload) == pytest.approx(payload, rel=RING_TOLERANCE)
