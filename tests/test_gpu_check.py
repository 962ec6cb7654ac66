"""`make gpu-check` (the gpu-node plan of `commbench accept`) on a host without a GPU: steps free of
the launcher's variables, time limits that stop a step whole, doctor's verdict reported without
failing the run."""

import json
import os
import re
import sys
import time

import pytest
from conftest import commbench, mpi_env

from commbench.accept import plan as plans
from commbench.accept import runner
from commbench.accept.baselines import Baselines
from commbench.accept.steps import overall, run_step
from commbench.launch.world import detect_launcher

DEGRADED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo", "hgx_h100_degraded.json")

LAUNCH = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "1",
          "SLURM_NTASKS": "1", "SLURM_STEP_NODELIST": "n1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_UNIVERSE_SIZE": "2", "PMIX_RANK": "0", "PMIX_NAMESPACE": "p",
          "PMI_RANK": "0", "PMI_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
          "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
KEPT = {"SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "1", "OMPI_MCA_btl": "self,tcp"}  # job-wide, configuration


def test_steps_run_without_the_launchers_variables(tmp_path):
    """As from `srun --pty bash` or one task of `srun -N 100 commbench accept` (or a shell under
    mpirun or torchrun): a step must not take itself for one rank of that launch, and starts its own
    two ranks."""
    env = {**mpi_env(), **LAUNCH, **KEPT}
    assert detect_launcher(env) == "mpi"
    (tmp_path / "two.toml").write_text('description = "two ranks"\n[[step]]\nname = "allreduce"\n'
                                       'command = "allreduce"\noptions = { np = 2, sizes = "1K", impl = "mpi" }\n')
    r = commbench(["accept", "--plan", str(tmp_path / "two.toml"), "-o", str(tmp_path / "out")], cwd=str(tmp_path),
                  env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    [folder] = os.listdir(tmp_path / "out")
    with open(tmp_path / "out" / folder / "allreduce.json") as f:
        doc = json.load(f)
    assert doc["machine"]["ranks"] == 2 and doc["machine"]["launcher"] == "standalone"


def test_a_step_past_its_limit_is_stopped_whole(tmp_path):
    # The step starts a child of its own, as mpirun starts ranks; both must be gone after the limit.
    sleeper = ("import subprocess, sys, time; "
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
               "print('started', child.pid, flush=True); time.sleep(5)")
    ran = runner.run([sys.executable, "-c", sleeper], str(tmp_path / "sleeper.log"), 1, dict(os.environ))
    assert ran.rc is None and ran.seconds < 4
    log = open(ran.log).read()
    assert log.startswith(f"$ {sys.executable} -c ")
    started = re.search(r"^started (\d+)$", log, re.MULTILINE)
    assert started and started.end() < log.index("\nstopped at the time limit of 1 s\n")
    child = int(started.group(1))
    # Dead (Z: not yet reaped by its new parent) or gone, once SIGKILL is delivered: on a busy
    # machine a process on another core takes a moment to take it.
    deadline = time.monotonic() + 5
    state = "?"
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("Z", "gone"):
            break
        time.sleep(0.05)
    assert state in ("Z", "gone"), state
    ran = runner.run([sys.executable, "-c", "print('ran')"], str(tmp_path / "next.log"), 60, dict(os.environ))
    assert ran.rc == 0 and open(ran.log).read().endswith("ran\n")


@pytest.mark.parametrize("said,limit_s,kept", [("print('{\"a\": 1}')", 60, True),  # whole: kept, whatever the exit
                                               ("print('{\"a\": 1}'); raise SystemExit(1)", 60, True),
                                               ("print('{\"a\": ', flush=True); time.sleep(30)", 1, False),
                                               ("raise SystemExit(2)", 60, False)])
def test_a_steps_document_is_there_whole_or_not_at_all(tmp_path, said, limit_s, kept):
    """A step whose stdout is its document (topo, doctor): interrupted or stopped as it wrote it, an
    empty or cut topo.json stood in the run's folder for the step's output."""
    doc = tmp_path / "topo.json"
    ran = runner.run([sys.executable, "-c", f"import time; {said}"], str(tmp_path / "topo.log"), limit_s, dict(os.environ),
                     str(doc))
    assert (ran.rc is None) == (limit_s == 1)
    assert sorted(os.listdir(tmp_path)) == (["topo.json", "topo.log"] if kept else ["topo.log"])
    assert not kept or json.loads(doc.read_text()) == {"a": 1}


def test_a_stopped_step_has_time_to_end_its_own_launch():
    """accept's SIGKILL of a stopped step came with the step's own SIGKILL of ranks deaf to the stop
    (both at 10 s): the step's launch folder stayed in $TMPDIR (1 run in 13 of a SIGHUP to accept)."""
    from commbench.launch.backstop import STOP_WITHIN_S
    assert runner.STOP_GRACE_S >= STOP_WITHIN_S + 5


def test_doctor_verdict_is_reported_and_not_counted(tmp_path):
    """gpu-node's doctor step, judging a recorded degraded node instead of this one: every FAIL and
    WARN with its evidence, the step FAIL, the run still PASS (the step is not counted)."""
    [doctor] = [s for s in plans.load("gpu-node").steps if s.name == "doctor"]
    step = plans.Step(**{**doctor.__dict__, "options": {"from": DEGRADED}})
    assert not step.counted
    r = run_step(step, str(tmp_path), 1, False, [], Baselines(None), mpi_env())
    assert r["status"] == "FAIL" and not r["counted"]
    assert [(c["status"], c["check"]) for c in r["checks"]] == [
        ("FAIL", "doctor pcie_width"), ("FAIL", "doctor throttle"), ("FAIL", "doctor nvlink"),
        ("FAIL", "doctor peer_access"), ("WARN", "doctor infiniband"), ("WARN", "doctor mtu")]
    assert r["checks"][2]["evidence"].startswith("GPU 6 (0000:ba:00.0): 16 of 18 NVLinks up (remedy: inspect")
    assert overall([r]) == "PASS"
    assert overall([r, {**r, "counted": True}]) == "FAIL"


def test_a_doctor_without_verdict_is_said_so(tmp_path):
    step = plans.parse({"description": "d", "step": [{"name": "doctor", "command": "doctor",
                                                      "options": {"from": str(tmp_path / "missing.json")}}]},
                       "p", "p.toml").steps[0]
    r = run_step(step, str(tmp_path), 0, False, [], Baselines(None), mpi_env())
    assert r["status"] == "ERROR" and r["checks"][0]["evidence"] == "doctor left no verdict (see its log)"


def test_make_gpu_check_runs_the_gpu_tests_then_the_gpu_node_plan():
    """What `make gpu-check` would run (make -n: nothing runs): the GPU tests, then accept with the
    gpu-node plan into a stamped folder with JUnit beside it, failing if either fails."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["make", "-n", "-o", "install", "-o", "emu", "gpu-check"], cwd=root, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    script = r.stdout
    tests, plan = script.index(" -m pytest -q -m gpu "), script.index("/commbench accept --plan gpu-node -o gpu-check/")
    assert tests < plan and re.search(r"-o (gpu-check/\d{8}T\d{6}Z) --junit \1/junit\.xml", script), script
    assert "test $tests -eq 0 && test $plan -eq 0" in script
