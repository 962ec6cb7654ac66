import copy
import json

import numpy as np
import pytest

from commbench.errors import CommbenchError
from commbench.results import document as results
from commbench.results.legacy import upgrade
from docs import record


def header():
    return {
        "tool": {"name": "commbench", "version": "0.1.0", "git_commit": None},
        "created": "2026-11-21T00:00:00+00:00",
        "argv": ["commbench", "allreduce"],
        "config": {"op": "allreduce", "impls": ["ring@mpi"], "sizes": [1024], "dtype": "float32", "redop": "sum",
                   "place": "out", "policy": {"warmup": 5}},
        "machine": {"hosts": ["h"], "ranks": 2, "launcher": "mpi", "cpu_model": "cpu", "cores": 2,
                    "memory_bytes": 1, "os": "Linux", "python": "3.11", "torch": "2", "mpi": "Open MPI"},
        "env": {"OMPI_X": "1"},
    }


def rec(size=1024):
    return record("allreduce", "ring@mpi", "float32", "sum", 2, size, size // 4,
                  np.array([1e-6, 2e-6, 3e-6]), 0, in_place=False)


def test_round_trip(tmp_path):
    path = str(tmp_path / "r.json")
    f = results.ResultFile(path, header())
    f.add(rec(1024))
    f.add(rec(2048))
    f.finish()
    df = results.load(path)
    assert list(df["size_bytes"]) == [1024, 2048]
    assert df["time_us_median"].iloc[0] == pytest.approx(2.0)
    assert df["busbw_gbps"].iloc[0] == pytest.approx(1024 / 2e-6 / 1e9)
    assert df.attrs["meta"]["status"] == "complete"
    assert df["samples_us"].iloc[1] == [1.0, 2.0, 3.0]


def test_rows_are_on_disk_after_each_add(tmp_path):
    path = str(tmp_path / "r.json")
    f = results.ResultFile(path, header())
    f.add(rec())
    with open(path) as fh:
        doc = json.load(fh)
    assert doc["status"] == "running" and len(doc["results"]) == 1
    results.validate(doc)


def test_never_overwrites(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("precious")
    with pytest.raises(CommbenchError, match="already exists"):
        results.ResultFile(str(path), header())
    assert path.read_text() == "precious"


def _bad(tmp_path, mutate):
    f = results.ResultFile(str(tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"), header())
    f.add(rec())
    doc = copy.deepcopy(f.doc)
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(CommbenchError) as e:
        results.load(str(bad))
    return str(e.value)


def test_validation_names_the_first_bad_field(tmp_path):
    msg = _bad(tmp_path, lambda d: d["results"][0]["time_us"].__setitem__("median", "fast"))
    assert "results/0/time_us/median" in msg
    msg = _bad(tmp_path, lambda d: d.pop("schema_version"))
    assert "schema_version" in msg
    msg = _bad(tmp_path, lambda d: d["results"][0].__setitem__("wrong", -1))
    assert "results/0/wrong" in msg


def test_a_bad_field_s_value_is_quoted_cut_short(tmp_path):
    """jsonschema's message starts with the whole value: a host-level links section made a 2.6 KB line.
    Of a section that fits neither level, the level it comes nearest to is the one said."""
    section = {"level": "host", "hosts": [f"node{i:04d}" for i in range(400)]}
    msg = _bad(tmp_path, lambda d: d.__setitem__("links", section))
    assert msg.endswith("invalid field 'links': 'impl' is a required property"), msg
    long_name = "x" * 3000
    msg = _bad(tmp_path, lambda d: d["config"].__setitem__("op", long_name))
    assert f"invalid field 'config/op': {json.dumps(long_name)[:77]}..." in msg and len(msg) < 600, msg


@pytest.mark.parametrize("where,value", [
    (("time_us", "median"), 5e-324), (("time_us", "median"), 1e308), (("busbw_gbps",), 5e-324),
    (("algbw_gbps",), 1e308), (("samples_us", 0), 1e308), (("samples_us", 0), 5e-324)])
def test_a_figure_no_measurement_gives_is_refused_before_any_arithmetic(tmp_path, where, value):
    """A time of 1e308 us or a bandwidth of 5e-324 GB/s is no measurement, and the figures made from
    it over- or underflow (fit, compare, links, fleet, scale and plots printed numpy's warnings or a
    traceback): refused by its field, in one line. Spreads that rounding leaves tiny stay valid."""
    def edit(doc):
        *path, last = where
        node = doc["results"][0]
        for key in path:
            node = node[key]
        node[last] = value
    lo, hi = results.FIGURE_RANGES["_gbps" if where[0].endswith("gbps") else "_us"]
    assert _bad(tmp_path, edit).endswith(f"invalid field 'results/0/{'/'.join(map(str, where))}': {value!r} is no "
                                         f"measured figure: 0, or {lo:g} to {hi:g}")
    f = results.ResultFile(str(tmp_path / "good.json"), header())
    f.add(rec())
    doc = copy.deepcopy(f.doc)
    doc["results"][0]["time_us"]["stdev"] = 6e-14
    results.validate(doc)


def test_load_rejects_non_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(CommbenchError, match="not JSON"):
        results.load(str(p))
    with pytest.raises(CommbenchError, match="cannot read"):
        results.load(str(tmp_path / "missing.json"))


def test_schema_ships_with_the_package():
    assert results.schema()["properties"]["schema_version"]["const"] == results.SCHEMA_VERSION


def test_env_allowlist_never_takes_everything():
    from commbench.node.machine import recorded_env
    env = {"NCCL_DEBUG": "INFO", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root", "OMPI_MCA_btl": "self",
           "CUDA_VISIBLE_DEVICES": "0", "GITHUB_TOKEN": "t"}
    assert recorded_env(env) == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "OMPI_MCA_btl": "self"}


def test_the_header_names_commbench_s_own_commit_never_an_enclosing_repository_s(tmp_path):
    """A fleet repository that vendors commbench has commits of its own: they are not commbench's."""
    import subprocess

    from commbench.node.machine import checkout_commit
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    fleet = tmp_path / "fleet"
    package = fleet / "vendor" / "commbench" / "commbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    subprocess.run([*git, "init", "-q", str(fleet)], check=True)
    subprocess.run([*git, "-C", str(fleet), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(fleet), "commit", "-qm", "fleet"], check=True)
    assert checkout_commit(str(package)) is None
    own = fleet / "vendor" / "commbench"
    subprocess.run([*git, "init", "-q", str(own)], check=True)
    subprocess.run([*git, "-C", str(own), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(own), "commit", "-qm", "commbench"], check=True)
    head = subprocess.run(["git", "-C", str(own), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert checkout_commit(str(package)) == head and len(head) == 40
    assert checkout_commit(str(tmp_path)) is None  # in no repository


def _doc(records, **config):
    head = header()
    head["config"] = {**head["config"], **config}
    return results.new_document(head, records, "complete")


def _copy(op, mode):
    return record(op, "cuda", "uint8", "none", 1, 1024, 1024, np.array([1e-6, 2e-6]), 0, mode=mode, pair=[0, 1])


COPIES = [_copy("h2d", "pinned"), _copy("d2h", "pageable"), _copy("staged", "pinned2"), _copy("peer_copy", "ce")]


def test_the_upgrade_of_earlier_files_leaves_todays_documents_as_they_are():
    gpu = [record("allreduce", impl, "float32", "sum", 2, 1024, 256, np.array([1e-6, 2e-6]), 0, in_place=True)
           for impl in ("nccl", "ring@nccl", "tree@nccl")]
    docs = [_doc([rec(), rec(2048)]), _doc(gpu, impls=["nccl", "ring@nccl", "tree@nccl"], device="cuda"),
            _doc(COPIES, op="copy", impls=["cuda"], device="cuda")]
    for doc in docs:
        results.validate(doc)
        assert upgrade(copy.deepcopy(doc)) == doc


def test_an_earlier_copy_file_keeps_its_modes_apart_under_impl_cuda():
    new = _doc(COPIES, op="copy", impls=["cuda"], device="cuda")
    old = copy.deepcopy(new)
    old["config"]["impls"] = ["pinned", "pageable", "staged", "ce"]
    for r in old["results"]:
        r["impl"] = r.pop("mode")
    assert upgrade(old) == new


@pytest.mark.parametrize("in_place,place", [(False, "out"), (True, "in")])
def test_an_earlier_files_placement_reads_as_place(in_place, place):
    new = _doc([rec()], place=place)
    old = copy.deepcopy(new)
    del old["config"]["place"]
    old["config"]["in_place"] = in_place
    results.validate(old)
    assert upgrade(old) == new


def test_an_earlier_numerics_file_names_its_algorithms_transport():
    old = _doc([], impls=["mpi", "ring", "tree", "gloo"])
    old["numerics"] = {"rows": [{"impl": impl, "ranks": 2} for impl in ("mpi", "ring", "tree", "gloo")]}
    new = upgrade(old)
    assert new["config"]["impls"] == [row["impl"] for row in new["numerics"]["rows"]] == \
        ["mpi", "ring@mpi", "tree@mpi", "gloo"]


@pytest.mark.parametrize("bad,message", [
    (-2.0, "-2.0 is less than the minimum of 0"),
    ("x", "\"x\" is not of type 'number'"),
    (True, "true is not of type 'number'"),
    (None, "null is not of type 'number'"),
    (float("nan"), "nan is not a finite number"),
    (float("inf"), "inf is not a finite number"),
])
def test_a_bad_sample_is_named_by_its_path(bad, message):
    """Samples are checked in bulk beside the schema (a fleet's files hold millions): the same
    refusal, naming the sample."""
    doc = _doc([rec(), rec(2048)])
    doc["results"][1]["samples_us"][2] = bad
    with pytest.raises(CommbenchError) as e:
        results.validate(doc, "run.json")
    assert str(e.value) == f"run.json: invalid field 'results/1/samples_us/2': {message}"


def test_the_physical_floor_of_a_record():
    """The least time the bytes some rank's GPU must write take at its memory's bandwidth, plus a
    launch (1 us), less the event timer's step (0.5 us) before a median is a defect: at 8K the
    0.1-0.5 us of events recorded out of order are caught too."""
    from commbench.results import physical
    rec = {"op": "allreduce", "impl": "nccl", "size_bytes": 64 << 20, "ranks": 8, "in_place": False,
           "time_us": {"median": 2.0}}
    assert physical.floor_s(rec, 1000.0) == pytest.approx((8 << 20) / 1e12 + 1e-6)  # 8 MiB at 1 TB/s: 8.4 us
    with pytest.raises(physical.TimingDefect, match=r"a median of 2\.00 us, below the 9\.39 us"):
        physical.check(rec, 1000.0)
    physical.check({**rec, "time_us": {"median": 9.0}}, 1000.0)  # within the timer's step
    physical.check(rec, None)  # bandwidth unknown: nothing checked
    small = {**rec, "size_bytes": 8 << 10, "time_us": {"median": 0.3}}
    with pytest.raises(physical.TimingDefect, match=r"a median of 0\.30 us, below the 1\.00 us"):
        physical.check(small, 1000.0)
    physical.check({**small, "time_us": {"median": 0.6}}, 1000.0)
    # --agg 8: a record's time is the group's over 8 calls, which share one launch (a 0.2 us call is
    # no defect there, where a whole launch per call refused it).
    physical.check({**small, "agg": 8, "time_us": {"median": 0.2}}, 1000.0)
    assert physical.floor_s({**small, "agg": 8}, 1000.0) == pytest.approx((1 << 10) / 1e12 + 1e-6 / 8)
    assert physical.floor_s({**rec, "ranks": 1, "in_place": True}, 1000.0) == 0
    assert physical.floor_s({**rec, "op": "peer_copy"}, 1000.0) == pytest.approx((64 << 20) / 1e12 + 1e-6)
