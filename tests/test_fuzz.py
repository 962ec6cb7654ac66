"""Property-based fuzzing (hypothesis) of what reads a user's text: the size parser, result files,
topology snapshots, nccl-tests and OSU logs, plans. Whatever the input, the answer is a value or one
CommbenchError, never another exception. Each property has a bounded budget (EXAMPLES), derandomized
so that `make test` is the same run every time."""

import io
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.accept import plan as plans
from commbench.cli.accept import check_argv
from commbench.errors import CommbenchError, one_line
from commbench.node import doctor
from commbench.results import document, importers
from commbench.sizes import parse_sizes

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = int(os.environ.get("COMMBENCH_FUZZ_EXAMPLES", 300))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)


def answered(call, *args, **kwargs):
    """call's value, or None where it refused in one CommbenchError (any other exception fails)."""
    try:
        return call(*args, **kwargs)
    except CommbenchError as e:
        assert one_line(str(e)), repr(str(e))  # what the user reads: main() prints it as one line
        return None


# Size lists as users type them: numbers, units, ranges, steps, lists, and noise between.
SIZE_WORDS = st.sampled_from(["0", "1", "3", "8", "1K", "4k", "1M", "1G", "1T", "16T", "1e3", "-1", "1.5K", "0x10",
                              "K", "", " ", "nan", "99999999999999999999", "1KiB", "2MB"])
SIZE_TEXT = st.one_of(st.text(max_size=20), st.lists(
    st.tuples(SIZE_WORDS, st.sampled_from(["", "-", ":x", ":+", ",", ":", "x", "+"]), SIZE_WORDS)
    .map("".join), min_size=1, max_size=4).map(",".join))


@FUZZ
@given(SIZE_TEXT)
def test_the_size_parser_answers_every_text(text):
    sizes = answered(parse_sizes, text)
    assert sizes is None or (sizes and all(isinstance(s, int) and s >= 0 for s in sizes))


def _valid_result() -> dict:
    from docs import ring_run
    doc = ring_run()
    doc["results"] = doc["results"][:4]  # a short file: every field of it is tried
    return doc


def _mutations(valid: dict):
    """A valid document with one field anywhere replaced by any JSON value, or dropped."""
    paths = []

    def walk(node, path):
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            paths.append((*path, key))
            walk(child, (*path, key))
    walk(valid, ())
    return st.tuples(st.sampled_from(paths), JSON, st.booleans())


def _mutate(doc, path, value, drop):
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if drop and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


VALID_RESULT = None


@FUZZ
@given(st.data())
def test_a_result_file_with_any_field_broken_is_read_or_refused(tmp_path_factory, data):
    global VALID_RESULT
    VALID_RESULT = VALID_RESULT or _valid_result()
    path, value, drop = data.draw(_mutations(VALID_RESULT))
    f = tmp_path_factory.mktemp("r") / "run.json"
    f.write_text(json.dumps(_mutate(VALID_RESULT, path, value, drop)))
    doc = answered(document.load_document, str(f))
    if doc is not None:  # what loads, the analyses take
        from commbench.analysis.fit import fit_records
        fit_records(doc["results"])


@FUZZ
@given(JSON)
def test_any_json_as_a_result_file_is_refused_in_one_line(tmp_path_factory, value):
    f = tmp_path_factory.mktemp("j") / "any.json"
    f.write_text(json.dumps(value))
    assert answered(document.load_document, str(f)) is None or isinstance(value, dict)


with open(os.path.join(HERE, "fixtures", "topo", "hgx_h100_degraded.json")) as _f:
    SNAPSHOT = json.load(_f)


@FUZZ
@given(_mutations(SNAPSHOT))
def test_a_snapshot_with_any_field_broken_is_judged_or_refused(change):
    """What the schema lets through, doctor judges without a traceback."""
    snap = _mutate(SNAPSHOT, *change)
    try:
        doctor.check_snapshot(snap, "snap.json")
    except CommbenchError as e:
        assert one_line(str(e))
        return
    doctor.run_checks(snap)


with open(os.path.join(HERE, "data", "nccl-tests", "all_gather_perf-8gpu.txt")) as _f:
    NCCL_LOG = _f.read().splitlines()
LINE_NOISE = st.one_of(st.text(max_size=40), st.sampled_from(["", "#", "# Avg bus bandwidth    : 1.0",
                                                              "  1024  256  float  none  -1  1.0  1.0  1.0  0",
                                                              "1024 256 float sum -1 nan inf -1 N/A"]))


@FUZZ
@given(st.data())
def test_a_nccl_tests_log_with_lines_changed_is_imported_or_refused(data):
    lines = list(NCCL_LOG)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["replace", "drop", "insert", "cut"]))
        if action == "replace":
            lines[i] = data.draw(LINE_NOISE)
        elif action == "drop":
            del lines[i]
        elif action == "insert":
            lines.insert(i, data.draw(LINE_NOISE))
        else:
            lines = lines[:i]
        if not lines:
            break
    answered(importers.import_nccl_tests, io.StringIO("\n".join(lines) + "\n"), "log")


OSU_TITLES = st.sampled_from(["", "# OSU MPI Latency Test v7.4", "# OSU MPI Bandwidth Test v7.4",
                              "# OSU MPI Allreduce Latency Test v7.4", "# OSU MPI Bi-Directional Bandwidth Test v7.4",
                              "# OSU MPI Broadcast Latency Test v7.4"])
OSU_HEADERS = st.sampled_from(["# Size       Avg Latency(us)", "# Size      Bandwidth (MB/s)",
                               "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations", ""])


@FUZZ
@given(OSU_TITLES, OSU_HEADERS, st.lists(st.one_of(LINE_NOISE, st.tuples(
    st.integers(-1, 1 << 31), st.sampled_from(["0.5", "nan", "-1", "1e400", "x", "12.25"])).map(
    lambda t: f"{t[0]}  {t[1]}")), max_size=6), st.sampled_from([None, "latency", "bw", "allreduce"]))
def test_an_osu_log_of_any_rows_is_imported_or_refused(title, header, rows, test):
    answered(importers.import_osu, io.StringIO("\n".join([title, header, *rows]) + "\n"), "osu.txt", test)


PLAN_VALUES = st.one_of(st.text(max_size=10), st.integers(-5, 10**6), st.floats(allow_nan=False), st.booleans(),
                        st.sampled_from(["1K", "1K-1M:x4", "gpus", "min(gpus,3)", "mpi,ring", "cuda", "loop"]))


@FUZZ
@given(st.dictionaries(st.sampled_from(["description", "scope", "requires_gpu", "defaults", "limits", "step", "x"]),
                       st.one_of(PLAN_VALUES, st.dictionaries(st.text(max_size=12), PLAN_VALUES, max_size=3)),
                       max_size=5),
       st.lists(st.dictionaries(st.sampled_from(["name", "command", "options", "quick", "limits", "timeout_s",
                                                 "counted", "when", "env"]),
                                st.one_of(PLAN_VALUES, st.sampled_from(["allreduce", "p2p", "links", "doctor", "fleet"]),
                                          st.dictionaries(st.sampled_from(["sizes", "np", "impl", "timing", "fabric",
                                                                           "min_gpus", "tolerance_bw_pct", "bogus"]),
                                                          PLAN_VALUES, max_size=3)), max_size=6), max_size=3))
def test_any_plan_is_parsed_or_refused_in_one_line(top, steps):
    data = {**top, **({"step": steps} if steps else {})}
    answered(plans.parse, data, "fuzz", "fuzz.toml", check_argv)
