"""The registry of output formats: each format is one module of this package, named in FORMATS.

A format module defines
    SUMMARY   one line saying what the format holds (the --format help lists it);
    BINARY    True when its output is bytes that only a file can take: `export` then requires -o;
    SAMPLES   True when it can carry every per-iteration sample: `export --samples` is refused otherwise;
    render(doc, options) -> str | bytes, the whole output for one result document;
    render_numerics(doc, options) the same for a numerics result (numerics.py gives what it shows).

Adding a format is one new module here and its line in FORMATS: `commbench export --format` takes
its choices, help and checks from this registry, and nothing else names a format.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import CommbenchError
from .options import Options, records

__all__ = ["FORMATS", "Options", "get", "names", "records", "render"]

# name -> module of this package
FORMATS = {
    "console": "console",
    "json": "json",
    "csv": "csv",
    "markdown": "markdown",
    "html": "html",
    "png": "png",
}


def names() -> list[str]:
    return list(FORMATS)


def render(name: str, doc: dict, options: Options):
    """The output of format `name` for one result document. A numerics result (commbench numerics)
    holds no timing records: its own views (formats/numerics.py) show it in every format."""
    if "numerics" in doc:
        return get(name).render_numerics(doc, options)
    return get(name).render(doc, options)


def get(name: str) -> ModuleType:
    # Imported on demand: a format's own imports (pandas, matplotlib) cost only when it is used.
    if name not in FORMATS:
        raise CommbenchError(f"unknown format '{name}': choose from {', '.join(FORMATS)}")
    return importlib.import_module(f"{__name__}.{FORMATS[name]}")
