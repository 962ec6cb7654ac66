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
