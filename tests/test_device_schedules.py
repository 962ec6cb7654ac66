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


def _segments(segs) -> list:
    return [len(segs), *(x for s in segs for x in (s.offset, s.count, s.first, s.source))]


def _layouts(coll, n: int, root: int, in_place: bool, ranks) -> str:
    """What the simulator reads on stdin: for each rank count, the registry's buffers of n float
    elements (nccl-tests' size, blocks unrounded), and each rank's places, inputs and expected segments."""
    words = []
    for p in ranks:
        shape, r0 = coll.shape(n * 4, 4, p, align=1), root % p
        words += [p, shape.send, shape.recv]
        for r in range(p):
            words += [*(coll.places(r, shape) if in_place else (0, 0)), *_segments(coll.inputs(r, p, r0, shape)),
                      *_segments(coll.expected(r, p, r0, shape))]
    return " ".join(map(str, words))


def _run(simulator, coll, algo, n, chunk, root=0, in_place=False, ranks=RANKS):
    from commbench import collectives
    r = subprocess.run([simulator, "collectives", coll, algo, str(n), str(chunk), str(root), str(int(in_place)),
                        *map(str, ranks)], input=_layouts(collectives.get(coll), n, root, in_place, ranks),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def _exact(rows):
    for row in rows:
        assert not row["deadlock"], row
        assert row["wrong"] == 0, row
        yield row["ranks"], row["rounds"]


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("n", [0, 1, 5, 1000, 4099])
def test_ring_completes_exactly_in_2p_minus_2_rounds(simulator, n, in_place):
    for p, rounds in _exact(_run(simulator, "allreduce", "ring", n, 1, in_place=in_place)):
        assert rounds == (2 * (p - 1) if p > 1 else 0)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("coll", ["allgather", "reducescatter"])
@pytest.mark.parametrize("n", [0, 5, 1000, 4099])
def test_ring_halves_take_p_minus_1_rounds(simulator, coll, n, in_place):
    """The ring all-gather and reduce-scatter are the all-reduce ring's two halves."""
    for p, rounds in _exact(_run(simulator, coll, "ring", n, 1, in_place=in_place)):
        assert rounds == (p - 1 if p > 1 else 0)


@pytest.mark.parametrize("n,chunk", [(1, 1), (7, 3), (1000, 64), (4099, 256), (640, 640)])
def test_tree_pipelines_one_group_per_step(simulator, n, chunk):
    """Each phase takes chunks + depth - 1 steps: interior ranks receive chunk k + 1 while sending
    chunk k. Ungrouped calls on one stream would serialise those and take several times as many."""
    chunks = math.ceil(n / chunk)
    for p, rounds in _exact(_run(simulator, "allreduce", "tree", n, chunk)):
        depth = int(math.floor(math.log2(p)))
        assert rounds == (2 * (chunks + depth - 1) if p > 1 else 0)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("root", [0, 1, 5])
@pytest.mark.parametrize("algo", ["tree", "chain"])
def test_tree_halves_pipeline_from_any_root(simulator, algo, coll, root, in_place):
    """The tree broadcast and reduce are the all-reduce tree's halves, over the tree renumbered from
    the root: one phase, chunks + depth - 1 steps, whichever rank is the root; the chain is the same
    pipeline with one child per rank, depth p - 1."""
    n, chunk = 1000, 64
    for p, rounds in _exact(_run(simulator, coll, algo, n, chunk, root=root, in_place=in_place)):
        depth = int(math.floor(math.log2(p))) if algo == "tree" else p - 1
        assert rounds == (math.ceil(n / chunk) + depth - 1 if p > 1 else 0)


@pytest.mark.parametrize("n", [0, 17, 1000])
def test_pairwise_alltoall_takes_one_round_per_rank(simulator, n):
    """Step d pairs every rank with rank + d and rank - d; step 0 is each rank's own block."""
    for p, rounds in _exact(_run(simulator, "alltoall", "pairwise", n, 1)):
        assert rounds == p


def _own_algorithms():
    from commbench import collectives
    return [(c.name, a) for c in collectives.all_collectives() for a in c.algorithms]


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("coll,algo", _own_algorithms())
def test_every_algorithm_is_exact_from_any_root(simulator, coll, algo, in_place):
    """Each of our algorithms for each collective of the registry, under NCCL's semantics: exact and
    free of deadlock at every rank count, from several roots, in and out of place where the
    collective has both forms, over counts the ranks do not divide and a chunk that splits them."""
    from commbench import collectives
    if in_place and not collectives.get(coll).in_place:
        pytest.skip(f"{coll} has no in-place form")
    for root in (0, 1, 5):
        for n in (0, 5, 1000):
            for _ in _exact(_run(simulator, coll, algo, n, 64, root=root, in_place=in_place)):
                pass


@pytest.mark.parametrize("coll", ["gather", "scatter"])
@pytest.mark.parametrize("root", [0, 1, 5])
def test_binomial_takes_floor_log2_p_rounds(simulator, coll, root):
    """A subtree moves as one message, and a rank waits only for its own subtree: the rounds are the
    most bits set in a relative rank below p, floor(log2 p), whichever rank is the root."""
    for p, rounds in _exact(_run(simulator, coll, "binomial", 1000, 1, root=root)):
        assert rounds == (int(math.floor(math.log2(p))) if p > 1 else 0), (p, rounds)


def test_empty_message_needs_no_round(simulator):
    assert all(rounds == 0 for _, rounds in _exact(_run(simulator, "allreduce", "tree", 0, 4)))


def test_vector_split_and_scratch_placement(simulator):
    """Every misalignment of source and destination for 1-, 2-, 4- and 8-byte elements: the split
    covers every element once, vectorises whenever one peel aligns both sides, and align_like gives
    scratch the destination's misalignment."""
    r = subprocess.run([simulator, "alignment"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"failures": 0}


# The volumes a bus-bandwidth convention is measured by: what the busiest rank injects (ring,
# pairwise: one outgoing stream per rank; a scatter's root), what it takes in (a gather's root), or
# what the busiest link carries (tree: a rank feeds two children, each link carries the message once).
VOLUMES = ("rank_bytes", "rank_recv_bytes", "link_bytes")


def _with_algorithms():
    from commbench import collectives
    return [c.name for c in collectives.all_collectives() if c.algorithms]


@pytest.mark.parametrize("coll", _with_algorithms())
def test_busbw_factor_is_the_bytes_an_algorithm_moves(simulator, coll):
    """busbw = algbw * factor(p) must equal the bytes on the busiest rank or link per second: the
    registry's factor is derived here from the bytes one of our algorithms for it actually moves, by
    one measure at every rank count. Every algorithm is exact and free of deadlock on the way."""
    from commbench import collectives
    entry = collectives.get(coll)
    n = 360360  # the least common multiple of 2..13: every rank count below divides it
    matching = set()
    for algo in entry.algorithms:
        per_volume = {v: True for v in VOLUMES}
        for row in _run(simulator, coll, algo, n, n, root=1, ranks=range(2, 14)):
            p = row["ranks"]
            assert not row["deadlock"] and row["wrong"] == 0, row
            size = entry.shape(n * 4, 4, p, align=1).size  # the simulator splits n into p blocks unrounded
            for v in VOLUMES:
                per_volume[v] &= row[v] / size == pytest.approx(entry.busbw_factor(p), rel=1e-12)
        matching |= {(algo, v) for v, held in per_volume.items() if held}
    assert matching, f"no algorithm of {coll} moves busbw_factor(p) x size by any of {VOLUMES}"


def test_sendrecv_busbw_factor_is_the_bytes_each_rank_sends():
    """Send-recv has no algorithm of ours to count bytes in: each rank sends its whole buffer to one
    neighbour, over one link, so the busiest rank and link move exactly the size."""
    from commbench import collectives
    entry = collectives.get("sendrecv")
    for p in range(2, 14):
        shape = entry.shape(360360 * 4, 4, p)
        assert shape.send * 4 / shape.size == entry.busbw_factor(p)
