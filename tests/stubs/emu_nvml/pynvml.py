"""NVML for the emulated GPUs (tests/emu): on this directory first in PYTHONPATH, every process finds
this stand-in as pynvml. It answers, through tests/fake_pynvml.py, for COMMBENCH_GPU_EMULATION GPUs of
one healthy node joined by NVSwitch, with the emulated runtime's bus ids, so that topo and doctor run
their NVML paths beside the emulated CUDA runtime."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import fake_pynvml  # noqa: E402

_N = int(os.environ.get("COMMBENCH_GPU_EMULATION") or 0)
_BUSES = [f"{0x10 + i:02x}:00.0" for i in range(_N)]  # the emulated runtime's cudaDeviceGetPCIBusId
_GPUS = [dict(name="commbench emulated GPU", bus=bus, pcie=(5, 5, 16, 16), links=[(True, "ff:00.0")] * 18,
              nvlink_version=4, cpus=set(range(os.cpu_count() or 1)), reasons=0x1, temp=40, power_mw=90000,
              limit_mw=700000, ecc=0, remap=(0, 0, 0, 0), procs=[], p2p={}, level={j: 0 if j == i else 20 for j in range(_N)})
         for i, bus in enumerate(_BUSES)]

sys.modules[__name__] = fake_pynvml.make(_GPUS, driver="580.00.00", cuda=13000)
