"""Ground truth: two network namespaces joined by a veth pair shaped with tbf to a known rate; one
commbench process per namespace, launched torchrun-style, measures gloo p2p and all-reduce across the
link. The fit must recover the shaped rate, and compare must catch the link re-shaped to half."""

import json
import os
import shutil
import subprocess

import pytest

from commbench import fit, results
from conftest import COMMBENCH, commbench, mpi_env

RATE_MBIT = 400
# tbf counts whole Ethernet frames: a 1500-byte MTU frame is 1514 bytes on the wire and carries
# 1448 bytes of TCP payload (20 IP + 32 TCP header with timestamps).
PAYLOAD_SHARE = 1448 / 1514


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def link():
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root, ip and tc to create network namespaces")
    tag = f"cb{os.getpid() % 100000}"
    ns = (f"{tag}a", f"{tag}b")
    devs = (f"{tag}-va", f"{tag}-vb")
    addrs = ("10.77.0.1", "10.77.0.2")
    try:
        made = _ip("netns", "add", ns[0], check=False)
        if made.returncode != 0:
            pytest.skip(f"network namespaces not permitted here: {made.stderr.strip()}")
        _ip("netns", "add", ns[1])
        _ip("link", "add", devs[0], "type", "veth", "peer", "name", devs[1])
        for n, d, a in zip(ns, devs, addrs):
            _ip("link", "set", d, "netns", n)
            _ip("-n", n, "addr", "add", f"{a}/24", "dev", d)
            _ip("-n", n, "link", "set", d, "up")
            _ip("-n", n, "link", "set", "lo", "up")

        def shape(mbit, verb="add"):
            for n, d in zip(ns, devs):
                subprocess.run(["ip", "netns", "exec", n, "tc", "qdisc", verb, "dev", d, "root", "tbf", "rate",
                                f"{mbit}mbit", "burst", "256kb", "latency", "100ms"], check=True, capture_output=True)
        shape(RATE_MBIT)
        yield {"ns": ns, "devs": devs, "master": addrs[0], "shape": shape}
    finally:
        for n in ns:
            _ip("netns", "del", n, check=False)


def _run_pair(link, args, out, port):
    procs = []
    for rank, (n, d) in enumerate(zip(link["ns"], link["devs"])):
        env = mpi_env()
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR=link["master"],
                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=d)
        procs.append(subprocess.Popen(["ip", "netns", "exec", n, COMMBENCH, *args, "-o", out], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return results.load_document(out)


def _bandwidth(doc, op):
    [f] = [f for f in fit.fit_records(doc["results"]) if f["op"] == op]
    return f["bandwidth_gbps"]


P2P = ["p2p", "--sizes", "256K-2M:x2", "--window", "4", "--budget-ms", "100", "--min-iters", "3", "--warmup", "1"]


def test_fit_recovers_the_shaped_link_and_compare_catches_half(link, workdir):
    payload_gbps = RATE_MBIT * 1e6 / 8 * PAYLOAD_SHARE / 1e9
    p2p = _run_pair(link, P2P, os.path.join(workdir, "p2p.json"), 29561)
    assert all(r["wrong"] == 0 for r in p2p["results"])
    assert _bandwidth(p2p, "bandwidth") == pytest.approx(payload_gbps, rel=0.10)
    ar = _run_pair(link, ["allreduce", "--device", "cpu", "--sizes", "512K-8M:x2", "--budget-ms", "100", "--min-iters", "3",
                          "--warmup", "1"], os.path.join(workdir, "ar.json"), 29562)
    assert all(r["wrong"] == 0 for r in ar["results"]) and ar["machine"]["launcher"] == "torchrun"
    # Two ranks: the gloo ring moves the whole buffer across the link once each way.
    assert _bandwidth(ar, "allreduce") == pytest.approx(payload_gbps, rel=0.10)

    saved = commbench(["baseline", "save", os.path.join(workdir, "p2p.json"), "--name", f"veth-{RATE_MBIT}mbit",
                       "--dir", "bl"], cwd=workdir)
    assert saved.returncode == 0, saved.stderr
    link["shape"](RATE_MBIT // 2, "change")
    _run_pair(link, P2P, os.path.join(workdir, "half.json"), 29563)
    r = commbench(["compare", os.path.join("bl", f"veth-{RATE_MBIT}mbit.json"), "half.json", "--json"], cwd=workdir)
    assert r.returncode == 1, r.stdout + r.stderr
    verdict = json.loads(r.stdout)
    bw = [c for s in verdict["series"] if s["op"] == "bandwidth" for c in s["checks"] if c["check"] == "bandwidth sizes"]
    assert bw and bw[0]["regression"] and bw[0]["change"] == pytest.approx(-0.5, abs=0.1)
