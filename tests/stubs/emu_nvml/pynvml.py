"""NVML for the emulated GPUs (tests/emu): on this directory first in PYTHONPATH, every process finds
this stand-in as pynvml. It answers, through tests/fake_pynvml.py, for COMMBENCH_GPU_EMULATION GPUs of
one healthy node joined by NVSwitch, with the emulated runtime's bus ids, so that topo and doctor run
their NVML paths beside the emulated CUDA runtime."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import fake_pynvml  # noqa: E402

from commbench.node.topo import cpulist_to_set  # noqa: E402

_N = int(os.environ.get("COMMBENCH_GPU_EMULATION") or 0)
_BUSES = [f"{0x10 + i:02x}:00.0" for i in range(_N)]  # the emulated runtime's cudaDeviceGetPCIBusId
# COMMBENCH_EMU_GPU_CPUS="0;1": GPU i is local to the i-th CPU list (a node of two sockets); default
# every CPU, for every GPU.
_CPUS = [cpulist_to_set(c) for c in os.environ["COMMBENCH_EMU_GPU_CPUS"].split(";")] \
    if os.environ.get("COMMBENCH_EMU_GPU_CPUS") else [set(range(os.cpu_count() or 1))] * _N
_GPUS = [dict(name="commbench emulated GPU", bus=bus, pcie=(5, 5, 16, 16), links=[(True, "ff:00.0")] * 18,
              nvlink_version=6, cpus=_CPUS[i], reasons=0x1, temp=40, power_mw=90000,
              limit_mw=700000, ecc=0, remap=(0, 0, 0, 0), procs=[], p2p={}, level={j: 0 if j == i else 20 for j in range(_N)})
         for i, bus in enumerate(_BUSES)]

sys.modules[__name__] = fake_pynvml.make(_GPUS, driver="580.00.00", cuda=13000)
