"""The house rules a reader relies on: layers that import only downwards and no cycles (import-linter's
contracts in pyproject.toml), no import cycle between any two modules, ruff clean, the layout that
docs/architecture.md describes is the tree, and the collectives registry is the only list of
collectives."""

import importlib
import json
import os
import re
import subprocess
import sys

import click
import grimp
from conftest import ROOT

from commbench import collectives
from commbench.results.document import schema
from commbench.transports import impls_for

BIN = os.path.dirname(sys.executable)


def test_layers_and_acyclic_packages_hold():
    r = subprocess.run([os.path.join(BIN, "lint-imports")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others():
    """Stricter than import-linter's sibling check: a package's __init__ and its own modules count too,
    and imports inside functions as much as those at the top."""
    assert _cycles(grimp.build_graph("commbench")) == []


def test_the_cycle_finder_finds_a_cycle():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]
    assert _cycles(Graph()) == [["a", "b", "c"]]


def test_ruff_is_clean():
    r = subprocess.run([os.path.join(BIN, "ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _described() -> set[str]:
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    block = re.search(r"<!-- layout -->\n```\n(.*?)```\n<!-- /layout -->", text, re.S).group(1)
    return {line.split()[0] for line in block.splitlines() if line.strip()}


def _tree() -> set[str]:
    found = set()
    for top in ("commbench", "csrc"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                if f.endswith((".py", ".pyi", ".h", ".cuh", ".cpp", ".cu")):
                    found.add(os.path.relpath(os.path.join(folder, f), ROOT))
    return found


def test_the_described_layout_is_the_tree():
    described, tree = _described(), _tree()
    assert sorted(tree - described) == [], "files docs/architecture.md does not describe"
    assert sorted(described - tree) == [], "files docs/architecture.md describes that do not exist"


_COMMANDS_OF_ONE_MODULE = """
import json, sys
from commbench.cli import group
group._load(sys.argv[1])
print(json.dumps({"modules": sorted(m for m in sys.modules if m.startswith("commbench.cli.")),
                  "commands": {name: sorted(getattr(c, "commands", ())) for name, c in group.cli.commands.items()}}))
"""


def test_a_command_s_module_alone_registers_it_whole():
    """The group imports only the module of the command asked for (commbench/cli/group.py): in a
    process of its own, each module registers whole every command the group looks for in it, groups
    with all their subcommands (`baseline promote` is accept's, `baseline save` analyze's), as every
    module together does; a measuring command's processes import neither the analysis nor accept."""
    from commbench.cli import group
    named = [name for names in group.OTHER_COMMANDS.values() for name in names]
    assert len(named) == len(set(named)), named
    folder = os.path.join(ROOT, "commbench", "cli")
    for module in sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py")):
        importlib.import_module(f"commbench.cli.{module}")  # whatever registers, known to the group or not
    everything = {name: sorted(getattr(c, "commands", ())) for name, c in group.cli.commands.items()}
    found = {}
    for module in group.MODULES:
        r = subprocess.run([sys.executable, "-c", _COMMANDS_OF_ONE_MODULE, module], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        found[module] = json.loads(r.stdout)
        for name, subcommands in found[module]["commands"].items():
            if group.module_of(name) == module:
                assert subcommands == everything[name], (module, name)
    assert {name for name in everything if name not in found[group.module_of(name)]["commands"]} == set()
    assert not {"commbench.cli.analyze", "commbench.cli.accept"} & set(found["measure"]["modules"])


def test_a_step_runs_the_measuring_commands_and_the_node_kinds_alone():
    """What an accept step may run follows from the group (MEASURING: the modules whose commands write
    a result file, each taking -o) and accept's step kinds; every other command is refused by name."""
    from commbench.accept.kinds import KINDS
    from commbench.cli import group
    from commbench.cli.accept import check_argv
    from commbench.errors import CommbenchError
    group.cli.list_commands(None)
    for name, command in group.cli.commands.items():
        runs = name in KINDS or group.module_of(name) in group.MEASURING
        # A group of measuring commands (overlap <collective>): each of them takes -o.
        commands = command.commands.values() if isinstance(command, click.Group) else [command]
        assert not runs or name in KINDS or all("output" in {p.name for p in c.params} for c in commands), name
        try:
            check_argv([name])
            refused = ""
        except CommbenchError as e:
            refused = str(e)
        assert runs != refused.startswith(f"'{name}' is no command a step can run"), (name, refused)


def test_every_collective_module_is_registered_and_reaches_the_cli_schema_and_transports():
    """A collective is its module: the registry finds it, and the command, the result schema and the
    transports take it from there, with no list to extend."""
    from commbench.cli import cli
    cli.list_commands(None)  # every command's module imported
    folder = os.path.join(ROOT, "commbench", "collectives")
    modules = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_")}
    defining = {m for m in modules if re.search(r"^COLLECTIVE = ", open(os.path.join(folder, f"{m}.py")).read(), re.M)}
    assert {c.name for c in collectives.all_collectives()} == defining
    ops = schema()["properties"]["config"]["properties"]["op"]["enum"]
    for c in collectives.all_collectives():
        assert c.name in cli.commands and c.name in ops
        assert "mpi" in impls_for(c, "cpu") and "nccl" in impls_for(c, "cuda")
    # Natively a collective is its place in library_calls.h alone: a name in the enum's list, and a case
    # in MPI's call and in NCCL's (docs/architecture.md: a collective the libraries run is 2 files).
    with open(os.path.join(ROOT, "csrc", "include", "commbench", "library_calls.h")) as f:
        calls = f.read()
    listed = calls[calls.index("kCollectiveNames[]"):]
    assert sorted(re.findall(r'"(\w+)"', listed[:listed.index("};")])) == sorted(collectives.names())
    for value in re.search(r"enum class Collective \{([^}]*)\}", calls).group(1).split(","):
        assert calls.count(f"case Collective::{value.strip()}:") == 2, value


def test_readme_is_an_entry_point_and_every_example_has_its_generator():
    """README.md stays short (the rest is in docs/), and every example block of README.md and docs/ is
    one that tools/make_docs.py (`make docs`) produces."""
    with open(os.path.join(ROOT, "README.md")) as f:
        assert len(f.read().splitlines()) <= 250
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_docs.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_transport_provides_what_a_transport_must():
    """A transport subclasses Transport (commbench/transports/base.py), whose defaults stand only for
    what a library may not report: the rest each transport provides itself, or its calls would return
    the protocol's None."""
    from commbench.transports import TRANSPORTS
    from commbench.transports.base import Transport
    own = ("impls", "prepare", "times", "open_pairs")
    for t in TRANSPORTS:
        assert Transport in type(t).__mro__, t
        assert [m for m in own if getattr(type(t), m) is getattr(Transport, m)] == [], t.name
        assert all(isinstance(getattr(t, a), want) for a, want in
                   (("name", str), ("p2p_device", str), ("p2p_summary", str), ("captures_graphs", bool))), t.name


def test_every_format_shows_a_numerics_result_too():
    """A numerics result is rendered by each format's own render_numerics (commbench/formats): a
    format without one would fail only when a numerics file met it, minutes into a user's export."""
    from commbench import formats
    assert [name for name in formats.names() if not callable(getattr(formats.get(name), "render_numerics", None))] == []


_THROWAWAY_MODULE = '''"""A collective of a test's own: every rank keeps its own buffer."""
from .base import Collective, Segment


class Throwaway(Collective):
    name = "throwaway"
    aliases = ("throw_away",)
    title = "throw-away"
    summary = "Time a collective that moves nothing."
    order = 99

    def busbw_factor(self, p):
        return 1.0

    def expected(self, rank, p, root, shape):
        return [Segment(0, shape.recv, 0, rank)]

    def cost_model(self, algorithm, p):
        return None


COLLECTIVE = Throwaway()
'''

# In a process of its own, commbench.collectives found with one more folder, holding the module above.
_WITH_THROWAWAY = '''
import importlib.abc, importlib.machinery, json, re, sys
folder, calls = sys.argv[1], open(sys.argv[2]).read()


class Extend(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "commbench.collectives":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.submodule_search_locations.append(folder)
        return spec


sys.meta_path.insert(0, Extend())
from click.testing import CliRunner
from commbench import collectives
from commbench.accept import plan
from commbench.cli import cli
from commbench.results.document import schema
from commbench.results.importers import NCCL_TESTS_OPS
from commbench.transports import impls_for
listed = calls[calls.index("kCollectiveNames[]"):]
native = set(re.findall(r'"(\\w+)"', listed[:listed.index("};")]))
print(json.dumps({
    "help": CliRunner().invoke(cli, ["throwaway", "--help"]).exit_code,
    "op": "throwaway" in schema()["properties"]["config"]["properties"]["op"]["enum"],
    "plan": "throwaway" in [s.name for s in plan.load("gpu-node").steps],
    "import": NCCL_TESTS_OPS.get("throw_away"),
    "impls": {d: sorted(impls_for(collectives.get("throwaway"), d)) for d in ("cpu", "cuda")},
    "not_native": sorted(set(collectives.names()) - native)}))
'''


def test_a_throwaway_collective_needs_its_module_and_its_native_case_alone(tmp_path):
    """docs/architecture.md's recipe, tried: a collective module dropped beside the others has its
    command, its place in the schema, its step in gpu-node, its nccl-tests binary and its impls, with no
    other edit; what it still lacks, its native case in library_calls.h, the check above names."""
    (tmp_path / "throwaway.py").write_text(_THROWAWAY_MODULE)
    r = subprocess.run([sys.executable, "-c", _WITH_THROWAWAY, str(tmp_path),
                        os.path.join(ROOT, "csrc", "include", "commbench", "library_calls.h")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"help": 0, "op": True, "plan": True, "import": "throwaway",
                                    "impls": {"cpu": ["mpi"], "cuda": ["mpi", "nccl"]}, "not_native": ["throwaway"]}


# In a process of its own: one more Knob, before anything reads the registry (series fields, the options).
_WITH_THROWAWAY_KNOB = '''
import json
from commbench.results import nccl_knobs
nccl_knobs.KNOBS = (*nccl_knobs.KNOBS, nccl_knobs.Knob("nccl_throwaway", "NCCL_THROWAWAY", ("Alpha", "Beta")))
from click.testing import CliRunner
from commbench.analysis import nccl_default
from commbench.cli import cli
from commbench.results.document import schema
from commbench.results.series import SERIES_FIELDS, variant
from commbench.transports import nccl_variants
refused = lambda *a: str(CliRunner().invoke(cli, ["allreduce", "--device", "cpu", "--impl", "mpi", *a]).exception)
base = {"op": "allreduce", "impl": "nccl", "ranks": 2, "dtype": "float32", "redop": "sum", "in_place": False}
records = [{**base, "size_bytes": 8, "time_us": {"median": 2.0}},
           {**base, "nccl_throwaway": "beta", "size_bytes": 8, "time_us": {"median": 1.0}}]
doc = schema()
print(json.dumps({
    "help": "--nccl-throwaway" in CliRunner().invoke(cli, ["allreduce", "--help"]).output,
    "bad": refused("--nccl-throwaway", "gamma"), "no_nccl": refused("--nccl-throwaway", "alpha"),
    "series": "nccl_throwaway" in SERIES_FIELDS, "name": variant({"impl": "nccl", "nccl_throwaway": "beta"}),
    "variants": nccl_knobs.variants({"nccl_algo": ["ring"], "nccl_throwaway": ["alpha", "beta"]}),
    "environment": nccl_knobs.environment({"nccl_throwaway": "beta"}),
    "impl": nccl_variants([{"nccl_throwaway": "beta"}])[0].description,
    "record": doc["$defs"]["record"]["properties"]["nccl_throwaway"]["enum"],
    "config": doc["properties"]["config"]["properties"]["nccl_variants"]["items"]["properties"]["nccl_throwaway"]["enum"],
    "summary": nccl_default.summary_lines({"results": records})}))
'''


def test_a_throwaway_nccl_knob_needs_its_registry_line_alone():
    """docs/architecture.md's recipe, tried: one Knob line gives the option and the check of its values,
    the variants' product, the forced communicator's environment, the series field and name, the forced
    impl's description, the schema's fields and the default-against-best summary."""
    r = subprocess.run([sys.executable, "-c", _WITH_THROWAWAY_KNOB], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got.pop("bad") == "--nccl-throwaway 'gamma': gamma is not one of NCCL's names: Alpha, Beta (a comma list, any case)"
    assert got.pop("no_nccl").startswith("--nccl-throwaway forces the choice of NCCL's own call, impl nccl,")
    assert got.pop("summary")[:2] == ["NCCL's default against the best forced choice: allreduce nccl (2 ranks)",
                                      "  8: default 2.00 us, best throwaway=beta 1.00 us: default slower by 100 %"]
    assert got == {"help": True, "series": True, "name": "nccl throwaway=beta",
                   "variants": [{"nccl_algo": "ring", "nccl_throwaway": "alpha"}, {"nccl_algo": "ring", "nccl_throwaway": "beta"}],
                   "environment": {"NCCL_ALGO": None, "NCCL_PROTO": None, "NCCL_THROWAWAY": "beta"},
                   "impl": "NCCL's call with NCCL_THROWAWAY=beta", "record": ["alpha", "beta"], "config": ["alpha", "beta"]}


def test_every_step_kind_names_a_command_and_its_limits():
    """accept's step kinds (commbench/accept/kinds.py) are looked up by command: each must name a command
    of the CLI, limits the plan knows, and a judge only where there is a kept output to judge."""
    from commbench.accept import kinds, plan
    from commbench.cli import cli
    cli.list_commands(None)
    for k in kinds.KINDS.values():
        assert k.command in cli.commands, k
        assert set(k.limits) <= set(plan.LIMITS), k
        assert k.judge is None or k.keeps_stdout, k
