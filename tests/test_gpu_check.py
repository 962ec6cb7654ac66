"""`make gpu-check` (tools/gpu_check.py) on a host without a GPU: a fresh folder per run, steps free
of the launcher's variables, time limits, and doctor's verdict reported without failing the run."""

import dataclasses
import json
import os
import re
import sys

import pytest
from conftest import gpu_check_module

from commbench.launch.world import detect_launcher

GPU_CHECK = gpu_check_module()
DEGRADED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "topo", "hgx_h100_degraded.json")


def test_each_run_writes_into_a_fresh_folder_of_its_own(tmp_path):
    base = str(tmp_path / "gpu-check")
    first, second = GPU_CHECK.run_folder(base), GPU_CHECK.run_folder(base)
    assert first != second and sorted(os.listdir(base)) == sorted(map(os.path.basename, (first, second)))
    assert os.listdir(first) == [] and os.listdir(second) == []
    GPU_CHECK.point_latest(base, first)
    GPU_CHECK.point_latest(base, second)
    assert os.path.realpath(os.path.join(base, "latest")) == os.path.realpath(second)
    # Every file a step writes (results, pytest's temporary files) lies in the run's folder; the
    # steps that name none only print (into the folder's files, see run_step).
    for step in GPU_CHECK.steps(8, second):
        writes = [step.argv[i + 1] for i, a in enumerate(step.argv) if a == "-o"]
        writes += [a.split("=", 1)[1] for a in step.argv if a.startswith("--basetemp=")]
        assert writes or step.name in ("version", "topo", "doctor"), step
        assert all(w.startswith(second + os.sep) for w in writes), step


LAUNCH = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "1",
          "SLURM_NTASKS": "1", "SLURM_STEP_NODELIST": "n1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_UNIVERSE_SIZE": "2", "PMIX_RANK": "0", "PMIX_NAMESPACE": "p",
          "PMI_RANK": "0", "PMI_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
          "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
KEPT = {"SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "1", "OMPI_MCA_btl": "self,tcp"}  # job-wide, configuration


def test_steps_run_without_the_launchers_variables(tmp_path):
    """As from `srun --pty bash` (or a shell under mpirun or torchrun): the steps must not take
    themselves for one rank of that launch."""
    env = {**os.environ, **LAUNCH, **KEPT}
    assert detect_launcher(env) == "mpi"
    dump = GPU_CHECK.Step("env", [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], 60,
                          stdout_file="env.json")
    [r] = GPU_CHECK.run_steps([dump], str(tmp_path), env)
    assert r["status"] == "PASS", open(r["log"]).read()
    with open(tmp_path / "env.json") as f:
        seen = json.load(f)
    assert sorted(set(LAUNCH) & set(seen)) == [] and detect_launcher(seen) is None
    assert {k: seen.get(k) for k in KEPT} == KEPT and seen["PATH"] == os.environ["PATH"]


def test_a_step_past_its_limit_is_stopped_whole_and_the_run_goes_on(tmp_path):
    # The step starts a child of its own, as mpirun starts ranks; both must be gone after the limit.
    sleeper = ("import subprocess, sys, time; "
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
               "print('started', child.pid, flush=True); time.sleep(5)")
    todo = [GPU_CHECK.Step("sleeper", [sys.executable, "-c", sleeper], 1),
            GPU_CHECK.Step("next", [sys.executable, "-c", "print('ran')"], 60)]
    late, after = GPU_CHECK.run_steps(todo, str(tmp_path), dict(os.environ))
    assert (late["status"], late["rc"], late["timeout_s"]) == ("TIMEOUT", None, 1) and late["seconds"] < 4
    assert GPU_CHECK.result_text(late) == "TIMEOUT (1 s)" and not GPU_CHECK.passed([late])
    log = open(late["log"]).read()
    assert late["log"] == str(tmp_path / "sleeper.log") and log.startswith(f"$ {sys.executable} -c ")
    started = re.search(r"^started (\d+)$", log, re.MULTILINE)
    assert started and started.end() < log.index("\ngpu-check: stopped at the time limit of 1 s\n")
    child = int(started.group(1))
    try:
        with open(f"/proc/{child}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"  # dead, not yet reaped by its new parent
    except FileNotFoundError:
        pass
    assert after["status"] == "PASS" and open(after["log"]).read().endswith("ran\n")


def test_doctor_verdict_is_reported_and_not_counted(tmp_path):
    folder = str(tmp_path)
    [doctor_step] = [s for s in GPU_CHECK.steps(1, folder) if s.name == "doctor"]
    # The very step, judging a recorded degraded node instead of this one.
    step = dataclasses.replace(doctor_step, argv=[*doctor_step.argv, "--from", DEGRADED])
    results = GPU_CHECK.run_steps([step, GPU_CHECK.Step("ok", [sys.executable, "-c", "pass"], 60)], folder)
    assert [(r["status"], r["rc"], r["counted"]) for r in results] == [("FAIL", 1, False), ("PASS", 0, True)]
    assert GPU_CHECK.passed(results)
    node = GPU_CHECK.doctor_summary(GPU_CHECK.read_doctor(os.path.join(folder, GPU_CHECK.DOCTOR_JSON)))
    assert node["status"] == "FAIL" and node["line"] == "doctor: 4 FAIL, 2 WARN, 22 PASS"
    assert [(c["status"], c["name"]) for c in node["findings"]] == [
        ("FAIL", "pcie_width"), ("FAIL", "throttle"), ("FAIL", "nvlink"), ("FAIL", "peer_access"),
        ("WARN", "infiniband"), ("WARN", "mtu")]
    GPU_CHECK.write_summary(folder, 1, results, node)
    summary = json.load(open(os.path.join(folder, "summary.json")))
    assert summary["passed"] is True and summary["doctor"] == node
    assert [s["timeout_s"] for s in summary["steps"]] == [GPU_CHECK.QUICK_S, 60]
    md = open(os.path.join(folder, "summary.md")).read()
    assert md.startswith("# gpu-check: 1 GPU(s), PASS\n")
    assert f"| doctor | FAIL (rc 1), not counted | {results[0]['seconds']} | {GPU_CHECK.QUICK_S} |" in md
    assert "doctor: 4 FAIL, 2 WARN, 22 PASS\n" in md
    assert "- FAIL nvlink: GPU 6 (0000:ba:00.0): 16 of 18 NVLinks up (remedy: inspect" in md
    assert "- WARN infiniband: mlx5_5 port 1: state DOWN: unused or down (remedy:" in md


def test_a_doctor_without_verdict_is_said_so():
    assert GPU_CHECK.doctor_summary(None) == {"status": None, "line": "doctor: no verdict (see doctor.log)",
                                              "findings": []}


@pytest.mark.parametrize("rc,status", [(0, "PASS"), (1, "FAIL")])
def test_a_counted_step_decides_the_run(rc, status, tmp_path):
    [r] = GPU_CHECK.run_steps([GPU_CHECK.Step("exit", [sys.executable, "-c", f"raise SystemExit({rc})"], 60)],
                              str(tmp_path))
    assert r["status"] == status and GPU_CHECK.passed([r]) == (rc == 0)
