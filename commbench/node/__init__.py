"""The node: CPU, memory, MPI and toolkit facts, GPUs through NVML and torch, topology, health
checks (doctor)."""
