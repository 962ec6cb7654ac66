"""Plans: which commands `accept` runs, with which options and limits, and how each is judged. A plan
is a TOML file; the built-in ones lie beside this module (plans/NAME.toml). Everything in a plan is
checked before the first step runs, each mistake in one line that names the plan, the step and the
key, so a typo in a fleet's plan fails in CI at once rather than after an hour of measuring."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import CommbenchError, UnknownCommand, UnknownOption
from ..node.gpu import DEFAULT_TIMEOUT_S as DEFAULT_SIZE_TIMEOUT_S
from .kinds import OWNED_LIMITS, kind_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PLANS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plans")

SCOPES = ("node", "cluster")
DEFAULT_TIMEOUT_S = 600.0

# What a step may be judged by (a step's [limits] table, or the plan's for every step).
LIMITS = {
    "tolerance_bw_pct": "the largest drop of bandwidth against the baseline, in percent",
    "tolerance_lat_pct": "the largest rise of latency against the baseline, in percent",
    "warn_bw_pct": "a drop of bandwidth against the baseline, in percent, beyond which a step WARNs (up to tolerance_bw_pct)",
    "warn_lat_pct": "a rise of latency against the baseline, in percent, beyond which a step WARNs (up to tolerance_lat_pct)",
    "fabric": "a catalog fabric whose expected bandwidth the fit is judged against",
    "pass_pct": "the share of the fabric's bandwidth that passes",
    "fail_pct": "the share of the fabric's bandwidth under which the step fails",
    "min_busbw_gbps": "the least bus bandwidth (GB/s) at the largest size of each series",
    "max_time_us": "the longest time (us) at the smallest size of each series",
    "min_efficiency_pct": "the least scaling efficiency (scale) at the largest rank count measured, in percent",
}
DEFAULT_LIMITS = {"tolerance_bw_pct": 10.0, "tolerance_lat_pct": 25.0, "pass_pct": 80.0, "fail_pct": 60.0}
STEP_KEYS = {"name", "command", "options", "quick", "limits", "timeout_s", "counted", "when", "env", "each", "except"}
# A step with each = "collective" stands for one step per collective of the registry (but those in its
# `except` list), "{collective}" in its name and command naming each: a new collective joins the plan.
EACH = "collective"
EACH_FIELD = "{collective}"
PLAN_KEYS = {"description", "scope", "requires_gpu", "defaults", "quick", "limits", "step"}
WHEN_KEYS = {"min_gpus", "max_gpus"}
# An option value that names the node's GPU count: "gpus", or "min(gpus,N)" for at most N of them.
_GPUS = re.compile(r"^(?:gpus|min\(gpus,\s*(\d+)\))$")


@dataclass(frozen=True)
class Step:
    name: str
    command: str
    options: dict
    quick: dict
    limits: dict
    timeout_s: float
    counted: bool
    when: dict
    env: dict

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def measuring(self) -> bool:
        return kind_of(self.command).measuring

    def applies(self, gpus: int) -> bool:
        return gpus >= self.when.get("min_gpus", 0) and gpus <= self.when.get("max_gpus", gpus)

    def size_timeout_s(self, quick: bool = False) -> float:
        """The step's --timeout: what one size, and its ranks' start-up, may take."""
        return float({**self.options, **(self.quick if quick else {})}.get("timeout", DEFAULT_SIZE_TIMEOUT_S))

    def arguments(self, gpus: int, quick: bool = False) -> list[str]:
        """The step's command line after `commbench`, without the output file."""
        options = {**self.options, **(self.quick if quick else {})}
        argv = [self.command, *kind_of(self.command).argv]
        for key, value in options.items():
            flag = f"--{key.replace('_', '-')}"
            if value is True:
                argv.append(flag)
            elif value is not False:
                argv += [flag, str(_resolve(value, gpus))]
        return argv


@dataclass(frozen=True)
class Plan:
    name: str
    source: str
    description: str
    scope: str
    requires_gpu: bool
    steps: list = field(default_factory=list)

    def steps_for(self, gpus: int) -> list[Step]:
        return [s for s in self.steps if s.applies(gpus)]

    def check_values(self, check_step: Callable[[list], object], gpus: int, quick: bool) -> list:
        """The measuring steps this node runs, their values checked as their commands check them
        (`check_step(argv)` raises CommbenchError, or returns the command's Checked or None), before the
        first step runs: a size that does not parse, a rank count the node cannot hold or a step
        estimated past half its limit (accept/sizing.py) is a mistake of the plan, not of the node.
        Returns [(step, its Checked)]."""
        from .sizing import too_long
        checked = []
        for i, step in enumerate(self.steps, 1):
            if step.measuring and step.applies(gpus):
                try:
                    got = check_step(step.arguments(gpus, quick))
                    why = too_long(got, step.timeout_s) if got is not None else ""
                    if why:
                        raise CommbenchError(why)
                except CommbenchError as e:
                    raise CommbenchError(f"plan {self.source}: step {i} ({step.name}){' (quick)' if quick else ''}: "
                                         f"{e}") from None
                checked.append((step, got))
        return checked


# The run's own files in a node's folder (summary.json, .md, .html) beside the steps' <slug>.json and
# .log; a step's files keep room for their extension and a temporary name's within NAME_MAX.
RESERVED_SLUGS = ("summary",)
MAX_STEP_SLUG = 200


def slug(name: str) -> str:
    """A step's name as a file name: 'allreduce nccl/ring' -> 'allreduce_nccl_ring'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def builtin() -> list[str]:
    return sorted(f[:-len(".toml")] for f in os.listdir(PLANS_DIR) if f.endswith(".toml"))


def _resolve(value, gpus: int):
    if isinstance(value, str):
        m = _GPUS.match(value)
        if m:
            return min(gpus, int(m.group(1))) if m.group(1) else gpus
    return value


# The largest plan file read: the built-in plans are a few KiB.
MAX_PLAN_BYTES = 1 << 20


def load(name_or_path: str, check_argv: Optional[Callable[[list], None]] = None) -> Plan:
    """The plan of that built-in name or TOML file. `check_argv(argv)` raises CommbenchError where a
    step's command line would not parse (the commands' own options and types decide)."""
    if os.sep in name_or_path or name_or_path.endswith(".toml"):
        path, name = name_or_path, os.path.splitext(os.path.basename(name_or_path))[0]
    else:
        path, name = os.path.join(PLANS_DIR, f"{name_or_path}.toml"), name_or_path
        if not os.path.isfile(path):
            raise CommbenchError(f"no built-in plan '{name_or_path}': choose from {', '.join(builtin())}, "
                                 f"or give a plan file (NAME.toml)")
    from ..results.document import read_bounded
    try:
        # A FIFO reads as empty without waiting for a writer; a file far larger than any plan is
        # refused unread, a device (/dev/zero) once it passes that size.
        data = tomllib.loads(read_bounded(path, "plan", MAX_PLAN_BYTES).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CommbenchError(f"plan {path}: not TOML: {e}") from None
    if not data:
        raise CommbenchError(f"plan {path} is empty")
    return parse(data, name, path, check_argv)


def _expanded(raw_steps: list, bad) -> list:
    """The plan's steps with each step of `each = "collective"` made one per collective (EACH)."""
    from .. import collectives
    out = []
    for i, raw in enumerate(raw_steps, 1):
        if not isinstance(raw, dict) or "each" not in raw and "except" not in raw:
            out.append(raw)
            continue
        where = f"step {i} ({raw.get('name', 'unnamed')})"
        if raw.get("each") != EACH:
            raise bad(f"{where}: each = \"{EACH}\" is the one kind of step that repeats (except needs it)")
        skipped = raw.get("except", [])
        if not isinstance(skipped, list) or not all(isinstance(n, str) for n in skipped):
            raise bad(f"{where}: except is a list of collectives")
        unknown = sorted(set(skipped) - set(collectives.names()))
        if unknown:
            raise bad(f"{where}: except names '{unknown[0]}', no collective: choose from {', '.join(collectives.names())}")
        if not all(EACH_FIELD in str(raw.get(k, "")) for k in ("name", "command")):
            raise bad(f"{where}: each step's name and command say {EACH_FIELD}, which each collective replaces")
        rest = {k: v for k, v in raw.items() if k not in ("each", "except")}
        out += [{**rest, "name": raw["name"].replace(EACH_FIELD, c), "command": raw["command"].replace(EACH_FIELD, c)}
                for c in collectives.names() if c not in skipped]
    return out


def parse(data: dict, name: str, source: str, check_argv: Optional[Callable[[list], None]] = None) -> Plan:
    def bad(what: str):
        return CommbenchError(f"plan {source}: {what}")
    _keys(data, PLAN_KEYS, "", bad)
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise bad("needs a description (one line: what the plan accepts)")
    scope = data.get("scope", "node")
    if scope not in SCOPES:
        raise bad(f"scope '{scope}': choose from {', '.join(SCOPES)}")
    requires_gpu = data.get("requires_gpu", False)
    if not isinstance(requires_gpu, bool):
        raise bad("requires_gpu must be true or false")
    defaults = _table(data, "defaults", bad, "")
    quick_defaults = _table(data, "quick", bad, "")
    plan_limits = _limits(_table(data, "limits", bad, ""), bad, "")
    raw_steps = data.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise bad("has no [[step]]")
    raw_steps = _expanded(raw_steps, bad)
    steps, seen = [], set()
    # Per plan-wide table, the options some command has, and those some step takes (sets no value of
    # its own): one that none takes is a typo or a value never checked, refused as the plan's mistake.
    had: dict[str, set] = {"defaults": set(), "quick": set()}
    taken: dict[str, set] = {"defaults": set(), "quick": set()}
    for i, raw in enumerate(raw_steps, 1):
        if not isinstance(raw, dict):
            raise bad(f"step {i} is not a table")
        where = f"step {i} ({raw.get('name', 'unnamed')})"
        _keys(raw, STEP_KEYS, f"{where}: ", bad)
        step_name, command = raw.get("name"), raw.get("command")
        if not isinstance(step_name, str) or not slug(step_name):
            raise bad(f"step {i} needs a name")
        if slug(step_name).lower() in seen:  # two files that differ in case alone are one on some file systems
            raise bad(f"two steps are named '{step_name}' (their files would collide)")
        if slug(step_name).lower() in RESERVED_SLUGS:
            raise bad(f"{where}: the name '{step_name}' is the run's own (its {slug(step_name)}.* files): choose another")
        if len(slug(step_name)) > MAX_STEP_SLUG:
            raise bad(f"{where}: a name of at most {MAX_STEP_SLUG} characters (it names the step's files)")
        seen.add(slug(step_name).lower())
        if not isinstance(command, str) or not command:
            raise bad(f"{where}: needs a command")
        options = _table(raw, "options", bad, f"{where}: ")
        quick = _table(raw, "quick", bad, f"{where}: ")
        if kind_of(command).measuring:
            # The plan's defaults and quick defaults, for the options this command has (check_argv tells).
            accepted = {t: _accepted(command, table, check_argv, bad, t, where) for t, table in (("defaults", defaults),
                                                                                                 ("quick", quick_defaults))}
            for t, own in (("defaults", options), ("quick", quick)):
                had[t].update(accepted[t])
                taken[t].update(set(accepted[t]) - set(own))
            options = _spelled(command, {**accepted["defaults"], **options}, check_argv, bad, where)
            quick = _spelled(command, {**accepted["quick"], **quick}, check_argv, bad, where)
        timeout = raw.get("timeout_s", DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
            raise bad(f"{where}: timeout_s must be a number of seconds in (0, 86400]")
        counted = raw.get("counted", True)
        if not isinstance(counted, bool):
            raise bad(f"{where}: counted must be true or false")
        when = _table(raw, "when", bad, f"{where}: ")
        _keys(when, WHEN_KEYS, f"{where}: when.", bad)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in when.values()):
            raise bad(f"{where}: when.min_gpus and when.max_gpus are counts of GPUs")
        env = _table(raw, "env", bad, f"{where}: ")
        if any(not isinstance(v, str) for v in env.values()):
            raise bad(f"{where}: env values are strings")
        own = _limits(_table(raw, "limits", bad, f"{where}: "), bad, where)
        given = {**plan_limits, **own}  # what the plan sets, against what it leaves to the defaults
        limits = {**DEFAULT_LIMITS, **given}
        if limits["fail_pct"] > limits["pass_pct"]:
            unset = [k for k in ("fail_pct", "pass_pct") if k not in given]
            raise bad(f"{where}: limits.fail_pct {limits['fail_pct']:g} exceeds limits.pass_pct {limits['pass_pct']:g}"
                      + (f" ({unset[0]} the default)" if unset else ""))
        for limit in sorted(set(own) & set(OWNED_LIMITS) - set(kind_of(command).limits)):
            raise bad(f"{where}: limits.{limit} judges {OWNED_LIMITS[limit]} steps only, not {command}")
        for kind in ("bw", "lat"):
            if limits.get(f"warn_{kind}_pct", 0) > limits[f"tolerance_{kind}_pct"]:
                raise bad(f"{where}: limits.warn_{kind}_pct {limits[f'warn_{kind}_pct']:g} exceeds limits.tolerance_{kind}_pct "
                          f"{limits[f'tolerance_{kind}_pct']:g} (a WARN comes before a FAIL)")
        if kind_of(command).measuring:
            try:
                options = _measured_fabric(command, options, limits.get("fabric"), check_argv)
            except CommbenchError as e:
                raise bad(f"{where}: {e}") from None
        step = Step(step_name, command, options, quick, limits, float(timeout), counted, when, env)
        if check_argv is not None:
            for quick in (False, True):
                try:
                    check_argv(step.arguments(8, quick))
                except CommbenchError as e:
                    raise bad(f"{where}{' (quick)' if quick else ''}: {e}") from None
        steps.append(step)
    for t, table in (("defaults", defaults), ("quick", quick_defaults)):
        for key in table if check_argv is not None else ():
            if key not in had[t]:
                raise bad(f"[{t}] {key}: no step's command has --{key.replace('_', '-')}")
            if key not in taken[t]:
                raise bad(f"[{t}] {key}: every step whose command has it sets its own; remove it")
    return Plan(name, source, description.strip(), scope, requires_gpu, steps)


def _measured_fabric(command: str, options: dict, fabric: Optional[str], check_argv) -> dict:
    """The step's options with --fabric where its judge needs the run's own figure: a fabric measured
    on the spot (shm, tcp-loopback) is measured by the run that is judged against it, on its node,
    and kept in its result file; judged without it, every such step would fail for want of a figure."""
    from ..analysis.fabrics import measured_here
    if not fabric or not measured_here(fabric):
        return options
    if not _accepts(command, "fabric", fabric, check_argv):
        raise CommbenchError(f"limits.fabric '{fabric}' is measured on the spot by the step's own run, and {command} has no "
                  f"--fabric: judge it by a catalog fabric or by absolute limits")
    if options.get("fabric", fabric) != fabric:
        raise CommbenchError(f"limits.fabric '{fabric}' is measured on the spot by the step's own run, which options.fabric "
                  f"'{options['fabric']}' would measure instead: give one fabric")
    return {**options, "fabric": fabric}


def _accepted(command: str, table: dict, check_argv, bad, name: str, where: str) -> dict:
    """The options of a plan-wide table that `command` has; a value the command refuses is the
    plan's mistake, not an option to leave out. A command no step can run is the step's (`where`)."""
    try:
        return {k: v for k, v in table.items() if _accepts(command, k, v, check_argv)}
    except UnknownCommand as e:
        raise bad(f"{where}: {e}") from None
    except CommbenchError as e:
        raise bad(f"[{name}] ({command}): {e}") from None


def _spelled(command: str, options: dict, check_argv, bad, where: str) -> dict:
    """The options with each `key = false` as the command spells it: `--no-KEY` where the command has
    it (`intra = false` was left out, so --intra, the default, ran), left out where KEY is a plain flag
    (off unless given); a false that no flag of the command takes is the plan's mistake."""
    if check_argv is None:
        return options
    out = {}
    for key, value in options.items():
        if value is not False:
            out[key] = value
        elif _accepts(command, f"no_{key}", True, check_argv):
            out[f"no_{key}"] = True
        elif not _accepts(command, key, True, check_argv):
            raise bad(f"{where}: {key} = false: {command} has neither --{key.replace('_', '-')} nor "
                      f"--no-{key.replace('_', '-')}")
    return out


def _accepts(command: str, key: str, value, check_argv) -> bool:
    """Whether `command` has the option (UnknownOption: it does not); a value it refuses raises."""
    if check_argv is None:
        return True
    try:
        check_argv([command, f"--{key.replace('_', '-')}", *([] if value is True else [str(_resolve(value, 8))])])
        return True
    except UnknownOption:
        return False


def _keys(table: dict, allowed: set, where: str, bad) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise bad(f"{where}unknown key '{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")


def _table(data: dict, key: str, bad, where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise bad(f"{where}{key} must be a table")
    for k, v in value.items():
        if not isinstance(v, (str, int, float, bool)):
            raise bad(f"{where}{key}.{k}: a string, number or boolean")
    return value


def _limits(table: dict, bad, where: str) -> dict:
    prefix = f"{where}: " if where else ""
    _keys(table, set(LIMITS), f"{prefix}limits.", bad)
    for k, v in table.items():
        if k == "fabric":
            if not isinstance(v, str):
                raise bad(f"{prefix}limits.fabric: a fabric's name")
            from ..analysis.fabrics import catalog
            if v not in catalog():
                raise bad(f"{prefix}limits.fabric: unknown fabric '{v}' (see 'commbench fabrics')")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise bad(f"{prefix}limits.{k}: a finite number >= 0 ({LIMITS[k]})")
    return table
