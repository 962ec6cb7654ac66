"""The CPU's priority for the quiet tests (marker `quiet`, tests/conftest.py) over the others, under
pytest-xdist: the pytest process that runs the workers makes two cgroups of the CPU controller, one
for the quiet tests and one for the others flagged `cpu.idle` (Linux 5.15 and later), and each worker
moves itself into one or the other before each test. A process of the idle group, the ranks, daemons
and compilers a test starts included wherever they go, gets a core only where no process of the other
group wants it, and a waking quiet rank takes the core from it at once: the quiet tests run beside
the rest, first, rather than alone at the end of the pass.

Where the groups cannot be made (no right to the controller's folder, a cgroup v2 parent that holds
processes itself, a kernel without `cpu.idle`) or COMMBENCH_TEST_QUIET=hold, `make_groups` returns
None and the quiet tests run alone instead (tests/conftest.py's hold)."""

import os
from typing import Optional

# The run's groups, for its workers: set by the process that runs them, "" where they hold instead.
GROUPS_VAR = "COMMBENCH_TEST_QUIET_GROUPS"
QUIET, OTHERS = "quiet", "others"
PREFIX = "commbench-tests-"  # and the pid of the process that made them


def _own_cpu_cgroup() -> Optional[str]:
    """The folder of this process's cgroup in the hierarchy that has the CPU controller, or None."""
    with open("/proc/self/cgroup") as f:
        paths = dict(line.rstrip("\n").split(":", 2)[1:] for line in f)  # controllers ("" in v2) -> path
    v1 = next((path for controllers, path in paths.items() if "cpu" in controllers.split(",")), None)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            root, mount = fields[3], fields[4]
            fstype, options = fields[fields.index("-") + 1], fields[-1].split(",")
            if fstype == "cgroup" and "cpu" in options and v1 is not None:
                path = v1
            elif fstype == "cgroup2" and "" in paths and "cpu" in _read(os.path.join(mount, "cgroup.controllers")).split():
                path = paths[""]
            else:
                continue
            # A mount of a subtree (a container's) shows the path below its own root.
            inside = path[len(root):] if root != "/" and path.startswith(root) else path
            return os.path.join(mount, inside.lstrip("/"))
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def make_groups() -> Optional[str]:
    """The run's folder of the two groups, made inside this process's own cgroup (so that a pytest run
    by a test inside the idle group stays inside it), or None where they cannot be made."""
    if os.environ.get("COMMBENCH_TEST_QUIET") == "hold":
        return None
    try:
        own = _own_cpu_cgroup()
        if own is None:
            return None
        for name in os.listdir(own):  # a run that was killed left its groups
            if name.startswith(PREFIX) and not os.path.exists(f"/proc/{name[len(PREFIX):]}"):
                remove_groups(os.path.join(own, name))
        top = os.path.join(own, f"{PREFIX}{os.getpid()}")
        os.mkdir(top)
    except OSError:
        return None
    try:
        if os.path.exists(os.path.join(top, "cgroup.subtree_control")):  # cgroup v2
            _write(os.path.join(top, "cgroup.subtree_control"), "+cpu")
        for name in (QUIET, OTHERS):
            os.mkdir(os.path.join(top, name))
        _write(os.path.join(top, OTHERS, "cpu.idle"), "1")
        for into in (os.path.join(top, OTHERS), own):  # that a process can be moved in, and back
            _write(os.path.join(into, "cgroup.procs"), str(os.getpid()))
    except OSError:
        remove_groups(top)
        return None
    return top


_entered: list = []  # the group this worker is in, where it moved itself


def enter(groups: str, name: str) -> None:
    """Moves this process (every thread of it) into the run's group `name`; what it starts from now
    on starts there."""
    path = os.path.join(groups, name)
    if _entered != [path]:
        _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))
        _entered[:] = [path]


def remove_groups(top: str) -> None:
    """Moves whatever is still in the run's groups (a process a test left running) out to the cgroup
    that holds them, then removes them, the deepest first."""
    parent = os.path.dirname(top)
    for folder, _, _ in os.walk(top, topdown=False):
        try:
            pids = _read(os.path.join(folder, "cgroup.procs")).split()
        except OSError:
            continue
        for pid in pids:
            try:
                _write(os.path.join(parent, "cgroup.procs"), pid)
            except OSError:
                pass  # gone meanwhile
        try:
            os.rmdir(folder)
        except OSError:
            pass
