"""The GPU path's executors under NCCL's semantics, on the CPU: tests/native/nccl_semantics.cpp runs
collectives.h -- the code the CUDA extension runs over NCCL -- over a recording transport where
calls on a stream run in order and a group completes only once every peer's matching group is
posted. Also the 16-byte split and scratch placement the device kernels use (alignment.h)."""

import json
import math
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = list(range(1, 18))

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("sim") / "nccl_semantics")
    r = subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "csrc", "include"),
                        os.path.join(ROOT, "tests", "native", "nccl_semantics.cpp"), "-o", exe],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _run(simulator, algo, n, chunk, ranks=RANKS):
    r = subprocess.run([simulator, "collectives", algo, str(n), str(chunk), *map(str, ranks)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.mark.parametrize("n", [0, 1, 5, 1000, 4099])
def test_ring_completes_exactly_in_2p_minus_2_rounds(simulator, n):
    for row in _run(simulator, "ring", n, 1):
        p = row["ranks"]
        assert not row["deadlock"], row
        assert row["wrong"] == 0, row
        assert row["rounds"] == (2 * (p - 1) if p > 1 else 0), row


@pytest.mark.parametrize("n,chunk", [(1, 1), (7, 3), (1000, 64), (4099, 256), (640, 640)])
def test_tree_pipelines_one_group_per_step(simulator, n, chunk):
    """Each phase takes chunks + depth - 1 steps: interior ranks receive chunk k + 1 while sending
    chunk k. Ungrouped calls on one stream would serialise those and take several times as many."""
    chunks = math.ceil(n / chunk)
    for row in _run(simulator, "tree", n, chunk):
        p = row["ranks"]
        assert not row["deadlock"], row
        assert row["wrong"] == 0, row
        depth = int(math.floor(math.log2(p)))
        assert row["rounds"] == (2 * (chunks + depth - 1) if p > 1 else 0), row


def test_empty_message_needs_no_round(simulator):
    assert all(row["rounds"] == 0 and not row["deadlock"] for row in _run(simulator, "tree", 0, 4))


def test_vector_split_and_scratch_placement(simulator):
    """Every misalignment of source and destination for 1-, 2-, 4- and 8-byte elements: the split
    covers every element once, vectorises whenever one peel aligns both sides, and align_like gives
    scratch the destination's misalignment."""
    r = subprocess.run([simulator, "alignment"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"failures": 0}
