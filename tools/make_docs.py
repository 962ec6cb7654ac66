"""Regenerates every example output in README.md and docs/**/*.md from real runs, so that the pages
cannot drift from the code.

    .venv/bin/python tools/make_docs.py            # run every example, rewrite the blocks
    .venv/bin/python tools/make_docs.py --only p2p # one block (repeatable)
    .venv/bin/python tools/make_docs.py --check    # names, and the deterministic blocks' text: exit 1 on a difference

A block in a page is (each marker a line of its own)

    <!-- generated: NAME -->
    ```
    $ commbench ...
    ...what it printed...
    ```
    <!-- /generated -->

and EXAMPLES below says what NAME runs: shell lines as a user types them from the repository root,
with `commbench` (and `python`) meaning this interpreter's commbench, taken from this checkout. The
block becomes each line after `$ `, followed by what it printed to stdout (and to stderr where the
step says so; a refusal is only on stderr). Every example runs in a fresh temporary folder holding a
copy of results/, tests/data/, tests/fixtures/ and benchmarks/, so the paths read as from the repository root while
every file written (result files, commbench-results/, plots, reports) stays out of the checkout.

An example that reads another's files (`uses`) gets a copy of that example's folder; in a full run
they share one run of it, so their figures agree. --only runs the example it uses again without
rewriting that one's block: regenerate them together (--only A --only B) to keep them in step.

--check cannot compare most outputs: no timing is the same twice. It checks that the set of block names
in the pages is the set of names in EXAMPLES (no block without a generator, no generator without a
block, no name twice, every marker closed), and that the files the examples copy into docs/ exist;
the examples marked deterministic (refusals, the fabric catalog, a fixture's doctor verdict) it runs,
and compares each page's block with what they print now.

Examples needing root and network namespaces (the test cluster of tests/cluster.py) run only as
root, and the one typed on a real Slurm (tests/slurm.py) only where slurm-wlm and munge are installed;
elsewhere they are skipped with a note and their blocks left as they are. Examples that show
how a GPU-less host refuses GPU work are skipped where a GPU is visible. Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "docs"]
# What an example may read, copied into its folder under the same relative paths.
INPUTS = ["results", os.path.join("tests", "data"), os.path.join("tests", "fixtures"), "benchmarks"]
STEP_TIMEOUT_S = 600
# links on the cluster of rails (as tests/test_host_links.py runs it): bandwidth judged at half the
# typical flow, few iterations of 1 MiB.
RAILS_LINKS = ("--judge bandwidth --threshold-pct 50 --bandwidth-size 1M --window 2 --budget-ms 50 --min-iters 3 "
               "--warmup 1")
# Stands for the test cluster's mpirun prefix (hostfile, ssh agent, TCP on the cluster subnet) in a
# shown line; the prefix itself is long and names temporary files.
CLUSTER_MPIRUN = "mpirun ... "


@dataclasses.dataclass
class Step:
    line: str  # shown after "$ " and run by bash
    stderr: bool = False  # show stderr too, as a terminal would
    rc: tuple = (0,)  # exit statuses that are right for this step; anything else fails the example
    show_rc: bool = False  # follow the step with "$ echo $?" and its status
    fault: Optional[str] = None  # "stop" or "kill": rank 2 gets SIGSTOP/SIGKILL once `fault_file` has rows
    fault_file: Optional[str] = None


@dataclasses.dataclass
class Example:
    steps: list
    uses: Optional[str] = None  # an example whose files this one reads: run first, output not shown
    cluster: Optional[dict] = None  # Cluster(**cluster) of tests/cluster.py; CLUSTER_MPIRUN in lines
    ranks_per_host: int = 1  # CLUSTER_MPIRUN's ranks on each host of the cluster
    # Done to the cluster before the steps (tests/cluster.py's methods): {"bond": mbit} bonds every leaf's
    # uplink (bond_uplinks), {"member": [(leaf, member, mbit)]} shapes a bond's member, {"shape": [(host,
    # mbit, rail)]} a host's rail.
    faults: dict = dataclasses.field(default_factory=dict)
    slurm: Optional[int] = None  # a real Slurm (tests/slurm.py) of this many hosts: lines typed on its head node
    no_gpu: bool = False  # shows a GPU-less host's answer: skipped where a GPU is visible
    files: dict = dataclasses.field(default_factory=dict)  # file written -> repository path to copy it to
    # Runs on this many emulated GPUs a host (`make emu`; NVML answering for them, tests/stubs/emu_nvml):
    # the GPU path's output as it reads, its figures the host's and meaningless.
    emulated_gpus: int = 0
    # What it prints is the same on every run and host (refusals, a catalog, figures of a fixture):
    # --check runs it and compares the page's block with it.
    deterministic: bool = False


def sh(line: str, **kw) -> Step:
    return Step(line, **kw)


def err(line: str, rc: tuple = (2,)) -> Step:
    """A refusal: one line on stderr and its exit status."""
    return Step(line, stderr=True, rc=rc, show_rc=True)


# Each example short (few sizes, a small --budget-ms): the whole table runs in a few minutes on 2 cores.
EXAMPLES: dict[str, Example] = {
    # README.md
    "readme-allreduce": Example([sh("commbench allreduce --sizes 1K-4M:x64 --budget-ms 20 -o allreduce.json")]),

    # docs/commands/collectives.md
    "reducescatter": Example([sh("commbench reducescatter --impl mpi,ring --sizes 1K-1M:x32 --budget-ms 20 --no-fit "
                                 "-o rs.json")]),
    "broadcast-root": Example([sh("commbench broadcast --np 3 --root 1 --impl mpi,tree,chain --sizes 1K-4M:x64 "
                                  "--budget-ms 20 --no-fit -o bcast.json")]),
    "nccl-choice": Example([sh("commbench allreduce --device cuda --np 3 --impl nccl --nccl-algo ring,tree "
                               "--nccl-proto ll,simple --sizes 4K,256K,2M --iters 20 --no-fit -o forced.json")],
                           emulated_gpus=3),
    "timing-loop": Example([sh("commbench broadcast --impl mpi --sizes 1K,64K,1M --budget-ms 50 --no-fit "
                               "-o step.json"),
                            sh("commbench broadcast --impl mpi --sizes 1K,64K,1M --budget-ms 50 --no-fit --timing loop "
                               "-o loop.json")]),
    "place-both": Example([sh("commbench allgather --np 3 --impl mpi --place both --timing loop -b 8 -e 1M -f 16 "
                              "--budget-ms 20 --no-fit -o both.json")]),
    "straggler": Example([sh("commbench allreduce --np 3 --impl mpi,ring --delay 1:2000 --sizes 1K,64K --budget-ms 50 "
                             "--no-fit -o delay.json")]),
    "bad-input": Example(deterministic=True, steps=[
        err("commbench allreduce --np 0"),
        # One exit status shown is enough: every refusal is exit status 2.
        Step("commbench allreduce --sizes 1-1T:+1", stderr=True, rc=(2,)),
        Step("commbench allreduce --budget-ms nan", stderr=True, rc=(2,)),
        Step("commbench allreduce --impl ring,foo", stderr=True, rc=(2,)),
        Step("commbench p2p --pairs 0:5", stderr=True, rc=(2,)),
    ]),

    # docs/commands/overlap.md: MPI's non-blocking all-reduce beside the loop, untested and with 8 tests
    # during the computation; then a scale run judged with the overlap measured.
    "overlap": Example([sh("commbench overlap allreduce --np 2 --sizes 64K-4M:x4 --budget-ms 50 -o overlap.json"),
                        sh("commbench overlap allreduce --np 2 --sizes 64K-4M:x4 --budget-ms 50 --probes 8 "
                           "-o probes.json")]),
    "overlap-scale": Example([
        sh("commbench overlap allreduce --np 2 --sizes 4M --budget-ms 50 --probes 8 -o overlap.json > /dev/null"),
        sh("commbench scale --ranks 1,2 --impl mpi --sizes 256K-4M:x4 --budget-ms 20 -o scale.json > /dev/null"),
        sh("commbench scale --from scale.json --grad-bytes 4M --compute-ms 2 --overlap-from overlap.json "
           "--extrapolate 4,8"),
    ]),

    # docs/commands/p2p.md
    "p2p": Example([sh("commbench p2p --sizes 8,1K,64K,1M --budget-ms 20 -o p2p.json")]),

    # docs/commands/copy.md, docs/gpus.md
    "copy-no-gpu": Example([err("commbench copy --sizes 4K-1M:x16"), err("commbench p2p --device cuda")], no_gpu=True,
                           deterministic=True),
    "gpu-no-gpu": Example([err("commbench allreduce --device cuda"), err("commbench p2p --impl nccl")], no_gpu=True,
                          deterministic=True),
    "gpu-version": Example([sh("commbench version -v")]),

    # docs/commands/links.md: 4 hosts, host 2 shaped to a third of the others' rate. Latency on 2
    # cores shared by 4 hosts is the scheduler's, so bandwidth alone judges (as tests/test_links.py).
    "links-cluster": Example([
        sh(CLUSTER_MPIRUN + "commbench links --judge bandwidth --bandwidth-size 1M --window 2 --budget-ms 50 "
           "--min-iters 3 --warmup 1 -o slow.json > slow.txt", rc=(1,), show_rc=True),
        sh("commbench links --from slow.json --judge bandwidth", rc=(1,), show_rc=True),
        sh("commbench links --from slow.json --judge bandwidth --threshold-pct 25 | tail -n 1", rc=(0,)),
    ], cluster={"hosts": 4, "rates": [300, 300, 100, 300]}),

    # docs/commands/links.md at host level: 4 hosts of 2 ranks, host 2 shaped to a third; bandwidth
    # judged, as above. Every pair of 4 hosts is in the default rounds; host 2 has met every host, so
    # no partner is left to confirm it against.
    "links-host-cluster": Example([
        sh(CLUSTER_MPIRUN + "commbench links --level host --judge bandwidth --bandwidth-size 1M --window 2 "
           "--budget-ms 50 --min-iters 3 --warmup 1 -o hosts.json", rc=(1,), show_rc=True),
    ], cluster={"hosts": 4, "rates": [300, 300, 100, 300]}, ranks_per_host=2),
    # docs/commands/links.md: 8 hosts of two rails in leaves of 3, 3 and 2 (topology.conf written from
    # the cluster), each leaf's uplink two bonded members of 400 Mbit/s (as tests/test_host_links.py),
    # host 4's rail 1 at a fifth of the rate; host level, then every rank pair, timed.
    "links-rails": Example([
        sh("cat topology.conf"),
        sh("/usr/bin/time -f 'host level: %e s' -a -o times.txt " + CLUSTER_MPIRUN + "commbench links --level host "
           "--topology topology.conf --no-intra " + RAILS_LINKS + " -o hosts.json", rc=(1,), show_rc=True),
        sh("/usr/bin/time -f 'rank level, every pair: %e s' -a -o times.txt " + CLUSTER_MPIRUN + "commbench links "
           "--level rank " + RAILS_LINKS + " -o pairs.json > pairs.txt", rc=(1,)),
        sh("tail -n 4 pairs.txt; cat times.txt"),
    ], cluster={"hosts": 8, "mbit": 200, "rails": 2, "leaves": [3, 3, 2]}, ranks_per_host=2,
        faults={"bond": 400, "shape": [(4, 40, 1)]}),
    # The same cluster, healthy but for one member of leaf0's bonded uplink at 80 Mbit/s; every
    # matching (--rounds all), as the test that names it.
    "links-uplink": Example([
        sh(CLUSTER_MPIRUN + "commbench links --level host --topology topology.conf --no-intra --rounds all "
           + RAILS_LINKS + " -o uplink.json > uplink.txt", rc=(1,), show_rc=True),
        sh("grep -v '^#   flows' uplink.txt | tail -n 11"),
    ], cluster={"hosts": 8, "mbit": 200, "rails": 2, "leaves": [3, 3, 2]}, ranks_per_host=2,
        faults={"bond": 400, "member": [(0, 1, 80)]}),
    # docs/commands/links.md: the simulation at 1,000 and 4,000 hosts of 8 ranks in leaves of 32, on a
    # noisy fabric with ECMP collisions and worn hosts; a model file.
    "links-at-scale": Example([
        sh("python benchmarks/links_at_scale.py --hosts 1000 --ranks-per-host 8 --leaf-size 32 --mixes 3 "
           "--noise 0.08 --ecmp 0.1 --mild 0.02"),
        sh("python benchmarks/links_at_scale.py --hosts 4000 --ranks-per-host 8 --leaf-size 32 --mixes 2 "
           "--noise 0.08 --ecmp 0.1 --mild 0.02 | tail -n 3"),
        sh("python benchmarks/links_at_scale.py --hosts 1000 --ranks-per-host 8 --leaf-size 32 --noise 0.08 "
           "--ecmp 0.1 --mild 0.02 --plant host:node0042,rx:node0500:3,uplink:leaf20 --verdicts > sim.txt", rc=(0,)),
        sh("grep -v PASS sim.txt | head -n 3; tail -n 2 sim.txt"),
        sh("python benchmarks/links_at_scale.py --hosts 320 --ranks-per-host 8 --leaf-size 32 "
           "--model benchmarks/fabric_model.py"),
    ]),

    # docs/commands/fleet.md: the links run above, its hosts as a fleet.
    "fleet-cluster": Example([sh("commbench fleet slow.json --plot fleet.png", rc=(1,), show_rc=True)],
                             uses="links-cluster"),

    # docs/commands/accept.md: cpu-node on this host, promoted, judged against its own baselines,
    # then with a rank held back; cpu-cluster across 4 hosts of the test cluster, one shaped slower.
    "accept-cpu-node": Example([
        sh("commbench accept --plan cpu-node --quick -o first"),
        sh("commbench baseline promote first/$(hostname) --baselines baselines"),
        sh("commbench accept --plan cpu-node --quick --baselines baselines -o again --junit again.xml",
           show_rc=True),
    ]),
    "accept-held": Example([
        sh("commbench accept --plan cpu-node --print-plan | sed 's/impl = \"mpi,ring\", sizes/"
           "impl = \"mpi,ring\", delay = \"1:2000\", sizes/' > held.toml"),
        sh("commbench accept --plan held.toml --quick --baselines baselines -o held --junit held.xml", rc=(1,),
           show_rc=True),
        sh("grep -o '<failure[^>]*>' held.xml"),
    ], uses="accept-cpu-node"),
    "accept-cluster": Example([
        sh("commbench accept --plan cpu-cluster --quick --launch 'mpirun ...' -o cluster", rc=(1,), show_rc=True),
    ], cluster={"hosts": 4, "rates": [300, 300, 100, 300]}),
    # A real Slurm of 4 hosts (tests/slurm.py): the node plan on every node at once, then the fleet.
    "accept-slurm": Example([
        sh("srun -N 4 --ntasks-per-node=1 commbench accept --plan cpu-node --quick -o runs | grep '^# accept cpu-node on' | sort"),
        sh("ls runs runs/$(ls runs | head -n 1)"),
        sh("commbench fleet runs", rc=(0, 1), show_rc=True),
    ], slurm=4),

    # docs/commands/scale.md
    "scale": Example([sh("commbench scale --np 4 --ranks 1,2,4 --impl ring --sizes 64K-4M:x4 --budget-ms 20 "
                         "--compute-ms 20 --grad-bytes 4M --extrapolate 8,16,64,256 -o scale.json --plot scale.png")],
                     files={"scale.png": "docs/commands/scale.png"}),

    # docs/commands/numerics.md: nothing is timed, so these figures repeat exactly from run to run.
    "numerics-normal": Example([sh("commbench numerics --np 4 -o normal.json")]),
    "numerics-cancel": Example([sh("commbench numerics --np 4 --data cancel --dtype float32,bfloat16 -o cancel.json")]),

    # docs/commands/analysis.md
    "analysis-run": Example([sh("commbench allreduce --sizes 1K-4M:x16 --impl mpi,ring,tree --budget-ms 20 --no-fit "
                                "--fabric shm -o run.json")]),
    "fit": Example([sh("commbench p2p --sizes 1-16M:x4 --budget-ms 20 --no-fit --fabric shm -o p2p-shm.json | tail -n 1"),
                    sh("commbench fit p2p-shm.json --fabric shm")]),
    "fabrics": Example([sh("commbench fabrics")], deterministic=True),
    "compare": Example([
        sh("commbench baseline save run.json --name today --dir baselines"),
        sh("commbench compare results/baselines/vm-2core-allreduce-shm.json run.json", rc=(0, 1), show_rc=True),
    ], uses="analysis-run"),
    "plot-report": Example([
        sh("commbench plot run.json --baseline results/baselines/vm-2core-allreduce-shm.json -o run.png"),
        sh("commbench report run.json -o report --fabric shm"),
        sh("sed -n '1,/^## Records/p' report/report.md"),
    ], uses="analysis-run", files={"run.png": "docs/commands/plot.png"}),

    # docs/results.md
    "export": Example([
        sh("commbench export run.json --format csv -o run.csv"),
        sh("python -c \"import pandas; print(pandas.read_csv('run.csv')[['impl', 'size_bytes', 'time_us_median', "
           "'time_us_iqr', 'busbw_gbps']])\""),
        err("commbench export run.json --format png"),
        err("commbench export run.json --format csv --samples"),
    ], uses="analysis-run"),
    "import-nccl-tests": Example([
        sh("sed '/^ *16777216 /q' tests/data/nccl-tests/sendrecv_perf-2nodes-ib.txt > sendrecv-cut.log"),
        sh("grep -v all_gather_perf tests/data/nccl-tests/all_gather_perf-8gpu.txt > old-allgather.log"),
        sh("seq 60 | sed 's/^/maintenance note /' > notes.txt"),
        sh("commbench import nccl-tests sendrecv-cut.log -o sr.json", stderr=True),
        err("commbench import nccl-tests old-allgather.log"),
        sh("commbench import nccl-tests old-allgather.log --op allgather -o ag.json", stderr=True),
        err("commbench import nccl-tests tests/data/nccl-tests/gather_perf-8gpu.txt"),
        err("commbench import nccl-tests notes.txt"),
    ]),
    "import-alltoall": Example([
        sh("commbench import nccl-tests tests/data/nccl-tests/alltoall_perf-8gpu.txt -o a2a.json", stderr=True),
        sh("commbench export a2a.json --format console"),
    ]),
    "import-per-iteration": Example([
        sh("commbench import nccl-tests tests/fixtures/imports/nccl-tests-all_reduce_perf-2proc-g2-I1.json -o pi.json",
           stderr=True),
        sh("commbench report pi.json -o pi-report"),
        sh("grep -E 'timing|straggler' pi-report/report.md"),
    ]),
    "envelope": Example([
        sh("commbench import nccl-tests tests/fixtures/imports/nccl-tests-all_reduce_perf-8gpu.json -o h100.json"),
        sh("commbench fit h100.json"),
    ]),
    "import-osu": Example([
        sh("commbench import osu tests/fixtures/imports/osu_latency-7.4-2ranks-shm.txt -o osu.json", stderr=True),
        sh("commbench fit osu.json"),
    ]),

    # docs/commands/node.md
    "topo": Example([sh("commbench topo"), sh("commbench doctor", show_rc=True)]),
    "doctor-degraded": Example([sh("commbench doctor --from tests/fixtures/topo/hgx_h100_degraded.json", rc=(1,),
                                   show_rc=True)], deterministic=True),
    "version": Example([sh("commbench version"), sh("commbench version -v")]),

    # docs/launching.md
    "mpirun": Example([sh("mpirun -n 2 commbench allreduce --impl mpi,ring --sizes 1K-64K:x8 --budget-ms 20 --no-fit "
                          "-o mpirun.json")]),
    "torchrun": Example([sh("torchrun --standalone --nproc-per-node 2 --no-python commbench allreduce "
                            "--sizes 1K-64K:x8 --budget-ms 20 --no-fit -o torchrun.json")]),
    "fault-stop": Example([sh("commbench allreduce --impl ring --np 3 --sizes 1K-4K:+8 --iters 200 --timeout 3 "
                              "-o stopped.json    # rank 2 gets SIGSTOP once the first rows are in",
                              stderr=True, rc=(1,), show_rc=True, fault="stop", fault_file="stopped.json"),
                           sh("python -c \"import json; d = json.load(open('stopped.json')); "
                              "print(d['status'], len(d['results']), 'rows:', d['error'])\"")]),
    "fault-kill": Example([sh("commbench allreduce --impl ring --np 3 --sizes 1K-4K:+8 --iters 200 --timeout 3 "
                              "-o killed.json 2>&1 | grep error    # rank 2 gets SIGKILL once the first rows are in",
                              stderr=True, rc=(0,), fault="kill", fault_file="killed.json")]),
}

# A marker is a line of its own, so that a page can show one indented (docs/testing.md does). A body
# never holds another opening marker: a block left unclosed is reported, never swallows the next.
BLOCK = re.compile(r"^<!-- generated: (?P<name>[\w.-]+) -->\n"
                   r"(?P<body>(?:(?!^<!-- generated:).)*?)^<!-- /generated -->$", re.S | re.M)
OPEN = re.compile(r"^<!-- generated: .*-->$", re.M)
CLOSE = re.compile(r"^<!-- /generated -->$", re.M)


class ExampleFailed(Exception):
    pass


# ---- pages ---------------------------------------------------------------------------------------

def pages() -> list[str]:
    found = []
    for entry in PAGES:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            found.append(path)
        for folder, _, names in sorted(os.walk(path)):
            found += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return found


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def problems() -> list[str]:
    """What --check reports: names in pages and table that disagree, markers left open, files missing."""
    found, seen = [], {}
    for page in pages():
        with open(page, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(page, ROOT)
        names = blocks(text)
        if len(OPEN.findall(text)) != len(names) or len(CLOSE.findall(text)) != len(names):
            found.append(f"{rel}: a generated block is not closed, or not opened, as <!-- generated: NAME --> ... "
                         f"<!-- /generated -->")
        for name in names:
            if name in seen:
                found.append(f"{rel}: block {name} is also in {seen[name]}")
            seen.setdefault(name, rel)
            if name not in EXAMPLES:
                found.append(f"{rel}: block {name} has no entry in EXAMPLES")
    for name, ex in EXAMPLES.items():
        if name not in seen:
            found.append(f"EXAMPLES: {name} is in no page")
        if ex.uses is not None and ex.uses not in EXAMPLES:
            found.append(f"EXAMPLES: {name} uses {ex.uses}, which is no example")
        for target in ex.files.values():
            if not os.path.exists(os.path.join(ROOT, target)):
                found.append(f"EXAMPLES: {name} writes {target}, which is missing")
    return found


def stale_blocks() -> list[str]:
    """The deterministic examples whose block in a page is not what they print now (run here)."""
    shown = {}
    for page in pages():
        with open(page, encoding="utf-8") as f:
            for m in BLOCK.finditer(f.read()):
                lines = m.group("body").rstrip("\n").split("\n")
                shown[m.group("name")] = ("\n".join(lines[1:-1]), os.path.relpath(page, ROOT))
    found = []
    with tempfile.TemporaryDirectory(prefix="commbench-docs-") as tmp:
        runner = Runner(tmp)
        for name, ex in EXAMPLES.items():
            if not ex.deterministic or name not in shown or runner.skip_reason(ex):
                continue
            try:
                now = runner.run(name)
            except ExampleFailed as e:
                found.append(f"{shown[name][1]}: block {name} no longer runs: {e}")
                continue
            if now != shown[name][0]:
                found.append(f"{shown[name][1]}: block {name} is not what it prints now (tools/make_docs.py --only {name})")
    return found


def fence(text: str) -> str:
    """A code fence longer than any run of backticks in the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def write_blocks(outputs: dict) -> list[str]:
    changed = []
    for page in pages():
        with open(page, encoding="utf-8") as f:
            text = f.read()

        def replace(m):
            name = m.group("name")
            if name not in outputs:
                return m.group(0)
            f = fence(outputs[name])
            return f"<!-- generated: {name} -->\n{f}\n{outputs[name]}\n{f}\n<!-- /generated -->"
        new = BLOCK.sub(replace, text)
        if new != text:
            with open(page, "w", encoding="utf-8") as f:
                f.write(new)
            changed.append(os.path.relpath(page, ROOT))
    return changed


# ---- running -------------------------------------------------------------------------------------

def environment(tmp: str) -> dict:
    """This environment for the examples' shells: `commbench` and `python` are this interpreter with
    this checkout first on its path; mpirun and torchrun are those beside the interpreter."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    for name, argv in (("commbench", [sys.executable, "-m", "commbench"]), ("python", [sys.executable])):
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            # A wrapper, not a link: a link to a venv's python outside the venv's folder leaves the venv.
            f.write(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
        os.chmod(path, 0o755)
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))  # tests/cluster.py, for the examples on the test cluster
    from commbench.launch.world import launcher_free_env
    # Without the variables of a launcher this script may run under: every example starts its own ranks.
    env = launcher_free_env(dict(os.environ))
    env["PATH"] = os.pathsep.join([bindir, os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    # Output and error lines in the order a terminal shows them.
    env["PYTHONUNBUFFERED"] = "1"
    # The tests' stand-in GPU (tests/stubs/fake_gpu) must never answer for an example.
    env.pop("COMMBENCH_STUB_GPUS", None)
    if os.geteuid() == 0:
        # A user's own mpirun line (docs/launching.md) as root; commbench sets these itself when standalone.
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def gpu_visible(env: dict) -> bool:
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"], env=env,
                       capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() not in ("", "0")


def descendants(pid: int) -> list[int]:
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rank_pid(root_pid: int, rank: int) -> Optional[int]:
    for pid in descendants(root_pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return pid
    return None


def has_rows(path: str) -> bool:
    try:
        with open(path) as f:
            return bool(json.load(f).get("results"))
    except (OSError, ValueError):  # not there yet, or being replaced as we read it
        return False


def run_step(step: Step, cwd: str, env: dict, mpirun_prefix: Optional[list], on_host=None) -> tuple[str, int]:
    """`on_host(argv)`: argv as typed on a host of the test cluster (default: here)."""
    line = step.line
    launch = f"--launch '{CLUSTER_MPIRUN.strip()}'"  # accept's launcher of a cluster plan's steps
    if launch in line:
        line = line.replace(launch, f"--launch {shlex.quote(shlex.join(mpirun_prefix))}")
    if CLUSTER_MPIRUN in line:
        line = line.replace(CLUSTER_MPIRUN, shlex.join(mpirun_prefix) + " ")
    p = subprocess.Popen((on_host or list)(["bash", "-c", line]), cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT if step.stderr else subprocess.DEVNULL, text=True,
                         start_new_session=True)
    try:
        if step.fault:
            target = os.path.join(cwd, step.fault_file)
            until = time.monotonic() + 120
            while not has_rows(target) and p.poll() is None and time.monotonic() < until:
                time.sleep(0.1)
            pid = rank_pid(p.pid, 2)
            if pid is None:
                raise ExampleFailed(f"{step.line}: no rank 2 to {step.fault}")
            os.kill(pid, signal.SIGSTOP if step.fault == "stop" else signal.SIGKILL)
        out, _ = p.communicate(timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ExampleFailed(f"{step.line}: still running after {STEP_TIMEOUT_S} s") from None
    finally:
        # Whatever the step left (a stopped rank, a hung launcher) ends here, by process id.
        for pid in [p.pid, *descendants(p.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        p.wait()
    if p.returncode not in step.rc:
        raise ExampleFailed(f"{step.line}: exit status {p.returncode}, expected {step.rc}:\n{out[-3000:]}")
    # Paths of the temporary folder would differ in every run and mean nothing to a reader.
    out = out.replace(cwd + os.sep, "").replace(cwd, ".")
    if mpirun_prefix:
        out = out.replace(shlex.join(mpirun_prefix), CLUSTER_MPIRUN.strip())
    return out, p.returncode


def prepare(folder: str) -> None:
    for rel in INPUTS:
        src = os.path.join(ROOT, rel)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(folder, rel))


class Runner:
    def __init__(self, tmp: str):
        self.tmp = tmp
        self.env = environment(tmp)
        self.ran: dict[str, str] = {}  # example -> its folder, for those that others use
        self._gpu: Optional[bool] = None

    def gpu(self) -> bool:
        if self._gpu is None:
            self._gpu = gpu_visible(self.env)
        return self._gpu

    def skip_reason(self, ex: Example) -> Optional[str]:
        """Why `ex` cannot run here (or an example whose files it reads cannot), or None."""
        if ex.uses is not None:
            reason = self.skip_reason(EXAMPLES[ex.uses])
            if reason:
                return reason
        if ex.no_gpu and self.gpu():
            return "it shows a GPU-less host's answer, and a GPU is visible here"
        if ex.emulated_gpus and not os.path.exists(os.path.join(ROOT, "build", "emu", ".built")):
            return "it runs on emulated GPUs, and the emulated build is missing: run `make emu`"
        if ex.cluster or ex.slurm:
            from cluster import Cluster, ClusterUnavailable
            try:
                Cluster.check()
            except ClusterUnavailable as e:
                return str(e)
        if ex.slurm:
            from slurm import Slurm, SlurmUnavailable
            try:
                Slurm.check()
            except SlurmUnavailable as e:
                return str(e)
        return None

    def run(self, name: str) -> str:
        """Runs an example in a fresh folder; returns the block's text."""
        ex = EXAMPLES[name]
        folder = os.path.join(self.tmp, name)
        if ex.uses:
            if ex.uses not in self.ran:
                self.run(ex.uses)
            shutil.copytree(self.ran[ex.uses], folder)
        else:
            os.makedirs(folder)
            prepare(folder)
        if ex.cluster:
            from cluster import Cluster
            with Cluster(**ex.cluster) as c:
                if ex.cluster.get("leaves"):
                    with open(os.path.join(folder, "topology.conf"), "w") as f:
                        f.write(c.topology_conf())
                if ex.faults.get("bond"):
                    c.bond_uplinks(ex.faults["bond"])
                for leaf, member, mbit in ex.faults.get("member", []):
                    c.shape_member(leaf, member, mbit)
                for host, mbit, rail in ex.faults.get("shape", []):
                    c.shape(host, mbit, rail)
                env = c.env()
                env.update({k: self.env[k] for k in ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED")})
                text = self._steps(ex, folder, env, c.mpirun_prefix(ex.ranks_per_host))
        elif ex.slurm:
            from cluster import Cluster
            from slurm import Slurm
            with Cluster(ex.slurm, 1000) as c, Slurm(c) as slurm:
                env = slurm.env(c.env())
                env.update({k: self.env[k] for k in ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED")})
                text = self._steps(ex, folder, env, None, lambda argv: c.in_host(0, argv))
        elif ex.emulated_gpus:
            stubs = os.path.join(ROOT, "tests", "stubs", "emu_nvml")
            env = {**self.env, "COMMBENCH_GPU_EMULATION": str(ex.emulated_gpus),
                   "PYTHONPATH": os.pathsep.join([stubs, self.env["PYTHONPATH"]])}
            text = self._steps(ex, folder, env, None)
        else:
            text = self._steps(ex, folder, self.env, None)
        for produced, target in ex.files.items():
            os.makedirs(os.path.dirname(os.path.join(ROOT, target)), exist_ok=True)
            shutil.copyfile(os.path.join(folder, produced), os.path.join(ROOT, target))
        self.ran[name] = folder
        return text

    def _steps(self, ex: Example, folder: str, env: dict, prefix: Optional[list], on_host=None) -> str:
        shown = []
        for step in ex.steps:
            out, rc = run_step(step, folder, env, prefix, on_host)
            shown.append(f"$ {step.line}")
            shown += [line.rstrip() for line in out.rstrip("\n").splitlines()]
            if step.show_rc:
                shown += ["$ echo $?", str(rc)]
        return "\n".join(shown)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="check block names against EXAMPLES (outputs cannot be compared); write nothing")
    ap.add_argument("--only", action="append", metavar="NAME", help="regenerate this block only (repeatable)")
    args = ap.parse_args()

    found = problems()
    if args.check:
        found += stale_blocks()
        for line in found:
            print(line)
        print(f"make_docs: {len(EXAMPLES)} examples, {'OK' if not found else f'{len(found)} problem(s)'}")
        return 1 if found else 0
    names = args.only or list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        print(f"make_docs: no example named {', '.join(unknown)}; known: {', '.join(EXAMPLES)}", file=sys.stderr)
        return 2

    started = time.monotonic()
    outputs, failed = {}, []
    with tempfile.TemporaryDirectory(prefix="commbench-docs-") as tmp:
        runner = Runner(tmp)
        for name in names:
            why = runner.skip_reason(EXAMPLES[name])
            if why:
                print(f"skipped {name}: {why}; its block is left as it is", flush=True)
                continue
            t = time.monotonic()
            try:
                outputs[name] = runner.run(name)
            except ExampleFailed as e:
                failed.append(name)
                print(f"FAILED  {name}: {e}", flush=True)
                continue
            print(f"ok      {name} ({time.monotonic() - t:.1f} s)", flush=True)
    changed = write_blocks(outputs)
    print(f"make_docs: {len(outputs)} block(s) generated in {time.monotonic() - started:.0f} s; "
          f"pages changed: {', '.join(changed) or 'none'}")
    for line in problems():
        print(line)
    return 1 if failed or problems() else 0


if __name__ == "__main__":
    sys.exit(main())
