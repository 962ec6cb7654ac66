"""Both placements in one run (--place both) in nccl-tests' layout, and nccl-tests' per-rank block
rounding (16 bytes), so that a size's row reads as nccl-tests' row of the same size."""

import os

import numpy as np
import pytest
from conftest import ROOT, commbench

from commbench import collectives
from commbench.collectives.dtypes import DTYPES, itemsize_of
from commbench.formats import console
from commbench.results import document as results
from commbench.run.buffers import Buffers
from commbench.run.preflight import LIBRARY_SLACK_BYTES, collective_bytes
from docs import record

# A log in nccl-tests' exact column layout (its src/util.cu prints the header and rows).
NCCL_LOG = os.path.join(ROOT, "tests", "data", "nccl-tests", "all_gather_perf-8gpu.txt")
# The types of the fields of a nccl-tests row: size, count, type, redop, root, then per half time,
# algbw, busbw, #wrong.
ROW_TYPES = (int, int, str, str, int) + (float, float, float, int) * 2
SPREADS = ["min", "p99", "CV", "IQR"]


def _spans(line: str) -> list[tuple[str, int, int]]:
    """Each word of a line with where it starts and ends."""
    out, i = [], 0
    for word in line.split():
        i = line.index(word, i)
        out.append((word, i, i + len(word)))
        i += len(word)
    return out


def _group_line(lines: list[str]) -> int:
    """Where the first table header's line of placement names is: above its column names."""
    return next(k for k, line in enumerate(lines) if "out-of-place" in line and lines[k + 1].split()[:2] == ["#", "size"])


def _layout(lines: list[str]) -> tuple[list[str], list[str]]:
    """The column names and the units of the first table header in `lines` that names the placements."""
    i = _group_line(lines)
    return lines[i + 1].split()[1:], lines[i + 2].split()[1:]


def _halves_under_their_names(lines: list[str]) -> None:
    """Each placement's name stands over its half's four columns, as nccl-tests centres them."""
    i = _group_line(lines)
    group_words, columns = _spans(lines[i])[1:], _spans(lines[i + 1])[1:]
    for (name, start, end), first in zip(group_words[:2], (5, 9)):
        assert name == ("out-of-place", "in-place")[first == 9]
        assert columns[first][1] <= start and end <= columns[first + 3][2], (name, lines[i:i + 2])


def _rows(lines: list[str]) -> list[list[str]]:
    return [line.split() for line in lines if line and not line.startswith("#")]


def test_the_reference_log_has_the_layout_the_test_reads():
    lines = open(NCCL_LOG).read().splitlines()
    names, units = _layout(lines)
    assert names == ["size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    assert units == ["(B)", "(elements)"] + ["(us)", "(GB/s)", "(GB/s)"] * 2
    _halves_under_their_names(lines)
    assert all(len(r) == 13 and [t(v) for t, v in zip(ROW_TYPES, r)] for r in _rows(lines))


@pytest.mark.mpi
def test_place_both_prints_nccl_tests_columns_and_records_each_half(workdir):
    out = os.path.join(workdir, "both.json")
    r = commbench(["allgather", "--device", "cpu", "--np", "3", "--impl", "mpi,ring", "--place", "both",
                   "--sizes", "1000,64K", "--budget-ms", "20", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    reference_names, reference_units = _layout(open(NCCL_LOG).read().splitlines())
    names, units = _layout(lines)
    # nccl-tests' thirteen columns first, in its order (a script's $6, $8, $10 and $12 read the
    # same), then the spread of each half.
    assert names == reference_names + SPREADS * 2
    assert units[:len(reference_units)] == reference_units
    _halves_under_their_names(lines)
    assert "# impls: mpi, ring@mpi; dtype float32; redop none; out-of-place and in-place" in r.stdout

    doc = results.load_document(out)
    assert doc["config"]["place"] == "both"
    recs = {(rec["impl"], rec["size_bytes"], rec["in_place"]): rec for rec in doc["results"]}
    rows = _rows(lines)
    assert len(rows) == len(recs) // 2 == 4
    block = None
    for line in lines:
        if line.startswith("# impl "):
            block = line.split()[2].rstrip(":")
        if not line or line.startswith("#"):
            continue
        row = line.split()
        assert len(row) == 21
        values = [t(v) for t, v in zip(ROW_TYPES, row)]
        for half, in_place in ((values[5:9], False), (values[9:13], True)):
            rec = recs[(block, values[0], in_place)]
            assert (values[0], values[1], rec["wrong"]) == (rec["size_bytes"], rec["count"], 0)
            assert half == [round(rec["time_us"]["median"], 2), round(rec["algbw_gbps"], 2),
                            round(rec["busbw_gbps"], 2), rec["wrong"]]
    # The whole file prints the same rows.
    exported = commbench(["export", out, "--format", "console"], cwd=workdir)
    assert exported.returncode == 0 and _rows(exported.stdout.splitlines()) == rows


def test_a_row_whose_in_place_half_never_came_shows_it_missing():
    rec = record("allreduce", "mpi", "float32", "sum", 2, 1024, 256, np.array([1e-6, 2e-6]), 0, in_place=False)
    cells = console.paired_row(rec, None).split()
    assert cells[9:13] == ["n/a"] * 4 and cells[17:] == ["n/a"] * 4 and cells[5:9] != ["n/a"] * 4


def _nccl_tests_block(size: int, itemsize: int, p: int) -> int:
    """nccl-tests 2.19's per-rank count of all-gather, reduce-scatter and all-to-all:
    (count / nranks) & ~(16 / eltSize - 1), where count = size / eltSize."""
    return (size // itemsize // p) & ~(16 // itemsize - 1)


@pytest.mark.parametrize("name,send,recv", [("allgather", 1, "p"), ("reducescatter", "p", 1), ("alltoall", "p", "p")])
def test_per_rank_blocks_are_rounded_to_16_bytes_as_nccl_tests_rounds_them(name, send, recv):
    coll = collectives.get(name)
    for dtype in DTYPES:
        itemsize = itemsize_of(dtype)
        for p in range(1, 10):
            for size in (0, 8, 64, 100, 1000, 4096, 65544, 10**6 + 3):
                c = _nccl_tests_block(size, itemsize, p)
                blocks = {"p": p, 1: 1}
                shape = coll.shape(size, itemsize, p)
                assert (shape.count, shape.send, shape.recv) == (c, c * blocks[send], c * blocks[recv])
                # nccl-tests prints the larger buffer's bytes as the size
                assert shape.size == c * p * itemsize
                # Without the rounding (align 1), any count is reachable: the correctness tests' odd blocks.
                assert coll.shape(size, itemsize, p, align=1).count == size // itemsize // p


def test_a_real_nccl_tests_row_has_the_size_and_count_commbench_gives():
    # reduce_scatter_perf, 8 ranks, float, -b 128 (NVIDIA/nccl-tests issue 128): 128 B, 4 elements;
    # all_gather_perf, 8 ranks, float: the requested 64 B prints as 0 B, 0 elements.
    shape = collectives.get("reducescatter").shape(128, 4, 8)
    assert (shape.size, shape.count) == (128, 4)
    shape = collectives.get("allgather").shape(64, 4, 8)
    assert (shape.size, shape.count) == (0, 0)


@pytest.mark.parametrize("name,placements", [(c.name, p) for c in collectives.all_collectives()
                                             for p in ([(False,), (True,), (False, True)] if c.in_place else [(False,)])])
def test_the_memory_check_counts_the_buffers_each_placement_allocates(name, placements):
    coll = collectives.get(name)
    shape = coll.shape(3 << 20, 4, 3)
    allocated = []
    Buffers(coll, shape, "float32", placements, lambda n, dt: allocated.append(n) or np.zeros(n, np.float32))
    assert collective_bytes(coll, 3 << 20, 4, 3, placements) == 4 * sum(allocated) + shape.size + LIBRARY_SLACK_BYTES


@pytest.mark.mpi
def test_both_placements_under_loop_timing_name_the_slowest_of_each(workdir):
    out = os.path.join(workdir, "loop.json")
    r = commbench(["reducescatter", "--device", "cpu", "--np", "2", "--impl", "ring", "--place", "both",
                   "--timing", "loop", "--loops", "2", "--iters", "5", "--sizes", "4K", "-o", out], cwd=workdir)
    assert r.returncode == 0, r.stderr
    names, _ = _layout(r.stdout.splitlines())
    assert names[13:] == ["min", "slowest", "CV", "IQR"] * 2
    doc = results.load_document(out)
    assert sorted(rec["in_place"] for rec in doc["results"]) == [False, True]
    assert all(rec["timing"] == "loop" and rec["wrong"] == 0 for rec in doc["results"])
