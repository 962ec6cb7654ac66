"""Failure paths end every rank with one line and leave no broken file; refused runs leave no file;
result files keep secrets out and the command as typed; the fit's headline reads as latency and
bandwidth; the policy spends no warm-ups it cannot afford."""

import errno
import glob
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import COMMBENCH, HERE, HUNG_S, MPIRUN, ROOT, commbench, free_port, in_process, mpi_env, mpirun, torchrun_env, torchrun_style

from commbench.analysis import fit
from commbench.analysis import verdicts as fitreport
from commbench.cli import main
from commbench.errors import CommbenchError
from commbench.launch.world import WITHOUT_LIBFABRIC
from commbench.node import machine
from commbench.results import atomic
from commbench.results import document as results
from commbench.run import policy
from docs import result_doc, ring_run, row

FULL_DISK = os.path.join(HERE, "stubs", "full_disk")
NCCL_LOG = os.path.join(HERE, "data", "nccl-tests", "all_gather_perf-8gpu.txt")
NO_SPACE = os.strerror(errno.ENOSPC)


def _error_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("commbench: error")]


def _run_main(args, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["commbench", *args])
    with pytest.raises(SystemExit) as ended:
        main()
    return ended.value.code, capsys.readouterr().err


# ---- a disk that fills up ------------------------------------------------------------------------

def test_full_disk_mid_sweep_ends_every_rank_with_one_line(workdir):
    """The third row's write fails, and so does the failed run's last write: the job still ends (no
    rank left in a collective), says so once, and the file keeps its last complete version."""
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [FULL_DISK, env.get("PYTHONPATH")]))
    env["COMMBENCH_STUB_FULL_AFTER"] = "3"  # the file's making, then two rows
    out = os.path.join(workdir, "full.json")
    r = commbench(["allreduce", "--device", "cpu", "--impl", "ring", "--sizes", "1K-64K", "--budget-ms", "5", "-o", out],
                  cwd=workdir, env=env, timeout=180)
    assert r.returncode == 1, r.stderr
    [line] = _error_lines(r.stderr)
    assert line.startswith(f"commbench: error at ring@mpi 4K: {NO_SPACE}") and "OSError" not in line, line
    assert f"{out} keeps the rows of its last complete write; closing it failed: {NO_SPACE}" in line
    assert "Traceback" not in r.stderr
    doc = results.load_document(out)
    assert [r["size_bytes"] for r in doc["results"]] == [1024, 2048] and doc["status"] == "running"
    assert os.listdir(workdir) == ["full.json"]


@pytest.mark.parametrize("args,target", [
    (["allreduce", "--device", "cpu", "--sizes", "1K", "-o", "{full}/r.json"], "{full}/r.json"),
    (["scale", "--device", "cpu", "--ranks", "1,2", "--sizes", "1K", "-o", "r.json", "--plot", "{full}/s.png"], "{full}/s.png"),
    (["links", "--np", "2", "-o", "{full}/sub/l.json"], "{full}/sub/l.json"),
])
def test_a_file_system_that_is_full_already_is_refused_before_any_rank(args, target, full_disk, tmp_path):
    """scale measured for 10 s and then failed on its plot; a result file failed on its first row:
    each file a run writes is refused first where its file system has less than a MiB free."""
    r = commbench([a.format(full=full_disk) for a in args], cwd=str(tmp_path), timeout=60)
    assert (r.returncode, r.stderr) == (2, f"commbench: error: cannot write {target.format(full=full_disk)}: 0 KiB free, "
                                           f"less than the 1 MiB it may take: free some room or choose another place\n")
    assert r.stdout == "" and sorted(os.listdir(tmp_path)) == ["full"] and os.listdir(full_disk) == ["filler"]


def test_accept_on_a_disk_that_fills_during_the_run_shows_its_summary(tmp_path):
    """The step's rank fails on its second write, and the summaries on theirs: the step's evidence is
    its error line (not the fit it printed after), what the full disk took is shown on stdout, and
    the run ends with the first write that failed."""
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [FULL_DISK, env.get("PYTHONPATH")]))
    env["COMMBENCH_STUB_FULL_AFTER"] = "2"  # each process: JUnit and summary.json, or the file's making and a row
    plan = tmp_path / "p.toml"
    plan.write_text('description = "d"\n[[step]]\nname = "sweep"\ncommand = "allreduce"\n'
                    'options = { device = "cpu", impl = "ring", sizes = "1K-64K", budget-ms = 5 }\n')
    junit, folder = tmp_path / "j.xml", tmp_path / "acc" / socket.gethostname()
    r = commbench(["accept", "--plan", str(plan), "-o", str(tmp_path / "acc"), "--junit", str(junit)],
                  cwd=str(tmp_path), env=env, timeout=180)
    assert (r.returncode, _error_lines(r.stderr)) == (2, [f"commbench: error: cannot write {folder / 'summary.md'}: {NO_SPACE}"])
    said = f"commbench: error at ring@mpi 2K: {NO_SPACE}"
    assert "| sweep | FAIL | yes |" in r.stdout and said in r.stdout.split("## sweep: FAIL")[1], r.stdout
    assert said in json.loads((folder / "summary.json").read_text())["steps"][0]["checks"][0]["evidence"]
    assert junit.exists() and sorted(os.listdir(folder)) == ["summary.json", "sweep.json", "sweep.log"]


class _Comm:
    def __init__(self):
        self.aborts = []

    def Abort(self, code):  # noqa: N802 - mpi4py's name
        self.aborts.append(code)


class _World:
    def __init__(self, rank):
        self.rank, self.size, self.comm = rank, 2, _Comm()


class _BrokenReporter:
    """A reporter whose every step after the failure fails too."""
    current = "ring 64M"

    def fail(self, error):
        return "measured rows kept in r.json"

    def summary(self):
        raise RuntimeError("the summary failed as well")


@pytest.mark.parametrize("rank,reporter,line", [
    (0, _BrokenReporter(), "commbench: error at ring 64M: ValueError: peer gone (measured rows kept in r.json)"),
    (1, None, "commbench: error on rank 1: ValueError: peer gone"),
])
def test_a_failure_ends_every_rank_once_whatever_fails_after_it(rank, reporter, line, monkeypatch, capsys):
    from commbench.cli import common
    slept = []
    monkeypatch.setattr(common.time, "sleep", slept.append)
    world = _World(rank)

    def run():
        raise ValueError("peer\ngone")
    with pytest.raises(SystemExit) as ended:
        common.sweep(reporter, run, world)
    assert ended.value.code == 1 and world.comm.aborts == [1]
    assert capsys.readouterr().err == line + "\n"
    assert slept == ([common.RANK_SPEAKS_AFTER_S] if rank else [])  # rank 0 speaks for the job at once


@pytest.mark.parametrize("var,value,line", [
    ("RANK", "2", "torchrun-style launch: RANK=2 with WORLD_SIZE=2: ranks are 0 to 1"),
    ("WORLD_SIZE", "abc", "torchrun-style launch: WORLD_SIZE='abc': give a whole number, 1 or more"),
    ("MASTER_PORT", "99999", "torchrun-style launch: MASTER_PORT='99999': give a whole number, 1 to 65535"),
    # c10d retried it for 300 s whatever --timeout said, deaf to SIGTERM.
    ("MASTER_ADDR", "nosuchhost.invalid", "torchrun-style launch: MASTER_ADDR=nosuchhost.invalid: does not resolve "
                                          "(Name or service not known); set it to an address of rank 0's host that "
                                          "every rank reaches"),
])
def test_torchrun_style_variables_are_checked_in_one_line(var, value, line, workdir):
    """Each rank checks its own launch variables and says what is wrong, whatever its rank."""
    env = torchrun_env(0, 2, free_port())
    env[var] = value
    r = subprocess.run([COMMBENCH, "allreduce", "--device", "cpu", "--sizes", "1K", "-o", "x.json"], env=env,
                       cwd=workdir, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (2, f"commbench: error: {line}\n") and os.listdir(workdir) == []


@pytest.mark.parametrize("addr,why", [
    ("nosuchhost.invalid", "does not resolve (Name or service not known); set it to an address of rank 0's host "
                           "that every rank reaches"),
    ("256.1.1.1", "does not resolve"),
    ("192.0.2.1", f"not an address of host {socket.gethostname()}, where every rank runs (Cannot assign requested "
                  f"address): the ranks would wait there for rank 0"),
])
@pytest.mark.parametrize("launch", ["standalone", "mpirun"])
def test_a_master_address_no_rank_can_reach_is_refused_in_one_line(addr, why, launch, workdir):
    """COMMBENCH_MASTER_ADDR that does not resolve, or on one host is no address of it: the ranks
    waited in gloo's rendezvous for its 300 s whatever --timeout said, c10d retrying every few
    seconds on stderr; over MPI alone the run ended 9 s in under mpirun's box. Refused before any
    rank starts (standalone), or by rank 0 before any measurement."""
    args = ["allreduce", "--device", "cpu", "--sizes", "1K", "--iters", "3", "--timeout", "5", "-o", "x.json"]
    env = {**mpi_env(), "COMMBENCH_MASTER_ADDR": addr}
    r = (subprocess.run([COMMBENCH, *args], env=env, cwd=workdir, capture_output=True, text=True, timeout=60)
         if launch == "standalone" else mpirun(2, [COMMBENCH, *args], cwd=workdir, env=env))
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"commbench: error: COMMBENCH_MASTER_ADDR={addr}: {why}"), \
        r.stderr
    assert not os.path.exists(os.path.join(workdir, "x.json"))
    if launch == "standalone":
        assert r.stderr == lines[0] + "\n"


def test_a_torchrun_style_rank_whose_peers_never_come_ends_within_its_timeout(workdir):
    """Within --timeout, or the 10 s that ranks loading torch on a busy node may take to meet: the rank
    that listens (0) and a rank that connects (1), each of a rendezvous of its own, waited for side by
    side."""
    ports = {rank: free_port() for rank in (0, 1)}
    procs = {rank: subprocess.Popen([COMMBENCH, "allreduce", "--device", "cpu", "--sizes", "1K", "--timeout", "2", "-o",
                                     "x.json"], env=torchrun_env(rank, 2, port), cwd=workdir, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for rank, port in ports.items()}
    for rank, p in procs.items():
        _, err = p.communicate(timeout=60)
        assert (p.returncode, err) == (2, f"commbench: error: rank {rank}: the torchrun-style rendezvous at "
                                          f"127.0.0.1:{ports[rank]}: did not complete within 10 s (--timeout 2 s, at "
                                          f"least 10 s for the ranks to start): start all 2 ranks "
                                          f"(WORLD_SIZE) with the same MASTER_ADDR and MASTER_PORT, where every "
                                          f"rank reaches MASTER_ADDR\n")
    assert os.listdir(workdir) == []


def test_a_torchrun_style_rank_waiting_for_its_peers_ends_on_sigterm(workdir):
    """The rendezvous waits in C++, where no Python handler runs: a rank whose peers never came
    (or whose MASTER_ADDR no packet reaches) ignored SIGTERM until its store's 300 s were up. Both the
    rank that listens (0) and one that connects (1) end at once, with one line. Each is signalled once
    it is there (4 s of waiting was not enough for a busy VM's import of torch, and the line was then
    `commbench: terminated`, right for a rank not yet in the rendezvous): rank 0 once its store
    listens, rank 1 once it connected to a store of the test's that never answers."""
    ports = {rank: free_port() for rank in (0, 1)}
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", ports[1]))
        silent.listen()
        silent.settimeout(HUNG_S)
        procs = {rank: subprocess.Popen([COMMBENCH, "allreduce", "--device", "cpu", "--sizes", "1K", "--timeout", "120", "-o",
                                         "x.json"], env=torchrun_env(rank, 2, port), cwd=workdir, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for rank, port in ports.items()}
        try:
            connected, _ = silent.accept()
            until = time.monotonic() + HUNG_S
            while not _listening(ports[0]) and time.monotonic() < until:
                time.sleep(0.1)
        except BaseException:
            for p in procs.values():
                p.kill()
            raise
        time.sleep(0.5)  # in the C++ call that waits
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        said = {rank: p.communicate(timeout=20)[1] for rank, p in procs.items()}
        connected.close()  # after rank 1 ended: a connection reset before is a warning of c10d's on its stderr
    for rank, p in procs.items():
        assert (p.returncode, said[rank]) == (128 + signal.SIGTERM, f"commbench: error: rank {rank}: the torchrun-style "
                                              f"rendezvous at 127.0.0.1:{ports[rank]}: interrupted (SIGTERM)\n")
    assert os.listdir(workdir) == []


def _listening(port: int) -> bool:
    """Whether a socket of this host listens on TCP `port` (/proc/net/tcp, tcp6: state 0A)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            if any(fields[1].endswith(f":{port:04X}") and fields[3] == "0A" for fields in map(str.split, list(f)[1:])):
                return True
    return False


@pytest.mark.parametrize("measured", [0, 1])
def test_bad_input_found_once_the_result_file_exists(measured, tmp_path):
    """A refusal on the ranks after rank 0 made the result file (a GPU's memory, an MPI that is not
    CUDA-aware): a file without rows goes, so a retry with the same -o works; one with rows stays,
    marked as bad input."""
    from commbench.cli import common
    from commbench.run.output import FileOutput
    path = str(tmp_path / "r.json")
    out = FileOutput(path, {k: v for k, v in ring_run().items() if k not in ("status", "error", "results")})
    for record in ring_run()["results"][:measured]:
        out.file.add(record)

    def run():
        raise CommbenchError("--impl mpi --device cuda: Open MPI v5.0.11 is not CUDA-aware")
    with pytest.raises(CommbenchError):
        common.sweep(out, run, None)
    if measured:
        doc = results.load_document(path)
        assert len(doc["results"]) == 1 and doc["status"] == "failed"
        assert doc["error"] == "bad input: --impl mpi --device cuda: Open MPI v5.0.11 is not CUDA-aware"
    else:
        assert os.listdir(str(tmp_path)) == []


def test_a_file_name_with_a_line_break_is_refused(tmp_path):
    """-o, plot -o and baseline --name all come here; a shell table cannot type the line break."""
    with pytest.raises(CommbenchError, match=r"^file name '.*a\\nb.json' holds a control character \(a line break\?\)"):
        atomic.check_new_file(str(tmp_path / "a\nb.json"), "exists")
    assert os.listdir(str(tmp_path)) == []


def test_a_failed_write_keeps_the_last_good_result_file(tmp_path, monkeypatch):
    path = str(tmp_path / "r.json")
    f = results.ResultFile(path, {k: v for k, v in ring_run().items() if k not in ("status", "error", "results")})
    first, second = ring_run()["results"][:2]
    f.add(first)

    def full_disk(name, mode="r", *args, **kwargs):
        open(name, mode, *args, **kwargs).close()  # the file is created, the write finds no space
        raise OSError(errno.ENOSPC, NO_SPACE, name)

    monkeypatch.setattr(results, "open", full_disk, raising=False)
    with pytest.raises(OSError):
        f.add(second)
    with pytest.raises(OSError):
        f.finish("OSError")
    monkeypatch.undo()
    assert len(f.doc["results"]) == 1  # what the summary prints matches the file
    assert len(results.load_document(path)["results"]) == 1 and os.listdir(str(tmp_path)) == ["r.json"]


class _FullDisk:
    """Files opened for writing under `folder` take a few bytes, then the disk is full."""

    def __init__(self, folder, real_open):
        self.folder, self.real_open = folder, real_open

    def __call__(self, file, mode="r", *args, **kwargs):
        f = self.real_open(file, mode, *args, **kwargs)
        writing = isinstance(file, (str, os.PathLike)) and any(m in mode for m in "wax+")
        return _Filling(f) if writing and os.path.abspath(file).startswith(self.folder) else f


class _Filling:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[:8])
        raise OSError(errno.ENOSPC, NO_SPACE)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.mark.parametrize("command,line", [
    (["plot", "run.json", "-o", "p.png"], f"commbench: error: cannot write p.png: {NO_SPACE}"),
    (["report", "run.json", "-o", "rep"], f"commbench: error: cannot write rep/plot.png: {NO_SPACE}"),
    (["baseline", "save", "run.json", "--name", "a", "--dir", "bl"], f"commbench: error: cannot write bl/a.json: {NO_SPACE}"),
    (["baseline", "save", "run.json", "--name", "a", "--dir", "bl/x/y"],
     f"commbench: error: cannot write bl/x/y/a.json: {NO_SPACE}"),
    (["export", "run.json", "-o", "r.csv"], f"commbench: error: cannot write r.csv: {NO_SPACE}"),
    (["import", "nccl-tests", NCCL_LOG, "-o", "i.json"], f"commbench: error: cannot write i.json: {NO_SPACE}"),
])
def test_files_written_on_a_full_disk_leave_nothing(command, line, tmp_path, monkeypatch, capsys):
    import builtins
    (tmp_path / "run.json").write_text(json.dumps(ring_run()))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(builtins, "open", _FullDisk(str(tmp_path), builtins.open))
    assert _run_main(command, monkeypatch, capsys) == (2, line + "\n")
    # Nothing, not even the folder the baseline or the report was to go into.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run.json"]


def test_new_files_appear_whole_and_never_replace_one(tmp_path):
    target = str(tmp_path / "sub" / "a.txt")
    with atomic.new_file(target, "taken") as tmp:
        assert os.path.dirname(tmp) == os.path.dirname(target) and not os.path.exists(target)
        with open(tmp, "w") as f:
            f.write("whole")
    assert open(target).read() == "whole" and os.listdir(os.path.dirname(target)) == ["a.txt"]
    with pytest.raises(CommbenchError, match="^taken$"):
        with atomic.new_file(target, "taken"):
            pass
    folder = str(tmp_path / "rep")
    with atomic.new_files_in(folder, "has a report") as stage:
        open(os.path.join(stage, "report.md"), "w").close()
    with pytest.raises(CommbenchError, match="has a report"):
        with atomic.new_files_in(folder, "has a report") as stage:
            open(os.path.join(stage, "report.md"), "w").close()
    assert sorted(os.listdir(str(tmp_path))) == ["rep", "sub"] and os.listdir(folder) == ["report.md"]


@pytest.mark.parametrize("name,ext", [("p" * 251 + ".png", ".png"), ("é" * 125 + "x.svg", ".svg"),
                                      ("r" * 200 + "." + "e" * 54, "")])
def test_any_name_a_file_can_take_can_be_written(name, ext, tmp_path):
    """Its temporary name is cut to fit (a 255-byte plot name was refused for its .partial name),
    keeping a format's extension last (matplotlib reads it)."""
    assert len(name.encode()) == 255
    target = str(tmp_path / name)
    with atomic.new_file(target, "taken") as tmp:
        assert len(os.path.basename(tmp).encode()) <= 255 and tmp.endswith(f".partial{ext}")
        with open(tmp, "w") as f:
            f.write("whole")
    assert os.listdir(tmp_path) == [name] and open(target).read() == "whole"


def test_a_run_writes_any_legal_name_and_touches_nothing_beside_it(workdir):
    """A result file rewritten as rows come went through '<name>.partial': a legal name of 248 bytes or
    more failed once measured (that name too long), and a file of the user's called so was replaced and
    removed. Each rewrite now goes through a new hidden file of its own."""
    name = "a" * 250 + ".json"
    with open(os.path.join(workdir, "x.json.partial"), "w") as f:
        f.write("precious")
    for out in (name, "x.json"):
        r = subprocess.run([COMMBENCH, "allreduce", "--device", "cpu", "--impl", "mpi", "--sizes", "1K,2K", "--iters",
                            "3", "-o", out], cwd=workdir, env=mpi_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert results.load_document(os.path.join(workdir, out))["status"] == "complete"
    assert sorted(os.listdir(workdir)) == sorted([name, "x.json", "x.json.partial"])
    assert open(os.path.join(workdir, "x.json.partial")).read() == "precious"


def _reader_gone(argv: list, cwd: str) -> tuple[int, str]:
    """argv run with its stdout's reader gone after the first line (`| head -n 1`): its exit status
    and stderr."""
    p = subprocess.Popen(argv, cwd=cwd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def test_a_reader_that_leaves_early_changes_no_exit_status(workdir):
    """`commbench allreduce ... | head`: mpirun met the closed pipe and ended the job ('prterun:
    SIGPIPE detected - aborting', exit 1) though the file was complete; `commbench compare A A | head`
    exited 1, compare's status for a regression, without a word. The rest goes to /dev/null."""
    code, err = _reader_gone([COMMBENCH, "allreduce", "--device", "cpu", "--impl", "mpi,ring", "--sizes", "1K-4K", "--iters", "3",
                              "--warmup", "1", "--np", "2", "-o", "r.json"], workdir)
    assert code == 0 and "SIGPIPE" not in err and "commbench: error" not in err, err
    assert results.load_document(os.path.join(workdir, "r.json"))["status"] == "complete"
    assert _reader_gone([COMMBENCH, "compare", "r.json", "r.json"], workdir) == (0, "")


@pytest.mark.parametrize("redirect", [">&-", "2>&-", ">/dev/full", "2>/dev/full"])
def test_a_closed_or_full_stdout_or_stderr_changes_no_exit_status(redirect, workdir):
    """Started with stdout closed (`>&-`: Python's sys.stdout is None) a run exited 120 with a
    traceback; with stderr closed, 1 without a word; a full stdout (/dev/full) printed the relay
    thread's traceback under a complete run (whose result is the file); a refusal whose line a full
    stderr could not take exited 1, not 2. What cannot be written goes nowhere, the exit status stays
    the run's."""
    def run(args: str) -> subprocess.CompletedProcess:
        return subprocess.run(f"{shlex.quote(COMMBENCH)} {args} {redirect}", shell=True, cwd=workdir, env=mpi_env(),
                              capture_output=True, text=True, timeout=120)
    r = run("allreduce --device cpu --impl mpi,ring --sizes 1K-4K --iters 3 --warmup 1 --np 2 -o r.json")
    assert r.returncode == 0 and "Traceback" not in r.stderr and "commbench: error" not in r.stderr, r.stderr
    assert results.load_document(os.path.join(workdir, "r.json"))["status"] == "complete"
    # An analysis command's output is its result: a full device fails it, in one line (exit 2).
    assert run("compare r.json r.json").returncode == (2 if redirect == ">/dev/full" else 0)
    r = run("allreduce --device cpu --sizes 1K --iters -1 --np 2 -o bad.json")
    assert r.returncode == 2 and "Traceback" not in r.stderr and not os.path.exists(os.path.join(workdir, "bad.json"))


def test_a_run_writes_a_result_file_whose_name_is_no_utf8(workdir):
    """-o with a Latin-1 byte in its name: rank 0 failed as it left the name for the command (a text
    file, which no encoder writes such a name into) with a raw UnicodeEncodeError, the file left
    `running`."""
    name = os.fsdecode(b"caf\xe9.json")
    r = subprocess.run([COMMBENCH, "allreduce", "--device", "cpu", "--impl", "ring", "--np", "2", "--sizes", "1K", "--iters", "2",
                        "--warmup", "1", "--no-fit", "-o", name], cwd=workdir, env=mpi_env(), capture_output=True, timeout=120)
    assert r.returncode == 0 and b"commbench: error" not in r.stderr, r.stderr[-2000:]
    assert results.load_document(os.path.join(workdir, name))["status"] == "complete"


def test_a_file_name_that_is_no_utf8_is_shown_not_crashed_on(workdir):
    """A result file named with a Latin-1 byte: report wrote it into its pages and plot into a legend,
    and both ended in a traceback (Python keeps such bytes as surrogates no encoder writes). They show
    U+FFFD for it instead."""
    name = os.fsdecode(b"caf\xe9.json")
    fixture = os.path.join(HERE, "fixtures", "imports", "nccl-tests-all_reduce_perf-8gpu.json")
    for args in (["import", "nccl-tests", fixture, "-o", name], ["report", name, "-o", "rep"],
                 ["plot", name, "--baseline", name, "-o", "p.png"]):
        r = subprocess.run([COMMBENCH, *args], cwd=workdir, env=mpi_env(), capture_output=True, timeout=120)
        assert r.returncode == 0 and r.stderr == b"", (args, r.stderr[-2000:])
    assert "caf\ufffd.json" in open(os.path.join(workdir, "rep", "report.md")).read()
    assert os.path.getsize(os.path.join(workdir, "p.png")) > 0


def test_a_files_leftover_temporaries_are_told_from_anything_else(tmp_path):
    """What a process killed while it rewrote a result file leaves (the standalone launch removes it
    after its ranks): its temporary names alone, not a user's files of like names."""
    target = str(tmp_path / "out.json")
    with atomic.new_file(target, "taken") as tmp:
        left = tmp
    for name in ("out.json.partial", ".out.json", ".out.1-abcdef.partial.png", "out.json"):
        (tmp_path / name).write_text("mine")
    os.link(target, left)  # as if a rewrite were cut short
    assert atomic.leftovers(target) == [left]


# ---- refused before it measures: no file, no rank ----------------------------------------------------

def test_an_mpi_run_under_torchrun_is_refused_before_the_ranks_meet(workdir):
    """Each rank of a torchrun-style launch refuses an MPI p2p before gloo's rendezvous: rank 0 says
    so in one line, the others say nothing, and no result file is made."""
    out = os.path.join(workdir, "p.json")
    ends = torchrun_style(["p2p", "--impl", "mpi", "--sizes", "1K", "-o", out], cwd=workdir)
    assert [rc for rc, _, _ in ends] == [2, 2]
    assert ends[0][2] == ("commbench: error: commbench p2p needs an MPI launch (mpirun/srun, or no launcher at "
                          "all); under torchrun use --impl gloo\n")
    assert ends[1][2] == "" and not os.path.exists(out)


def test_under_a_launcher_rank_0_refuses_before_any_measurement(workdir):
    out = os.path.join(workdir, "big.json")
    r = mpirun(2, [COMMBENCH, "allreduce", "--device", "cpu", "--sizes", "16T", "-o", out], cwd=workdir)
    assert r.returncode != 0
    [line] = _error_lines(r.stderr)
    assert "all-reduce of 16T on 2 rank(s) (each about 520 MiB before its buffers) needs about" in line  # gloo among the impls
    assert "Traceback" not in r.stderr and os.listdir(workdir) == []


def test_an_os_error_no_command_answered_is_one_line(monkeypatch, capsys):
    from commbench.analysis import fabrics

    def unreadable():
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/site/commbench/fabrics.json")
    monkeypatch.setattr(fabrics, "catalog", unreadable)
    code, err = _run_main(["fabrics"], monkeypatch, capsys)
    assert (code, err) == (2, f"commbench: error: /site/commbench/fabrics.json: {os.strerror(errno.EACCES)}\n")


# ---- what result files record ----------------------------------------------------------------------

SECRETS = {"UCX_PASSWORD": "hunter2", "GLOO_AUTH_TOKEN": "t0k", "NCCL_IB_SECRET": "s", "MY_API_KEY": "k",
           "AWS_SECRET_ACCESS_KEY": "a", "OMPI_MCA_credential_file": "/home/me/.cred", "UCX_PASS": "hunter2",
           "NCCL_IB_PWD": "p", "NCCL_X_CREDS": "c", "UCX_COOKIE": "k"}
SETTINGS = {"NCCL_IB_HCA": "mlx5_0", "OMPI_MCA_btl_tcp_if_include": "lo", "FI_PROVIDER": "tcp"}
# Settings of the recorded families that are paths of the machine the run was on.
PATHS = {"NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "NCCL_NET_PLUGIN": "/opt/nccl/libnccl-net.so",
         "UCX_MODULE_DIR": "ucx", "OMPI_MCA_orte_tmpdir_base": "/scratch/me"}


@pytest.mark.parametrize("name,kept", [
    *[(n, False) for n in SECRETS],
    *[(n, True) for n in SETTINGS],
    ("CUDA_VISIBLE_DEVICES", True), ("UCX_TLS", True), ("TORCH_NCCL_BLOCKING_WAIT", True),
    ("OMPI_COMM_WORLD_RANK", False), ("OMPI_FILE_LOCATION", False), ("PMIX_RANK", False),
    ("OMPI_MCA_initial_wdir", False), ("OMPI_COMMAND", False), ("CUDA_HOME", False), ("HOME", False),
    ("ncclfoo", False),
    ("NCCL_TOPO_FILE", False), ("UCX_MODULE_DIR", False), ("NCCL_PLUGIN_PATH", False), ("I_MPI_ROOT", False),
    ("GLOO_X_HOME", False), ("UCX_IB_PREFIX", False),
    ("UCX_RNDV_BYPASS", True),  # "pass" inside a word names no credential
])
def test_the_environment_is_an_allow_list_without_secrets(name, kept):
    assert (name in machine.recorded_env({name: "x"})) == kept


# Credential-shaped values under names that are kept (fake keys of the real shapes); each redacted,
# what tuning needs beside it kept.
SHAPED = [
    ("NCCL_COMM_ID", "10.0.0.1:5000?token=s3cr3t&x=1", "10.0.0.1:5000?token=<redacted>&x=1"),
    ("NCCL_NET_PLUGIN", "https://me:pa55@plugins.example.com/aws-ofi", "https://<redacted>@plugins.example.com/aws-ofi"),
    ("NCCL_DEBUG_SUBSYS", "ghp_" + "a1B2" * 9, "<redacted>"),
    ("UCX_TLS", "rc,AKIAIOSFODNN7EXAMPLE", "rc,<redacted>"),
    ("FI_PROVIDER", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU", "<redacted>"),
    ("GLOO_SOCKET_IFNAME", "eth0?api_key=abc&sig=def", "eth0?api_key=<redacted>&sig=<redacted>"),
    ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1", "mlx5_0:1,mlx5_1:1"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker0", "^lo,docker0"),
    ("NCCL_ALGO", "Ring,Tree", "Ring,Tree"),
    # a setting named like a secret at the value's start, or after a comma or a space
    ("NCCL_NET", "password=abc123xyz", "password=<redacted>"),
    ("UCX_NET_DEVICES", "mlx5_0:1,secret=zz", "mlx5_0:1,secret=<redacted>"),
    # ... or after = : a quote or a bracket, as a library's message or a command line quotes it
    ("UCX_TLS", "UCX_NET_DEVICES=token=t0k3n", "UCX_NET_DEVICES=token=<redacted>"),
    ("NCCL_NET", "mlx5_0:key=k3y", "mlx5_0:key=<redacted>"),
    ("UCX_LOG_LEVEL", "device 'password=abc123xyz' (passwd=qq) [auth=zz]",
     "device 'password=<redacted>' (passwd=<redacted>) [auth=<redacted>]"),
    # ... or set with a colon
    ("GLOO_DEVICE_TRANSPORT", "TCP password:colonpw42", "TCP password:<redacted>"),
    ("NCCL_DEBUG_SUBSYS", "token: tokcolon77", "token: <redacted>"),
    ("UCX_TLS", "Password = pw555", "Password = <redacted>"),
    ("UCX_TLS", "rc,pass=pw556,bypass=1", "rc,pass=<redacted>,bypass=1"),
    ("UCX_TLS", "rc,passphrase=pp1,cookie=c2,x_creds=c3", "rc,passphrase=<redacted>,cookie=<redacted>,x_creds=<redacted>"),
    # a quoted value or name (JSON, Python, a shell), a flag, an HTTP authorisation
    ("NCCL_NET", 'password="pw r1"', 'password="<redacted>"'),
    ("UCX_TLS", "password='pwR2',rc", "password='<redacted>',rc"),
    ("GLOO_DEVICE_TRANSPORT", '{"password": "pwR3", "port": 5}', '{"password": "<redacted>", "port": 5}'),
    ("OMPI_MCA_btl", "tcp --password pw5e --verbose", "tcp --password <redacted> --verbose"),
    ("NCCL_DEBUG_SUBSYS", "Authorization: Bearer pw5f", "Authorization: Bearer <redacted>"),
    # GitLab's and Slack's token shapes
    ("NCCL_ALGO", "glpat-" + "x1Y2" * 5, "<redacted>"),
    ("UCX_TLS", "xoxb-1234-pw5k", "<redacted>"),
]


@pytest.mark.parametrize("name,value,recorded", SHAPED, ids=[s[0] for s in SHAPED])
def test_credential_shaped_values_are_redacted_whatever_the_name(name, value, recorded):
    assert machine.recorded_env({name: value}) == {name: recorded}


def test_paths_of_the_machine_are_not_recorded():
    assert machine.recorded_env({**PATHS, **SETTINGS, "NCCL_SOCKET_IFNAME": "eth0"}) == \
        {**SETTINGS, "NCCL_SOCKET_IFNAME": "eth0"}


def test_a_run_records_settings_not_secrets_and_the_command_as_typed(workdir):
    # None of the recorded families but what the test sets, so that the exact record is known.
    clean = {k: v for k, v in mpi_env().items()
             if not (k in machine.RECORDED_NAMES or k.startswith(machine.RECORDED_PREFIXES))}
    env = {**clean, **SECRETS, **SETTINGS, **PATHS}
    out = os.path.join(workdir, "r.json")
    args = ["allreduce", "--device", "cpu", "--impl", "mpi", "--sizes", "1K", "--iters", "2", "--warmup", "1", "-o", out]
    r = commbench(args, cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr
    assert "# policy: 2 timed iterations per size after 1 warm-up(s)" in r.stdout
    doc = results.load_document(out)
    assert doc["env"] == {**SETTINGS, **WITHOUT_LIBFABRIC}  # and what commbench's own launch set for its ranks
    assert doc["argv"] == ["commbench", *args]
    rep = commbench(["report", out, "-o", "rep"], cwd=workdir)
    assert rep.returncode == 0, rep.stderr
    assert f"- **command**: {shlex.join(['commbench', *args])}" in open(os.path.join(workdir, "rep", "report.md")).read()


def test_a_module_in_the_current_folder_never_runs_in_the_ranks(workdir):
    """The ranks and a plan's steps run `python -m commbench`, which puts the current folder first on
    the module path: a secrets.py or json.py there replaced the standard module in every rank. -P
    leaves the folder out (Python 3.11 and later)."""
    for name in ("secrets", "json"):
        with open(os.path.join(workdir, f"{name}.py"), "w") as f:
            f.write("open(__file__ + '.ran', 'w').close()\nraise SystemExit(3)\n")
    r = commbench(["allreduce", "--device", "cpu", "--impl", "mpi", "--np", "2", "--sizes", "1K", "--iters", "2",
                   "--warmup", "1", "-o", "r.json"], cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert not [n for n in os.listdir(workdir) if n.endswith(".ran")]


def test_an_accept_step_s_log_is_scrubbed_as_it_comes(tmp_path):
    """A library's warning on a step's stderr may quote a credential-shaped setting (UCX quoting its
    UCX_NET_DEVICES): the step's log keeps the line, not the credential."""
    from commbench.accept import runner
    said = ("UCX  WARN  network device 'https://me:pa55@fabric.example.com' is not available\n"
            "UCX  WARN  network device 'password=abc123xyz' is not available\n")
    log = tmp_path / "step.log"
    ran = runner.run([sys.executable, "-c", f"import sys; print('out ghp_{'a1B2' * 9}'); sys.stderr.write({said!r})",
                      "UCX_NET_DEVICES=token=t0k3n"], str(log), 60, dict(os.environ))
    text = log.read_text()
    assert ran.rc == 0 and not {"pa55", "a1B2", "abc123xyz", "t0k3n"} & set(re.findall(r"\w+", text)), text
    assert "'https://<redacted>@fabric.example.com' is not available" in text and "out <redacted>" in text
    assert "'password=<redacted>' is not available" in text and "UCX_NET_DEVICES=token=<redacted>" in text


def test_a_credential_a_library_s_error_quotes_is_redacted(workdir):
    """gloo's error names the interface it was given: GLOO_SOCKET_IFNAME's value, which the file's
    env redacts, came back through the run's error and its line."""
    token = "ghp_" + "a1B2" * 9
    r = commbench(["allreduce", "--device", "cpu", "--impl", "gloo", "--np", "2", "--sizes", "1K", "--iters", "2",
                   "--warmup", "1", "-o", "r.json"], cwd=workdir, env={**mpi_env(), "GLOO_SOCKET_IFNAME": token})
    doc = results.load_document(os.path.join(workdir, "r.json"))
    assert r.returncode == 1 and doc["status"] == "failed" and "<redacted>" in doc["error"], (r.stderr, doc["error"])
    assert token not in r.stderr and token not in json.dumps(doc), r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("commbench: error")] == [
        f"commbench: error: {doc['error']} (measured rows kept in r.json)"], r.stderr


def test_an_imported_log_s_host_names_are_scrubbed(tmp_path, monkeypatch, capsys):
    log = tmp_path / "nccl.log"
    with open(NCCL_LOG) as f:
        log.write_text(f.read().replace(" hgx-a01 ", " https://me:pa55@hgx-a01 "))
    code, _, err = in_process(["import", "nccl-tests", str(log), "-o", str(tmp_path / "i.json")], monkeypatch, capsys)
    assert code == 0, err
    hosts = results.load_document(str(tmp_path / "i.json"))["machine"]["hosts"]
    assert "https://<redacted>@hgx-a01" in hosts and not any("pa55" in h for h in hosts), hosts


def test_checked_in_baselines_are_clean():
    paths = glob.glob(os.path.join(ROOT, "results", "baselines", "*.json"))
    assert paths
    for path in paths:
        doc = results.load_document(path)
        assert doc["env"] == machine.recorded_env(doc["env"]), path
        assert doc["argv"][0] == "commbench" and doc["baseline"]["command"] == shlex.join(doc["argv"]), path


def test_baseline_save_cleans_what_an_older_run_file_recorded(tmp_path, monkeypatch, capsys):
    old = result_doc(ring_run()["results"], env={"UCX_PASSWORD": "p", "NCCL_DEBUG": "WARN", "OMPI_FILE_LOCATION": "/tmp/x"},
                     argv=["/build/commbench/__main__.py", "allreduce", "--sizes", "1K-16M"])
    (tmp_path / "old.json").write_text(json.dumps(old))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["commbench", "baseline", "save", "old.json", "--name", "a", "--dir", "bl"])
    main()
    doc = results.load_document(str(tmp_path / "bl" / "a.json"))
    assert doc["env"] == {"NCCL_DEBUG": "WARN"} and doc["baseline"]["command"] == "commbench allreduce --sizes 1K-16M"


def test_the_report_shows_an_older_files_command_as_typed():
    from commbench.formats import report
    old = result_doc(ring_run()["results"], argv=["/build/commbench/__main__.py", "allreduce", "--sizes", "1K-16M"])
    assert ("command", "commbench allreduce --sizes 1K-16M") in report.facts(old, "old.json")


def test_default_result_names_differ_between_processes_in_the_same_second():
    import datetime
    now = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.timezone.utc)
    a, b = results.default_path("allreduce", now, pid=101), results.default_path("allreduce", now, pid=102)
    assert a != b and os.path.basename(a).startswith("20261122T120000Z-101_")
    assert f"-{os.getpid()}_" in results.default_path("allreduce")


# ---- the fit's headline -------------------------------------------------------------------------------

def test_headline_latency_comes_from_the_smallest_sizes_and_bandwidth_from_the_largest():
    """Shared memory: past the caches (16M and up) the line is steeper and its intercept negative; the
    headline must still read as the latency of small messages."""
    def t_us(n):
        return 0.5 + n / 5e3 if n < 16 << 20 else -2000 + n / 1.5e3
    [f] = fit.fit_records([row(n, t_us(n)) for n in (1 << k for k in range(10, 31))])
    assert f["alpha_us"] == pytest.approx(0.25, rel=0.05)  # a = 2(p-1) alpha with p = 2
    assert f["alpha_segment"][0] == 1024 and f["alpha_segment"][1] < 16 << 20
    assert f["bandwidth_gbps"] == pytest.approx(1.5, rel=0.02) and f["bandwidth_segment"] == [16 << 20, 1 << 30]
    assert f["alpha_us_ci"] == f["segments"][0]["alpha_us_ci"]
    [headline] = [line for line in fitreport.fit_lines([f]) if line.startswith("# allreduce ring")]
    assert f"alpha {f['alpha_us']:.3g} us " in headline and "negative intercept" not in headline
    assert f"from 1K-{fitreport.format_size(f['alpha_segment'][1])}," in headline
    assert "GB/s" in headline and headline.count(" from ") == 2 and "from 16M-1G" in headline


def test_the_report_says_which_segment_alpha_and_bandwidth_come_from():
    from commbench import formats
    from commbench.formats import report
    def t_us(n):  # as above: shared memory, a steeper line past the caches
        return 0.5 + n / 5e3 if n < 16 << 20 else -2000 + n / 1.5e3
    doc = result_doc([row(n, t_us(n)) for n in (1 << k for k in range(10, 31))])
    [header, cells] = report.fit_table(doc, formats.Options(source="run.json"))
    [f] = fit.fit_records(doc["results"])
    low, top = f["segments"][0], f["segments"][-1]
    by_column = dict(zip(header, cells))
    assert by_column["alpha from"] == f"1K-{fitreport.format_size(low['size_max'])} (R² {low['r2']:.3f})"
    assert by_column["bandwidth from"] == f"16M-1G (R² {top['r2']:.3f})"
    assert by_column["alpha (us)"] == f"{f['alpha_us']:.3g}" and by_column["bandwidth (GB/s)"] == "1.5"
    md = formats.get("markdown").render(doc, formats.Options(source="run.json"))
    assert "| alpha (us) | alpha from | bandwidth (GB/s) | 95% CI (GB/s) | bandwidth from |" in md


# ---- the measurement policy -------------------------------------------------------------------------

def _calls_of(measure_one_s, p):
    calls = []

    def timer(n):
        calls.append(n)
        return np.full(n, measure_one_s)
    samples = policy.measure(timer, p, first=timer(1))
    return calls, samples


def test_no_warm_up_beyond_the_check_where_the_floor_of_iterations_exceeds_the_budget():
    p = policy.Policy(warmup=5, budget_ms=200, min_iters=5)
    calls, samples = _calls_of(0.05, p)  # 5 x 50 ms > 200 ms
    assert calls == [1, 5] and len(samples) == 5
    calls, _ = _calls_of(0.001, p)  # cheap: every warm-up, then the budget's worth
    assert calls == [1, 4, 200]
    calls, _ = _calls_of(0.03, p)  # 5 x 30 ms leave 50 ms: one more warm-up
    assert calls == [1, 1, 6]
    assert "one where those alone exceed the budget" in p.rule()


def _too_many(rank_bytes: int) -> int:
    """A rank count whose processes alone would take 1.2 times this host's available memory."""
    from commbench.node.machine import meminfo_bytes
    return int(1.2 * meminfo_bytes("MemAvailable") / rank_bytes) + 1


@pytest.mark.parametrize("command,torch", [
    (["allreduce", "--impl", "mpi", "--sizes", "1K"], False), (["p2p", "--sizes", "1K"], False),
    (["links"], False), (["scale", "--impl", "mpi", "--sizes", "1K,2K,4K"], False),
    (["allreduce", "--impl", "gloo", "--sizes", "1K"], True)])
def test_more_ranks_than_the_host_can_hold_are_refused_before_any_starts(command, torch, workdir):
    """Each rank is an interpreter of its own (60 MiB with MPI and NumPy, 520 MiB with torch): a
    thousand of them took the machine down. The processes count in the memory check."""
    from commbench.run.preflight import HOST_RANK_BYTES, TORCH_RANK_BYTES
    n = _too_many(TORCH_RANK_BYTES if torch else HOST_RANK_BYTES)
    r = commbench([*command, "--np", str(n), "-o", os.path.join(workdir, "x.json")], cwd=workdir, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("commbench: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert f"{n} rank(s) (each about {520 if torch else 60} MiB before its buffers) needs about" in r.stderr
    assert os.listdir(workdir) == []


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_during_a_report_leaves_no_temporary_file(tmp_path, sent):
    """SIGINT cleaned up, SIGTERM or a hang-up ended the process where it was: the report's hidden
    staging folder stayed. Now they unwind like SIGINT: one line, exit 143 or 129, nothing left."""
    from test_analysis import doc_of, ring, synthetic
    recs = []
    for impl in ("ring@mpi", "tree@mpi", "mpi", "ring@mpix", "tree@mpix", "mpix"):
        recs += synthetic("allreduce", impl, 4, ring(4, 3e-6, 10e9), iters=400)
    (tmp_path / "run.json").write_text(json.dumps(doc_of(recs)))
    p = subprocess.Popen([COMMBENCH, "report", "run.json", "-o", "rep"], cwd=str(tmp_path), env=mpi_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(".partial" in n for n in os.listdir(tmp_path)) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    p.send_signal(sent)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sent and err == "commbench: terminated\n", err
    assert sorted(os.listdir(tmp_path)) == ["run.json"]


@pytest.mark.mpi
def test_no_planted_credential_reaches_any_file_or_stream(tmp_path):
    """A credential planted in every input a run takes (the environment, a launch command, the paths
    of its plan, its output folder and its JUnit, an imported file's host names) reaches no file the
    runs write and no line they print: grepped for, everywhere."""
    def token(k: int) -> str:
        return f"ghp_{k}" + "Qx7" * 11
    planted = [token(k) for k in range(6)] + ["Hunter2Secret"]
    plan_dir = tmp_path / "cfg-password=Hunter2Secret"
    plan_dir.mkdir()
    plan = plan_dir / "p.toml"
    plan.write_text('description = "d"\nscope = "cluster"\n[[step]]\nname = "allreduce"\ncommand = "allreduce"\n'
                    'options = { impl = "mpi", sizes = "1K", iters = 2, warmup = 1 }\n')
    env = {**mpi_env(), "NCCL_DEBUG_SUBSYS": token(0)}
    accept = subprocess.run([COMMBENCH, "accept", "--plan", str(plan), "-o", str(tmp_path / f"acc-{token(1)}"),
                             "--junit", str(tmp_path / f"j-{token(2)}.xml"),
                             "--launch", f"{MPIRUN} --np 2 -x HF_TOKEN={token(3)}"],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=HUNG_S)
    assert accept.returncode == 0, accept.stdout + accept.stderr
    nccl_json = json.loads(open(os.path.join(HERE, "fixtures", "imports", "nccl-tests-all_reduce_perf-8gpu.json")).read())
    for d in nccl_json["config"]["devices"]:
        d["hostname"] = token(4)
    (tmp_path / "nccl.json").write_text(json.dumps(nccl_json))
    imported = subprocess.run([COMMBENCH, "import", "nccl-tests", str(tmp_path / "nccl.json"), "-o",
                               str(tmp_path / f"imp-{token(5)}.json")],
                              capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=HUNG_S)
    assert imported.returncode == 0, imported.stderr
    texts = {"accept's stdout": accept.stdout, "accept's stderr": accept.stderr, "import's stdout": imported.stdout,
             "import's stderr": imported.stderr}
    for folder, _, names in os.walk(tmp_path):
        for name in names:
            if name not in ("p.toml", "nccl.json"):  # the inputs themselves
                texts[os.path.join(folder, name)] = open(os.path.join(folder, name), errors="replace").read()
    assert len(texts) > 10, sorted(texts)  # the run's files: summaries, JUnit, step files and logs, the import
    leaks = {where: [s for s in planted if s in text] for where, text in texts.items()}
    assert not {where: found for where, found in leaks.items() if found}, leaks
    assert "-x HF_TOKEN=&lt;redacted&gt; " in open(tmp_path / f"j-{token(2)}.xml").read()


# ---- a host that loses packets: what names it ----------------------------------------------------

SS = """State    Recv-Q Send-Q Local Address:Port  Peer Address:Port Process
ESTAB    0      0         10.77.64.3:49989 10.77.64.254:39833 users:(("prted",pid=%(daemon)d,fd=19))
\t bbr wscale:10,10 rto:208 retrans:0/7 bytes_retrans:954
ESTAB    0      18         127.0.0.1:53131    127.0.0.1:42160 users:(("python3",pid=%(rank)d,fd=7))
\t bbr rto:3912 unacked:1 retrans:0/11
ESTAB    0      0         10.77.64.3:50000 10.77.64.1:1024 users:(("python3",pid=%(rank)d,fd=8))
\t cubic rto:204 bytes_acked:10
SYN-SENT 0      1         10.77.64.3:40000 10.77.64.2:1024 users:(("python3",pid=%(rank)d,fd=9),("ssh",pid=%(other)d,fd=3))
\t cubic retrans:1/2
ESTAB    0      0         10.77.64.3:50001 10.99.0.5:1024 users:(("prterun",pid=%(other)d,fd=4))
\t cubic retrans:0/30
ESTAB    0      0         10.77.64.3:50002 10.99.0.6:1024
\t cubic retrans:0/40
"""


def test_start_up_names_the_peers_this_launch_resent_packets_to(monkeypatch):
    """`ss -tinp`'s running totals, per peer, of the connections of the processes given and their
    descendants: loopback, connections that resent nothing, and another job's connections (another
    process's, or of no process: closed) left out."""
    from commbench.launch import startup
    pids = {"daemon": 100, "rank": 101, "other": 200}
    parents = {100: 1, 101: 100, 200: 1}
    monkeypatch.setattr(startup.os, "listdir", lambda path: [str(p) for p in parents])
    monkeypatch.setattr(startup, "parent_of", parents.get)
    table = SS % pids
    monkeypatch.setattr(startup.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, table, ""))
    monkeypatch.setattr(startup, "_names", lambda addrs: {a: f"{a} (h{a[-1]})" for a in addrs})
    assert startup.resent_text([100]) == (f"; host {socket.gethostname()} resent packets: 7 to 10.77.64.254 (h4), "
                                          "2 to 10.77.64.2 (h2): a link between them loses packets")
    assert startup.resent_text([101]) == (f"; host {socket.gethostname()} resent packets: 2 to 10.77.64.2 (h2): a link "
                                          "between them loses packets")
    assert startup.resent_text([300]) == ""
    table = "\n".join(SS.splitlines()[:1] + SS.splitlines()[3:7]) % pids  # loopback, and one that resent nothing
    assert startup.resent_text([100]) == ""


def test_the_resent_peers_names_are_looked_up_within_the_look_time(monkeypatch):
    """A reverse lookup has no timeout, and an address DNS does not know took seconds each: the lines
    that named the hosts came a minute late. What is not named within LOOK_S is shown as the address."""
    from commbench.launch import startup

    def lookup(addr):
        if addr.endswith(".9"):
            time.sleep(30)
        return (f"h{addr[-1]}", [], [addr])
    monkeypatch.setattr(startup.socket, "gethostbyaddr", lookup)
    monkeypatch.setattr(startup, "LOOK_S", 0.5)
    t = time.monotonic()
    assert startup._names(["10.0.0.3", "10.0.0.9"]) == {"10.0.0.3": "10.0.0.3 (h3)", "10.0.0.9": "10.0.0.9"}
    assert time.monotonic() - t < 2


def test_a_start_up_past_its_deadline_ends_the_rank_in_one_line(tmp_path):
    """The forked child ends a rank held in a call that keeps the interpreter's lock (MPI_Init), at
    max(--timeout, START_UP_MIN_S), rank 0 saying so; disarmed in time, it ends nothing."""
    code = ("import os, sys, time; from commbench.launch import startup; startup.START_UP_MIN_S = 0.5; "
            "done = startup.arm(0.5, 0); time.sleep(0.1) if sys.argv[1] == 'quick' else os.read(os.pipe()[0], 1); "
            "done(); print('started')")
    quick = subprocess.run([sys.executable, "-c", code, "quick"], capture_output=True, text=True, timeout=30)
    assert (quick.returncode, quick.stdout, quick.stderr) == (0, "started\n", "")
    t = time.monotonic()
    held = subprocess.run([sys.executable, "-c", code, "held"], capture_output=True, text=True, timeout=30)
    assert held.returncode == -signal.SIGKILL and time.monotonic() - t < 10, held
    assert held.stderr.startswith("commbench: error: the ranks did not all start within 0.5 s (MPI's start-up, "
                                  "bounded by --timeout)") and held.stderr.count("\n") == 1, held.stderr


def test_a_timeout_with_every_rank_alive_names_the_host_whose_channel_resent(monkeypatch):
    """Rank 0 adds its own side's resends and what each host's leader said of its side."""
    from commbench.launch import watchdog
    dog = watchdog.Watchdog.__new__(watchdog.Watchdog)
    dog.hosts = ["h0", "h0", "h1", "h2", "h3"]
    dog.peers = {1: "c1", 2: "c2", 3: "c3", 4: "c4"}
    mine = {"c1": 9, "c2": 0, "c3": 2, "c4": 0}
    monkeypatch.setattr(watchdog, "_resent", mine.get)
    dog.resent = {3: 5}
    assert dog._resent_text() == "; packets resent to host h2 7: it loses packets"  # h0's own rank 1 left out
    dog.resent = {2: 1, 3: 1, 4: 1}
    assert dog._resent_text() == ("; rank 0's connections to every other host resent packets (5 in all): host h0 "
                                  "loses packets")
    monkeypatch.setattr(watchdog, "_resent", lambda conn: 0)
    dog.resent = {}
    assert dog._resent_text() == ""
    # Nothing resent on the beats' connections: what this rank's own connections resent.
    dog.rank, dog.label, dog.timeout_s, dog.paused_s, dog.lost, dog.failures = 0, "allreduce 1K", 5.0, 0.0, [], {}
    dog.heard, dog.finished = {r: time.monotonic() for r in range(1, 5)}, set()
    monkeypatch.setattr(watchdog, "resent_text", lambda roots: f"; host h0 resent packets: 3 to {roots == [os.getpid()]}")
    assert dog._absent_text("did not arrive").endswith("every rank was alive in it; host h0 resent packets: 3 to True")


def test_under_the_users_mpirun_a_silent_host_s_line_says_to_end_mpirun(monkeypatch):
    """Open MPI's mpirun waits for good for the daemon of a host that stopped answering, after every
    rank has ended (docs/launching.md): under the user's mpirun, rank 0's line says to end it where
    every rank of another host is silent; not for one rank of a host, nor under commbench's own launch."""
    from commbench.launch import watchdog
    dog = watchdog.Watchdog.__new__(watchdog.Watchdog)
    dog.hosts, dog.label, dog.timeout_s, dog.rank = ["h0", "h0", "h1", "h1", "h2"], "allreduce 1K", 5.0, 0
    dog.lost, dog.failures, dog.finished, dog.peers, dog.resent = [], {}, set(), {}, {}
    dog.heard = {1: time.monotonic(), 2: 0.0, 3: 0.0, 4: time.monotonic()}
    dog.user_mpirun = True
    assert dog._absent_text("did not arrive within --timeout 5 s") == (
        "allreduce 1K: ranks 2, 3 did not arrive within --timeout 5 s (host h1); mpirun may wait for good for its "
        "daemon on host h1: end it once this line is out (Ctrl-C twice)")
    dog.heard[3] = time.monotonic()  # one rank of h1 still answers: its daemon does too
    assert dog._absent_text("did not arrive within --timeout 5 s").endswith("rank 2 did not arrive within --timeout 5 s "
                                                                             "(host h1)")
    dog.heard[3], dog.user_mpirun = 0.0, False
    assert dog._absent_text("did not arrive within --timeout 5 s").endswith("(host h1)")


def test_rank_1_speaking_for_rank_0_names_the_peers_its_host_resent_to(monkeypatch, capsys):
    """30 % loss on a host from the start: rank 0 still waited for that host's channel (its connection
    retried), rank 1's deadline passed and it spoke for rank 0 with no host named. It adds what its
    host's kernel resent, and to whom."""
    from commbench.launch import watchdog
    said = []
    monkeypatch.setattr(watchdog, "resent_text", lambda roots: "; host h1 resent packets: 9 to 10.0.0.3 (h2): a link between "
                                                         "them loses packets")
    monkeypatch.setattr(watchdog, "speak_for_rank_0", lambda status, text: said.append((status, text)))
    monkeypatch.setattr(watchdog, "GRACE_S", 0.0)
    dog = watchdog.Watchdog.__new__(watchdog.Watchdog)
    dog.rank, dog.watched, dog.reported, dog.up = 1, True, False, None
    dog._io = __import__("threading").RLock()
    dog._hand_over("timeout", "allreduce 1K: did not finish within --timeout 5 s; rank 0 did not answer")
    assert said == [("timeout", "allreduce 1K: did not finish within --timeout 5 s; rank 0 did not answer; host h1 "
                                "resent packets: 9 to 10.0.0.3 (h2): a link between them loses packets")]
    assert capsys.readouterr().err == f"commbench: error on rank 1: {said[0][1]}\n"
