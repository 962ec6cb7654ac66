"""The stubs of the native modules (commbench/_host.pyi, _cuda.pyi) against the built modules. mypy's
stubtest (`make check`) checks that every name is in both; it cannot read the parameters of
pybind11's functions, whose signatures live in their docstrings, so this test reads those: every
function and method of a stub takes the parameters the module's own signature names, in its order,
positional or keyword-only alike, with the same defaults."""

import ast
import importlib
import importlib.util
import os

import pytest

import commbench

MODULES = ["_host", "_cuda"]


def _params(fn: ast.FunctionDef) -> list[tuple]:
    """(name, keyword-only, default) of each parameter but self."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
    out = [(p.arg, False, d) for p, d in zip(positional, defaults)]
    out += [(p.arg, True, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return [(name, kw, None if d is None else ast.literal_eval(d)) for name, kw, d in out if name != "self"]


def _tree(module: str) -> ast.Module:
    with open(os.path.join(os.path.dirname(commbench.__file__), f"{module}.pyi")) as f:
        return ast.parse(f.read())


def _methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    # A property's getter has no signature of pybind11's to read: stubtest sees that it is there.
    return {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)
            and not any(isinstance(d, ast.Name) and d.id == "property" for d in m.decorator_list)}


def _stubbed(module: str) -> dict[str, ast.FunctionDef]:
    """{qualified name: its def} of the stub's functions and methods; a class's methods include those
    of the stubs' private bases (the enums' _Enum), which exist in no module."""
    private = {node.name: _methods(node) for m in MODULES for node in _tree(m).body
               if isinstance(node, ast.ClassDef) and node.name.startswith("_")}
    found = {}
    for node in _tree(module).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            inherited = {k: v for b in node.bases if isinstance(b, ast.Name) for k, v in private.get(b.id, {}).items()}
            found.update({f"{node.name}.{name}": m for name, m in {**inherited, **_methods(node)}.items()})
    return found


def _runtime(obj, name: str) -> ast.FunctionDef:
    """The def of pybind11's signature line, the first of the object's docstring."""
    line = obj.__doc__.splitlines()[0].replace(": buffer", ": object")  # pybind11 names the buffer protocol so
    return ast.parse(f"def {line.split('(', 1)[0].rsplit('.', 1)[-1]}({line.split('(', 1)[1]}: ...").body[0]


@pytest.mark.parametrize("module", MODULES)
def test_the_stubs_take_the_parameters_the_modules_take(module):
    if importlib.util.find_spec(f"commbench.{module}") is None:
        pytest.skip(f"commbench.{module} is not built here (COMMBENCH_SKIP_CUDA)")
    native = importlib.import_module(f"commbench.{module}")
    stubbed = _stubbed(module)
    assert stubbed, module
    for qualified, fn in stubbed.items():
        if fn.name.startswith("__") and fn.name != "__init__":
            continue  # the enums' conversions, pybind11's own
        obj = native
        for part in qualified.split("."):
            obj = getattr(obj, part)
        assert _params(fn) == _params(_runtime(obj, qualified)), qualified
