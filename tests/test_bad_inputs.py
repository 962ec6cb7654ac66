"""Every bad input of tests/data/bad_inputs.txt gets exactly its one line on stderr, exit status 2,
no traceback, and leaves no file behind.

The table runs through commbench's entry point in this process (fast: one import for all rows);
a sample of it also runs as the installed console script, as a user types it."""

import json
import os
import re
import shlex
import socket
import sys

import pytest
from conftest import HERE, commbench

from commbench import collectives
from commbench.cli import main
from commbench.launch.world import launcher_free_env
from commbench.results.document import MAX_FILE_BYTES
from commbench.results.importers import MAX_LOG
from docs import result_doc, ring_run, row

TABLE = os.path.join(HERE, "data", "bad_inputs.txt")
# What the placeholders of the expected lines stand for (see the table's header).
PLACEHOLDERS = {"{gib}": r"[0-9.]+", "{why}": r"[^()]+"}


def _rows() -> list:
    rows = []
    with open(TABLE) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                args, expected = line.rstrip("\n").split("  =>  ")
                rows.append(pytest.param(args, expected, id=args))
    return rows


def _make_files(folder: str) -> None:
    """The files the table names: one valid run, one valid nccl-tests log, and one for each way a
    file can be wrong."""
    run = ring_run()
    docs = {
        "run.json": run,
        "norows.json": result_doc([], status="failed"),
        "running.json": dict(run, status="running"),
        "empty-messages.json": result_doc([row(0, 0.0), row(0, 0.0, impl="mpi")]),
        "negative.json": result_doc([dict(r, samples_us=[-1.0, *r["samples_us"][1:]]) for r in run["results"]]),
        "unknown-op.json": result_doc([dict(r, op="frobnicate") for r in run["results"]]),
        "no-impl.json": result_doc([dict(r, impl="") for r in run["results"]]),
        "petabytes.json": result_doc([dict(r, size_bytes=10**30) for r in run["results"]]),
    }
    for name, doc in docs.items():
        with open(os.path.join(folder, name), "w") as f:
            json.dump(doc, f)
    texts = {
        "latin1.json": b'{"tool": "caf\xe9"}',  # Latin-1, not UTF-8
        "utf16.json": json.dumps(run).encode("utf-16"),  # a valid run, but UTF-16 (json reads it)
        "notjson.json": b"hello\n",
        "list.json": b"[1, 2]",
        "nan.json": json.dumps(ring_run()).replace('"samples_us": [', '"samples_us": [NaN, ', 1).encode(),
        "overflow.json": json.dumps(ring_run()).replace('"samples_us": [', '"samples_us": [1e999, ', 1).encode(),
        "taken.json": b"precious",
        "taken.png": b"precious",
        "garbage.log": bytes(range(256)) * 64,  # neither text nor anyone's output, with a line break every 256 bytes
        "nthreads0.json": b'{"version": 3, "config": {"nthreads": 0, "ngpus": 1, "devices": [{"rank": 0}]}, "results": []}',
    }
    with open(os.path.join(HERE, "data", "nccl-tests", "all_gather_perf-8gpu.txt"), "rb") as f:
        texts["nccl.log"] = f.read()
    # -I 1 reports whose first row is bent: times that are JSON's true, all zero, a fractional skip.
    with open(os.path.join(HERE, "fixtures", "imports", "nccl-tests-all_reduce_perf-2proc-g2-I1.json")) as f:
        timed = json.load(f)
    for name, bent in (("true-times.json", {"times_us": [True] * 8}), ("zero-times.json", {"times_us": [0.0] * 8}),
                       ("skip-2.9.json", {"skipped_iterations": 2.9})):
        first = dict(timed["results"][0], out_of_place_per_iter={**timed["results"][0]["out_of_place_per_iter"], **bent})
        texts[name] = json.dumps(dict(timed, results=[first, *timed["results"][1:]])).encode()
    for name, data in texts.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    # Too large to read, as sparse files (no disk taken), and a FIFO that no one writes to.
    for name, size in (("huge.json", MAX_FILE_BYTES + 1), ("huge.log", MAX_LOG + 1)):
        with open(os.path.join(folder, name), "wb") as f:
            f.truncate(size)
    os.mkfifo(os.path.join(folder, "nowriter.log"))


def _tree(folder: str) -> dict:
    """Every file under folder, with its size: what a refused command must leave as it found it."""
    return {os.path.join(d, n): os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names}


def _expected_pattern(expected: str, tmp: str) -> str:
    pattern = re.escape(expected.replace("{tmp}", tmp).replace("{host}", socket.gethostname())
                        .replace("{ops}", ", ".join((*collectives.names(), *collectives.PAIRWISE))))
    for name, regex in PLACEHOLDERS.items():
        pattern = pattern.replace(re.escape(name), regex)
    return pattern


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder holding the table's files, as the working directory of a process without launcher
    variables (so that no row takes itself for one rank of a launch)."""
    _make_files(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for var in set(os.environ) - set(launcher_free_env()):
        monkeypatch.delenv(var)
    return str(tmp_path)


@pytest.mark.parametrize("args,expected", _rows())
def test_bad_input_gets_its_one_line(args, expected, folder, monkeypatch, capsys):
    before = _tree(folder)
    monkeypatch.setattr(sys, "argv", ["commbench", *shlex.split(args.replace("{tmp}", folder))])
    with pytest.raises(SystemExit) as ended:
        main()
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    assert re.fullmatch(_expected_pattern(expected, folder) + "\n", err), err
    assert _tree(folder) == before


@pytest.mark.parametrize("args,expected", [
    ("allreduce --np 0", "commbench: error: Invalid value for '--np': 0 is not in the range x>=1."),
    ("fit {tmp}/latin1.json", "commbench: error: {tmp}/latin1.json is not a result file: not UTF-8 text"),
    ("allreduce --device cpu -o /dev/null",
     "commbench: error: result file /dev/null already exists; choose another --output"),
])
def test_the_console_script_answers_the_same(args, expected, tmp_path):
    _make_files(str(tmp_path))
    r = commbench(shlex.split(args.replace("{tmp}", str(tmp_path))), cwd=str(tmp_path))
    assert r.returncode == 2
    assert r.stderr == expected.replace("{tmp}", str(tmp_path)) + "\n"
    assert not os.path.exists(os.path.join(str(tmp_path), "commbench-results"))


@pytest.mark.parametrize("args", [["allreduce", "-o", "a\nb.json"], ["plot", "{tmp}/run.json", "-o", "p\tq.png"],
                                  ["baseline", "save", "{tmp}/run.json", "--name", "x\ny", "--dir", "{tmp}/b"]])
def test_a_control_character_in_a_name_is_refused(args, folder, monkeypatch, capsys):
    """A newline pasted into a file name would make a file no shell lists cleanly: one line, nothing
    written."""
    before = _tree(folder)
    monkeypatch.setattr(sys, "argv", ["commbench", *(a.replace("{tmp}", folder) for a in args)])
    with pytest.raises(SystemExit) as ended:
        main()
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1 and err.startswith("commbench: error: ")
    assert "control character" in err or "bad baseline name" in err, err
    assert _tree(folder) == before
