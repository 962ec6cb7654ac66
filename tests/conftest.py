"""Shared helpers: run commbench and Python under the bundled mpirun, as a user would."""

import atexit
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from commbench.launch.world import WITHOUT_LIBFABRIC, launcher_free_env
from commbench.results.document import read_json

BIN = os.path.dirname(sys.executable)
COMMBENCH = os.path.join(BIN, "commbench")
MPIRUN = os.path.join(BIN, "mpirun")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STUB_GPU = os.path.join(HERE, "stubs", "fake_gpu")


def mpi_env() -> dict:
    """This environment without launcher variables (so a test run from inside a job starts its own
    ranks), allowed to run mpirun as root."""
    env = launcher_free_env()
    # Ranks waiting in MPI yield the core: the tests start up to 4 ranks on 2 cores, where ranks that
    # spin starve the rank they wait for (the correctness matrix at 4 ranks took far longer spinning).
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    # As commbench's own launch: no test has a fabric for libfabric; shared memory and TCP carry
    # every test's traffic.
    for var, value in WITHOUT_LIBFABRIC.items():
        env.setdefault(var, value)
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


# Open MPI leaves a killed mpirun's session folder (ompi.<pid>) in its tmpdir for good, and a later
# mpirun that draws the same pid fails before any rank starts ("The PMIx server's listener thread
# failed to start"): the tests kill mpiruns on purpose, and /tmp keeps every earlier run's folders.
# commbench's own launch keeps its in a folder of its own (launch/world.py session_base); so does
# every mpirun a test starts itself, inside a folder of this process's, removed when it exits.
_SESSIONS = tempfile.mkdtemp(prefix="commbench-tests-mpirun-")
atexit.register(shutil.rmtree, _SESSIONS, True)


def own_session(inside: str = _SESSIONS) -> list:
    """mpirun's options that give it a new, empty folder (inside `inside`) for its session folder."""
    return ["--prtemca", "prte_tmpdir_base", tempfile.mkdtemp(dir=inside)]


def rank_faults_env(**faults: str) -> dict:
    """mpi_env() with tests/stubs/rank_faults loaded in every process, `faults` its COMMBENCH_STUB_*
    variables."""
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(HERE, "stubs", "rank_faults"), env.get("PYTHONPATH")]))
    return {**env, **faults}


def stub_gpu_env(gpus: int = 1) -> dict:
    """mpi_env() with `gpus` GPUs made visible by the stub in tests/stubs/fake_gpu (to commbench's
    processes and to every rank mpirun starts from them)."""
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [STUB_GPU, env.get("PYTHONPATH")]))
    env["COMMBENCH_STUB_GPUS"] = str(gpus)
    return env


# The hang-up tests send SIGHUP to the commands they start: those must not inherit an ignored SIGHUP
# from however the suite was started (`nohup make test`), as a command started to ignore hang-ups
# keeps ignoring them, by design.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# How long a command of a test may take before it counts as hung: 2.5 times the longest one the
# tests run (gpu-check on 8 emulated GPUs on a busy VM), well before the 300 s of commbench's own
# --timeout and of a plan's step, so that a hang fails its test in 2 minutes, not 5.
HUNG_S = 120


# The most a loaded machine stretches a hang limit (bounded): past that a command is hung, however busy.
MOST_STRETCH = 5.0


def load_stretch() -> float:
    """How many times longer the machine now takes than an idle one: its runnable work (the load
    average of the last minute) per core, at least 1 (at a load of 14 on 2 cores, the 8-GPU gpu-check
    ran past 120 s)."""
    return min(MOST_STRETCH, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


def room(seconds: float) -> float:
    """A bound on how long something took, stretched by the load the machine had (load_stretch): a
    fault test's 'ended within --timeout + 5 s' held on a quiet machine and failed at a load of 14."""
    return seconds * load_stretch()


def bounded(cmd: list, timeout: float, **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd) with its output, in a session of its own, so that a command past `timeout`
    is killed with everything it started (mpirun, the ranks) before TimeoutExpired is raised. A busy
    machine gives it room: the limit is `timeout` times load_stretch(), as the load stands when the
    limit would pass."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as p:
        start = time.monotonic()
        while True:
            try:
                out, err = p.communicate(timeout=max(0.1, start + timeout * load_stretch() - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - start < timeout * load_stretch():
                    continue  # the machine got busier meanwhile
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def mpirun(n: int, args: list, timeout: float = HUNG_S, cwd=None, env=None) -> subprocess.CompletedProcess:
    extra = ["--oversubscribe", "--bind-to", "none"] if n > (os.cpu_count() or 1) else []
    return bounded([MPIRUN, *own_session(), "--np", str(n), *extra, *args], timeout, env=env or mpi_env(), cwd=cwd)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(rank: int, world: int, port: int) -> dict:
    """mpi_env() with the variables torchrun gives rank `rank` of `world` on this host."""
    env = mpi_env()
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    return env


def torchrun_style(args: list, ranks: int = 2, cwd=None, timeout: float = HUNG_S, env_extra=None) -> list:
    """commbench ARGS launched torchrun-style: `ranks` processes with torchrun's variables (and
    `env_extra`) and no torchrun (whose own process loads torch: seconds; the real torchrun is
    test_collectives_cli's); [(exit status, stdout, stderr)] by rank."""
    port = free_port()
    procs = [subprocess.Popen([COMMBENCH, *args], env={**torchrun_env(r, ranks, port), **(env_extra or {})}, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(ranks)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [(p.returncode, *out) for p, out in zip(procs, outs)]


def commbench(args: list, timeout: float = HUNG_S, cwd=None, env=None) -> subprocess.CompletedProcess:
    return bounded([COMMBENCH, *args], timeout, env=env or mpi_env(), cwd=cwd)


TRACE_LINE = re.compile(r"^# start (top|\d+) ([a-z-]+) (\d+)$")


def traced_phases(stderr: str) -> dict:
    """{'top' or rank: [(phase, ms)]} from a traced command's stderr, every such line well formed."""
    lines = [TRACE_LINE.match(x) for x in stderr.splitlines() if x.startswith("# start ")]
    assert lines and all(lines), stderr
    seen: dict[str, list[tuple[str, int]]] = {}
    for m in lines:
        seen.setdefault(m.group(1), []).append((m.group(2), int(m.group(3))))
    return seen


# ---- ranks of a run under way (the fault tests) --------------------------------------------------

def rank_pids(marker: str) -> dict:
    """rank -> pid of the ranks whose command line holds `marker` (the result file's path), or whose
    working folder it is (a run without -o, in a test's own folder)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read() and os.readlink(f"/proc/{pid}/cwd") != marker:
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return found


def error_lines(err: str) -> list:
    """commbench's error lines in a user's mpirun's stderr, as a terminal shows them: mpirun puts a NUL
    before a rank's line at times, and Open MPI's abort message a blank (launch/relay.as_shown)."""
    from commbench.launch.relay import as_shown
    return [line for line in (as_shown(raw.encode()).decode() for raw in err.splitlines())
            if line.startswith("commbench: error")]


def left_behind(marker: str) -> list:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()


def wait_for_rows(out: str, proc, deadline_s: float = 90, rows=lambda doc: doc["results"]) -> None:
    """Until `out` holds a row (`rows` of its document: its records; numerics' are its own section)."""
    until = time.monotonic() + deadline_s
    while time.monotonic() < until and proc.poll() is None:
        try:
            if rows(read_json(out, "result file")):
                return
        except Exception:  # noqa: BLE001 - not there yet, or replaced as we read it
            pass
        time.sleep(0.1)
    said = "".join(proc.communicate()) if proc.poll() is not None else "still running"
    raise AssertionError(f"no row was measured; rank 0 said: {said[-3000:]}")


@pytest.fixture
def workdir(tmp_path):
    return str(tmp_path)


@pytest.fixture
def full_disk(tmp_path):
    """A file system with no space left (a tmpfs of 64 KiB, filled): needs root."""
    where = tmp_path / "full"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with contextlib.suppress(OSError), open(where / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture
def make_cluster():
    """Factory of test clusters (tests/cluster.py): make_cluster(hosts, mbit=..., rates=[...], options of
    Cluster) builds
    one, torn down after the test whatever happens; skips the test with one line where network
    namespaces cannot be made (not root, no ip/tc, not permitted)."""
    from cluster import Cluster, ClusterUnavailable
    made = []

    def make(hosts: int = 2, mbit: float = 400, rates=None, **options):
        c = Cluster(hosts, mbit, rates, **options)
        made.append(c)
        try:
            return c.__enter__()
        except ClusterUnavailable as e:
            pytest.skip(str(e))

    try:
        yield make
    finally:
        for c in made:
            c.teardown()


@pytest.fixture
def make_slurm(make_cluster):
    """A real Slurm (tests/slurm.py) on a test cluster of `hosts` hosts, stopped after the test; skips
    with one line where the cluster or Slurm's daemons are not to be had."""
    from slurm import Slurm, SlurmUnavailable
    started = []

    def make(hosts: int = 4, mbit: float = 1000):
        try:
            Slurm.check()
        except SlurmUnavailable as e:
            pytest.skip(str(e))
        s = Slurm(make_cluster(hosts, mbit))
        started.append(s)
        return s.__enter__()

    try:
        yield make
    finally:
        for s in started:
            s.stop()


class Ran:
    """What one command of a batch printed and returned, as subprocess.CompletedProcess has it, and
    whether rank 0 had loaded torch by its end."""

    def __init__(self, got: dict):
        self.args, self.returncode, self.stdout, self.stderr = got["argv"], got["returncode"], got["stdout"], got["stderr"]
        self.torch_loaded = got["torch_loaded"]


def batch(ranks: int, cases: dict, folder: str, env=None, timeout: float = 600) -> dict:
    """Runs every command of `cases` ({name: argv}) in one mpirun launch of `ranks` processes, one
    after another (tests/batched.py); returns {name: Ran}. The commands write their files where their
    argv says, relative paths in `folder`. Under xdist a module's tests may run on both workers: the
    first to ask runs the batch, in a folder of the session, the other waits for it, and each gets a
    copy of its files in its `folder`. (Not torchrun: gloo's process group cannot be made twice in
    one torchrun launch.)"""
    import fcntl
    import hashlib
    import json
    import shutil
    key = {"ranks": ranks, "cases": cases,
           "env": {k: v for k, v in (env or {}).items() if k.startswith("COMMBENCH") or k == "PYTHONPATH"}}
    where = folder
    if os.environ.get("PYTEST_XDIST_WORKER"):  # folder: <session>/popen-gwN/<name>
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        where = os.path.join(os.path.dirname(os.path.dirname(folder)), f"batch-{digest}")
    with open(where + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(os.path.join(where, "ran.json")):
            os.makedirs(where, exist_ok=True)
            path = os.path.join(where, "cases.json")
            with open(path, "w") as f:
                json.dump(cases, f)
            r = mpirun(ranks, [sys.executable, os.path.join(HERE, "batched.py"), path, where], timeout=timeout,
                       cwd=where, env=env)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            ran = {}
            for name in cases:
                with open(os.path.join(where, f"ran-{name}.json")) as f:
                    ran[name] = json.load(f)
            with open(os.path.join(where, "ran.json"), "w") as f:
                json.dump(ran, f)
    if where != folder:
        shutil.copytree(where, folder, dirs_exist_ok=True)
    with open(os.path.join(folder, "ran.json")) as f:
        return {name: Ran(got) for name, got in json.load(f).items()}


def in_process(args: list, monkeypatch, capsys) -> tuple:
    """commbench ARGS as the console script runs it (main() with that argv), in this process and its
    working directory, without launcher variables: (exit status, stdout, stderr). For what ends before
    any rank starts (refusals, analysis commands): a run would start ranks from the test process."""
    from commbench.cli import main
    for var in set(os.environ) - set(launcher_free_env()):
        monkeypatch.delenv(var)
    monkeypatch.setattr(sys, "argv", ["commbench", *args])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


# The open lock files of this worker's exclusive hold, kept from a quiet test to the next one.
_quiet_hold: list = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `quiet` runs alone on the machine: under pytest-xdist the other workers finish
    the test they are in and wait until it is done. Its measured figures are judged (against a shaped
    link's rate, or a baseline measured minutes before), and the other worker's load moves them:
    scale's 4-rank ground truth read 0.90 to 0.99 of its prediction beside the first pass (0.96 to 0.99
    alone) and once 0.84, outside its 15 %; beside a test cluster's ranks (nice -10) a 256K all-reduce
    read 0.035 of its baseline. Every other test holds a shared lock for its run; a quiet one first
    takes the turnstile, which lets no new test start, then the lock alone. Around the whole of a
    test's run, its fixtures' set-up and tear-down included: a module's fixture that starts ranks or a
    test cluster does so inside the lock of the test that first asks for it. A quiet test followed by
    another on its worker keeps the hold for it: each new hold first waits for the other worker's
    test to end (seconds, as the first pass's long tests weigh most), so the quiet tests
    run one after another (pytest_collection_modifyitems) under one hold."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    quiet = item.get_closest_marker("quiet") is not None
    if not _quiet_hold:
        where = item.config._tmp_path_factory.getbasetemp().parent  # the run's folder, shared by its workers
        _quiet_hold.extend([open(where / "quiet.turnstile", "a"), open(where / "quiet.lock", "a")])
        turnstile, lock = _quiet_hold
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        if not quiet:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        if not (quiet and nextitem is not None and nextitem.get_closest_marker("quiet") is not None):
            while _quiet_hold:
                _quiet_hold.pop().close()  # the locks go with the files


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group marks into the test ids
def pytest_collection_modifyitems(items):
    """The longest tests first (the wheel's build, the test clusters' shaped links, gpu-check on
    emulated GPUs), so that under `make test`'s workers none of them is what one worker is left running
    at the end; the quiet tests last, one group (`--dist loadgroup`, in collection order:
    `--no-loadscope-reorder`), so that one worker runs them one after another under one exclusive
    hold (pytest_runtest_protocol). Spread over the workers as they came, they took three holds and
    more in a first pass: each new hold waits for the tests the other workers are in, and a test that
    took the turnstile between two holds ran alone too.

    The other test-cluster tests are one group too, first: one worker runs them one after another.
    Their ranks (up to 16, ahead of the rest at nice -10) poll while they wait for a shaped link, so
    that two or three of these tests at once slow each other to a crawl (several times as long each,
    and shaped-link judgements failed).

    The tests of a module that share a fixture (a batched launch: _shares_a_fixture) are one group
    each, so that one worker sets the fixture up: each worker a test came to set it up again (one
    batch of 3-rank runs three times, a minute each).

    The rest is spread (_spread), so that tests that wait do so beside tests that compute."""
    for item in items:
        if item.get_closest_marker("quiet"):
            item.add_marker(pytest.mark.xdist_group("quiet"))
        elif item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("cluster"))
        elif _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    position = _spread(items)
    items.sort(key=lambda item: (item.get_closest_marker("quiet") is not None,
                                 not any(item.get_closest_marker(m) for m in ("wheel", "cluster", "long")),
                                 position[item]))


def _shares_a_fixture(item) -> bool:
    """Whether the test uses a fixture it shares with others of its module (scope module, class or
    package: a batched launch, a test cluster, a compiled simulator), set up again each time its
    worker comes back to the module from another."""
    return any(d.scope != "function" and d.scope != "session"
               for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs)


def _spread(items) -> dict:
    """Each test's place in the pass, between 0 and 1: a module's tests evenly over the whole pass,
    or, where they share a fixture, together at the module's own place in the collection. In
    collection order a module's tests ran side by side on every worker: test_faults.py's, which
    mostly wait (a `--timeout` run out, a stopped rank, an interrupt), left the two cores mostly idle
    for long stretches of the pass."""
    modules: dict = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    position = {}
    for place, tests in enumerate(modules.values()):
        together = any(_shares_a_fixture(item) for item in tests)
        for k, item in enumerate(tests):
            position[item] = (place + 0.5) / len(modules) if together else (k + 0.5) / len(tests)
    return position


def pytest_addoption(parser):
    parser.addoption("--no-launch", action="store_true",
                     help="Skip every test at the point where it would start a process (mpirun, a command's ranks, "
                          "a script): `make check`'s inner loop; `make test` runs them all.")


def _needs_a_launch(*args, **kwargs):
    pytest.skip("starts a process: `make test` runs it")


@pytest.fixture(scope="session", autouse=True)
def _no_launch(request):
    """With --no-launch, whatever starts a process (subprocess, multiprocessing's fork) skips the test
    there, fixtures of any scope included: the tests left are those of one process alone."""
    if not request.config.getoption("--no-launch"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _needs_a_launch)
        patch.setattr(os, "fork", _needs_a_launch)
        yield
