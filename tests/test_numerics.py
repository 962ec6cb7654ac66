"""commbench numerics: the data, the exact reference, the figures, and the command as a user types it
(under mpirun, standalone, torchrun). Every figure of a result file is recomputed here on a path of
its own: the inputs rounded and summed exactly with fractions.Fraction, the rounding written out from
its definition."""

import hashlib
import json
import math
import os
import re
import shlex
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from conftest import COMMBENCH, HERE, batch, commbench, mpirun, stub_gpu_env, torchrun_style

from commbench.analysis import numerics
from commbench.cli import main
from commbench.cli.numerics import default_counts
from commbench.errors import CommbenchError
from commbench.launch.world import launcher_free_env
from commbench.results.document import load_document

pytestmark = pytest.mark.mpi

# significand bits, smallest and largest normal exponent
FORMATS = {"float32": (24, -126, 127), "float16": (11, -14, 15), "bfloat16": (8, -126, 127),
           "float64": (53, -1022, 1023)}
DTYPES = list(FORMATS)
IMPLS = ["mpi", "ring@mpi", "tree@mpi", "gloo"]
SEED, COUNT, C = 7, 4096, 4  # the float runs: 4 contributions, at 2 and 4 ranks
RUN = ["numerics", "--device", "cpu", "--ranks", "2,4", "--count", str(COUNT), "--seed", str(SEED)]


# ---- an independent exact arithmetic ------------------------------------------------------------

def binade(x: Fraction) -> int:
    """floor(log2 |x|) of a nonzero rational, exactly."""
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if a >= Fraction(2) ** e else e - 1


def rn(x: Fraction, dtype: str) -> float:
    """x rounded to the nearest value of dtype, ties to the even significand, beyond the largest
    value to infinity: IEEE 754's definition, on exact rationals."""
    bits, emin, emax = FORMATS[dtype]
    if x == 0:
        return 0.0
    k = max(binade(x), emin) - (bits - 1)
    v = round(x / Fraction(2) ** k) * Fraction(2) ** k  # Fraction's round() breaks ties to even
    largest = (2 - Fraction(2) ** (1 - bits)) * Fraction(2) ** emax
    return math.copysign(math.inf, x) if abs(v) > largest else float(v)


def ulp_of(x: float, dtype: str) -> float:
    bits, emin, _ = FORMATS[dtype]
    e = math.frexp(x)[1] - 1 if x else emin
    return math.ldexp(1.0, max(e, emin) - (bits - 1))


def fingerprint(vector: np.ndarray, dtype: str) -> str:
    """BLAKE2b (16 bytes) of the vector's little-endian bytes in the dtype (bfloat16: the high half of
    float32)."""
    if dtype == "bfloat16":
        raw = (vector.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    else:
        raw = vector.astype({"float32": "<f4", "float16": "<f2", "float64": "<f8"}[dtype]).tobytes()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


# ---- the data, the reference and the figures as functions ----------------------------------------

def test_data_follows_its_definition():
    """The module's text defines the data from PCG64's raw stream: rebuilt here from that text."""
    def raw(c, k, tag=0):
        return np.random.PCG64(np.random.SeedSequence([SEED, c, tag])).random_raw(COUNT * k).reshape(COUNT, k)

    def unit(r):
        return (r >> np.uint64(11)).astype(np.float64) * 2.0**-53
    u = unit(raw(3, 12))
    z = u[:, 0]
    for j in range(1, 12):
        z = z + u[:, j]
    scale = np.array([5**k / 8**k for k in range(16)])[(np.arange(COUNT) // 1024) % 16]
    assert np.array_equal(numerics.contribution("normal", SEED, 3, COUNT), (z - 6) * scale)
    assert np.array_equal(numerics.contribution("uniform", SEED, 2, COUNT), 2 * unit(raw(2, 1))[:, 0] - 1)
    assert np.array_equal(numerics.contribution("integer", SEED, 1, COUNT), (raw(1, 1)[:, 0] % 5).astype(float) - 2)
    big = 2.0**12 * (1 + unit(raw(1, 1, tag=1))[:, 0])
    assert np.array_equal(numerics.contribution("cancel", SEED, 3, COUNT), -big + (2 * unit(raw(3, 1))[:, 0] - 1))
    # Gradient-like: each bucket of 1024 elements has its own scale, over three orders of magnitude.
    x = numerics.contribution("normal", SEED, 0, 16 * 1024)
    spread = [x[b * 1024:(b + 1) * 1024].std() for b in range(16)]
    assert spread[0] == pytest.approx(1, rel=0.1) and spread[15] == pytest.approx(0.625**15, rel=0.1)


def test_shares_cover_the_batch_in_order():
    assert numerics.shares(4, 3) == [range(0, 1), range(1, 2), range(2, 4)]
    assert [list(s) for s in numerics.shares(8, 2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("values,dtype,naive,right", [
    # fsum gives 1 + 2^-8 (the 2^-60 is below float64's half unit there), exactly halfway between two
    # bfloat16 values; rounding that again goes to the even one, 1, but the exact sum lies above.
    ([1.0, 2**-8, 2**-60], "bfloat16", 1.0, 1 + 2**-7),
    ([-1.0, -(2**-8), -(2**-60)], "bfloat16", -1.0, -(1 + 2**-7)),
    # Halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even), the exact sum just below: the odd one.
    ([1 + 2**-7, 2**-8, -(2**-60)], "bfloat16", 1 + 2**-6, 1 + 2**-7),
    ([1.0, 2**-24, 2**-80], "float32", 1.0, 1 + 2**-23),
    ([1.0, 2**-11, 2**-70], "float16", 1.0, 1 + 2**-10),
])
def test_midpoint_is_resolved_exactly(values, dtype, naive, right):
    assert numerics.round_to(math.fsum(values), dtype) == naive  # the double rounding a plain path makes
    assert numerics.correctly_rounded_sum(values, dtype) == right == rn(sum(map(Fraction, values)), dtype)
    assert numerics.reference(np.array(values)[:, None], dtype)[0] == right


def test_rounding_edges():
    assert list(numerics.round_to([65519.99, 65520.0, -1e6, 2.0**-25, 3 * 2.0**-25], "float16")) == \
        [65504.0, math.inf, -math.inf, 0.0, 2.0**-23]  # ties: 0 and 2 units are even
    assert numerics.ulp(1.0, "float32") == 2.0**-23 and numerics.ulp(0.0, "float16") == 2.0**-24
    assert numerics.ulp(65504.0, "float16") == 32.0 and numerics.ulp(2.0**-130, "bfloat16") == 2.0**-133


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_is_the_correctly_rounded_sum(dtype):
    """Columns of wide and narrow exponents and much cancellation, against Fraction's exact sums."""
    rng = np.random.default_rng(3)
    low = -20 if dtype == "float16" else -60
    x = rng.standard_normal((5, 3000)) * np.ldexp(1.0, rng.integers(low, 10, size=(5, 3000)))
    x[1, ::3] = -x[0, ::3]  # exact cancellation of the largest terms
    x = numerics.round_to(x, dtype)
    got = numerics.reference(x, dtype)
    want = [rn(sum(map(Fraction, col)), dtype) for col in x.T.tolist()]
    assert got.tolist() == want


def test_default_rank_counts():
    assert default_counts(8) == (2, 4, 8) and default_counts(6) == (2, 4) and default_counts(2) == (2,)
    with pytest.raises(CommbenchError, match="launch at least 2 ranks"):
        default_counts(1)


# ---- runs of the command -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("numerics"))


def _ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def four(folder):
    """This module's 4-rank commands in one mpirun launch (conftest.batch): the float run with every
    impl and dtype, and the integer run at 1, 3 and 4 ranks (3 ranks share 4 contributions unevenly).
    GPUs are made visible (a stub that fails any GPU work): --device cpu must keep them on the CPU."""
    return batch(4, {"float": [*RUN, "-o", "mpirun.json"],
                     "integer": ["numerics", "--device", "cpu", "--data", "integer", "--ranks", "1,3,4", "--count", "3000",
                                 "-o", "integer.json"],
                     "vectors": [os.path.join(HERE, "numerics_vectors.py"), "vectors.npz", "normal",
                                 str(SEED), str(COUNT), "2,4", ",".join(DTYPES)]}, folder, env=stub_gpu_env(4))


@pytest.fixture(scope="module")
def launched(folder, four):
    """The float run under mpirun, every impl and dtype."""
    _ok(four["float"])
    return load_document(os.path.join(folder, "mpirun.json")), four["float"].stdout


@pytest.fixture(scope="module")
def vectors(folder, four):
    """The same run once more (tests/numerics_vectors.py, in the same launch), its vectors kept: rows
    and arrays."""
    _ok(four["vectors"])
    with np.load(os.path.join(folder, "vectors.npz")) as z:
        return json.loads(str(z["rows"])), {k: z[k] for k in z.files if k != "rows"}


@pytest.fixture(scope="module")
def exact():
    """Per dtype: the inputs (each contribution rounded to the dtype), their exact sums and the
    correctly rounded sums, all computed here."""
    out = {}
    raw = [numerics.contribution("normal", SEED, c, COUNT) for c in range(C)]
    for dtype in DTYPES:
        xs = [[rn(Fraction(v), dtype) for v in x.tolist()] for x in raw]
        sums = [sum(map(Fraction, col)) for col in zip(*xs)]
        out[dtype] = (np.array(xs), sums, np.array([rn(s, dtype) for s in sums]))
    return out


def _row(doc: dict, impl: str, dtype: str, ranks: int) -> dict:
    [row] = [r for r in doc["numerics"]["rows"] if (r["impl"], r["dtype"], r["ranks"]) == (impl, dtype, ranks)]
    return row


def test_every_impl_dtype_and_count_is_reported(launched):
    doc, stdout = launched
    n = doc["numerics"]
    assert doc["status"] == "complete" and doc["results"] == [] and doc["machine"]["launcher"] == "mpi"
    assert (n["data"], n["seed"], n["count"], n["ranks"], n["contributions"]) == ("normal", SEED, COUNT, [2, 4], C)
    assert {(r["impl"], r["dtype"], r["ranks"]) for r in n["rows"]} == \
        {(i, d, p) for i in IMPLS for d in DTYPES for p in (2, 4)}
    table = [line.split() for line in stdout.splitlines() if line and not line.startswith("#")]
    assert len(table) == len(n["rows"]) and table[0][:3] == ["float32", "mpi", "2"]


def test_own_algorithms_are_reproducible(launched, vectors):
    """Our ring and tree give the same bits on every rank, in every repeat, and in another launch."""
    again = {"numerics": {"rows": vectors[0]}}
    for impl in ("ring@mpi", "tree@mpi"):
        for dtype in DTYPES:
            for p in (2, 4):
                a, b = _row(launched[0], impl, dtype, p), _row(again, impl, dtype, p)
                assert a["ranks_identical"] and a["repeat_identical"] and b["repeat_identical"]
                assert a["digest"] == b["digest"] == fingerprint(vectors[1][f"{impl}/{dtype}/{p}"], dtype)


def test_two_ranks_add_the_local_sums_once(launched, exact):
    """At 2 ranks of 4 contributions every impl computes RN(RN(x0 + x1) + RN(x2 + x3)): one addition
    of the two local sums, whose order does not matter."""
    for dtype in DTYPES:
        xs = [[Fraction(v) for v in x] for x in exact[dtype][0].tolist()]
        want = np.array([rn(Fraction(rn(a + b, dtype)) + Fraction(rn(c + d, dtype)), dtype)
                         for a, b, c, d in zip(*xs)])
        for impl in IMPLS:
            assert _row(launched[0], impl, dtype, 2)["digest"] == fingerprint(want, dtype), (impl, dtype)


def test_float32_ring_stays_within_the_classical_bound(vectors, exact):
    """At 4 ranks each rank holds one contribution: the ring adds them in some order, and every
    element stays within (p - 1) u sum|x| of the exact sum, u = 2^-24."""
    xs, sums, _ = exact["float32"]
    result = vectors[1]["ring@mpi/float32/4"]
    bound = [3 * Fraction(2) ** -24 * sum(abs(Fraction(v)) for v in col) for col in xs.T.tolist()]
    over = [i for i, (r, s, b) in enumerate(zip(result.tolist(), sums, bound)) if abs(Fraction(r) - s) > b]
    assert not over, over[:5]
    assert any(Fraction(r) != s for r, s in zip(result.tolist(), sums))  # the bound was not met trivially


def test_float16_errs_more_than_float32(launched):
    for impl in IMPLS:
        for p in (2, 4):
            half, single = _row(launched[0], impl, "float16", p), _row(launched[0], impl, "float32", p)
            assert half["mean_rel_error"] > 100 * single["mean_rel_error"] > 0
            assert half["max_rel_error"] > single["max_rel_error"]


def test_every_figure_recomputed(launched, vectors, exact):
    """From the vectors (the same bits as the result file's rows, by their fingerprints) and the
    exact sums computed here."""
    doc = launched[0]
    rows, arrays = vectors
    checked = 0
    for row in doc["numerics"]["rows"]:
        key = f"{row['impl']}/{row['dtype']}/{row['ranks']}"
        result, dtype = arrays[key], row["dtype"]
        if fingerprint(result, dtype) != row["digest"]:
            assert row["impl"] in ("mpi", "gloo"), key  # a library may choose otherwise in another run
            continue
        xs, _, ref = exact[dtype]
        nonzero = ref != 0
        err = np.abs(result - ref)
        rel = err[nonzero] / np.abs(ref[nonzero])
        ulps = [e / ulp_of(r, dtype) for e, r in zip(err[nonzero].tolist(), ref[nonzero].tolist())]
        u_sum = np.abs(xs).sum(axis=0) * 2.0 ** -FORMATS[dtype][0]
        assert row["max_rel_error"] == pytest.approx(rel.max(), rel=1e-9)
        assert row["mean_rel_error"] == pytest.approx(rel.mean(), rel=1e-9)
        assert row["max_ulps"] == pytest.approx(max(ulps), rel=1e-9)
        assert row["max_error_u_abs_sum"] == pytest.approx((err / u_sum).max(), rel=1e-9)
        assert row["max_error_u_abs_sum"] <= C  # any order of adding C values: C - 1, and CR's own half ulp
        assert row["not_correctly_rounded"] == np.count_nonzero(result != ref) / COUNT
        assert row["nonfinite"] == 0
        if row["ranks"] == 2:
            assert row["drift_max_rel"] is None
        else:
            first = arrays[f"{row['impl']}/{dtype}/2"]
            assert row["drift_max_rel"] == pytest.approx((np.abs(result - first)[nonzero] / np.abs(ref[nonzero])).max(),
                                                         rel=1e-9, abs=0)
        checked += 1
    assert checked >= len(doc["numerics"]["rows"]) // 2


def test_integer_data_is_exact_everywhere(folder, four):
    out, r = os.path.join(folder, "integer.json"), four["integer"]
    _ok(r)
    assert "every result exact, OK" in r.stdout
    rows = load_document(out)["numerics"]["rows"]
    assert len(rows) == len(IMPLS) * len(DTYPES) * 3
    for row in rows:
        assert (row["max_rel_error"], row["max_ulps"], row["max_error_u_abs_sum"], row["not_correctly_rounded"]) == \
            (0, 0, 0, 0), row
        assert row["ranks_identical"] and row["repeat_identical"] and row["drift_max_rel"] in (None, 0)


def test_report_plot_and_export_show_it_and_fit_refuses_it(launched, folder):
    run = os.path.join(folder, "mpirun.json")
    _ok(commbench(["report", run, "-o", os.path.join(folder, "report")]))
    with open(os.path.join(folder, "report", "report.md")) as f:
        md = f.read()
    assert "## Numerics: does the answer depend on the rank count?" in md and "![plot](plot.png)" in md
    assert md.count("| float16 |") == len(IMPLS) * 2
    png = os.path.join(folder, "numerics.png")
    _ok(commbench(["plot", run, "-o", png]))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    r = commbench(["export", run, "--format", "csv"])
    _ok(r)
    assert r.stdout.splitlines()[0].startswith("impl,dtype,ranks,count,max_rel_error")
    assert len(r.stdout.splitlines()) == 1 + len(launched[0]["numerics"]["rows"])
    r = commbench(["fit", run])
    assert r.returncode == 2
    assert r.stderr == f"commbench: error: {run} is a numerics result (commbench numerics): it holds no timings to " \
                       f"fit or keep as a baseline; 'commbench report', 'plot' and 'export' show it\n"


def test_under_torchrun_gloo_alone(folder):
    out = os.path.join(folder, "torchrun.json")
    ends = torchrun_style(["numerics", "--device", "cpu", "--count", "1024", "--dtype", "float32,bfloat16", "-o", out], cwd=folder)
    assert [rc for rc, _, _ in ends] == [0, 0], ends
    doc = load_document(out)
    assert doc["machine"]["launcher"] == "torchrun" and doc["config"]["impls"] == ["gloo"]
    assert [(r["dtype"], r["ranks"]) for r in doc["numerics"]["rows"]] == [("float32", 2), ("bfloat16", 2)]


def test_mpi_impls_are_refused_under_torchrun(tmp_path):
    """Launched torchrun-style (its variables, no torchrun), as in test_cli."""
    ends = torchrun_style(["numerics", "--device", "cpu", "--count", "64", "--impl", "ring"], cwd=tmp_path)
    assert [rc for rc, _, _ in ends] == [2, 2]
    assert ends[0][2] == "commbench: error: --impl ring@mpi needs an MPI launch (mpirun/srun, or no launcher at " \
                         "all); under torchrun use --impl gloo\n"
    assert ends[1][2] == "" and os.listdir(tmp_path) == []  # refused before the ranks met


def test_a_visible_gpu_takes_the_gpu_path(tmp_path):
    """With GPUs (the stub of tests/stubs/fake_gpu) the same command goes to them: one rank per GPU,
    NCCL's impls, and here the stub's refusal of GPU work, in one line, with no file left."""
    r = commbench(["numerics", "--count", "64", "--impl", "gloo"], cwd=tmp_path, env=stub_gpu_env(2))
    assert r.returncode == 2
    assert r.stderr.endswith("commbench: error: impl 'gloo' of allreduce runs with --device cpu, not --device cuda\n")
    r = commbench(["numerics", "--count", "64"], cwd=tmp_path, env=stub_gpu_env(2))
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error")]
    assert r.returncode != 0 and len(lines) == 1 and "this run took the GPU path" in lines[0]
    assert os.listdir(tmp_path) == []


def test_more_rank_counts_than_launched_under_mpirun(folder):
    r = mpirun(2, [COMMBENCH, "numerics", "--device", "cpu", "--ranks", "3", "--count", "64"], cwd=folder)
    lines = [line for line in r.stderr.splitlines() if line.startswith("commbench: error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert lines == ["commbench: error: --ranks asks for 3 ranks but 2 are started: launch 3 (--np 3 without a "
                     "launcher) or lower --ranks"]


@pytest.mark.parametrize("args,expected", [
    ("--np 2 --ranks 3", "--ranks asks for 3 ranks but 2 are started: launch 3 (--np 3 without a launcher) or "
                         "lower --ranks"),
    ("--ranks 0", "bad count '0' in --ranks: give positive integers up to 16,777,216, e.g. 1,2,4,8"),
    ("--ranks 2,x", "bad count 'x' in --ranks: give positive integers up to 16,777,216, e.g. 1,2,4,8"),
    # more digits than int() reads: its own error, a traceback
    ("--ranks " + "9" * 5000, f"bad count '{'9' * 24}...' in --ranks: give positive integers up to 16,777,216, e.g. 1,2,4,8"),
    ("--data gaussian", "Invalid value for '--data': 'gaussian' is not one of 'normal', 'uniform', 'cancel', "
                        "'integer'."),
    ("--dtype int32", "--dtype int32: numerics compares float dtypes: choose from float32, float16, bfloat16, "
                      "float64, or all"),
    ("--count 0", "--count 0: at least one element"),
    ("--count 1.5M", "--count '1.5M': give a number of elements such as 4096, 64K or 1M"),
    ("--repeats 1", "Invalid value for '--repeats': 1 is not in the range 2<=x<=1000000."),
    ("--device cpu --impl nccl", "impl 'nccl' of allreduce runs with --device cuda, not --device cpu"),
    ("--device cuda", "--device cuda needs a GPU: {why}"),
    ("--device cpu --impl bogus", "unknown impl 'bogus' for allreduce: choose from gloo, mpi, nccl, ring@mpi, ring@nccl, "
                                  "tree@mpi, tree@nccl"),
    ("--device cpu --impl tree@nccl", "impl 'tree@nccl' of allreduce runs with --device cuda, not --device cpu"),
])
def test_bad_input_gets_one_line(args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for var in set(os.environ) - set(launcher_free_env()):
        monkeypatch.delenv(var)
    monkeypatch.setattr(sys, "argv", ["commbench", "numerics", *shlex.split(args)])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 2
    # {why}: the machine's own words for having no usable GPU
    pattern = re.escape(f"commbench: error: {expected}\n").replace(re.escape("{why}"), "[^\n]+")
    assert re.fullmatch(pattern, capsys.readouterr().err)
    assert os.listdir(tmp_path) == []
