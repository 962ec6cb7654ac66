"""`commbench accept`: plans checked before any step, the built-in cpu-node plan run as a user types
it, promoted into per-SKU baselines and judged against them (PASS on this machine, FAIL naming the
step and its evidence with a rank held back), JUnit that validates against the format's schema."""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest
import xmlschema
from conftest import COMMBENCH, MPIRUN, commbench, in_process, load_stretch, mpi_env, rank_faults_env, wait_for_rows

from commbench.accept import plan as plans
from commbench.accept.baselines import Baselines, sku_folder
from commbench.accept.judge import FAIL, PASS, WARN
from commbench.cli.accept import check_argv
from commbench.errors import CommbenchError
from commbench.node.gpu import visible_gpus
from commbench.node.machine import cores
from commbench.results import importers

HERE = os.path.dirname(os.path.abspath(__file__))
JUNIT_XSD = xmlschema.XMLSchema(os.path.join(HERE, "data", "junit", "junit.xsd"))
# The schema Jenkins publishes, as `make test` fetches it (tools/junit_schema.py).
PUBLISHED_XSD = os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "share", "junit-10.xsd")


def validate_junit(path) -> None:
    """The file against commbench's own schema (strict on counts and outcomes) and Jenkins' published one."""
    JUNIT_XSD.validate(str(path))
    if os.path.exists(PUBLISHED_XSD):
        xmlschema.XMLSchema(PUBLISHED_XSD).validate(str(path))


def test_the_published_junit_schema_is_at_hand():
    if not os.path.exists(PUBLISHED_XSD):
        pytest.skip(f"{PUBLISHED_XSD} is missing (make test fetches it): JUnit files checked against commbench's schema alone")
    assert xmlschema.XMLSchema(PUBLISHED_XSD).elements["testsuites"] is not None
CPU_NODE = os.path.join(plans.PLANS_DIR, "cpu-node.toml")
HOST = socket.gethostname()


@pytest.mark.parametrize("name", plans.builtin())
def test_every_built_in_plan_parses_with_its_commands_options(name):
    plan = plans.load(name, check_argv)
    assert plan.steps and plan.description
    for step in plan.steps:
        for quick in (False, True):
            check_argv(step.arguments(8, quick))


def test_a_plan_s_defaults_reach_only_the_commands_that_have_the_option():
    plan = plans.load("cpu-node", check_argv)
    doctor, allreduce = plan.steps[0], plan.steps[2]
    assert doctor.arguments(0) == ["doctor", "--json"]
    assert allreduce.arguments(0)[:3] == ["allreduce", "--np", "2"]
    assert allreduce.arguments(0, quick=True)[-4:] == ["--sizes", "1K-1M:x4", "--budget-ms", "20"]


def test_a_plan_s_quick_table_reaches_the_commands_that_have_the_option_under_a_step_s_own():
    quick = {"sizes": "1K", "budget-ms": 5, "window": 4}
    plan = plans.parse({"description": "d", "quick": quick, "step": [
        {"name": "d", "command": "doctor"}, {"name": "a", "command": "allreduce", "options": {"sizes": "1K-1G"}},
        {"name": "l", "command": "links", "quick": {"budget-ms": 9}}]}, "p", "p.toml", check_argv)
    doctor, allreduce, links = plan.steps
    assert doctor.arguments(0, quick=True) == ["doctor", "--json"]
    assert allreduce.arguments(0) == ["allreduce", "--sizes", "1K-1G"]
    assert allreduce.arguments(0, quick=True) == ["allreduce", "--sizes", "1K", "--budget-ms", "5"]
    assert links.arguments(0, quick=True) == ["links", "--budget-ms", "9", "--window", "4"]  # links has no --sizes


def test_a_false_option_is_spelled_as_the_command_spells_it():
    """`intra = false` was left out of the command line, so links measured inside hosts (its default)."""
    plan = plans.parse({"description": "d", "step": [
        {"name": "l", "command": "links", "options": {"intra": False, "budget-ms": 5}},
        {"name": "a", "command": "allreduce", "options": {"graph": False}, "quick": {"fit": False}}]},
        "p", "p.toml", check_argv)
    links, allreduce = plan.steps
    assert links.arguments(0) == ["links", "--no-intra", "--budget-ms", "5"]
    assert allreduce.arguments(0) == ["allreduce"]  # --graph is a plain flag: false is its default
    assert allreduce.arguments(0, quick=True) == ["allreduce", "--no-fit"]


def test_gpu_counts_in_option_values():
    step = plans.parse({"description": "d", "step": [{"name": "l", "command": "links",
                                                      "options": {"np": "gpus"}, "quick": {"np": "min(gpus,3)"}}]},
                       "p", "p.toml").steps[0]
    assert step.arguments(8)[-2:] == ["--np", "8"] and step.arguments(8, quick=True)[-2:] == ["--np", "3"]
    assert step.arguments(2, quick=True)[-2:] == ["--np", "2"]


GOOD = 'description = "d"\n[[step]]\nname = "a"\ncommand = "allreduce"\n'
BAD_PLANS = [
    ("not TOML", "description = \n", "not TOML"),
    ("no description", '[[step]]\nname = "a"\ncommand = "allreduce"\n', "needs a description"),
    ("no step", 'description = "d"\n', "has no [[step]]"),
    ("unknown top key", GOOD + 'colour = "red"\n', "unknown key 'colour'"),
    ("unknown step key", GOOD + 'retries = 3\n', "step 1 (a): unknown key 'retries'"),
    ("unknown command", 'description = "d"\n[[step]]\nname = "a"\ncommand = "allreduse"\n', "'allreduse' is no command"),
    # Found by a plan-wide option's check first, it is still the step's (it read `[defaults] (allreduse)`).
    ("unknown command beside defaults", 'description = "d"\n[defaults]\ntimeout = 5\n[[step]]\nname = "a"\ncommand = "allreduse"\n',
     "step 1 (a): 'allreduse' is no command"),
    ("an analysis command", 'description = "d"\n[[step]]\nname = "a"\ncommand = "fleet"\n', "'fleet' is no command"),
    ("unknown option", GOOD + 'options = { sizez = "1K" }\n', "step 1 (a): No such option '--sizez'. Did you mean '--sizes'?"),
    ("bad value", GOOD + 'options = { np = "two" }\n', "step 1 (a): Invalid value for '--np'"),
    ("false no flag takes", GOOD + 'options = { fitt = false }\n', "step 1 (a): fitt = false: allreduce has neither --fitt nor --no-fitt"),
    ("bad quick value", GOOD + 'quick = { budget-ms = -1 }\n', "step 1 (a) (quick): Invalid value for '--budget-ms'"),
    # A plan-wide value a command refuses is the plan's mistake (it reached no step before, silently).
    ("bad default", GOOD.replace("[[step]]", '[defaults]\nnp = 0\n[[step]]'),
     "[defaults] (allreduce): Invalid value for '--np': 0 is not in the range"),
    ("bad quick default", GOOD.replace("[[step]]", '[quick]\ntimeout = "abc"\n[[step]]'),
     "[quick] (allreduce): Invalid value for '--timeout'"),
    # A plan-wide option no step takes is a typo, or a value nothing would ever check.
    ("default no command has", GOOD.replace("[[step]]", '[defaults]\nbogus-opt = 1\n[[step]]'),
     "[defaults] bogus-opt: no step's command has --bogus-opt"),
    ("default every step overrides", GOOD.replace("[[step]]", '[defaults]\nsizes = "abc"\n[[step]]') + 'options = { sizes = "1K" }\n',
     "[defaults] sizes: every step whose command has it sets its own; remove it"),
    ("quick default every step overrides", GOOD.replace("[[step]]", '[quick]\nsizes = "abc"\n[[step]]') + 'quick = { sizes = "1K" }\n',
     "[quick] sizes: every step whose command has it sets its own; remove it"),
    ("output named", GOOD + 'options = { output = "x.json" }\n', "--output: accept names each step's files itself"),
    ("two steps one name", GOOD + '[[step]]\nname = "A"\ncommand = "p2p"\n', "two steps are named 'A'"),
    ("bad timeout", GOOD + 'timeout_s = 0\n', "timeout_s must be a number of seconds"),
    ("unknown limit", GOOD + '[step.limits]\nbusbw = 3\n', "unknown key 'busbw'"),
    ("unknown fabric", GOOD + '[step.limits]\nfabric = "nvlink9"\n', "unknown fabric 'nvlink9'"),
    ("negative limit", GOOD + '[step.limits]\nmin_busbw_gbps = -1\n', "limits.min_busbw_gbps: a finite number >= 0"),
    ("NaN limit", GOOD + '[step.limits]\ntolerance_bw_pct = nan\n', "limits.tolerance_bw_pct: a finite number >= 0"),
    ("step named as the run's summary", 'description = "d"\n[[step]]\nname = "Summary"\ncommand = "allreduce"\n',
     "the name 'Summary' is the run's own (its Summary.* files)"),
    ("step name too long", f'description = "d"\n[[step]]\nname = "{"n" * 300}"\ncommand = "allreduce"\n',
     "a name of at most 200 characters"),
    ("fail above pass", GOOD + '[step.limits]\npass_pct = 50\nfail_pct = 70\n', "limits.fail_pct 70 exceeds limits.pass_pct 50"),
    ("fabric no command measures", 'description = "d"\n[[step]]\nname = "l"\ncommand = "links"\n[step.limits]\nfabric = "shm"\n',
     "limits.fabric 'shm' is measured on the spot by the step's own run, and links has no --fabric"),
    ("fail above the default pass", GOOD + '[step.limits]\nfail_pct = 90\n',
     "limits.fail_pct 90 exceeds limits.pass_pct 80 (pass_pct the default)"),
    ("efficiency of no scale", GOOD + '[step.limits]\nmin_efficiency_pct = 50\n',
     "limits.min_efficiency_pct judges scale steps only, not allreduce"),
    ("warn beyond the tolerance", GOOD + '[step.limits]\ntolerance_bw_pct = 20\nwarn_bw_pct = 30\n',
     "limits.warn_bw_pct 30 exceeds limits.tolerance_bw_pct 20 (a WARN comes before a FAIL)"),
    ("two fabrics", GOOD + 'options = { fabric = "tcp-loopback" }\n[step.limits]\nfabric = "shm"\n',
     "which options.fabric 'tcp-loopback' would measure instead"),
    ("bad scope", 'scope = "rack"\n' + GOOD, "scope 'rack'"),
    ("bad requires_gpu", 'requires_gpu = "yes"\n' + GOOD, "requires_gpu must be true or false"),
    ("list option", GOOD + 'options = { sizes = [1, 2] }\n', "options.sizes: a string, number or boolean"),
]


@pytest.mark.parametrize("label,text,expected", BAD_PLANS, ids=[b[0] for b in BAD_PLANS])
def test_a_bad_plan_is_refused_in_one_line(label, text, expected, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(CommbenchError) as e:
        plans.load(str(path), check_argv)
    assert str(e.value).startswith(f"plan {path}: ") and expected in str(e.value) and "\n" not in str(e.value)


def test_a_bad_plan_is_refused_before_any_step(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD + 'options = { np = "two" }\n')
    r = commbench(["accept", "--plan", str(path), "-o", str(tmp_path / "out")], cwd=str(tmp_path))
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith(f"commbench: error: plan {path}: step 1 (a): Invalid value for '--np'")
    assert r.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


NO_GPU = pytest.mark.skipif(visible_gpus()[0] > 0, reason="a GPU is visible")
BAD_VALUES = [
    ("a size", 'options = { sizes = "abc" }\n', "step 1 (a): bad size 'abc' for --sizes: expected a number"),
    ("a quick size", 'quick = { sizes = "1K-" }\n', "step 1 (a) (quick): bad size '1K-' in --sizes"),
    ("more ranks than cores", f'options = {{ device = "cpu", np = {cores() + 1} }}\n',
     f"step 1 (a): {cores() + 1} ranks on this node's {cores()} cores: a node plan takes a core a rank (lower np)"),
    ("ranks beyond memory", 'options = { np = 1000000 }\n', "step 1 (a): reduce of 1G on 1000000 rank(s) (each about"),
    pytest.param("the GPUs of a node without", 'options = { np = "min(gpus,3)" }\n',
                 "step 1 (a): Invalid value for '--np': 0 is not in the range x>=1.", marks=NO_GPU),
    ("a rank the run lacks", 'options = { np = 2, root = 5 }\n', "step 1 (a): --root 5: only 2 rank(s)"),
    # 15 sizes of 1 s budget (and up to half as much in warm-ups, 0.05 s besides): 2 + 15 x 1.55 s
    ("a step past half its limit", 'options = { np = 2, impl = "mpi", sizes = "4-64K:x2", budget-ms = 1000 }\n'
                                   'timeout_s = 40\n',
     "step 1 (a): 15 measurements of about 1.55 s each, an estimated 25 s, more than half its timeout_s 40: "
     "measure fewer sizes or pairs, lower its budget-ms, or raise its timeout_s"),
]


def test_a_dry_run_prints_each_step_its_measurements_and_estimate(monkeypatch, capsys):
    """What each step of cpu-node would measure, as its command counts it (the progress bar's steps),
    and the estimate of accept/sizing.py against its limit; nothing runs, no folder is made."""
    from commbench.accept.sizing import START_S, measurement_s
    from commbench.run.policy import Policy
    from commbench.sizes import parse_sizes
    code, out, err = in_process(["accept", "--plan", "cpu-node", "--dry-run", "-o", "never"], monkeypatch, capsys)
    assert code == 0 and err == "", err
    rows = {line[3:35].strip(): line[35:].split() for line in out.splitlines() if not line.startswith("#")}
    plan = plans.load(CPU_NODE)
    assert list(rows) == [s.name for s in plan.steps if s.measuring]
    sizes = len(parse_sizes(plan.steps[2].options["sizes"]))
    ranks, count, estimate, limit, *command = rows["allreduce"]
    assert (ranks, count, limit) == ("2", str(2 * sizes), "300")  # mpi and ring
    assert int(estimate) == round(START_S["cpu"] + 2 * sizes * measurement_s(Policy()))
    assert command[:2] == ["commbench", "allreduce"] and not os.path.exists("never")


@pytest.mark.parametrize("label,options,expected", BAD_VALUES, ids=[getattr(b, "values", b)[0] for b in BAD_VALUES])
def test_a_plan_s_values_are_checked_as_its_commands_check_them_before_any_step(label, options, expected, tmp_path,
                                                                                 monkeypatch, capsys):
    """Checked by the commands themselves (check_only: everything a command checks before it starts
    ranks), in this process: no step, no run folder."""
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace('"allreduce"', '"reduce"') + options)
    quick = ["--quick"] if "quick" in options else []
    code, out, err = in_process(["accept", "--plan", str(path), *quick, "-o", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith(f"commbench: error: plan {path}: {expected}"), err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,expected", [
    (["--launch", ""], "--launch '': give the command that starts the ranks"),
    (["--plan", "cpu-nod"], "no built-in plan 'cpu-nod': choose from "),
    (["--plan", "/nonexistent/p.toml"], "No such file or directory"),
    (["--launch", "srun"], "--launch is for cluster plans"),
    pytest.param(["--plan", "gpu-node"], "plan gpu-node measures GPUs and none is visible: ",
                 marks=pytest.mark.skipif(visible_gpus()[0] > 0, reason="a GPU is visible")),
    (["--baselines", "/nonexistent/bl"], "--baselines /nonexistent/bl: no such folder"),
])
def test_bad_accept_arguments(args, expected, tmp_path):
    r = commbench(["accept", *args, "-o", str(tmp_path / "out")], cwd=str(tmp_path))
    assert r.returncode == 2 and expected in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out").exists()


def test_a_cluster_plan_needs_an_allocation_or_a_launcher(tmp_path):
    env = {k: v for k, v in mpi_env().items() if not k.startswith("SLURM_")}
    r = commbench(["accept", "--plan", "gpu-cluster", "-o", str(tmp_path / "out")], cwd=str(tmp_path), env=env)
    assert r.returncode == 2 and "a cluster plan runs its steps across the nodes of an allocation" in r.stderr


def test_a_cluster_plan_s_values_are_checked_before_any_step_what_its_nodes_decide_left_to_them(tmp_path, monkeypatch,
                                                                                                     capsys):
    """A cluster plan's steps run on the allocation's nodes, but a size that does not parse is a
    mistake on any node: refused before any step, no run folder. What depends on the nodes the
    launcher gives the steps (GPUs, several hosts for links at host level) is left to the run: the
    built-in cluster plans pass the check on this node, which has neither."""
    from commbench.accept import plan as plans
    from commbench.cli.accept import check_argv, checked_cluster_step
    path = tmp_path / "cluster.toml"
    path.write_text('description = "one step"\nscope = "cluster"\n\n[[step]]\nname = "allreduce"\ncommand = "allreduce"\n'
                    'options = { impl = "mpi", sizes = "abc" }\n')
    code, out, err = in_process(["accept", "--plan", str(path), "--launch", f"{MPIRUN} --np 2", "-o", str(tmp_path / "out")],
                                monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith(f"commbench: error: plan {path}: step 1 (allreduce): bad size 'abc'"), err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
    for name in ("cpu-cluster", "gpu-cluster"):
        plan = plans.load(name, check_argv)
        for quick in (False, True):
            assert [step.name for step, _ in plan.check_values(checked_cluster_step, 0, quick)] == \
                [s.name for s in plan.steps if s.measuring and s.applies(0)]
    # The quick cluster links judge flows between hosts alone: a few samples of pairs that share a
    # host's cores FAILed healthy namespace hosts.
    links = next(s for s in plans.load("cpu-cluster", check_argv).steps if s.command == "links")
    assert "--no-intra" in links.arguments(0, quick=True) and "--no-intra" not in links.arguments(0)


def test_a_step_whose_command_fails_after_its_complete_file_is_an_error(tmp_path):
    """A rank stopped (or killed) once its step's file was complete: the command exits 1 on its line
    (`... the run was complete ..., but then rank 1's process ended`), with nothing in the file to
    say why. accept read exit 1 as the command's own verdict, found the file good and said PASS, exit
    0 (7 runs in 7, a rank SIGSTOPped after the last size). Such a step is an ERROR
    (tests/stubs/rank_faults kills rank 1 as the world closes, rank 0's file closed whole)."""
    path = tmp_path / "one.toml"
    path.write_text('description = "one step"\n[[step]]\nname = "allreduce"\ncommand = "allreduce"\n'
                    'options = { np = 2, impl = "mpi", sizes = "1K", iters = 5 }\n')
    r = commbench(["accept", "--plan", str(path), "-o", str(tmp_path / "out")], cwd=str(tmp_path),
                  env=rank_faults_env(COMMBENCH_STUB_KILLED_AT_CLOSE="1"))
    assert r.returncode == 1, r.stdout + r.stderr
    [step] = summary_of(tmp_path, "out")["steps"]
    assert step["status"] == "ERROR" and step["result"] == "allreduce.json", step
    assert [(c["check"], c["status"]) for c in step["checks"]] == [("correct", "PASS"), ("exit status", "ERROR")], step
    assert step["checks"][1]["evidence"].startswith("exit 1: commbench: error: the run was complete ("), step


def accept(tmp_path, out: str, *args):
    return commbench(["accept", "--quick", "-o", str(tmp_path / out), *args], cwd=str(tmp_path), timeout=600)


def summary_of(tmp_path, out: str) -> dict:
    with open(tmp_path / out / HOST / "summary.json") as f:
        return json.load(f)


def busy_machine_plan(tmp_path, change=lambda text: text) -> str:
    """cpu-node with the limits of a machine that runs other tests beside it: the suite runs two at a
    time on 2 cores, where another test's ranks moved a bandwidth-bound size's median by up to 35 % and
    a latency-bound one (1 KiB in 3 us) by 4x: scheduler ticks (cpu-node's limits are a quiet node's).
    links' 8-byte ping-pong (a series of one size, judged as latency) lost 73 % of its rate so. A rank
    held back 2 ms moves a bandwidth-bound size by 99 %, a latency-bound one by 600x."""
    with open(CPU_NODE) as f:
        text = f.read()
    assert "tolerance_bw_pct = 35\ntolerance_lat_pct = 60\n" in text
    path = tmp_path / f"cpu-node-busy-{len(os.listdir(tmp_path))}.toml"
    path.write_text(change(text.replace("tolerance_bw_pct = 35\ntolerance_lat_pct = 60\n",
                                        "tolerance_bw_pct = 85\ntolerance_lat_pct = 1000\n")))
    return str(path)


@pytest.mark.long
@pytest.mark.quiet  # beside a test cluster's ranks (nice -10), its rerun's 256K all-reduce once read 0.035 of its baseline
def test_cpu_node_passes_against_its_own_baselines_and_fails_with_a_rank_held_back(tmp_path):
    baselines = tmp_path / "baselines"
    # A first run, no baselines: judged on correctness alone, then promoted.
    r = accept(tmp_path, "first", "--plan", "cpu-node", "--junit", str(tmp_path / "first.xml"))
    assert r.returncode == 0, r.stdout + r.stderr
    first = summary_of(tmp_path, "first")
    assert first["status"] == PASS and [s["step"] for s in first["steps"]] == \
        ["doctor", "topo", "allreduce", "allgather", "alltoall", "p2p", "links"]
    assert all(s["baseline_note"] in ("no --baselines given", "no baseline: this step writes no result file")
               for s in first["steps"])
    validate_junit(tmp_path / "first.xml")
    folder = tmp_path / "first" / HOST
    assert {"summary.md", "summary.html", "allreduce.json", "allreduce.log", "doctor.json"} <= set(os.listdir(folder))
    r = commbench(["baseline", "promote", str(folder), "--baselines", str(baselines)], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    saved = r.stdout.split()
    assert len(saved) == 2 * 5 and all(p.startswith(str(baselines / sku_folder(first["sku"])) + os.sep)
                                       for p in saved[1::2]), saved
    # Each keeps its node's SKU, plan and step, and the versions as facts.
    with open(saved[1]) as f:
        kept = json.load(f)["baseline"]
    assert (kept["sku"], kept["plan"], kept["host"], kept["quick"]) == (first["sku"], "cpu-node", HOST, True)
    assert kept["step"] in ("allreduce", "allgather", "alltoall", "p2p", "links"), kept
    assert set(kept["facts"]) == {"gpu_driver", "nccl", "mpi", "torch", "topology_fingerprint"}
    assert kept["facts"]["mpi"] and kept["facts"]["topology_fingerprint"]
    # Promoting again would replace them: refused, nothing written.
    r = commbench(["baseline", "promote", str(folder), "--baselines", str(baselines)], cwd=str(tmp_path))
    assert r.returncode == 2 and "already exists" in r.stderr
    # The same node again: every measuring step judged against its own baseline, and passes.
    r = accept(tmp_path, "again", "--plan", busy_machine_plan(tmp_path), "--baselines", str(baselines))
    again = summary_of(tmp_path, "again")
    # An oversubscribed machine (more runnable work than cores, from outside the suite) moves a
    # latency-bound size by its scheduler's ticks (12 ms against 3 us at a load of 14): only latency
    # may fail then.
    failed = [c for s in again["steps"] for c in s["checks"] if c["status"] == FAIL]
    assert (r.returncode, again["status"]) in ((0, PASS), (0, WARN)) or \
        load_stretch() > 1 and failed and all(c["check"] == "baseline latency sizes" for c in failed), r.stdout
    for step in again["steps"][2:]:
        assert step["baseline"] == str(baselines / os.path.basename(os.path.dirname(step["baseline"]))
                                       / f"cpu-node-{step['step']}.json"), step  # picked whatever the plan's name
        assert any(c["check"] == "baseline bandwidth sizes" for c in step["checks"]), step
    # A rank held back 2 ms before each iteration: the allreduce step fails, with its evidence (the plan
    # cut to that step: the others were judged above).
    def held_back(text):
        header, *steps = text.split("[[step]]")
        [step] = [s for s in steps if 'name = "allreduce"' in s]
        return header + "[[step]]" + step.replace('impl = "mpi,ring", sizes', 'impl = "mpi,ring", delay = "1:2000", sizes')
    held = busy_machine_plan(tmp_path, held_back)
    r = accept(tmp_path, "held", "--plan", held, "--baselines", str(baselines),
               "--junit", str(tmp_path / "held.xml"))
    assert r.returncode == 1, r.stdout + r.stderr
    failed = {x.split()[1]: x for x in r.stdout.splitlines() if x.startswith("FAIL")}
    assert "allreduce" in failed and "against the baseline" in failed["allreduce"], r.stdout
    validate_junit(tmp_path / "held.xml")
    failure = xmlschema.XMLSchema(os.path.join(HERE, "data", "junit", "junit.xsd")).to_dict(str(tmp_path / "held.xml"))
    [suite] = failure["testsuite"]
    cases = {c["@name"]: c for c in suite["testcase"] if "failure" in c}
    assert "against the baseline" in cases["allreduce"]["failure"][0]["@message"]
    assert suite["@failures"] == len(failed) == 1 and suite["@tests"] == 1
    with open(tmp_path / "held" / HOST / "summary.md") as f:
        assert "| allreduce | FAIL | yes |" in f.read()
    # A failed run is no baseline.
    r = commbench(["baseline", "promote", str(tmp_path / "held" / HOST), "--baselines", str(tmp_path / "b2")],
                  cwd=str(tmp_path))
    assert r.returncode == 2 and "did not pass acceptance (FAIL)" in r.stderr and not (tmp_path / "b2").exists()


def test_a_baseline_of_another_sku_or_timing_is_not_picked(tmp_path):
    import numpy as np

    from docs import node_doc
    rng = np.random.default_rng(1)
    run = node_doc("n1", rng)
    other_cpu = node_doc("n2", rng, cpu="Intel Xeon 8480")
    same = node_doc("n3", rng)
    looped = node_doc("n4", rng)
    looped["config"]["policy"] = {"timing": "loop"}
    quick = node_doc("n5", rng)
    quick["baseline"] = {"quick": True}
    folder = tmp_path / "bl"
    folder.mkdir()
    for name, doc in [("other", other_cpu), ("looped", looped), ("quick", quick)]:
        (folder / f"{name}.json").write_text(json.dumps(doc))
    picked, note = Baselines(str(folder)).pick(run, quick=False)
    assert picked is None and note.startswith("no baseline of SKU 'no GPU; AMD EPYC 9654, 96 cores' with these series "
                                              "(per-iteration timing, 1 host(s))")
    assert Baselines(str(folder)).pick(run, quick=True)[0][0].endswith("quick.json")
    graphed = node_doc("n6", rng)
    graphed["config"]["graph"] = True  # the same series, measured as a CUDA graph's replays
    (folder / "graphed.json").write_text(json.dumps(graphed))
    assert Baselines(str(folder)).pick(run, quick=False)[0] is None
    (folder / "same.json").write_text(json.dumps(same))
    picked, note = Baselines(str(folder)).pick(run, quick=False)
    assert picked[0].endswith("same.json") and note == f"baseline {picked[0]}"
    # Two steps of one plan that time the same series: each step's own baseline, the newer
    # notwithstanding; a step of another name takes the one without a rank held back, as the run.
    plain, held = node_doc("n7", rng), node_doc("n8", rng)
    plain["baseline"], held["baseline"] = {"step": "allreduce"}, {"step": "allreduce delay"}
    held["created"] = "2026-11-22T00:00:00+00:00"
    held["config"]["delay"] = {"rank": 1, "us": 2000.0}
    (folder / "plain.json").write_text(json.dumps(plain))
    (folder / "held.json").write_text(json.dumps(held))
    assert Baselines(str(folder)).pick(run, False, "allreduce")[0][0].endswith("plain.json")
    assert Baselines(str(folder)).pick(run, False, "allreduce delay")[0][0].endswith("held.json")
    assert Baselines(str(folder)).pick(run, False, "allgather")[0][0].endswith("plain.json")
    # Where the step's own baselines are of another kind, the step says so (accept WARNs).
    assert Baselines(str(folder)).unmatched(run, False, "allreduce") is None
    assert Baselines(str(folder)).unmatched(run, False, "links") is None
    other_cpu["baseline"] = {"step": "p2p"}
    (folder / "other.json").write_text(json.dumps(other_cpu))
    assert Baselines(str(folder)).unmatched(run, False, "p2p") == \
        f"{folder / 'other.json'} (promoted from step 'p2p') is not this run's kind: SKU cpu: AMD EPYC 9654, 96 cores " \
        f"against Intel Xeon 8480, 96 cores"


def test_promote_needs_an_accept_run_folder(tmp_path):
    r = commbench(["baseline", "promote", str(tmp_path)], cwd=str(tmp_path))
    assert r.returncode == 2 and "is not the folder of an accept run (it has no summary.json)" in r.stderr
    # A summary that is a FIFO no one writes to is read as empty, not waited on.
    os.mkfifo(tmp_path / "summary.json")
    r = commbench(["baseline", "promote", str(tmp_path)], cwd=str(tmp_path), timeout=30)
    assert (r.returncode, r.stderr) == (2, f"commbench: error: {tmp_path / 'summary.json'} is not JSON: Expecting value: "
                                           f"line 1 column 1 (char 0)\n")


def test_a_step_past_its_limit_or_failing_is_judged_so_and_the_next_runs(tmp_path):
    from commbench.accept.steps import run_step
    plan = plans.parse({"description": "d", "step": [
        {"name": "slow", "command": "allreduce", "options": {"sizes": "1K", "np": 2}, "timeout_s": 0.5},
        {"name": "unlaunched", "command": "allreduce", "options": {"sizes": "1K", "np": 2}},
    ]}, "p", "p.toml", check_argv)
    slow, unlaunched = plan.steps
    r = run_step(slow, str(tmp_path), 0, False, [], Baselines(None), mpi_env())
    assert r["status"] == "TIMEOUT" and r["checks"][0]["evidence"] == "stopped after 0.5 s (timeout_s)"
    # A launcher that cannot start the step: an ERROR with the step's last line.
    r = run_step(unlaunched, str(tmp_path), 0, False, [sys.executable, "-c", "import sys; sys.exit('no node')"],
                 Baselines(None), mpi_env())
    assert r["status"] == "ERROR" and r["checks"][-1]["evidence"] == "exit 1: no node", r


@pytest.mark.cluster
@pytest.mark.mpi
@pytest.mark.quiet
def test_a_cluster_plan_fails_on_a_slowed_link_naming_the_host_and_the_evidence(make_cluster, tmp_path):
    """cpu-cluster across 4 hosts of the test cluster (mpirun with a hostfile as --launch): passes,
    is promoted, and with host 2's link shaped to a third of its rate fails in the links step (the
    slow host named) and against the baseline."""
    c = make_cluster(4, 300)
    launch = shlex.join(c.mpirun_prefix(1))

    def run(out, *more):
        return subprocess.run([COMMBENCH, "accept", "--plan", "cpu-cluster", "--quick", "--launch", launch,
                               "-o", str(tmp_path / out), *more], capture_output=True, text=True, timeout=600,
                              env=c.env(), cwd=str(tmp_path))
    r = run("clean")
    assert r.returncode == 0, r.stdout + r.stderr
    clean = summary_of(tmp_path, "clean")
    assert clean["scope"] == "cluster" and [s["step"] for s in clean["steps"]] == ["allreduce", "alltoall", "links"]
    with open(tmp_path / "clean" / HOST / "links.json") as f:
        assert len(set(json.load(f)["machine"]["hosts"])) == 4
    r = commbench(["baseline", "promote", str(tmp_path / "clean" / HOST), "--baselines", str(tmp_path / "bl")])
    assert r.returncode == 0, r.stderr
    c.shape(2, 100)
    r = run("slowed", "--baselines", str(tmp_path / "bl"), "--junit", str(tmp_path / "slowed.xml"))
    assert r.returncode == 1, r.stdout + r.stderr
    # JUnit: a test case per host beside the links step's own, the slow one failed.
    validate_junit(tmp_path / "slowed.xml")
    cases = {case["@name"]: case for case in JUNIT_XSD.to_dict(str(tmp_path / "slowed.xml"))["testsuite"][0]["testcase"]}
    assert {name for name in cases if name.startswith("links/")} == {f"links/{h.name}" for h in c.hosts}
    assert [name for name, case in cases.items() if name.startswith("links/") and "failure" in case] == [
        f"links/{c.hosts[2].name}"]
    slowed = {s["step"]: s for s in summary_of(tmp_path, "slowed")["steps"]}
    links = {c_["check"]: c_ for c_ in slowed["links"]["checks"]}
    assert slowed["links"]["status"] == FAIL and links["links"]["status"] == FAIL
    assert links["links"]["evidence"].startswith(f"{c.hosts[2].name} | FAIL host: ")
    assert {h: v.split(":")[0] for h, v in links["links"]["hosts"].items()} == {
        h.name: "FAIL host" if h.index == 2 else "PASS" for h in c.hosts}
    assert slowed["links"]["baseline"] and slowed["allreduce"]["status"] == FAIL
    assert any(ch["status"] == FAIL and ch["check"] == "baseline bandwidth sizes" for ch in slowed["allreduce"]["checks"])


@pytest.mark.cluster
@pytest.mark.mpi
def test_a_node_plan_under_mpirun_with_a_hostfile_runs_on_every_node(make_cluster, tmp_path):
    """mpirun --hostfile, one task per node, each running a node plan on its own node into its own
    folder: the tasks' launch variables are not the steps' (each starts its own 2 ranks)."""
    c = make_cluster(2, 1000)
    (tmp_path / "one.toml").write_text('description = "one step"\n[[step]]\nname = "p2p"\ncommand = "p2p"\n'
                                       'options = { np = 2, sizes = "1K", budget-ms = 5 }\n')
    r = c.mpirun([COMMBENCH, "accept", "--plan", str(tmp_path / "one.toml"), "-o", str(tmp_path / "runs")],
                 timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "runs")) == sorted(h.ns for h in c.hosts)
    for h in c.hosts:
        with open(tmp_path / "runs" / h.ns / "p2p.json") as f:
            doc = json.load(f)
        assert (doc["machine"]["hosts"], doc["machine"]["ranks"], doc["machine"]["launcher"]) == ([h.ns], 2, "standalone")


JUDGED_PLAN = """description = "limits of every kind"
[defaults]
np = 2
budget-ms = 5

[[step]]
name = "allreduce"
command = "allreduce"
options = { impl = "mpi", sizes = "1K,64K,1M" }
[step.limits]
fabric = "shm"
min_busbw_gbps = 1e6
max_time_us = 1e7

[[step]]
name = "scale"
command = "scale"
options = { ranks = "1,2", sizes = "1K,64K,1M", impl = "mpi" }
limits = { min_efficiency_pct = 10 }

# Rank 1 waits 5 s before its one timed call: past the step's limit, though its estimate (a start and
# one measurement: accept/sizing.py) is within half of it.
[[step]]
name = "stalled"
command = "allreduce"
options = { sizes = "1K", impl = "mpi", iters = 1, warmup = 0, delay = "1:5000000" }
timeout_s = 4.5
"""


def test_a_plan_judges_a_measured_fabric_absolute_limits_and_scaling(tmp_path):
    """A step judged against shm (measured by the step's own run: the plan asks for no --fabric), an
    absolute bandwidth no node reaches (FAIL, with the figure and the limit) and a time any node
    meets; scale's efficiency judged; a step past its limit an error in JUnit that validates."""
    (tmp_path / "judged.toml").write_text(JUDGED_PLAN)
    r = commbench(["accept", "--plan", str(tmp_path / "judged.toml"), "-o", str(tmp_path / "run"),
                   "--junit", str(tmp_path / "judged.xml")], cwd=str(tmp_path), timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    steps = {s["step"]: s for s in summary_of(tmp_path, "run")["steps"]}
    allreduce = {c["check"]: c for c in steps["allreduce"]["checks"]}
    assert "--fabric shm" in steps["allreduce"]["command_line"]
    fabric = allreduce["fabric shm"]
    assert fabric["status"] in (PASS, WARN, FAIL) and "GB/s expected (pass at 80%, fail under 60%" in fabric["evidence"]
    assert fabric["reference"] > 0 and fabric["figure"] > 0
    assert allreduce["busbw"]["status"] == FAIL and allreduce["busbw"]["evidence"].endswith("at 1M (limit >= 1e+06 GB/s)")
    assert allreduce["time"]["status"] == PASS and "at 1K (limit <= 1e+07 us)" in allreduce["time"]["evidence"]
    assert steps["allreduce"]["status"] == FAIL and allreduce["correct"]["status"] == PASS
    scaling = next(c for c in steps["scale"]["checks"] if c["check"] == "scaling")
    assert scaling["status"] == PASS and "efficiency at 2 rank(s)" in scaling["evidence"] \
        and scaling["evidence"].endswith("(limit >= 10%)"), scaling
    assert steps["stalled"]["status"] == "TIMEOUT"
    validate_junit(tmp_path / "judged.xml")
    suite = JUNIT_XSD.to_dict(str(tmp_path / "judged.xml"))["testsuite"][0]
    assert (suite["@tests"], suite["@failures"], suite["@errors"]) == (3, 1, 1)
    cases = {c["@name"]: c for c in suite["testcase"]}
    assert cases["stalled"]["error"][0]["@message"] == "stopped after 4.5 s (timeout_s)"
    with open(tmp_path / "run" / HOST / "summary.md") as f:
        md = f.read()
    assert "| allreduce | FAIL | yes |" in md and "- FAIL busbw: allreduce mpi (2 ranks): " in md
    with open(tmp_path / "run" / HOST / "summary.html") as f:
        page = f.read()
    assert "<li>FAIL busbw: allreduce mpi (2 ranks): " in page and "<h2>stalled: TIMEOUT</h2>" in page


@pytest.mark.parametrize("limits,status", [
    ({"tolerance_bw_pct": 35}, PASS),
    ({"tolerance_bw_pct": 35, "warn_bw_pct": 10}, WARN),
    ({"tolerance_bw_pct": 15, "warn_bw_pct": 10}, FAIL),
])
def test_a_baseline_drop_passes_warns_or_fails_by_the_plan_s_limits(limits, status):
    """The bandwidth 20 % below the baseline's (5 GB/s against 6.25): within the tolerance a PASS,
    beyond a WARN band a WARN, beyond the tolerance a FAIL, each with the change and the limits."""
    from commbench.accept.judge import result_checks
    from docs import ring_run
    limits = {**plans.DEFAULT_LIMITS, "tolerance_lat_pct": 1000, **limits}
    checks = result_checks(ring_run(3.0, 5.0), limits, ("base.json", ring_run(3.0, 6.25)))
    bw = next(c for c in checks if c["check"] == "baseline bandwidth sizes")
    assert bw["status"] == status and bw["evidence"].startswith("allreduce ring@mpi (2 ranks): bandwidth sizes -"), bw
    assert f"(limit -{limits['tolerance_bw_pct']}%" in bw["evidence"]
    assert ("WARN beyond -10%" in bw["evidence"]) == ("warn_bw_pct" in limits)
    assert next(c for c in checks if c["check"] == "baseline latency sizes")["status"] == PASS


INTERRUPTED_PLAN = """description = "a step to interrupt between two others"
[[step]]
name = "p2p first"
command = "p2p"
options = { sizes = "4,64K", budget-ms = 20 }
[[step]]
name = "allreduce"
command = "allreduce"
options = { device = "cpu", impl = "mpi", np = 2, sizes = "1K-4M:x4", budget-ms = 1000, warmup = 1 }
[[step]]
name = "p2p"
command = "p2p"
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_plan_judges_the_step_in_progress_and_writes_every_summary(signum, tmp_path):
    """Ctrl-C, SIGTERM from a CI job's time limit, or SIGHUP from a closed session: the step in
    progress is stopped, judged on the rows it saved, the rest listed as not run, and the summaries
    and JUnit written."""
    plan = tmp_path / "p.toml"
    plan.write_text(INTERRUPTED_PLAN)
    out, junit = tmp_path / "out", tmp_path / "j.xml"
    proc = subprocess.Popen([COMMBENCH, "accept", "--plan", str(plan), "-o", str(out), "--junit", str(junit)],
                            cwd=tmp_path, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rows(str(out / socket.gethostname() / "allreduce.json"), proc)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stdout + stderr
    name = signal.Signals(signum).name
    assert stderr.endswith(f"commbench: error: interrupted ({name}); the steps run so far are judged in the summary\n")
    run = out / socket.gethostname()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and summary["status"] == FAIL and summary["not_run"] == ["p2p"]
    first, allreduce = summary["steps"]
    assert first["status"] == PASS and allreduce["status"] == "ERROR" and allreduce["result"] == "allreduce.json"
    assert allreduce["checks"][0]["check"] == "interrupted", allreduce["checks"]
    assert f"{FAIL} (interrupted; 1 ERROR, 1 PASS; " in stdout
    assert "interrupted" in junit.read_text()
    # What passed before the interrupt can be kept as baselines, marked partial; the run whole cannot.
    refused = commbench(["baseline", "promote", str(run), "--baselines", str(tmp_path / "bl")], cwd=str(tmp_path))
    assert refused.returncode == 2 and "--partial promotes the steps that passed before" in refused.stderr
    kept = commbench(["baseline", "promote", str(run), "--partial", "--baselines", str(tmp_path / "bl")],
                     cwd=str(tmp_path))
    assert kept.returncode == 0 and kept.stdout.count("saved ") == 1, kept.stdout + kept.stderr
    [saved] = kept.stdout.split()[1:]
    section = json.loads(open(saved).read())["baseline"]
    assert section["partial"] is True and section["step"] == "p2p first"


def test_every_unreadable_baseline_is_named_not_skipped_silently(tmp_path):
    """A baseline that cannot be read turns the regression check off for what it held: accept names
    each such file and why, as fleet does."""
    folder = tmp_path / "baselines" / "sku"
    folder.mkdir(parents=True)
    from docs import ring_run
    good = ring_run()
    files = {"binary.json": b"\x00\x01\xff" * 10, "latin1.json": '{"a": "\xe9"}'.encode("latin-1"),
             "schema999.json": json.dumps({**good, "schema_version": 999}).encode(),
             "nan.json": json.dumps(good).replace('"median": ', '"median": NaN, "x": ', 1).encode(),
             "truncated.json": json.dumps(good)[:200].encode(), "empty.json": b""}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "loop.json").symlink_to(folder / "loop.json")
    plan = tmp_path / "p.toml"
    plan.write_text('description = "d"\n[[step]]\nname = "topo"\ncommand = "topo"\n')
    r = commbench(["accept", "--plan", str(plan), "--baselines", str(tmp_path / "baselines"), "-o", str(tmp_path / "out")],
                  cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: --baselines: skipped ")]
    assert len(warned) == len(files) + 1, r.stderr
    for name in [*files, "loop.json"]:
        assert sum(str(folder / name) in line for line in warned) == 1, (name, warned)


def test_accept_on_a_full_disk_is_refused_before_any_step(full_disk, tmp_path):
    """Every step an ERROR on its first write, then the summaries failing too: a run folder whose file
    system has no room is refused first, in one line, nothing made (the unit test below: the bound)."""
    plan = tmp_path / "p.toml"
    plan.write_text(GOOD + 'options = { device = "cpu", sizes = "1K", iters = 2 }\n')
    junit = tmp_path / "j.xml"
    r = commbench(["accept", "--plan", str(plan), "-o", str(full_disk / "out"), "--junit", str(junit)], cwd=str(tmp_path))
    assert (r.returncode, r.stderr) == (2, f"commbench: error: cannot write {full_disk / 'out'}: 0 KiB free, less than "
                                           f"the 16 MiB it may take: free some room or choose another place\n")
    assert r.stdout == "" and os.listdir(full_disk) == ["filler"] and not junit.exists()


def test_a_junit_in_the_runs_own_folder_is_refused_before_any_step(tmp_path):
    """summary.json, or a step's result file, named as --junit: refused before anything runs, not
    overwritten with XML (nor exit 2 after a PASS run)."""
    plan = tmp_path / "p.toml"
    plan.write_text('description = "d"\n[[step]]\nname = "topo"\ncommand = "topo"\n')
    for name in ("summary.json", "topo.json"):
        junit = tmp_path / "out" / HOST / name
        r = commbench(["accept", "--plan", str(plan), "-o", str(tmp_path / "out"), "--junit", str(junit)],
                      cwd=str(tmp_path))
        assert (r.returncode, r.stdout) == (2, ""), r.stderr
        assert r.stderr == (f"commbench: error: --junit {junit} is in the run's folder {tmp_path / 'out' / HOST}, which "
                            f"takes the steps' files and the summaries: name a file outside it\n")
        assert not (tmp_path / "out").exists()


@pytest.mark.mpi
def test_a_junit_that_another_accept_took_is_refused_before_any_step(tmp_path):
    """Two accepts that name one --junit: the second is refused as it starts, while the first runs
    (the first's file is made empty before its first step, and replaced whole by its JUnit)."""
    plan = tmp_path / "p.toml"
    plan.write_text(GOOD + 'options = { device = "cpu", sizes = "1K", iters = 2, np = 2, impl = "mpi" }\n')
    junit = tmp_path / "j.xml"
    first = subprocess.Popen([COMMBENCH, "accept", "--plan", str(plan), "-o", str(tmp_path / "a"), "--junit", str(junit)],
                             cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        deadline = time.monotonic() + 60
        while not junit.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        r = commbench(["accept", "--plan", str(plan), "-o", str(tmp_path / "b"), "--junit", str(junit)],
                      cwd=str(tmp_path))
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"commbench: error: {junit} already exists; choose another "
                                                         f"--junit\n")
    assert not (tmp_path / "b" / HOST).exists()
    assert first.returncode == 0, err
    assert junit.read_text().startswith("<testsuites ") and "<testcase " in junit.read_text()


def test_junit_of_an_interrupted_run_is_no_pass_and_holds_any_text(tmp_path):
    """A Ctrl-C after one step: an error testcase says so and the steps not reached are skipped; a
    step's last line with a terminal's colour codes still makes valid XML."""
    from commbench.accept.outputs import junit
    step = {"step": "allreduce", "status": "ERROR", "counted": True, "seconds": 1.25, "command_line": "commbench allreduce",
            "baseline_note": "no --baselines given", "checks": [{"check": "exit status", "status": "ERROR",
                                                                "evidence": "exit 3: \x1b[31mboom\x1b[0m \x00"}]}
    summary = {"plan": "cpu-node", "host": HOST, "started": "2026-11-27T00:00:00+00:00", "seconds": 2.0,
               "interrupted": True, "not_run": ["p2p", "links"], "steps": [step]}
    junit(summary, str(tmp_path / "j.xml"))
    validate_junit(tmp_path / "j.xml")
    suite = JUNIT_XSD.to_dict(str(tmp_path / "j.xml"))["testsuite"][0]
    assert (suite["@tests"], suite["@errors"], suite["@skipped"]) == (4, 2, 2)
    cases = {c["@name"]: c for c in suite["testcase"]}
    assert cases["allreduce"]["error"][0]["@message"] == "exit 3: \ufffd[31mboom\ufffd[0m \ufffd"
    assert cases["interrupted"]["error"][0]["@type"] == "INTERRUPTED" and "skipped" in cases["links"]


def test_a_steps_envelope_placement_is_shown_and_judges_nothing(tmp_path):
    """A step's result file placed in the reference envelopes of its node (an 8-GPU H100 node's
    all-reduce, the nccl-tests fixture imported): the lines go to the summary's step section and the
    JUnit case's output; the step's verdict stays its checks'."""
    from commbench.accept import outputs, steps
    from commbench.analysis import envelopes
    doc = importers.import_nccl_tests(open(os.path.join(HERE, "fixtures", "imports",
                                                        "nccl-tests-all_reduce_perf-8gpu.json")), "h100").doc
    placed = [line.strip() for line in envelopes.lines(doc)]
    assert placed[1] == "allreduce nccl (8 ranks): peak busbw 354.8 GB/s, below (which algorithm NCCL ran is not recorded)"
    step = {"step": "allreduce", "status": PASS, "counted": True, "seconds": 1.0, "baseline": None,
            "command_line": "commbench allreduce", "baseline_note": "no --baselines given",
            "checks": [{"status": PASS, "check": "ran", "evidence": "exit 0"}], "envelopes": placed}
    summary = {"plan": "gpu-node", "host": "hgx-a01", "status": PASS, "seconds": 1.0, "description": "d", "sku": "s",
               "plan_source": "p", "baselines": None, "steps": [step], "started": "2026-11-28T10:00:00",
               "interrupted": False, "not_run": []}
    text = outputs.markdown(summary)
    assert "| allreduce | PASS | yes |" in text and all(f"- {line}" in text for line in placed)
    outputs.junit(summary, str(tmp_path / "j.xml"))
    assert placed[1] in (tmp_path / "j.xml").read_text()
    assert steps.overall([step]) == PASS


def test_a_run_folder_on_a_full_file_system_is_refused_first(tmp_path, monkeypatch):
    """On a full disk every step failed to write (7 ERRORs) and then the summaries did: the run folder
    is refused before any step where its file system has less than MIN_FREE_BYTES free."""
    from commbench.accept import steps
    real = os.statvfs

    class Full:
        def __init__(self, fs):
            self.f_frsize, self.f_blocks, self.f_bavail = fs.f_frsize, fs.f_blocks, (64 << 10) // fs.f_frsize
    monkeypatch.setattr(os, "statvfs", lambda path: Full(real(path)))
    with pytest.raises(CommbenchError, match=r"acc: 64 KiB free, less than the 16 MiB it may take"):
        steps.run_folder(str(tmp_path / "acc"), "h")
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(os, "statvfs", real)
    assert steps.run_folder(str(tmp_path / "acc"), "h") == str(tmp_path / "acc" / "h")


def test_a_bandwidth_window_that_outlasts_the_budget_is_estimated_by_its_iterations():
    """links' windows of 64 x 256 MiB: one takes 1.4 s at the slowest healthy flow, seven times the
    200 ms budget, so the measurement takes its warm-up and least timed count of them."""
    from commbench.accept.sizing import OVERHEAD_S, SLOWEST_FLOW_GBPS, bandwidth_s, measurement_s
    from commbench.run.policy import Policy
    policy = Policy()
    assert bandwidth_s(policy, 64, 4096) == measurement_s(policy)
    window_s = 64 * (256 << 20) / (SLOWEST_FLOW_GBPS * 1e9)
    assert bandwidth_s(policy, 64, 256 << 20) == pytest.approx((1 + policy.min_iters) * window_s + OVERHEAD_S)
    assert bandwidth_s(Policy(iters=2), 64, 256 << 20) == pytest.approx(3 * window_s + OVERHEAD_S)


def test_a_step_that_outlives_its_ranks_error_line_is_stopped(tmp_path):
    """mpirun waits for ever for the daemon of a host that stopped answering, after its ranks have
    said their line and ended: the step is stopped OUTLIVES_ITS_LINE_S after that line, not at its
    time limit, and its log says why."""
    from commbench.accept import runner
    step = [sys.executable, "-c", "import sys, time; print('commbench: error: rank 2 did not arrive (host h2)', "
                                  "file=sys.stderr, flush=True); time.sleep(120)"]
    t = time.monotonic()
    ran = runner.run(step, str(tmp_path / "step.log"), 100, dict(os.environ))
    took = time.monotonic() - t
    assert ran.rc is None and runner.OUTLIVES_ITS_LINE_S <= took < runner.OUTLIVES_ITS_LINE_S + 5, took
    log = (tmp_path / "step.log").read_text()
    assert f"\nstopped {runner.OUTLIVES_ITS_LINE_S:g} s after its error line: the launch waited on" in log
    assert runner.last_line(str(tmp_path / "step.log")) == "commbench: error: rank 2 did not arrive (host h2)"


@pytest.mark.parametrize("speaks", [False, True], ids=["silent launch", "rank 0 spoke"])
def test_a_launched_step_whose_ranks_do_not_start_is_stopped_naming_it(speaks, tmp_path):
    """mpirun's start of its hosts (ssh over a lossy link) runs before the ranks' own start-up deadline:
    a launched step with no line from rank 0 by `starts_within_s` is stopped then, with an error line of
    its own; one whose rank 0 spoke (its header, once MPI's start-up is done) runs on to its end."""
    from commbench.accept import runner
    said = "print('# commbench', flush=True); " if speaks else ""
    step = [sys.executable, "-c", f"import time; {said}time.sleep(4)"]
    t = time.monotonic()
    ran = runner.run(step, str(tmp_path / "step.log"), 100, dict(os.environ), starts_within_s=1.5)
    took = time.monotonic() - t
    log = (tmp_path / "step.log").read_text()
    if speaks:
        assert ran.rc == 0 and not ran.stopped and took >= 4, log
        return
    assert ran.rc is None and ran.stopped == "its ranks had not started" and 1.5 <= took < 1.5 + 3, (took, log)
    assert runner.last_line(str(tmp_path / "step.log")).startswith(
        "commbench: error: the ranks had not started 1.5 s after the launch (MPI's start-up is bounded by --timeout, "
        "the launcher's start of its hosts is not)")
    assert log.endswith("\nstopped 1.5 s after the launch: its ranks had not started\n")


def test_a_step_of_each_collective_is_one_step_per_collective_of_the_registry():
    """gpu-node's `each = "collective"` step stands for every collective but its `except`: a new
    collective joins the plan with no edit to it. Its mistakes are the plan's, said in one line."""
    from commbench import collectives
    steps = [s.name for s in plans.load("gpu-node").steps]
    assert [n for n in collectives.names() if n != "allreduce"] == [n for n in steps if n in collectives.names()]
    step = {"name": "{collective}", "command": "{collective}", "options": {"device": "cpu"}, "each": "collective"}
    made = plans.parse({"description": "d", "step": [step]}, "p", "p.toml").steps
    assert [(s.name, s.command) for s in made] == [(n, n) for n in collectives.names()]
    for change, said in [({"each": "impl"}, 'each = "collective" is the one kind of step that repeats'),
                         ({"except": ["allreduce", "bogus"]}, "except names 'bogus', no collective"),
                         ({"except": "allreduce"}, "except is a list of collectives"),
                         ({"name": "sweep"}, "each step's name and command say {collective}")]:
        with pytest.raises(CommbenchError, match=re.escape(said)):
            plans.parse({"description": "d", "step": [{**step, **change}]}, "p", "p.toml")
