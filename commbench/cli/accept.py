"""`commbench accept`: a plan's steps run and judged on this node (or, for a cluster plan, across the
nodes of an allocation); `commbench baseline promote`: an accepted run kept as its SKU's baselines."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import sys

import click

from ..accept.kinds import KINDS, kind_of
from ..errors import CommbenchError, NodeError, UnknownCommand, UnknownOption
from ..launch.world import on_hang_up
from .analyze import baseline
from .group import MEASURING, cli, module_of

# Files accept names itself: a plan's options may not.
OWN_OPTIONS = ("output", "o", "json")


def check_argv(argv: list) -> None:
    """Parses a step's command line as the command would, without running it: a plan's unknown
    option, wrong type or value out of range is refused before the first step."""
    ctx = click.Context(cli, info_name="commbench")
    command = cli.get_command(ctx, argv[0])
    if command is None or not (argv[0] in KINDS or module_of(argv[0]) in MEASURING):
        others = ", ".join(name for name, k in KINDS.items() if not k.measuring)
        raise UnknownCommand(f"'{argv[0]}' is no command a step can run (a measuring command, {others})")
    owned = [a for a in argv[1:] if a.lstrip("-") in OWN_OPTIONS and a.startswith("-")]
    if owned and not kind_of(argv[0]).keeps_stdout:
        raise CommbenchError(f"{owned[0]}: accept names each step's files itself")
    try:
        command.make_context(argv[0], list(argv[1:]), parent=ctx)
    except click.NoSuchOption as e:
        raise UnknownOption(e.format_message()) from None
    except click.ClickException as e:
        raise CommbenchError(e.format_message()) from None


def _off_a_closed_terminal() -> None:
    """After a hang-up, what would go to the terminal goes nowhere: writing to a closed one fails, and
    the summary and JUnit must still be written. Pipes and files stay as they are."""
    from ..launch.relay import to_nowhere
    for fd in (1, 2):
        if os.isatty(fd):
            to_nowhere(fd)


def checked_step(argv: list):
    """check_step for a node plan's Plan.check_values: a step's command line run under check_only
    (every value checked by its command), and no more ranks on host memory than the node has cores
    (a plan judges the node's figures; such ranks sharing a core measure the scheduler; a GPU's rank
    mostly waits on its GPU)."""
    from ..node.machine import cores
    c = _checked(argv)
    if c.device == "cpu" and c.ranks > cores():
        raise CommbenchError(f"{c.ranks} ranks on this node's {cores()} cores: a node plan takes a core a rank "
                             f"(lower np)")
    return c


def checked_cluster_step(argv: list) -> None:
    """check_step for a cluster plan: the values a step's command checks, on whichever node accept
    runs; what depends on the nodes the launcher gives the step (their GPUs, their hosts: NodeError)
    is left to the run, and so are the ranks and the time, which the allocation decides."""
    with contextlib.suppress(NodeError):
        _checked(argv)


def _checked(argv: list):
    """The Checked a step's command raises under check_only (a CommbenchError where it refuses)."""
    from .common import Checked, check_only
    check_argv(argv)
    ctx = click.Context(cli, info_name="commbench")
    command = cli.get_command(ctx, argv[0])
    try:
        with check_only(), command.make_context(argv[0], list(argv[1:]), parent=ctx) as sub:
            command.invoke(sub)
    except Checked as c:
        return c
    except click.ClickException as e:
        raise CommbenchError(e.format_message()) from None
    raise AssertionError(f"{argv[0]} ran to its end under check_only")


def _outside_the_run(junit_path: str, folder: str) -> None:
    """--junit may not name a file of the run's own folder, which takes the steps' files and the
    summaries (summary.json would become XML, or a step's result file would be taken)."""
    junit, own = os.path.realpath(junit_path), os.path.realpath(folder)
    if os.path.commonpath([junit, own]) == own:
        raise CommbenchError(f"--junit {junit_path} is in the run's folder {folder}, which takes the steps' files and "
                             f"the summaries: name a file outside it")


def _launch(scope: str, launch_text) -> list:
    if launch_text is not None and not launch_text.strip():
        raise CommbenchError("--launch '': give the command that starts the ranks, e.g. 'mpirun --hostfile hosts'")
    if scope == "node":
        if launch_text:
            raise CommbenchError("--launch is for cluster plans: a node plan starts its own ranks on this node")
        return []
    if launch_text:
        try:
            launch = shlex.split(launch_text)
        except ValueError as e:
            raise CommbenchError(f"--launch {launch_text!r}: {e} (it is split as a shell splits words)") from None
        if shutil.which(launch[0]) is None:
            raise CommbenchError(f"--launch {launch_text!r}: no program {launch[0]!r} on PATH")
        return launch
    if os.environ.get("SLURM_JOB_ID") and not os.environ.get("SLURM_STEP_ID"):
        # This environment's mpirun takes the allocation's nodes and tasks from Slurm (and starts its
        # daemons with srun); srun alone starts ranks only for an MPI built for Slurm's PMI.
        from ..launch.world import bundled_mpirun
        return [bundled_mpirun()]
    raise CommbenchError("a cluster plan runs its steps across the nodes of an allocation: run it inside one "
                         "(salloc, sbatch), or give --launch 'mpirun --hostfile FILE'")


def _print_estimates(plan, checked: list, gpus: int, quick: bool) -> None:
    from ..accept.sizing import estimate_s
    click.echo(f"# accept {plan.name}{' --quick' if quick else ''}: {len(checked)} measuring step(s) checked on "
               f"{gpus} GPU(s); each estimated against its limit (accept/sizing.py)")
    click.echo(f"#  {'step':<32} {'ranks':>5} {'measurements':>12} {'estimate_s':>10} {'limit_s':>8}  command")
    for step, c in checked:
        click.echo(f"   {step.name:<32} {c.ranks:>5} {c.measurements:>12,} {estimate_s(c):>10.0f} "
                   f"{step.timeout_s:>8g}  commbench {shlex.join(step.arguments(gpus, quick))}")


@cli.command()
@click.option("--plan", "plan_name", default=None, metavar="NAME|FILE",
              help="A built-in plan (cpu-node, gpu-node, gpu-cluster...) or a plan file (.toml); default gpu-node "
                   "where a GPU is visible, else cpu-node.")
@click.option("--baselines", "baselines_dir", type=click.Path(file_okay=False), default=None,
              help="Folder of per-SKU baselines (baseline promote): each step is judged against the one of its kind.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML here too.")
@click.option("--output", "-o", "base", default="accept", show_default=True, type=click.Path(file_okay=False),
              help="Folder of the run folders: this run writes into OUTPUT/<host name>, which must not exist.")
@click.option("--quick", is_flag=True, help="Each step with its plan's quick options (small sizes): proves the steps run.")
@click.option("--launch", "launch_text", default=None, metavar="COMMAND",
              help="A cluster plan's launcher for every measuring step, e.g. 'mpirun --hostfile hosts' (default "
                   "inside a Slurm allocation: this environment's mpirun, which takes the allocation's tasks; "
                   "'srun --mpi=pmix' for an MPI built for Slurm).")
@click.option("--print-plan", is_flag=True, help="Print the plan's TOML (to start a plan file of your own from) and exit.")
@click.option("--dry-run", is_flag=True,
              help="A node plan: check every step this node would run, print each with its measurements and its "
                   "estimated time against its limit, and exit.")
def accept(plan_name, baselines_dir, junit_path, base, quick, launch_text, print_plan, dry_run) -> None:
    """Run a plan's steps on this node, judge each (PASS, WARN, FAIL with its evidence) against the
    baseline of the node's SKU, its fabric and its limits, and write summary.json, summary.md,
    summary.html (and --junit) beside the steps' files. Exit 0 pass, 1 a counted step failed, 2 an
    unusable plan or input."""
    from ..accept import outputs
    from ..accept.baselines import Baselines
    from ..accept.plan import load
    from ..accept.steps import accept as run_plan
    from ..accept.steps import run_folder
    from ..node.gpu import visible_gpus
    from ..results.atomic import check_new_file

    gpus, why = visible_gpus()
    if plan_name is not None and not plan_name.strip():
        raise CommbenchError("--plan '': give a built-in plan's name or a plan file (NAME.toml)")
    if junit_path is not None and not junit_path.strip():
        raise CommbenchError("--junit '': give the JUnit file's name, e.g. accept.xml")
    if not base.strip():
        raise CommbenchError("--output '': give the folder the run's folder goes in, e.g. accept")
    plan = load(plan_name or ("gpu-node" if gpus else "cpu-node"), check_argv)
    if print_plan:
        with open(plan.source) as f:
            click.echo(f.read(), nl=False)
        return
    if plan.requires_gpu and plan.scope == "node" and not gpus:
        raise CommbenchError(f"plan {plan.name} measures GPUs and none is visible: {why}")
    if dry_run and plan.scope != "node":
        raise CommbenchError(f"--dry-run checks a node plan's steps on this node; {plan.name} runs across an "
                             f"allocation, whose hosts its steps' checks depend on")
    launch = _launch(plan.scope, launch_text)
    if plan.scope == "node":
        checked = plan.check_values(checked_step, gpus, quick)
        if dry_run:
            _print_estimates(plan, checked, gpus, quick)
            return
    else:
        plan.check_values(checked_cluster_step, gpus, quick)
    if junit_path:
        check_new_file(junit_path, f"{junit_path} already exists; choose another --junit")
        _outside_the_run(junit_path, os.path.join(base, socket.gethostname()))
    baselines = Baselines(baselines_dir)
    for why in baselines.skipped:  # the regression check is off for what that file held: say so
        click.echo(f"warning: --baselines: skipped {why}", err=True)
    folder = run_folder(base, socket.gethostname())
    if junit_path:
        try:
            outputs.reserve_junit(junit_path)
        except CommbenchError:
            os.rmdir(folder)  # nothing ran: the folder is no run's
            raise
    click.echo(f"# accept {plan.name}: {plan.description}")
    click.echo(f"# {len(plan.steps_for(gpus))} step(s) into {folder}" + (f", each launched by {shlex.join(launch)}"
                                                                          if launch else ""))
    stopped_by: list[int] = []

    def stop(signum, _frame):
        # SIGTERM (a CI job's time limit, a scheduler's end of the job) and SIGHUP (the terminal or the
        # ssh session closed) end the plan as Ctrl-C does: the step in progress stopped and judged on
        # what it saved, the summary and JUnit written.
        stopped_by.append(signum)
        if signum == signal.SIGHUP:
            _off_a_closed_terminal()
        raise KeyboardInterrupt
    ending = (signal.SIGTERM, signal.SIGHUP)
    signal.signal(signal.SIGTERM, stop)
    on_hang_up(stop)
    try:
        try:
            summary = run_plan(plan, folder, baselines, quick, launch, gpus, say=lambda line: click.echo(line))
        finally:
            for s in ending:
                signal.signal(s, signal.SIG_IGN)  # the summary is written whole, whatever comes next
        click.echo(f"# {outputs.headline(summary)}")
        try:
            outputs.write_all(summary, folder, junit_path)
        except CommbenchError:
            # A disk that filled during the run: the verdicts are shown where they can still go, then
            # the one error line and exit 2.
            click.echo(outputs.markdown(summary), nl=False)
            raise
    finally:
        if junit_path:
            outputs.release_junit(junit_path)
    click.echo(f"# summary: {os.path.join(folder, 'summary.md')}" + (f", JUnit: {junit_path}" if junit_path else ""))
    if summary["interrupted"]:
        signum = stopped_by[0] if stopped_by else signal.SIGINT
        click.echo(f"commbench: error: interrupted ({signal.Signals(signum).name}); the steps run so far are judged "
                   f"in the summary", err=True)
        sys.exit(128 + signum)
    sys.exit(1 if summary["status"] == "FAIL" else 0)


@baseline.command("promote")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--baselines", "directory", default=None, help="Folder of per-SKU baselines (default results/baselines).")
@click.option("--force", is_flag=True, help="Promote a run that did not pass acceptance.")
@click.option("--partial", is_flag=True,
              help="Of an interrupted run (Ctrl-C, SIGTERM, a job's time limit): promote the steps that passed "
                   "before it stopped, marked partial in their baseline section.")
def baseline_promote(run_dir, directory, force, partial) -> None:
    """Keep the accept run in RUN_DIR (a known-good node's) as its SKU's baselines: one file per step
    in BASELINES/<SKU>/, none replaced."""
    from ..accept.baselines import promote
    from ..analysis.baseline import DEFAULT_DIR
    for path in promote(run_dir, directory or DEFAULT_DIR, force, partial):
        click.echo(f"saved {path}")
