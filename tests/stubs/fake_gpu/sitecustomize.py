"""Makes GPUs visible to commbench on a host without one: on this directory first in PYTHONPATH,
every Python process (mpirun's ranks included) finds this stand-in as commbench._cuda. It answers
only the questions a CPU run may ask (is there a GPU, which versions); anything else is GPU work,
and raises, so that a CPU run that strays onto the GPU path fails loudly."""

import os
import sys
import types


class _StubCuda(types.ModuleType):
    emulated = False

    def device_count(self) -> int:
        return int(os.environ.get("COMMBENCH_STUB_GPUS", "1"))

    def versions(self) -> str:
        return "CUDA runtime 13.0, NCCL 2.30.7"

    def __getattr__(self, name):
        if name.startswith("__"):  # probes such as hasattr(module, "__file__") must stay harmless
            raise AttributeError(name)
        raise RuntimeError(f"commbench._cuda.{name} used, but the GPUs here are a test stub "
                           f"(tests/stubs/fake_gpu): this run took the GPU path")


sys.modules["commbench._cuda"] = _StubCuda("commbench._cuda")
