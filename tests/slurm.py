"""A real Slurm on the test cluster (tests/cluster.py): Debian's slurm-wlm and munge, one slurmd per
host namespace under the host's own name and address, slurmctld on host 0 (the head node, where
srun, salloc and sbatch are typed), munged in the root namespace (its socket is a file, which every
namespace reaches). Everything the daemons write lies in one temporary folder; nothing of the
machine's own Slurm or munge configuration is read or changed.

Verified with Slurm 22.05.8 (Debian 12): `srun -N 4 hostname` on 4 hosts prints the 4 host names.
What it takes, and why:
- a cgroup.conf naming the plugin of the machine's hierarchy: on a hybrid (v1) one, slurmd's
  autodetection finds "no filesystem mounted on /sys/fs/cgroup" and refuses to start;
- proctrack/linuxproc, task/none, no accounting: no cgroup of its own per job, so no systemd or
  delegation is needed;
- CPUs=2 per node, OverSubscribe=FORCE: every namespace sees this machine's cores, and the tests run
  a task per node beside whatever else runs;
- SlurmdSpoolDir, pid and log files per node (%n): several slurmd on one file system.

Needs root, the test cluster, and slurmctld, slurmd, munged and mungekey on PATH (`make test` installs
slurm-wlm and munge on Debian as root); otherwise SlurmUnavailable says which is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Optional

from cluster import Cluster

DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "srun", "sinfo")
START_S = 30  # the daemons up and every node idle


class SlurmUnavailable(Exception):
    """No Slurm can be started here (what is missing in one line)."""


class Slurm:
    """Slurm on a Cluster: a context manager that stops every daemon it started."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.folder = os.path.join(cluster._tmp, "slurm")
        self.conf = os.path.join(self.folder, "slurm.conf")
        self._daemons: list[subprocess.Popen] = []

    @staticmethod
    def check() -> None:
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            raise SlurmUnavailable(f"a real Slurm needs {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")

    def __enter__(self) -> "Slurm":
        self.check()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self, base: Optional[dict] = None) -> dict:
        return {**(base if base is not None else self.c.env()), "SLURM_CONF": self.conf}

    def _write_config(self) -> None:
        head = self.c.hosts[0]
        lines = [
            "ClusterName=commbench",
            f"SlurmctldHost={head.ns}({head.addr})",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.folder}/munge.sock",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={self.folder}/state", f"SlurmdSpoolDir={self.folder}/spool-%n",
            f"SlurmctldPidFile={self.folder}/slurmctld.pid", f"SlurmdPidFile={self.folder}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.folder}/slurmctld.log", f"SlurmdLogFile={self.folder}/slurmd-%n.log",
            "SlurmctldPort=16817", "SlurmdPort=16818",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "MpiDefault=none",
            "ReturnToService=2", "SlurmdTimeout=60", "InactiveLimit=0", "KillWait=5",
        ]
        lines += [f"NodeName={h.ns} NodeAddr={h.addr} CPUs={os.cpu_count()} State=UNKNOWN" for h in self.c.hosts]
        lines.append("PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        with open(os.path.join(self.folder, "cgroup.conf"), "w") as f:
            f.write(f"CgroupPlugin=cgroup/{'v2' if v2 else 'v1'}\nCgroupMountpoint=/sys/fs/cgroup\n"
                    "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n")

    def _start(self) -> None:
        os.makedirs(os.path.join(self.folder, "state"))
        key = os.path.join(self.folder, "munge.key")
        subprocess.run(["mungekey", "--create", "--force", "--keyfile", key], check=True, capture_output=True)
        os.chmod(key, 0o600)
        self._daemons.append(subprocess.Popen(
            ["munged", "--foreground", "--force", "--socket", f"{self.folder}/munge.sock", "--key-file", key,
             "--pid-file", f"{self.folder}/munged.pid", "--log-file", f"{self.folder}/munged.log",
             "--seed-file", f"{self.folder}/munge.seed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self._write_config()
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": self.env()}
        self._daemons.append(subprocess.Popen(self.c.in_host(0, ["slurmctld", "-D", "-f", self.conf]), **quiet))
        for i, h in enumerate(self.c.hosts):
            self._daemons.append(subprocess.Popen(self.c.in_host(i, ["slurmd", "-D", "-N", h.ns, "-f", self.conf]),
                                                  **quiet))
        deadline = time.monotonic() + START_S
        while True:
            r = self.run(["sinfo", "--noheader", "--format=%t %D"], timeout=10, check=False)
            states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
            if states.get("idle") == str(len(self.c.hosts)):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm did not come up in {START_S} s: sinfo says {r.stdout.strip() or r.stderr.strip()}"
                                   f" (logs in {self.folder})")
            time.sleep(0.5)

    def run(self, argv: list, timeout: float = 300, check: bool = False, env: Optional[dict] = None,
            cwd: Optional[str] = None) -> subprocess.CompletedProcess:
        """argv (srun, salloc, sinfo...) typed on the head node, host 0."""
        return subprocess.run(self.c.in_host(0, argv), capture_output=True, text=True, timeout=timeout, check=check,
                              env=self.env(env), cwd=cwd)

    def stop(self) -> None:
        for p in reversed(self._daemons):
            if p.poll() is None:
                p.terminate()
        for p in self._daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._daemons.clear()
