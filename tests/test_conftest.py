"""The suite's own machinery (tests/conftest.py), run as `make test` runs it: under pytest-xdist."""

import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))

SPAN = """
import os, time
import pytest

def span(name, seconds=0.4):
    start = time.time()
    time.sleep(seconds)
    with open(os.environ["SPANS"], "a") as f:
        f.write(f"{name} {start} {time.time()} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")
"""

# Two files, one a worker (--dist loadfile), so that the module fixture's set-up on one worker and the
# quiet test on the other start together: were the fixture outside the lock, they would overlap.
SPANS = {"test_a_spans.py": SPAN + """
@pytest.fixture(scope="module")
def measured():
    span("fixture", 1.0)

def test_with_a_module_fixture(measured):
    span("plain-after-fixture")

@pytest.mark.parametrize("i", range(2))
def test_plain(i):
    span(f"plain{i}")
""", "test_b_spans.py": SPAN + """
@pytest.mark.quiet
def test_quiet():
    span("quiet")

@pytest.mark.parametrize("i", range(2, 5))
def test_plain(i):
    span(f"plain{i}")
"""}


def _suite(tmp_path, files: dict) -> None:
    """The test files `files` in `tmp_path` under the suite's own hooks (its turnstile and order)."""
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {os.path.join(TESTS, 'conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_runtest_protocol = suite.pytest_runtest_protocol\n"
        "pytest_collection_modifyitems = suite.pytest_collection_modifyitems\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n    cluster: a test cluster's\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)


def _spans(tmp_path, files: dict, dist=("--dist", "loadfile"), workers=None) -> dict:
    """{span's name: (start, end)} of the test files `files` run under the suite's turnstile by two
    workers, --dist loadfile (one file a worker) unless `dist` says otherwise; `workers` gets
    {span's name: its worker}."""
    _suite(tmp_path, files)
    spans = tmp_path / "spans.log"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", *dist, "-p", "no:cacheprovider", *files],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "SPANS": str(spans)})
    assert r.returncode == 0, r.stdout + r.stderr
    found = [line.split() for line in spans.read_text().splitlines()]
    if workers is not None:
        workers.update({name: worker for name, _, _, worker in found})
    return {name: (float(a), float(b)) for name, a, b, _ in found}


def test_a_quiet_test_runs_while_no_other_test_does(tmp_path):
    """Two workers run the plain tests side by side, never beside the quiet one, whose lock covers a
    module fixture's set-up too."""
    found = _spans(tmp_path, SPANS)
    assert len(found) == 8, found
    quiet = found.pop("quiet")
    assert all(end <= quiet[0] or start >= quiet[1] for start, end in found.values()), (quiet, found)
    plain = sorted(found.values())
    assert any(b[0] < a[1] for a, b in zip(plain, plain[1:])), plain  # the workers did run side by side


def test_consecutive_quiet_tests_run_under_one_hold(tmp_path):
    """The other worker, waiting at the turnstile all along, starts no test between two quiet tests
    of one worker: the first one's hold is kept for the second."""
    found = _spans(tmp_path, {"test_a_spans.py": SPAN + """
@pytest.mark.parametrize("i", range(8))
def test_plain(i):
    span(f"plain{i}", 0.3)
""", "test_b_spans.py": SPAN + """
def test_first():  # the other worker is in its tests by the end of it
    span("first", 1.0)

@pytest.mark.quiet
@pytest.mark.parametrize("i", range(2))
def test_quiet(i):
    span(f"quiet{i}")
"""})
    assert len(found) == 11, found
    held = (found["quiet0"][0], found["quiet1"][1])
    assert all(end <= held[0] or start >= held[1] for name, (start, end) in found.items() if name.startswith("plain")), found


def test_the_quiet_tests_of_every_file_run_last_on_one_worker_under_one_hold(tmp_path):
    """As `make test` distributes them (--dist loadgroup --no-loadscope-reorder): the quiet tests of two
    files, each collected before plain tests, run after every other test has started, on one worker,
    one after another, and no plain test runs from the first one's start to the last one's end."""
    plain = "\n".join(f"def test_plain{i}():\n    span('{{f}}plain{i}', 0.2)\n" for i in range(4))
    quiet = "@pytest.mark.quiet\ndef test_quiet():\n    span('{f}quiet')\n"
    workers: dict = {}
    found = _spans(tmp_path, {f"test_{f}_spans.py": SPAN + quiet.format(f=f) + plain.format(f=f) for f in "ab"},
                   dist=("--dist", "loadgroup", "--no-loadscope-reorder"), workers=workers)
    assert len(found) == 10, found
    held = (min(found["aquiet"][0], found["bquiet"][0]), max(found["aquiet"][1], found["bquiet"][1]))
    assert workers["aquiet"] == workers["bquiet"], workers
    others = [span for name, span in found.items() if "plain" in name]
    assert all(end <= held[0] for start, end in others), found
    assert len(set(workers.values())) == 2, workers  # the plain tests did go to both workers


def test_the_cluster_tests_of_every_file_run_one_after_another_on_one_worker(tmp_path):
    """As `make test` distributes them: the test-cluster tests of two files, collected after plain
    tests, start first, on one worker, one after another, while the other worker runs plain tests."""
    plain = "\n".join(f"def test_plain{i}():\n    span('{{f}}plain{i}', 0.2)\n" for i in range(4))
    cluster = "\n".join(f"@pytest.mark.cluster\ndef test_cluster{i}():\n    span('{{f}}cluster{i}')\n" for i in range(2))
    workers: dict = {}
    found = _spans(tmp_path, {f"test_{f}_spans.py": SPAN + plain.format(f=f) + cluster.format(f=f) for f in "ab"},
                   dist=("--dist", "loadgroup", "--no-loadscope-reorder"), workers=workers)
    assert len(found) == 12, found
    clustered = sorted(span for name, span in found.items() if "cluster" in name)
    assert len({worker for name, worker in workers.items() if "cluster" in name}) == 1, workers
    assert all(a[1] <= b[0] for a, b in zip(clustered, clustered[1:])), clustered
    assert clustered[0][0] <= min(start for start, end in found.values()) + 0.1, found
    assert any(start < clustered[-1][1] for name, (start, end) in found.items() if "plain" in name), found


def test_a_modules_tests_spread_over_the_pass_unless_they_share_a_fixture(tmp_path):
    """The order a pass hands its tests out in: the tests of two modules of plain tests alternate
    (waiting tests of one module, test_faults.py's, no longer run side by side on every worker), while
    a module whose tests share a module fixture keeps them together, set up once, at its own place."""
    plain = "\n".join(f"def test_{{f}}{i}():\n    pass\n" for i in range(4))
    shared = ("import pytest\n\n@pytest.fixture(scope='module')\ndef launched():\n    return 1\n\n"
              + "\n".join(f"def test_b{i}(launched):\n    pass\n" for i in range(3)))
    _suite(tmp_path, {"test_a.py": plain.format(f="a"), "test_b.py": shared, "test_c.py": plain.format(f="c")})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    order = [line.split("::")[-1] for line in r.stdout.splitlines() if "::" in line]
    assert order == ["test_a0", "test_c0", "test_a1", "test_c1", "test_b0", "test_b1", "test_b2",
                     "test_a2", "test_c2", "test_a3", "test_c3"], r.stdout + r.stderr


def test_the_times_report_sums_each_file_and_lists_the_longest_tests(tmp_path):
    """tools/test_times.py on a JUnit report pytest wrote, as `make test` writes one per pass."""
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_a():\n    time.sleep(0.6)\n\n"
                                           "def test_b():\n    time.sleep(0.3)\n")
    (tmp_path / "test_quick.py").write_text("def test_c():\n    pass\n")
    report = tmp_path / "first.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        f"--junit-xml={report}", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    tool = os.path.join(os.path.dirname(TESTS), "tools", "test_times.py")
    r = subprocess.run([sys.executable, tool, "--top", "2", str(report)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("== first: 3 tests, ") and lines[1].endswith("2 tests  test_slow.py"), lines
    assert float(lines[1].split()[0]) >= 0.9 and lines[2].endswith("1 tests  test_quick.py"), lines
    assert [line.split()[-1] for line in lines[4:]] == ["test_slow.py::test_a", "test_slow.py::test_b"], lines
