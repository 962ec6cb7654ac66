"""An accept run: the plan's steps one after another into a folder of the node's own, each judged as
it ends (judge.py) against the baseline picked for it (baselines.py), then the summaries
(outputs.py). A step that fails, stops or hangs past its limit is judged so, and the next runs."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import socket
import time
from typing import Callable, Optional

from ..analysis import envelopes
from ..analysis.sku import sku_of
from ..errors import CommbenchError
from ..launch.startup import deadline_s
from ..launch.world import COMMBENCH_PROGRAM, launcher_free_env
from ..redact import scrub_all
from ..results.atomic import check_folder
from ..results.document import load_document
from . import runner
from .baselines import Baselines
from .judge import ERROR, FAIL, PASS, TIMEOUT, WARN, check, result_checks, worst
from .kinds import kind_of
from .plan import Plan, Step

# The least room a run's folder must have: its steps' result files and logs, the summaries, JUnit.
MIN_FREE_BYTES = 16 << 20


def run_folder(base: str, host: str) -> str:
    """base/<host>, made here: two runs never share a folder, and a folder never takes a second run.
    A file system with less than MIN_FREE_BYTES free is refused first: every step would fail to
    write, and the summaries after them."""
    folder = os.path.join(base, host)
    check_folder(base, base, MIN_FREE_BYTES)
    os.makedirs(base, exist_ok=True)
    try:
        os.mkdir(folder)
    except FileExistsError:
        raise CommbenchError(f"{folder} already exists: each accept run takes a new folder; choose another -o") from None
    return folder


def _step_files(step: Step, folder: str) -> tuple[Optional[str], Optional[str]]:
    """(result file given with -o, file of its stdout) of a step."""
    target = os.path.join(folder, f"{step.slug}.json")
    if step.measuring:
        return target, None
    return None, target if kind_of(step.command).keeps_stdout else None


def _read_json(path: Optional[str]) -> Optional[dict]:
    try:
        with open(path) as f:  # type: ignore[arg-type]
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, TypeError, ValueError):
        return None


def run_step(step: Step, folder: str, gpus: int, quick: bool, launch: list, baselines: Baselines, env: dict,
             plan: Optional[str] = None) -> dict:
    result, stdout = _step_files(step, folder)
    argv = [*(launch if step.measuring else []), *COMMBENCH_PROGRAM, *step.arguments(gpus, quick),
            *(["-o", result] if result else [])]
    ran = runner.run(argv, os.path.join(folder, f"{step.slug}.log"), step.timeout_s, {**env, **step.env}, stdout,
                     starts_within_s=deadline_s(step.size_timeout_s(quick)) + runner.LAUNCH_S if launch and step.measuring else None)
    checks = []
    if ran.unwritable:
        checks.append(check("not run", ERROR, ran.unwritable))
    elif ran.interrupted:
        checks.append(check("interrupted", ERROR, f"stopped by an interrupt after {ran.seconds:g} s"))
    elif ran.stopped:
        checks.append(check("stopped", TIMEOUT, f"stopped after {ran.seconds:g} s: {ran.stopped}: "
                                                f"{runner.last_line(ran.log) or 'see the log'}"))
    elif ran.rc is None:
        checks.append(check("time limit", TIMEOUT, f"stopped after {step.timeout_s:g} s (timeout_s)"))
    doc, picked, note = None, None, "no baseline: this step writes no result file"
    if result is not None and os.path.exists(result):
        try:
            doc = load_document(result)
        except CommbenchError as e:
            checks.append(check("result file", ERROR, str(e)))
    judged = doc is not None
    if doc is not None:
        picked, note = baselines.pick(doc, quick, step.name, plan)
        checks += result_checks(doc, step.limits, picked, runner.last_line(ran.log))
        unmatched = baselines.unmatched(doc, quick, step.name) if picked is None else None
        if unmatched:  # a fleet's baseline of this step that no longer matches its node: worth a look
            checks.append(check("baseline", WARN, unmatched))
    elif kind_of(step.command).judge is not None:
        verdict = _read_json(stdout)
        judged = verdict is not None
        checks += kind_of(step.command).judge(verdict)
    # Exit 1 with a file to judge is the command's own verdict (wrong elements, a slow link, a node
    # doctor fails, a run that did not finish), judged above, where the file gives that reason; a file
    # judged good beside exit 1 is a command that failed after it measured (a rank stopped as the ranks
    # ended, said on its last line), and like any other exit a step that could not show the node good.
    own_verdict = judged and ran.rc == 1 and any(c["status"] == FAIL for c in checks)
    if ran.rc not in (0, None) and not own_verdict:
        checks.append(check("exit status", ERROR, f"exit {ran.rc}: {runner.last_line(ran.log) or 'see the log'}"))
    if not checks:
        checks.append(check("ran", PASS, "exit 0"))
    return {"step": step.name, "command": step.command, "command_line": shlex.join(argv), "counted": step.counted,
            "status": worst(checks), "seconds": ran.seconds, "timeout_s": step.timeout_s,
            "log": os.path.basename(ran.log), "result": os.path.basename(result) if doc is not None else None,
            "baseline": picked[0] if picked else None, "baseline_note": note, "checks": checks,
            "sku": sku_of(doc) if doc is not None else None, "interrupted": ran.interrupted,
            # Shown, not judged: the plan's limits decide.
            "envelopes": [line.strip() for line in envelopes.lines(doc)] if doc is not None else []}


def overall(steps: list[dict]) -> str:
    """PASS, WARN or FAIL of the run: the worst of its counted steps (an ERROR or TIMEOUT fails it)."""
    status = worst([{"status": s["status"]} for s in steps if s["counted"]])
    return FAIL if status in (ERROR, TIMEOUT) else status


def accept(plan: Plan, folder: str, baselines: Baselines, quick: bool = False, launch: Optional[list] = None,
           gpus: int = 0, say: Callable[[str], None] = print) -> dict:
    """Runs the plan's steps (those for `gpus` GPUs) into folder; returns the summary. `launch`: the
    command that starts a cluster step's ranks across the nodes (srun, mpirun --hostfile ...)."""
    env = launcher_free_env(dict(os.environ))
    host = socket.gethostname()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    todo = plan.steps_for(gpus)
    done: list[dict] = []
    interrupted = False
    try:
        for step in todo:
            r = run_step(step, folder, gpus, quick, launch or [], baselines, env, plan.name)
            done.append(r)
            why = next((c["evidence"] for c in r["checks"] if c["status"] == r["status"]), "")
            say(f"{r['status'] if r['counted'] else r['status'].lower() + ' (not counted)':<22} {step.name}  "
                f"({r['seconds']:.1f} s)  {why}")
            if r["interrupted"]:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    sku = next((s["sku"] for s in done if s["sku"]), None) or "unknown (no step left a result file)"
    summary = {"plan": plan.name, "plan_source": plan.source, "description": plan.description, "scope": plan.scope,
               "host": host, "sku": sku, "gpus": gpus, "quick": quick, "started": started,
               "seconds": round(time.monotonic() - t0, 1), "folder": folder, "baselines": baselines.directory,
               "status": FAIL if interrupted else overall(done), "interrupted": interrupted,
               "not_run": [s.name for s in todo[len(done):]], "steps": done}
    if baselines.skipped:
        summary["baselines_skipped"] = baselines.skipped
    # Every output of the run is made from the summary (JSON, Markdown, HTML, JUnit, the headline): the
    # paths, command lines and evidence it quotes scrubbed once here.
    return scrub_all(summary)


