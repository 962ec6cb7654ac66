"""Output formats: the registry, the console table the live run and `export` share, every format's
content, and `commbench export` as a user types it (refusals included: exit 2, one line, no file)."""

import csv
import importlib
import io
import json
import os
import sys

import numpy as np
import pytest
from conftest import commbench

from commbench import formats
from commbench.cli import main
from commbench.cli.analyze import export
from commbench.errors import CommbenchError
from commbench.formats import console
from commbench.results import document as results
from commbench.results.record import measured
from commbench.results.stats import iqr, summarize
from commbench.run.reporter import Reporter
from docs import record

# Per-iteration times (us) whose statistics are known by hand: median 3, quartiles 2 and 4 (IQR 2,
# 66.7% of the median), mean 22, stdev 43.6 (CV 198.3%): one long outlier moves CV, not IQR.
SAMPLES_US = [1.0, 2.0, 3.0, 4.0, 100.0]


def _record(size=1024, samples_us=SAMPLES_US, impl="ring@mpi", **extra):
    return record("allreduce", impl, "float32", "sum", 4, size, size // 4, np.array(samples_us) * 1e-6, 0, **extra)


def _doc(recs):
    return {"schema_version": 1, "tool": {"name": "commbench", "version": "0.1.0", "git_commit": "0123456789abcdef"},
            "created": "2026-11-22T00:00:00+00:00", "argv": ["commbench", "allreduce", "--sizes", "1K,1M"],
            "config": {"op": "allreduce", "impls": ["ring@mpi", "tree@mpi"], "sizes": [1024, 1 << 20], "dtype": "float32",
                       "redop": "sum", "place": "out", "policy": {}},
            "machine": {"hosts": ["node1"], "ranks": 4, "launcher": "mpi", "cpu_model": "cpu", "cores": 8,
                        "memory_bytes": 1, "os": "Linux", "python": "3.11", "torch": "2", "mpi": "Open MPI v5"},
            "env": {}, "status": "complete", "error": None, "results": recs}


def _run(args, monkeypatch, capsys):
    """commbench ARGS in this process, as its console script runs it: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["commbench", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def run_file(workdir):
    """A result file of two series, ring and tree, at 1 KiB and 1 MiB."""
    recs = [_record(1024), _record(1 << 20, [250.0, 251.0, 252.0, 260.0]),
            _record(1024, [5.0, 5.0, 6.0, 7.0], impl="tree@mpi"), _record(1 << 20, [500.0, 510.0], impl="tree@mpi")]
    path = os.path.join(workdir, "run.json")
    with open(path, "w") as f:
        json.dump(_doc(recs), f)
    return path


def _refused(code, out, err, workdir, before):
    """Exit 2 with one line on stderr, nothing on stdout, no traceback, no new file in workdir."""
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commbench: error: "), (code, out, err)
    assert "Traceback" not in err and sorted(os.listdir(workdir)) == before


# ---- the registry and the statistics it shows -------------------------------------------------------

def test_every_registered_format_is_complete():
    # Every module of the package that renders (SUMMARY, render) is a registered format.
    folder = os.path.dirname(formats.__file__)
    renders = {m for m in (f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")
               if hasattr(importlib.import_module(f"commbench.formats.{m}"), "SUMMARY")}
    assert renders == set(formats.FORMATS.values()) and len(set(formats.names())) == len(formats.names())
    for name in formats.names():
        fmt = formats.get(name)
        assert isinstance(fmt.SUMMARY, str) and fmt.SUMMARY and callable(fmt.render)
        assert isinstance(fmt.BINARY, bool) and isinstance(fmt.SAMPLES, bool)
    assert [n for n in formats.names() if formats.get(n).BINARY] == ["png"]
    assert [n for n in formats.names() if formats.get(n).SAMPLES] == ["json"]
    with pytest.raises(CommbenchError, match="unknown format 'xml': choose from console, json, csv"):
        formats.get("xml")


def test_export_takes_its_choices_from_the_registry():
    [option] = [p for p in export.params if p.name == "format_name"]
    assert list(option.type.choices) == formats.names() and option.default == "csv"


def test_iqr_is_recorded_beside_cv():
    t = summarize(np.array(SAMPLES_US) * 1e-6)
    assert t["iqr"] == pytest.approx(2.0) and iqr(SAMPLES_US) == pytest.approx(2.0)
    assert t["median"] == pytest.approx(3.0) and t["cv"] == pytest.approx(1.98262077, rel=1e-8)
    results.validate(_doc([_record()]))  # the schema knows the field
    old = _record()
    del old["time_us"]["iqr"]
    results.validate(_doc([old]))  # and files from before it stay valid


# ---- the console table ---------------------------------------------------------------------------------

def test_console_row_shows_iqr_beside_cv():
    assert console.row(_record()) == ("       1024         256  float32   sum   -1        3.00    0.34    0.51"
                                      "      0        1.00       96.16  198.3   66.7")
    header = console.block_header("ring@mpi", "our ring")
    assert header[2].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                                 "#wrong", "min", "p99", "CV", "IQR"]
    assert header[3].split()[-2:] == ["(%)", "(%)"]
    meta = _doc([])
    assert console.header(meta)[-1] == ("# CV = stdev / mean; IQR = (p75 - p25) / median, a spread that a few long "
                                        "outliers leave alone")


def test_iqr_of_older_files_comes_from_their_samples():
    rec = _record()
    del rec["time_us"]["iqr"]
    assert console.cells(rec)[-1] == "66.7"
    rec["samples_us"] = []  # a baseline saved without samples
    assert console.cells(rec)[-1] == "n/a"


def test_columns_never_run_together():
    # 1 GiB taking a second on a rooted collective, and a CV in the thousands of percent: each value
    # used to fill its column and touch the next one ("-11049317.99", "5.302127.3").
    slow = _record(1 << 30, [1049317.99] * 5 + [40_000_000.0], root=3)
    slow["time_us"].update(p99=5.30, cv=21.273)
    cells = console.row(slow).split()
    assert cells == ["1073741824", "268435456", "float32", "sum", "3", "1049317.99", "1.02", "1.53", "0",
                     "1049317.99", "5.30", "2127.3", "0.0"]
    # Longer than any live default: a whole file's table widens the column for it, aligned with its header.
    slow["time_us"]["median"] = 123456789012.5
    text = console.render(_doc([slow, _record()]), formats.Options())
    names, units, *rows = [line for line in text.splitlines() if line.startswith(("#  ", "#       ", " "))]
    right_edges = lambda line: [i for i in range(1, len(line) + 1)  # noqa: E731
                                if line[i - 1] != " " and (i == len(line) or line[i] == " ")]
    for row in rows:
        assert right_edges(row) == right_edges(names)[1:] and len(row.split()) == len(console.COLUMNS)
    assert rows[1].split()[5] == "123456789012.50"


def test_the_live_table_is_the_console_format(workdir, capsys, monkeypatch):
    """What a run prints as it goes, and `export --format console` of its result file, row for row."""
    meta = {k: v for k, v in _doc([]).items() if k not in ("results", "status", "error")}
    path = os.path.join(workdir, "live.json")
    rep = Reporter(meta, path, total_steps=2, clock_floor_s=1e-9)
    made = [measured("allreduce", "ring@mpi", "float32", "sum", 4, size, size // 4, np.array(us) * 1e-6, 0)
            for size, us in ((1024, SAMPLES_US), (1 << 20, [250.0, 251.0, 252.0, 260.0]))]
    recs = [r.as_dict() for r in made]
    rep.block("ring@mpi", "commbench ring over MPI point-to-point")
    for r in made:
        rep.add(r, "ring@mpi", str(r.size_bytes))
    rep.finish()
    live = capsys.readouterr().out.splitlines()
    assert live[:len(console.header(meta))] == console.header(meta)
    assert live[len(console.header(meta)):][:6] == console.block_header("ring@mpi", "commbench ring over MPI point-to-point") \
        + [console.row(r) for r in recs]
    code, out, err = _run(["export", path, "--format", "console"], monkeypatch, capsys)
    assert code == 0, err
    exported = out.splitlines()
    assert exported == console.header(meta) + console.block_header("ring@mpi", "allreduce (4 ranks)") \
        + [console.row(r) for r in recs]


# ---- the other formats ---------------------------------------------------------------------------------

def test_json_leaves_samples_out_unless_asked(run_file):
    doc = results.load_document(run_file)
    plain = json.loads(formats.get("json").render(doc, formats.Options()))
    assert [r["size_bytes"] for r in plain] == [1024, 1 << 20, 1024, 1 << 20]
    assert all("samples_us" not in r for r in plain)
    assert plain[0]["time_us"] == doc["results"][0]["time_us"] and plain[0]["time_us"]["iqr"] == pytest.approx(2.0)
    full = json.loads(formats.get("json").render(doc, formats.Options(samples=True)))
    assert full == doc["results"] and full[0]["samples_us"] == SAMPLES_US


def test_csv_has_one_row_per_record_and_no_samples(run_file):
    rows = list(csv.DictReader(io.StringIO(formats.get("csv").render(results.load_document(run_file),
                                                                      formats.Options()))))
    assert [(r["impl"], r["size_bytes"]) for r in rows] == [("ring@mpi", "1024"), ("ring@mpi", "1048576"),
                                                            ("tree@mpi", "1024"), ("tree@mpi", "1048576")]
    assert float(rows[0]["time_us_median"]) == 3.0 and float(rows[0]["time_us_iqr"]) == 2.0
    assert not any("samples" in k for k in rows[0])


def test_csv_cells_that_hold_lists_are_json(workdir):
    per_rank = [{"rank": r, "host": "node1", "median_us": 3.0 - r, "skew_median_us": 0.5 * r, "skew_p90_us": r}
                for r in range(2)]
    doc = _doc([_record(1024, per_rank=per_rank), _record(1 << 20)])
    doc["results"][0]["pair"] = [0, 1]
    rows = list(csv.DictReader(io.StringIO(formats.get("csv").render(doc, formats.Options()))))
    assert json.loads(rows[0]["per_rank"]) == per_rank and json.loads(rows[0]["pair"]) == [0, 1]
    assert rows[1]["per_rank"] == "" and rows[1]["pair"] == ""


def test_markdown_and_html_are_the_report(run_file):
    doc = results.load_document(run_file)
    options = formats.Options(source="run.json")
    md = formats.get("markdown").render(doc, options)
    assert md.startswith("# commbench report\n\n- **run**: run.json\n")
    assert "![plot]" not in md  # only a report folder has the image beside it
    assert "| allreduce | ring@mpi | 4 |" in md and "### allreduce tree@mpi (4 ranks)" in md
    assert ("| 1024 | 256 | float32 | sum | -1 | 3.00 | 0.34 | 0.51 | 0 | 1.00 | 96.16 | 198.3 | 66.7 |"
            in md.splitlines())
    page = formats.get("html").render(doc, formats.Options(source="<run>.json", image="plot.png"))
    assert "<li><b>run</b>: &lt;run&gt;.json</li>" in page and "<img src='plot.png'" in page
    assert ("<tr><td>1024</td><td>256</td><td>float32</td><td>sum</td><td>-1</td><td>3.00</td><td>0.34</td>"
            "<td>0.51</td><td>0</td><td>1.00</td><td>96.16</td><td>198.3</td><td>66.7</td></tr>") in page


def test_png_is_an_image(run_file):
    data = formats.get("png").render(results.load_document(run_file), formats.Options())
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


# ---- commbench export -----------------------------------------------------------------------------------

def test_export_writes_stdout_or_a_new_file(run_file, workdir, monkeypatch, capsys):
    code, out, err = _run(["export", run_file], monkeypatch, capsys)
    assert code == 0 and err == "" and out.splitlines()[0].startswith("op,impl,dtype,redop,ranks,size_bytes")
    assert len(out.splitlines()) == 5
    md = os.path.join(workdir, "run.md")
    code, out, err = _run(["export", run_file, "--format", "markdown", "-o", md], monkeypatch, capsys)
    assert (code, out, err) == (0, f"wrote {md}\n", "")
    with open(md) as f:
        assert f.read() == formats.get("markdown").render(results.load_document(run_file),
                                                         formats.Options(source="run.json"))
    png = os.path.join(workdir, "run.png")
    assert _run(["export", run_file, "--format", "png", "-o", png], monkeypatch, capsys)[0] == 0
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    code, out, err = _run(["export", run_file, "--format", "json", "--samples"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)[0]["samples_us"] == SAMPLES_US
    assert sorted(os.listdir(workdir)) == ["run.json", "run.md", "run.png"]  # no temporary file left


@pytest.mark.parametrize("args,message", [
    (["--format", "png"], "--format png writes binary data, not text: give -o FILE"),
    (["--format", "csv", "--samples"], "--samples: --format csv cannot hold raw samples; formats that can: json"),
    (["-o", "run.json"], "run.json already exists; choose another -o"),
    (["--format", "xml"], "Invalid value for '--format': 'xml' is not one of"),
    (["--format", "markdown", "--fabric", "token-ring"], "unknown fabric 'token-ring'"),
])
def test_export_refusals(args, message, run_file, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    with open(run_file, "rb") as f:
        original = f.read()
    before = sorted(os.listdir(workdir))
    code, out, err = _run(["export", run_file, *args], monkeypatch, capsys)
    _refused(code, out, err, workdir, before)
    assert message in err
    with open(run_file, "rb") as f:
        assert f.read() == original


def test_export_of_a_file_without_records(workdir, monkeypatch, capsys):
    path = os.path.join(workdir, "empty.json")
    with open(path, "w") as f:
        json.dump(dict(_doc([]), status="failed", error="killed"), f)
    code, out, err = _run(["export", path, "--format", "console", "-o", os.path.join(workdir, "t.txt")],
                          monkeypatch, capsys)
    _refused(code, out, err, workdir, ["empty.json"])
    assert err == f"commbench: error: {path} holds no records to export\n"


def test_export_as_typed(run_file, workdir):
    """The installed command itself: the table on stdout, and a refusal in one line without a traceback."""
    r = commbench(["export", run_file, "--format", "console"], cwd=workdir)
    assert r.returncode == 0 and r.stderr == "" and "# impl tree@mpi: allreduce (4 ranks)" in r.stdout
    r = commbench(["export", run_file, "--format", "png"], cwd=workdir)
    assert r.returncode == 2 and r.stdout == "" and r.stderr == \
        "commbench: error: --format png writes binary data, not text: give -o FILE\n"


# ---- files appear whole or not at all -----------------------------------------------------------------

def test_write_new_is_atomic_and_never_overwrites(workdir, monkeypatch):
    path = os.path.join(workdir, "sub", "out.txt")
    results.write_new(path, "text\n", "taken")
    results.write_new(path + ".bin", b"\x00\x01", "taken")
    results.write_new(path + ".json", {"a": 1}, "taken")
    with open(path) as f, open(path + ".bin", "rb") as b, open(path + ".json") as j:
        assert (f.read(), b.read(), json.load(j)) == ("text\n", b"\x00\x01", {"a": 1})
    with pytest.raises(CommbenchError, match="^taken$"):
        results.write_new(path, "other\n", "taken")
    with open(path) as f:
        assert f.read() == "text\n"

    class FullDisk(io.BytesIO):
        def write(self, data):
            raise OSError(28, "No space left on device")

    real_open = open
    monkeypatch.setattr(results, "open", lambda p, mode="r", *a, **k: FullDisk() if "w" in mode else real_open(p, mode),
                        raising=False)
    with pytest.raises(CommbenchError, match="cannot write .*new.txt: No space left on device"):
        results.write_new(os.path.join(workdir, "sub", "new.txt"), "x" * 100, "taken")
    assert sorted(os.listdir(os.path.join(workdir, "sub"))) == ["out.txt", "out.txt.bin", "out.txt.json"]


def test_series_apart_by_placement_schedule_or_mode_are_named_apart():
    from commbench.results.series import by_series, label
    one = np.array([1e-6, 2e-6])
    recs = [_record(impl="nccl", in_place=False), _record(impl="nccl", in_place=True),
            *(record("pingpong", "mpi", "uint8", "none", 2, 8, 8, one, 0, pair=[0, 1], schedule=s) for s in ("clean", "loaded")),
            record("peer_copy", "cuda", "uint8", "none", 1, 8, 8, one, 0, pair=[0, 1], bidirectional=True, mode="ce")]
    assert [label(key) for key in by_series(recs)] == [
        "allreduce nccl (4 ranks)", "allreduce nccl in-place (4 ranks)", "pingpong mpi (pair 0-1)",
        "pingpong mpi loaded (pair 0-1)", "peer_copy cuda ce (pair 0-1, both ways)"]


def test_a_plot_s_legend_entry_is_cut_to_a_line(tmp_path, monkeypatch):
    """A series' label is the file's own words: an impl name of 100,000 characters took the legend 95 s
    to lay out. It is cut; the plot is drawn."""
    import matplotlib.figure

    from commbench.formats.plot import MAX_LABEL, plot
    from docs import ring_run
    doc = ring_run()
    for r in doc["results"]:
        r["impl"] = "x" * 100_000
    shown, save = [], matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        shown.extend(t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts())
        return save(fig, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    plot([("run", doc)], str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 0
    assert shown and all(len(text) <= MAX_LABEL for text in shown) and shown[0].endswith("xx...")
