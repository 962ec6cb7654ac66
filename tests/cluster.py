"""A test cluster on one machine: N network namespaces ("hosts") on a Linux bridge, each with its own
veth, address, host name and tbf rate, so that every link's payload rate is known. Open MPI (the
bundled mpirun) and gloo (torchrun-style environments) both run across it.

Layout (TAG = "cb" + this process's pid + a letter per cluster it made, so that parallel runs never collide):

    root namespace:  bridge TAG-br, address 10.77.S.254/24 (mpirun and its OOB listen here)
                     TAG-b<i>: bridge-side end of host i's veth, enslaved to the bridge
    namespace TAG-h<i> (host name TAG-h<i>):  eth0, address 10.77.S.<i+1>/24, lo

S is a /24 of 10.77.0.0/16 that no route of the root namespace uses yet (starting from one derived
from the pid). Only these addresses and loopback are ever targets: the namespaces have no default
route and no other interface.

Rails and leaves (Cluster(..., rails=2, leaves=[3, 3, 2])), for links at host level: each host has one
veth per rail, eth<r> inside (bridge end TAG-b<i> for rail 0, TAG-b<i>r<r> for the others), rail r's
address on a /24 of its own (S for rail 0, as above). Local rank i of mpirun's ranks talks TCP through
rail i mod rails alone (its btl_tcp_if_include, set per rank by a shell before the program), as GPU i
through NIC i; mpirun's daemons stay on rail 0. Inside each namespace ARP is answered only on the
interface holding the address (arp_ignore 1, arp_announce 2; the rails share one Ethernet) and the
reverse-path filter is off, so that a rank of rail 0 reaches one of rail 1 through the peer's rail-1
interface. (One /24 for every rail, routed by source address, was tried first: mpirun's daemons
failed to report back on it.) With leaves, each leaf is a bridge of its own, TAG-l<j>, joined to the
spine, TAG-br, by a veth pair standing for its uplinks (TAG-u<j> on the leaf, TAG-s<j> on the spine):
unshaped until shape_uplink. shape_pair slows what two hosts send each other (a tc filter by
destination address), topology_conf writes the leaves in Slurm's topology.conf syntax.

Shaping: host i's rate is applied as `tc qdisc ... root tbf` on BOTH ends of its veth: eth0 inside
the namespace (what the host sends) and TAG-b<i> in the root namespace (what the bridge delivers to
it). A link is then symmetric like a real NIC port, and traffic from host a to host b is limited by
min(rate_a, rate_b) — so one slow host slows every pair it is part of, in both directions, which is
what a test that must find "the bad host" needs. tbf counts whole Ethernet frames: a 1514-byte frame
of a 1500-byte MTU carries 1448 bytes of TCP payload (IP 20 + TCP 32 with timestamps), so the payload
rate is rate x 1448/1514 (payload_gbps). ACKs of the opposite direction share the same queue and
cost about 2 % when a host both sends and receives at full rate (a ring).

MPI across the namespaces (verified with Open MPI 5.0.11 / PRRTE from the PyPI wheel): each namespace
needs its own PRRTE daemon, so mpirun gets a hostfile of the namespaces' addresses and an ssh agent
(`--prtemca plm_ssh_agent AGENT`): AGENT is called as `AGENT HOST COMMAND...` (PRRTE passes no ssh
options), maps the address to its namespace and runs
`ip netns exec NS unshare --uts sh -c "hostname NS; COMMAND"` (the words joined by spaces and handed
to sh, exactly as ssh hands them to a remote shell). The own host name per namespace is required:
without it (tried) every daemon reports the same node name and the TCP BTL fails between ranks
(`mca_btl_tcp_frag_recv: readv error`); ranks of several namespaces under one daemon fail `PML add
procs` likewise. What else mpirun_prefix() passes, and which of it is precaution, is noted there.

Known limit (PRRTE, not the cluster): processes that exit milliseconds after they start, two or more
per daemon (`hostname` with ranks_per_host=2), make prterun wait for ever in about one run in five —
a daemon never reports one child's exit. MPI programs never showed it (60 runs); tests run those.

Timing on few cores: every host's ranks share this machine's cores. Busy-polling ranks make a core
change hands only at scheduler ticks, so small messages show milliseconds of latency; rates of a
few hundred Mbit/s and messages of MBs keep the links, not the CPUs, in charge of the fitted
bandwidth (see tests/test_ground_truth.py for measured figures).

The module needs no pytest: tests use the fixture factory `make_cluster` in conftest.py, which skips
with one line (ClusterUnavailable) where namespaces cannot be made. `python tests/cluster.py N`
builds an N-host cluster, runs `hostname` on every host under mpirun (one rank each), prints the
mpirun command and tears the cluster down.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import COMMBENCH, MPIRUN, mpi_env, own_session  # noqa: E402

# tbf counts whole Ethernet frames; TCP payload per 1500-byte-MTU frame (see the module docstring).
PAYLOAD_SHARE = 1448 / 1514
MAX_HOSTS = 8
# The bucket: enough for the kernel's timer granularity at these rates, small against the messages
# (256 KiB and up) so that a message cannot ride a full bucket at line rate.
BURST = "32kb"
# tbf's queue limit, as the longest wait of a frame: a NIC-like shallow queue (see TSQ_BYTES).
LATENCY_MS = 20
TSQ_BYTES = 65536
# Torchrun-style rendezvous port on host 0 (every namespace has its own port space).
MASTER_PORT = 29500
# Several rails: rail r of host i at address .(i + 1 + RAIL_STRIDE r), routed by source through
# table RAIL_TABLE + r of its namespace.
MAX_RAILS = 2
# Links of a bonded leaf uplink (Cluster.bond_uplinks).
MEMBERS = 2
RAIL_STRIDE = 100
RAIL_TABLE = 100


class ClusterUnavailable(Exception):
    """Network namespaces cannot be made here (not root, no ip/tc, not permitted)."""


@dataclass
class Host:
    index: int
    ns: str  # network namespace, also the host name its processes see
    addrs: list  # by rail
    devs: list  # by rail: the veth end inside the namespace (eth0, eth1, ...)
    bridge_devs: list  # by rail: the veth end on the host's bridge (root namespace)
    mbit: float
    leaf: int = 0

    @property
    def name(self) -> str:
        return self.ns

    @property
    def addr(self) -> str:  # rail 0's: the one mpirun, Slurm and gloo reach the host at
        return self.addrs[0]

    @property
    def dev(self) -> str:
        return self.devs[0]


# The machine's neighbours take its cores in bursts (steal time 3-18 % of a second, measured, beside
# softirqs that tbf's timers need): a burst over one size's iterations reads that size slow, and a fit
# through it 0.82-0.90 of the shaped rate, in one run of ten or, at a busy hour, one of two. A figure
# that a wrong model or a broken transport makes wrong is wrong in every run: a ground truth measures
# again, up to ATTEMPTS runs in all, until it lands (measured_until).
ATTEMPTS = 3


def measured_until(measure, lands):
    """measure() run again until lands(its result), ATTEMPTS runs at most: the last result, for the
    test to assert on (measure(attempt) gets 0, 1, ... for names of its own, such as its files)."""
    for attempt in range(ATTEMPTS):
        result = measure(attempt)
        if lands(result):
            break
        print(f"attempt {attempt + 1} of {ATTEMPTS} missed its ground truth: measured again")
    return result


def _tbf_spec(mbit: float) -> list:
    return ["root", "tbf", "rate", f"{int(mbit * 1000)}kbit", "burst", BURST, "latency", f"{LATENCY_MS}ms"]


def _htb_rate(mbit: float) -> list:
    rate = f"{int(mbit * 1000)}kbit"
    return ["rate", rate, "ceil", rate, "burst", BURST]


def _run(argv: list, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def _used_subnets() -> set:
    out = _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout
    out += _run(["ip", "-4", "addr"], check=False).stdout
    return {int(m) for m in re.findall(r"\b10\.77\.(\d+)\.\d+", out)}


def _is_up(argv: list) -> bool:
    return "LOWER_UP" in _run(argv, check=False).stdout


_made = 0  # clusters made by this process, for their names
_STALE = re.compile(r"^(cb(\d+)[a-z])-h0$")


def reap_stale() -> None:
    """Deletes what a test cluster left behind when its process was killed before tearing down:
    only clusters named by this module whose process no longer exists, and only when nothing
    runs in their namespaces any more."""
    for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines():
        m = _STALE.match(line.split()[0]) if line.strip() else None
        if not m or os.path.exists(f"/proc/{m.group(2)}"):
            continue
        tag = m.group(1)
        names = [n.split()[0] for n in _run(["ip", "netns", "list"], check=False).stdout.splitlines()
                 if n.startswith(f"{tag}-h")]
        if any(_run(["ip", "netns", "pids", n], check=False).stdout.strip() for n in names):
            continue
        for n in names:
            _run(["ip", "netns", "del", n], check=False)
            shutil.rmtree(_etc(n), ignore_errors=True)
        _run(["ip", "link", "del", f"{tag}-br"], check=False)


def _etc(ns: str) -> str:
    """The files ip netns exec mounts over /etc for namespace `ns`."""
    return os.path.join("/etc/netns", ns)


# What a bandwidth-judged run's ranks are given (mpirun's -x, `export`): a rank waiting for its flow
# polls Open MPI's progress once a millisecond. With env()'s nanosleep yield at its default of 1 ns,
# the 16 ranks of the rails cluster polled every 0.7 ms of contended CPU and kept both cores busy
# (288 s of the first pass's CPU, most of it in the kernel); with 1 ms the same tests took 56 s of CPU
# instead of 79-91. A flow there takes 40-400 ms (1 MiB at 20-200 Mbit/s): the poll delays it by at
# most 1 ms, alike for every flow, and the judgement is of ratios to the typical flow. Not for
# latency, alpha fits or anything timed below a few tens of milliseconds.
FLOW_WAITS = {"OMPI_MCA_threads_pthreads_nanosleep_time": str(1_000_000)}


class Cluster:
    """N namespaces on a bridge; a context manager that always tears everything down."""

    def __init__(self, hosts: int = 2, mbit: float = 400, rates: Optional[list] = None, tag: Optional[str] = None,
                 rails: int = 1, leaves: Optional[list] = None, loopback_names: bool = False):
        if not 2 <= hosts <= MAX_HOSTS:
            raise ValueError(f"a cluster has 2 to {MAX_HOSTS} hosts, not {hosts}")
        rates = list(rates) if rates is not None else [mbit] * hosts
        if len(rates) != hosts:
            raise ValueError("one rate per host")
        if not 1 <= rails <= MAX_RAILS or (leaves is not None and (sum(leaves) != hosts or min(leaves) < 1)):
            raise ValueError(f"1 to {MAX_RAILS} rails, and leaves (host counts) that add up to the hosts")
        self.rails, self.leaves = rails, list(leaves) if leaves else None
        # Each host's /etc/hosts maps its own name to 127.0.1.1, as Debian's installer writes it (ip
        # netns exec mounts /etc/netns/NS/hosts over /etc/hosts); otherwise the names do not resolve.
        self.loopback_names = loopback_names
        global _made
        # Interface names have at most 15 characters: "cb" + pid (<= 7 digits) + a letter + "-br".
        self.tag = tag or f"cb{os.getpid()}{chr(ord('a') + _made % 26)}"
        _made += 1
        self.bridge = f"{self.tag}-br"
        self.hosts: list[Host] = []
        self._rates = rates
        self._procs: list[subprocess.Popen] = []
        self._tmp: Optional[str] = None
        self.subnet = ""
        self.bridge_addr = ""
        self.bonded: Optional[float] = None  # each bonded uplink member's rate (bond_uplinks)

    # ---- building and tearing down -------------------------------------------------------------

    @staticmethod
    def check() -> None:
        """Raises ClusterUnavailable with one line where namespaces cannot be made."""
        if os.geteuid() != 0:
            raise ClusterUnavailable("the test cluster needs root (network namespaces, veth, tc)")
        for tool in ("ip", "tc", "unshare"):
            if shutil.which(tool) is None:
                raise ClusterUnavailable(f"the test cluster needs '{tool}' on PATH")

    def __enter__(self) -> "Cluster":
        self.check()
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def _pick_subnet(self, exclude: frozenset = frozenset()) -> int:
        used = _used_subnets() | set(exclude)
        start = os.getpid() % 200 + 20
        for k in range(254):
            s = (start + k - 1) % 254 + 1
            if s not in used:
                return s
        raise ClusterUnavailable("no free /24 left in 10.77.0.0/16")

    def _build(self) -> None:
        reap_stale()
        made = _run(["ip", "netns", "add", f"{self.tag}-h0"], check=False)
        if made.returncode != 0:
            raise ClusterUnavailable(f"network namespaces not permitted here: {made.stderr.strip()}")
        s = self._pick_subnet()
        self.subnet = f"10.77.{s}.0/24"
        self.bridge_addr = f"10.77.{s}.254"
        self.rail_subnets = [s] + [self._pick_subnet(exclude={s}) for _ in range(1, self.rails)]
        self._tmp = tempfile.mkdtemp(prefix=f"{self.tag}-")
        leaf_of = [j for j, n in enumerate(self.leaves or [len(self._rates)]) for _ in range(n)]
        for i, rate in enumerate(self._rates):
            # Rail r of host i: address .(i + 1 + RAIL_STRIDE r) of the one subnet, eth<r> inside.
            self.hosts.append(Host(i, f"{self.tag}-h{i}", [f"10.77.{sub}.{i + 1}" for sub in self.rail_subnets],
                                   [f"eth{r}" for r in range(self.rails)],
                                   [f"{self.tag}-b{i}" + (f"r{r}" if r else "") for r in range(self.rails)], rate,
                                   leaf_of[i]))
        try:
            # Where the kernel lacks bridges, veths or tbf, the first host says so: skip, not fail.
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            for j in range(len(self.leaves or [])):
                self._add_leaf(j)
            self._add_host(self.hosts[0])
        except RuntimeError as e:
            raise ClusterUnavailable(f"cannot build a test cluster here: {e}") from None
        _run(["ip", "addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for h in self.hosts[1:]:
            _run(["ip", "netns", "add", h.ns])
            self._add_host(h)
        if self.loopback_names:
            for h in self.hosts:
                os.makedirs(_etc(h.ns), exist_ok=True)
                with open(os.path.join(_etc(h.ns), "hosts"), "w") as f:
                    f.write(f"127.0.0.1 localhost\n127.0.1.1 {h.ns}\n")
        self._write_agent()
        # The bridges have no STP: their ports forward as soon as both ends of every veth are up.
        deadline = time.monotonic() + 10
        ends = [(["ip", "-n", h.ns, "link", "show", dev], ["ip", "link", "show", bdev])
                for h in self.hosts for dev, bdev in zip(h.devs, h.bridge_devs)]
        ends += [(["ip", "link", "show", self.uplink(j)[0]], ["ip", "link", "show", self.uplink(j)[1]])
                 for j in range(len(self.leaves or []))]
        for inner, outer in ends:
            while not (_is_up(inner) and _is_up(outer)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{inner[-1]}: the link to the bridge did not come up")
                time.sleep(0.05)

    def leaf_bridge(self, j: int) -> str:
        return f"{self.tag}-l{j}"

    def uplink(self, j: int) -> tuple[str, str]:
        """Leaf j's uplink: (its end on the leaf's bridge, its end on the spine, the cluster's bridge)."""
        return f"{self.tag}-u{j}", f"{self.tag}-s{j}"

    def _add_leaf(self, j: int) -> None:
        """A leaf switch: a bridge of its own, joined to the spine (the cluster's bridge, where mpirun
        listens) by a veth pair standing for its uplinks, unshaped until shape_uplink."""
        leaf, (up, spine) = self.leaf_bridge(j), self.uplink(j)
        _run(["ip", "link", "add", leaf, "type", "bridge"])
        _run(["ip", "link", "add", up, "type", "veth", "peer", "name", spine])
        _run(["ip", "link", "set", up, "master", leaf])
        _run(["ip", "link", "set", spine, "master", self.bridge])
        for dev in (leaf, up, spine):
            _run(["ip", "link", "set", dev, "up"])

    def _add_host(self, h: Host) -> None:
        bridge = self.leaf_bridge(h.leaf) if self.leaves else self.bridge
        for dev, bridge_dev, addr in zip(h.devs, h.bridge_devs, h.addrs):
            _run(["ip", "link", "add", bridge_dev, "type", "veth", "peer", "name", dev, "netns", h.ns])
            _run(["ip", "link", "set", bridge_dev, "master", bridge])
            _run(["ip", "link", "set", bridge_dev, "up"])
            _run(["ip", "-n", h.ns, "addr", "add", f"{addr}/24", "dev", dev])
            _run(["ip", "-n", h.ns, "link", "set", dev, "up"])
        _run(["ip", "-n", h.ns, "link", "set", "lo", "up"])
        if self.rails > 1:
            self._separate_rails(h)
        self._tbf(h, h.mbit, "add")
        # TCP small queues: at most TSQ_BYTES of one socket wait in the host's own qdisc (the
        # namespace's default is 4 MB), so that the ACKs of what a host receives do not queue
        # behind what it sends (a ring sends and receives at once): measured on 4 hosts, the
        # ring's fitted link bandwidth rose from about 0.90 to 0.93-0.94 of the payload rate.
        _run(["ip", "netns", "exec", h.ns, "sysctl", "-qw", f"net.ipv4.tcp_limit_output_bytes={TSQ_BYTES}"])

    def _separate_rails(self, h: Host) -> None:
        """Several interfaces on one subnet, each carrying only its own address's traffic, as NICs on
        rails do: ARP answered only on the interface holding the address (arp_ignore) and from it
        (arp_announce); a socket bound to rail r's address (Open MPI binds its TCP connections to its
        interface's) leaves through eth<r> (a routing table per rail, chosen by source address);
        and no reverse-path filter, under which a reply from another rail's address would be dropped."""
        sysctls = ["net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
                   "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                   *(f"net.ipv4.conf.{dev}.rp_filter=0" for dev in h.devs)]
        _run(["ip", "netns", "exec", h.ns, "sysctl", "-qw", *sysctls])

    def _tbf(self, h: Host, mbit: float, verb: str, rails: Optional[list] = None, way: Optional[str] = None) -> None:
        """Shapes what the host sends (its own end of the veth, way 'tx'), what it receives (the bridge's
        end, whose egress enters the host: 'rx'), or both (None)."""
        for r in rails if rails is not None else range(self.rails):
            if way != "rx":
                _run(["ip", "netns", "exec", h.ns, "tc", "qdisc", verb, "dev", h.devs[r], *_tbf_spec(mbit)])
            if way != "tx":
                _run(["tc", "qdisc", verb, "dev", h.bridge_devs[r], *_tbf_spec(mbit)])

    def _write_agent(self) -> None:
        cases = "\n".join(f"  {h.addr}|{h.ns}) ns={h.ns} ;;" for h in self.hosts)
        script = f"""#!/bin/sh
# mpirun's ssh agent for the commbench test cluster {self.tag}: called as AGENT [ssh options] HOST COMMAND...
# Runs COMMAND in HOST's network namespace under a host name of its own, as ssh would on HOST.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
case "$host" in
{cases}
  *) echo "commbench test cluster agent: unknown host '$host'" >&2; exit 255 ;;
esac
echo "$host $*" >> {shlex.quote(os.path.join(self._tmp, 'agent.log'))}
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""
        self.agent = os.path.join(self._tmp, "agent")
        with open(self.agent, "w") as f:
            f.write(script)
        os.chmod(self.agent, 0o755)
        self.hostfile = os.path.join(self._tmp, "hostfile")

    def teardown(self) -> None:
        """Kills every process left (ours, and anything in the namespaces), deletes the namespaces,
        the veths and the bridge. Safe to call twice and after a partial build."""
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        names = [h.ns for h in self.hosts] or [f"{self.tag}-h0"]
        for ns in names:
            for _ in range(3):
                pids = _run(["ip", "netns", "pids", ns], check=False).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                time.sleep(0.1)
            _run(["ip", "netns", "del", ns], check=False)
            shutil.rmtree(_etc(ns), ignore_errors=True)
        for h in self.hosts:
            for bridge_dev in h.bridge_devs:
                _run(["ip", "link", "del", bridge_dev], check=False)
        for j in range(len(self.leaves or [])):
            _run(["ip", "link", "del", self.uplink(j)[0]], check=False)
            _run(["ip", "link", "del", self.leaf_bridge(j)], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # ---- rates ---------------------------------------------------------------------------------

    def shape(self, host: int, mbit: float, rail: Optional[int] = None, way: Optional[str] = None) -> None:
        """Re-shapes one host's links (every rail, or `rail` alone; both directions, or `way` 'rx' or 'tx'
        alone) to `mbit` Mbit/s."""
        h = self.hosts[host]
        self._tbf(h, mbit, "replace", None if rail is None else [rail], way)
        if rail is None and way is None:
            h.mbit = mbit

    def shape_pair(self, a: int, b: int, mbit: float) -> None:
        """What host a sends to host b, and b to a, on every rail, at `mbit` (a tc filter by destination
        address under an HTB on each host's own interfaces); everything else at the host's rate."""
        for x, y in ((a, b), (b, a)):
            hx, hy = self.hosts[x], self.hosts[y]
            for dev in hx.devs:
                tc = ["ip", "netns", "exec", hx.ns, "tc"]
                _run([*tc, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
                for cls, rate in (("1:10", hx.mbit), ("1:20", mbit)):
                    _run([*tc, "class", "add", "dev", dev, "parent", "1:", "classid", cls, "htb",
                          *_htb_rate(rate)])
                for addr in hy.addrs:
                    _run([*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "u32", "match", "ip",
                          "dst", f"{addr}/32", "flowid", "1:20"])

    def shape_uplink(self, leaf: int, mbit: Optional[float]) -> None:
        """Leaf `leaf`'s uplink (both directions) at `mbit` in all, or as built again (None): bonded
        members at mbit / MEMBERS each, an unbonded uplink under one tbf."""
        if self.bonded:
            for m in range(MEMBERS):
                self.shape_member(leaf, m, self.bonded if mbit is None else mbit / MEMBERS)
            return
        for dev in self.uplink(leaf):
            if mbit is None:
                _run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
            else:
                _run(["tc", "qdisc", "replace", "dev", dev, *_tbf_spec(mbit)])

    def bond_uplinks(self, mbit: float) -> None:
        """Every leaf's uplink as MEMBERS links of `mbit` each, as a bond or ECMP group hashing on
        layer 3+4: a TCP connection keeps its member for its life, both ways, and connections that
        share a member share its rate, so that flows of a loaded round collide at random and a member
        degraded (shape_member) slows a share of its leaf's cross-leaf connections. The hash is bit 1
        of the source port XOR bit 1 of the destination port (the same both ways): bit 0 says nothing,
        as Linux gives connect() even ports and bind() odd ones. An HTB class per member on each end of
        the uplink's veth pair, u32 filters choosing it; what is not TCP takes member 0."""
        self.bonded = mbit
        for j in range(len(self.leaves or [])):
            for dev in self.uplink(j):
                _run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
                for m in range(MEMBERS):
                    _run(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", f"1:{10 + m}", "htb",
                          *_htb_rate(mbit)])
                for sport, dport in ((2, 0), (0, 2)):
                    _run(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                          "match", "ip", "protocol", "6", "0xff", "match", "ip", "sport", str(sport), "0x2",
                          "match", "ip", "dport", str(dport), "0x2", "flowid", "1:11"])

    def member_bytes(self, leaf: int) -> list[int]:
        """The bytes each member of leaf `leaf`'s bonded uplink carried so far, both ways."""
        sent = [0] * MEMBERS
        for dev in self.uplink(leaf):
            out = _run(["tc", "-s", "class", "show", "dev", dev]).stdout
            for m, n in re.findall(r"class htb 1:1(\d) .*?\n\s*Sent (\d+) bytes", out):
                sent[int(m)] += int(n)
        return sent

    def shape_member(self, leaf: int, member: int, mbit: float) -> None:
        """One member of leaf `leaf`'s bonded uplink (bond_uplinks) at `mbit`, both ways."""
        for dev in self.uplink(leaf):
            _run(["tc", "class", "change", "dev", dev, "parent", "1:", "classid", f"1:{10 + member}", "htb",
                  *_htb_rate(mbit)])

    def lose(self, host: int, pct: int = 100) -> None:
        """Host `host` drops `pct` % of the packets its rails send and receive (all of them by
        default), chosen at random, as a failing NIC or cable does; its loopback is spared. Debian's
        nftables in the host's namespace (netem is not to be had); the table goes with the namespace."""
        if shutil.which("nft") is None:
            raise ClusterUnavailable("losing packets needs Debian's nftables ('nft' on PATH; make test-system)")
        rule = 'meta iifname != "lo" meta oifname != "lo" ' + ("drop" if pct >= 100 else f"numgen random mod 100 < {pct} drop")
        script = (f"table inet lossy {{\n chain in {{ type filter hook input priority 0; policy accept; {rule}; }}\n"
                  f" chain out {{ type filter hook output priority 0; policy accept; {rule}; }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", self.hosts[host].ns, "nft", "-f", "-"], input=script, text=True,
                       check=True, capture_output=True)

    def reset(self) -> None:
        """Every host's every rail at its build rate again, no pair filters, no uplink shaped."""
        for h, rate in zip(self.hosts, self._rates):
            h.mbit = rate
            self._tbf(h, rate, "replace")
        for j in range(len(self.leaves or [])):
            self.shape_uplink(j, None)

    def topology_conf(self) -> str:
        """The cluster's leaves in Slurm's topology.conf syntax, under one spine."""
        leaves = [f"SwitchName=leaf{j} Nodes={','.join(h.ns for h in self.hosts if h.leaf == j)}"
                  for j in range(len(self.leaves or [1]))]
        return "\n".join([*leaves, f"SwitchName=spine Switches=leaf[0-{len(leaves) - 1}]"]) + "\n"

    @staticmethod
    def payload_gbps(mbit: float) -> float:
        """TCP payload rate in GB/s (commbench's unit, 1e9 bytes/s) of a link shaped to `mbit`."""
        return mbit * 1e6 / 8 * PAYLOAD_SHARE / 1e9

    # ---- running things on the hosts -------------------------------------------------------------

    def in_host(self, host: int, argv: list) -> list:
        """argv run in one host's namespace under its own host name, ahead of the rest of the machine
        for the CPU (nice -10): the fits against the shaped rates assume that the links, not the
        cores that the test beside them shares, set the times (a gloo fit read 1.10 of the rate, and
        scale's 4-host prediction 18 % off, while other tests took the cores in bursts)."""
        ns = self.hosts[host].ns
        return ["nice", "-n", "-10", "ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                f'hostname {ns} && exec "$@"', "sh", *argv]

    def env(self) -> dict:
        """This environment without launcher variables; mpirun allowed as root. A rank waiting for a
        shaped link sleeps (Open MPI's nanosleep yield) rather than spins: the fits read the same, and
        the cluster's MPI tests took 27 s of CPU instead of 71 s, which the test beside them needs."""
        return {**mpi_env(), "OMPI_MCA_threads_pthreads_yield_strategy": "nanosleep"}

    def mpirun_prefix(self, ranks_per_host: int = 1, hosts: Optional[list] = None, export: Optional[dict] = None) -> list:
        """The bundled mpirun's argv up to the program, across `hosts` (indices; default all) with
        `ranks_per_host` slots each; ranks are placed by slot (host 0 first). Run it with env(). With
        several rails, local rank i talks TCP through rail i mod rails alone (eth<r>), as GPU i
        through NIC i: a shell before the program sets its btl_tcp_if_include. `export`: variables
        mpirun sets on every rank (-x)."""
        chosen = [self.hosts[i] for i in (hosts if hosts is not None else range(len(self.hosts)))]
        hostfile = f"{self.hostfile}.{'-'.join(str(h.index) for h in chosen)}.{ranks_per_host}"
        with open(hostfile, "w") as f:
            f.writelines(f"{h.addr} slots={ranks_per_host}\n" for h in chosen)
        return [
            MPIRUN, "--hostfile", hostfile, "--np", str(len(chosen) * ranks_per_host),
            # mpirun's and its daemons' session folders in the cluster's own folder, which teardown
            # removes with those a killed mpirun or daemon leaves (conftest.own_session).
            *own_session(self._tmp),
            # Required: one PRRTE daemon per namespace, started through our agent instead of ssh.
            "--prtemca", "plm_ssh_agent", self.agent,
            # The rest is precaution (runs also passed without each of them, tried one at a time):
            # every daemon started by mpirun itself, not by other daemons (tree spawn), so that a
            # daemon's failure to start is mpirun's own error;
            "--prtemca", "plm_ssh_no_tree_spawn", "1",
            # the daemons call back over the bridge only (mpirun also advertises eth0's address,
            # which the namespaces cannot reach);
            "--prtemca", "oob_tcp_if_include", self.subnet,
            # ranks of different hosts talk TCP on the cluster subnet only, ranks of one host over
            # shared memory, as on a real node (with tcp,self alone they would use TCP through
            # their own address, not shaped either);
            "--mca", "btl", "tcp,sm,self", *([] if self.rails > 1 else ["--mca", "btl_tcp_if_include", self.subnet]),
            # 2 cores serve up to 8 hosts: no binding, oversubscription allowed, and waiting ranks
            # yield the core (measured: a 4-host all-reduce at 256 KiB took 20 ms instead of 125).
            "--bind-to", "none", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
            *(a for k, v in (export or {}).items() for a in ("-x", f"{k}={v}")),
            *(["sh", "-c", f'export OMPI_MCA_btl_tcp_if_include=eth$(( ${{OMPI_COMM_WORLD_LOCAL_RANK:-0}} % {self.rails} )); '
                           'exec "$@"', "sh"] if self.rails > 1 else []),
        ]

    def mpirun(self, args: list, ranks_per_host: int = 1, hosts: Optional[list] = None, timeout: float = 120,
               cwd: Optional[str] = None, export: Optional[dict] = None) -> subprocess.CompletedProcess:
        """Runs `args` (program and its arguments) under mpirun across the cluster and waits, at most
        `timeout` seconds (then everything it started is killed and TimeoutExpired raised)."""
        p = self.popen([*self.mpirun_prefix(ranks_per_host, hosts, export), *args], env=self.env(), cwd=cwd)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def popen(self, argv: list, env: Optional[dict] = None, cwd: Optional[str] = None) -> subprocess.Popen:
        """A process of ours (in its own process group), killed at teardown if still running."""
        p = subprocess.Popen(argv, env=env or self.env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        self._procs.append(p)
        return p

    def kill_all(self) -> None:
        """Kills our processes and everything running in the namespaces; the cluster stays up."""
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for h in self.hosts:
            for pid in _run(["ip", "netns", "pids", h.ns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def torchrun_envs(self, hosts: Optional[list] = None, port: int = MASTER_PORT) -> list:
        """One torchrun-style environment per host (one process each), rank i on hosts[i]; the
        rendezvous on the first host."""
        chosen = [self.hosts[i] for i in (hosts if hosts is not None else range(len(self.hosts)))]
        envs = []
        for rank, h in enumerate(chosen):
            env = self.env()
            env.update(RANK=str(rank), WORLD_SIZE=str(len(chosen)), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                       MASTER_ADDR=chosen[0].addr, MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=h.dev)
            envs.append(env)
        return envs

    def spawn_gloo(self, args: list, hosts: Optional[list] = None, program: Optional[list] = None,
                   cwd: Optional[str] = None, port: int = MASTER_PORT) -> list:
        """Starts `commbench ARGS` (or PROGRAM ARGS) once per host, torchrun-style; returns the
        Popen objects (rank order). See run_gloo to wait for them."""
        chosen = list(hosts if hosts is not None else range(len(self.hosts)))
        return [self.popen(self.in_host(i, [*(program or [COMMBENCH]), *args]), env=env, cwd=cwd)
                for i, env in zip(chosen, self.torchrun_envs(chosen, port))]

    def run_gloo(self, args: list, hosts: Optional[list] = None, timeout: float = 120,
                 cwd: Optional[str] = None, port: int = MASTER_PORT) -> list:
        """spawn_gloo and wait, at most `timeout` seconds for all; [(returncode, stdout, stderr)]."""
        procs = self.spawn_gloo(args, hosts, cwd=cwd, port=port)
        deadline = time.monotonic() + timeout
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                outs.append((p.returncode, out, err))
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        return outs


def main(argv: list) -> int:
    n = int(argv[0]) if argv else 2
    try:
        with Cluster(n) as c:
            t = time.monotonic()
            r = c.mpirun(["hostname"], timeout=60)
            print(shlex.join(c.mpirun_prefix()))
            print(f"rc={r.returncode} in {time.monotonic() - t:.1f} s\n{r.stdout}{r.stderr}")
            with open(os.path.join(c._tmp, "agent.log")) as f:
                print(f.read())
            return r.returncode
    except ClusterUnavailable as e:
        print(f"skipped: {e}")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
