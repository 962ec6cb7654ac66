"""GPU start-up on a node, without a GPU: which CUDA compiler builds commbench._cuda (stub nvcc of
other releases), why it is absent, which GPU each rank takes (stubbed device counts and UUIDs), the
memory check with NCCL's buffers and torch's cache, and the device timer's floor."""

import os
import stat
import subprocess
import sys

import pytest

from commbench.errors import CommbenchError
from commbench.node import gpu, toolkit

TORCH_CUDA = "13.0"


def _nvcc(home, release):
    """A stub toolkit at `home` whose nvcc reports `release`."""
    os.makedirs(os.path.join(home, "bin"), exist_ok=True)
    path = os.path.join(home, "bin", "nvcc")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                f"echo 'Cuda compilation tools, release {release}, V{release}.88'\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return str(home)


def _wheel(site, release):
    return _nvcc(os.path.join(site, "nvidia", f"cu{release.split('.')[0]}"), release)


def test_stub_nvcc_reports_its_release(tmp_path):
    assert toolkit.nvcc_release(_nvcc(tmp_path / "cuda-12.4", "12.4")) == "12.4"
    assert toolkit.nvcc_release(str(tmp_path / "missing")) is None


def test_system_toolkit_of_another_release_is_refused_with_the_reason(tmp_path):
    system = _nvcc(tmp_path / "cuda-12.4", "12.4")
    home, why = toolkit.choose(TORCH_CUDA, [], {"CUDA_HOME": system, "PATH": os.path.join(system, "bin")}, ())
    assert home is None
    assert "no nvcc matches torch's CUDA 13.0" in why and f"12.4 at {system}" in why
    assert "nvidia-cuda-nvcc==13.0.*" in why


def test_the_environment_wheel_wins_over_a_mismatched_system_toolkit(tmp_path):
    site = str(tmp_path / "site-packages")
    wheel = _wheel(site, "13.0")
    system = _nvcc(tmp_path / "cuda-12.4", "12.4")
    home, what = toolkit.choose(TORCH_CUDA, [site], {"CUDA_HOME": system, "PATH": ""}, ())
    assert home == wheel and "nvcc 13.0 from the nvidia-cuda-nvcc wheel" in what


def test_a_system_toolkit_is_used_when_its_release_matches(tmp_path):
    system = _nvcc(tmp_path / "cuda-13.0", "13.0")
    home, what = toolkit.choose(TORCH_CUDA, [str(tmp_path / "empty-site")], {"PATH": os.path.join(system, "bin")}, ())
    assert home == system and "nvcc on PATH" in what


def test_exact_release_beats_same_major(tmp_path):
    newer = _nvcc(tmp_path / "cuda-13.2", "13.2")
    exact = _nvcc(tmp_path / "cuda-13.0", "13.0")
    env = {"CUDA_HOME": newer, "PATH": os.path.join(exact, "bin")}
    assert toolkit.choose(TORCH_CUDA, [], env, ())[0] == exact
    # Only the newer minor release: torch's builder accepts it, so it is used.
    assert toolkit.choose(TORCH_CUDA, [], {"CUDA_HOME": newer, "PATH": ""}, ())[0] == newer


def test_no_compiler_cpu_torch_and_skip_switch(tmp_path):
    home, why = toolkit.choose(TORCH_CUDA, [], {"PATH": ""}, ())
    assert home is None and "no CUDA compiler found" in why
    assert toolkit.choose(None, [], {"PATH": ""}, ()) == (None, "torch is a CPU build")
    assert toolkit.choose(TORCH_CUDA, [], {"COMMBENCH_SKIP_CUDA": "1"}, ())[0] is None


def test_wheel_toolkit_gets_an_unversioned_cudart_for_the_linker(tmp_path):
    home = tmp_path / "cu13"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "libcudart.so.13").write_bytes(b"")
    link_dir = toolkit.cudart_link_dir(str(home), str(tmp_path / "build"))
    assert os.path.realpath(os.path.join(link_dir, "libcudart.so")) == str(home / "lib" / "libcudart.so.13")
    (home / "lib" / "libcudart.so").write_bytes(b"")
    assert toolkit.cudart_link_dir(str(home), str(tmp_path / "build2")) is None


@pytest.fixture
def no_cuda_module(monkeypatch, tmp_path):
    """commbench._cuda unimportable, and a build record saying why."""
    monkeypatch.setitem(sys.modules, "commbench._cuda", None)
    info = tmp_path / "_build_info.json"
    monkeypatch.setattr(toolkit, "BUILD_INFO", str(info))
    return info


def test_absent_extension_says_why_in_one_line(no_cuda_module):
    from click.testing import CliRunner

    from commbench.cli import cli
    why = "no nvcc matches torch's CUDA 13.0 (found 12.4 at /usr/local/cuda)"
    toolkit.write_build_info(False, why)
    assert gpu.visible_gpus() == (0, f"commbench._cuda was not built: {why}")
    out = CliRunner().invoke(cli, ["version", "-v"]).output
    assert f"CUDA extension (commbench._cuda): absent: commbench._cuda was not built: {why}\n" in out
    with pytest.raises(CommbenchError, match="needs a GPU: commbench._cuda was not built: no nvcc matches"):
        gpu.require_gpu("--device cuda")


def test_extension_that_fails_to_load_reports_the_import_error(no_cuda_module):
    toolkit.write_build_info(True, "nvcc 13.0")
    n, why = gpu.visible_gpus()
    assert n == 0 and why.startswith("commbench._cuda does not load: ") and "_cuda" in why


class FakeCuda:
    """commbench._cuda as a rank sees it: `count` visible devices with these UUIDs."""

    def __init__(self, uuids, error=None):
        self.uuids, self.error = uuids, error

    def device_count(self):
        if self.error:
            raise RuntimeError(self.error)
        return len(self.uuids)

    def device_identity(self, ordinal):
        assert 0 <= ordinal < len(self.uuids), "an invalid ordinal was chosen"
        return self.uuids[ordinal], f"0000:{ordinal + 0x18:02x}:00.0"


def _use(monkeypatch, fake: FakeCuda) -> None:
    """`fake` as commbench._cuda, on a host whose CUDA driver loads."""
    monkeypatch.setattr(gpu, "driver_loads", lambda: True)
    monkeypatch.setattr(gpu, "_load", lambda: (fake, ""))


def test_a_host_without_the_cuda_driver_has_no_gpu_and_never_loads_torch():
    """No driver library: zero GPUs, said so, without importing torch (seconds on a CPU host); topo
    then records no NCCL version."""
    code = ("import sys; from commbench.node import gpu, topo; gpu.DRIVER_LIBRARY = 'libcuda-absent.so.1'; "
            "print(gpu.visible_gpus()); print(topo.library_versions()['nccl']); print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == [
        "(0, 'no NVIDIA driver on this host (libcuda-absent.so.1 does not load)')",
        "None", "False"], r.stderr


def test_auto_refuses_gpus_that_cuda_cannot_use(tmp_path, monkeypatch, capsys):
    """A GPU's device file is there and CUDA cannot use it (here: no driver library): --device auto
    refuses, with the reason, instead of measuring the CPU; GPUs hidden on purpose
    (CUDA_VISIBLE_DEVICES) leave the CPU to measure."""
    from conftest import in_process

    from commbench.cli.common import resolve_device
    (tmp_path / "nvidia0").touch()
    monkeypatch.setattr(gpu, "DEVICE_FILES", str(tmp_path / "nvidia[0-9]*"))
    monkeypatch.setattr(gpu, "driver_loads", lambda: False)
    code, out, err = in_process(["allreduce", "--sizes", "1K"], monkeypatch, capsys)
    assert code == 2 and err == (f"commbench: error: --device auto: this host has GPUs ({tmp_path}/nvidia0) but CUDA "
                                 f"cannot use them: no NVIDIA driver on this host (libcuda.so.1 does not load); "
                                 f"--device cpu measures the CPU\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_device("auto", None) == ("cpu", 0)


class FakeWorld:
    """Rank 0 of `size` ranks on one host; the other ranks' identities are given."""

    def __init__(self, size, local_rank, others, host="node1"):
        self.rank, self.size, self.local_rank, self.others = 0, size, local_rank, others
        self.hosts = [host] * size

    def gather(self, mine):
        return [mine, *self.others]

    def bcast(self, value):
        return value


def test_driver_errors_are_reported_in_the_runtimes_words(monkeypatch):
    _use(monkeypatch, FakeCuda([], "CUDA driver version is insufficient for CUDA runtime version (the driver "
                                   "supports CUDA 12.4)"))
    n, why = gpu.visible_gpus()
    assert n == 0 and why == ("CUDA cannot use the GPUs: CUDA driver version is insufficient for CUDA runtime "
                              "version (the driver supports CUDA 12.4) (remedy: a torch built for the driver's CUDA, "
                              "e.g. `make install TORCH_CUDA=cu128`; nvidia-smi names the newest CUDA the driver supports)")


@pytest.mark.parametrize("visible,local_ranks,expected", [
    (8, range(8), list(range(8))),  # every GPU visible to every rank: local rank i takes GPU i
    (1, range(8), [0] * 8),  # --gpus-per-task=1: each rank's only GPU
    (2, range(4), [0, 1, 0, 1]),  # --gpus-per-task=2
])
def test_device_choice_follows_what_the_rank_sees(visible, local_ranks, expected):
    assert [gpu.choose_device(r, visible) for r in local_ranks] == expected


def test_per_rank_binding_is_accepted(monkeypatch):
    """Slurm --gpus-per-task=1: four ranks, each seeing one GPU of its own as ordinal 0."""
    _use(monkeypatch, FakeCuda(["GPU-aaaa"]))
    others = [("node1", f"GPU-{c * 4}", f"0000:{i:02x}:00.0") for i, c in enumerate("bcd", 1)]
    assert gpu.rank_device(FakeWorld(4, 0, others)) == 0


def test_one_gpu_per_rank_is_a_binding_to_warn_of_only_where_ranks_share_a_host():
    """Ranks that each see one GPU of an 8-GPU host: two of them on one host may lose NCCL's direct
    path between their GPUs; one rank per host (srun -N 2 --ntasks-per-node 1) has no such peer."""
    assert "every rank sees one GPU of a host with 8" in gpu.binding_warning([1, 1], [8, 8], ["a", "a"])
    assert gpu.binding_warning([1, 1, 1], [8, 8, 8], ["a", "b", "c"]) is None
    assert gpu.binding_warning([8, 8], [8, 8], ["a", "a"]) is None
    assert gpu.binding_warning([1, 1], [1, 1], ["a", "a"]) is None


def test_two_ranks_on_one_physical_gpu_are_refused_by_name(monkeypatch):
    """CUDA_VISIBLE_DEVICES=0 for every rank: each sees one GPU, and it is the same one."""
    _use(monkeypatch, FakeCuda(["GPU-aaaa"]))
    others = [("node1", "GPU-bbbb", "0000:19:00.0"), ("node1", "GPU-aaaa", "0000:18:00.0")]
    with pytest.raises(CommbenchError, match=r"ranks 0 and 2 on host node1 both use GPU GPU-aaaa \(PCI 0000:18:00.0\)"):
        gpu.rank_device(FakeWorld(3, 0, others))


def test_a_rank_without_a_gpu_fails_every_rank_instead_of_hanging_them(monkeypatch):
    """Rank 0 sees its GPU; rank 1 sees none (CUDA_VISIBLE_DEVICES=''): rank 0 must not wait for rank
    1's identity for ever, and the error names rank 1."""
    _use(monkeypatch, FakeCuda(["GPU-aaaa"]))
    others = ["--device cuda needs a GPU: no CUDA device visible (CUDA_VISIBLE_DEVICES='')"]
    with pytest.raises(CommbenchError, match=r"^rank 1: --device cuda needs a GPU: no CUDA device visible"):
        gpu.rank_device(FakeWorld(2, 0, others))


def test_the_same_gpu_id_on_two_hosts_is_no_duplicate():
    assert gpu.duplicate_gpus([("a", "GPU-1", "x"), ("b", "GPU-1", "x")]) is None


def test_nccl_reserve_follows_its_settings():
    """Worked by hand from NCCL 2.28's sizes (node/gpu.py): a connection of the default 4 MiB Simple
    buffer is 10 MiB received (LL, LL128, Simple and a header in 2 MiB granules) and 2 MiB sent."""
    mib = 2**20
    # 8 GPUs of one node, all-to-all: tables (32 x 3 + 16) x 2, ring and tree 32 x 12 x 3, 7 peers
    # x 32 channels x 12, NVLS 16 x 2 x 1 MiB x 8 GPUs + 2.
    assert gpu.nccl_reserve_bytes(8, 8, 7, {}) == (224 + 1152 + 2688 + 258) * mib
    assert gpu.nccl_reserve_bytes(8, 8, 7, {"NCCL_NVLS_ENABLE": "0"}) == (224 + 1152 + 2688) * mib
    # Channels above 32 (MAXCHANNELS is 64): tables (64 x 3 + 16) x 2, ring and tree 64 x 12 x 3; a peer of
    # the node gets every p2p channel (NCCL 2.29-2.30), 7 x 64 x 12.
    assert gpu.nccl_reserve_bytes(8, 8, 7, {"NCCL_MAX_NCHANNELS": "64"}) == (416 + 2304 + 5376 + 258) * mib
    assert gpu.nccl_reserve_bytes(8, 8, 7, {"NCCL_MAX_CTAS": "100"}) == gpu.nccl_reserve_bytes(8, 8, 7, {"NCCL_MAX_CTAS": "64"})
    # 2 ranks, 1 MiB buffers (8 + 2 MiB a connection), 4 channels (and 4 p2p channels: tables (4 x 3 +
    # 16) x 2), a ring alone, no point-to-point.
    assert gpu.nccl_reserve_bytes(2, 2, 0, {"NCCL_BUFFSIZE": "0x100000", "NCCL_MAX_NCHANNELS": "4"}) == \
        (56 + 40 + 66) * mib
    # Ranks on separate nodes: no NVLS; one rank: no connection at all.
    assert gpu.nccl_reserve_bytes(2, 1, 0, {}) == (224 + 32 * 12) * mib
    assert gpu.nccl_reserve_bytes(1, 1, 0, {}) == 224 * mib
    assert gpu.nccl_reserve_bytes(8, 8, 7, {"NCCL_BUFFSIZE": "junk"}) == gpu.nccl_reserve_bytes(8, 8, 7, {})


@pytest.mark.parametrize("nodes,channels,per_peer", [(1, 32, 32), (2, 32, 4), (8, 32, 4), (16, 32, 2), (32, 32, 1),
                                                     (64, 32, 1), (4, 16, 4), (8, 16, 2), (16, 16, 1)])
def test_nccl_gives_every_point_to_point_peer_the_channels_of_its_node_count(nodes, channels, per_peer):
    """NCCL 2.29-2.30 (graph/paths.cc): 4 channels a NET peer for one 400G NIC a GPU, halved while they
    times the node count exceed the p2p channels; on one node every p2p channel."""
    assert gpu.p2p_channels_per_peer(nodes, channels, {}) == per_peer
    assert gpu.p2p_channels_per_peer(nodes, channels, {"NCCL_NCHANNELS_PER_NET_PEER": "3"}) == (
        channels if nodes == 1 else 4)


def test_nccl_reserve_across_nodes_shares_its_network_buffers():
    """64 nodes of 8 GPUs, all-to-all: the 7 peers of the node at 1 channel each (12 MiB a channel),
    the 504 others through the shared pools of 32 channels x 16 slots x 128 KiB (64 MiB), this rank's
    receive pool and up to the 8 local ranks' send pools; whatever the count of peers."""
    mib = 2**20
    tables, rings, nvls = 224, 1152, 258
    assert gpu.nccl_reserve_bytes(512, 8, 511, {}) == (tables + rings + 7 * 12 + 9 * 64 + nvls) * mib
    assert gpu.nccl_reserve_bytes(4096, 8, 4095, {}) == gpu.nccl_reserve_bytes(512, 8, 511, {})
    # 2 nodes: 4 channels a peer.
    assert gpu.nccl_reserve_bytes(16, 8, 15, {}) == (tables + rings + 7 * 4 * 12 + 9 * 64 + nvls) * mib


def test_the_gpu_cluster_plan_fits_64_nodes_of_8_h100_80gb():
    """Each measuring step of gpu-cluster at its largest message on 64 nodes of 8 GPUs: its buffers
    and NCCL's bound (every peer reached by point-to-point where the step's calls are sends and
    receives) within what an H100-80GB has free (81,559 MiB, 1 GiB of it the CUDA context's)."""
    from commbench import collectives
    from commbench.accept import plan as plans
    from commbench.run.preflight import collective_bytes, p2p_bytes
    from commbench.sizes import parse_size, parse_sizes
    free, ranks, local = (81559 - 1024) * 2**20, 512, 8
    needs = {}
    for step in (s for s in plans.load("gpu-cluster").steps if s.measuring):
        if step.command == "links":
            need = p2p_bytes(parse_size(step.options["bandwidth-size"]))
            peers = ranks - 1
        else:
            coll = collectives.get(step.command)
            need = collective_bytes(coll, max(parse_sizes(step.options["sizes"])), 4, ranks, (False,))
            peers = ranks - 1 if coll.peer_to_peer else 0
        needs[step.name] = need + gpu.nccl_reserve_bytes(ranks, local, peers, {})
    assert set(needs) == {"allreduce", "allgather", "alltoall", "links"}
    assert all(need <= free for need in needs.values()), {k: v / 2**30 for k, v in needs.items()}


@pytest.fixture
def gpu_memory(monkeypatch):
    """A GPU with `free` bytes free, as commbench._cuda.mem_get_info reports it."""
    from types import SimpleNamespace

    def set_memory(free):
        monkeypatch.setattr(gpu, "cuda_module", lambda: SimpleNamespace(mem_get_info=lambda device: (free, 80 << 30)))
    return set_memory


def _one_rank_world():
    from commbench.launch.world import World
    return World(rank=0, size=1, hosts=["node1"], launcher="local", device=0)


def test_memory_check_counts_nccls_buffers(gpu_memory):
    from commbench.run.buffers import check_device_memory
    gpu_memory(free=4 << 30)
    check_device_memory(_one_rank_world(), 2 << 30, "an all-reduce of 1G", p2p_peers=0)
    # 3.5 GiB of buffers alone would fit in 90 % of 4 GiB; with one rank's NCCL tables (224 MiB) they do not.
    with pytest.raises(CommbenchError, match=r"needs about 3\.7 GiB on GPU 0 \(with NCCL's buffers\)"):
        check_device_memory(_one_rank_world(), 7 << 29, "an all-reduce of 1.75G", p2p_peers=0)


def test_device_samples_are_judged_against_the_event_timers_resolution():
    from commbench.cli.common import timer_floor_s
    from commbench.results.stats import sample_flags
    assert timer_floor_s("cuda") == pytest.approx(max(gpu.CUDA_EVENT_RESOLUTION_S, timer_floor_s("cpu")))
    assert timer_floor_s("cpu") < gpu.CUDA_EVENT_RESOLUTION_S  # this host's clock is finer
    five_us = [5.0] * 20
    assert "timer_floor" in sample_flags(five_us, timer_floor_s("cuda"))
    assert "timer_floor" not in sample_flags(five_us, timer_floor_s("cpu"))


def test_a_failure_midway_names_the_step_and_keeps_the_file(tmp_path, capsys):
    """What a NCCL timeout or async error becomes: one line naming the step (impl and size) and the
    rank's own words, the result file closed as failed with the rows measured before."""
    from commbench.cli.common import sweep as _sweep
    from commbench.results import document as results
    from commbench.run.config import RunConfig
    from commbench.run.reporter import Reporter, run_metadata
    path = str(tmp_path / "r.json")
    cfg = RunConfig(op="allreduce", impls=("ring@nccl",), sizes=(1 << 26,), device="cuda")
    reporter = Reporter(run_metadata(_one_rank_world(), cfg.describe(), ["commbench"]), path, 2, 1e-8)
    reporter.step("ring@nccl 64M")

    def run():
        raise RuntimeError("ring all-reduce did not finish within --timeout 5 s (rank 0, device 0): a peer rank "
                           "is dead or stalled; NCCL communicator aborted")
    with pytest.raises(SystemExit) as stop:
        _sweep(reporter, run, _one_rank_world())
    assert stop.value.code == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("commbench:")]
    assert len(err) == 1
    assert err[0].startswith("commbench: error at ring@nccl 64M: RuntimeError: ring all-reduce did not finish within "
                             "--timeout 5 s (rank 0, device 0)")
    doc = results.load_document(path)
    assert doc["status"] == "failed" and doc["error"].startswith("RuntimeError at ring@nccl 64M: ring all-reduce")


def test_device_array_slices_and_views_address_the_same_memory():
    """GPU buffers' views (run/device_arrays.py), as the buffer caster reads them, without a GPU: a
    stand-in memory at a made-up address."""
    from types import SimpleNamespace

    from commbench.run.device_arrays import DeviceArray
    a = DeviceArray(SimpleNamespace(ptr=1 << 20, device=3), 100, "float32")
    b = a[10:20]
    assert (b.data_ptr(), b.numel(), b.get_device(), b.device.type, b.dtype) == ((1 << 20) + 40, 10, 3, "cuda", "float32")
    assert a[90:200].numel() == 10 and a[50:10].numel() == 0
    assert a.view("uint8").numel() == 400 and b.view("float64").numel() == 5
    with pytest.raises(ValueError, match="contiguous slices only"):
        a[::2]
    with pytest.raises(ValueError, match="not whole float64 elements"):
        a[1:2].view("float64")


@pytest.mark.parametrize("visible,printed", [(None, "GPU-1234"), ("0,1", "GPU-1234"), ("MIG-abcd,MIG-ef01", "MIG-1234")])
def test_mig_instances_print_as_nvidia_smi_prints_them(visible, printed):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert gpu.printed_uuid("GPU-1234", env) == printed
