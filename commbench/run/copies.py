"""Copies within one process: the GPU peer-to-peer matrix (`p2p --device cuda`) and host<->device
and host-staged transfers (`commbench copy`). Timed in commbench._cuda; one record per measurement."""

from __future__ import annotations

import numpy as np

from ..collectives.impls import COPY_IMPL
from ..results.record import measured
from ..sizes import format_size
from .policy import measure


def _measure(reporter, rig, op, mode, size, block, policy, **extra) -> dict:
    """One untimed pattern check of the copy, then its timed iterations; one record."""
    wrong = rig.wrong()
    samples = measure(lambda n: np.asarray(rig.times(n)), policy)
    rec = measured(op, COPY_IMPL, "uint8", "none", 1, size, size, samples, wrong, mode=mode, **extra)
    reporter.add(rec, block, format_size(size))
    return rec.as_dict()


# The peer matrix's --access: which GPU issues each copy, and the record modes that say so.
ACCESS = {"write": ("ce", "sm"), "read": ("ce-read", "sm-read"), "both": ("ce", "sm", "ce-read", "sm-read")}


def run_peer_matrix(cfg, reporter, gpus: int, modes=ACCESS["write"]) -> tuple[dict, int]:
    """Every ordered pair of visible GPUs (the diagonal is a copy within one GPU), by copy engine
    ("ce") and by SM kernel ("sm"), issued by the source GPU (it writes into its peer) or, in the
    "-read" modes, by the destination (it reads from its peer); one direction and both at once.
    Returns ({(mode, bidirectional): {(src, dst): [record per size] or the reason it was not
    measured}}, bytes that arrived wrong)."""
    from ..node.gpu import cuda_module
    _cuda = cuda_module()
    matrices: dict = {}
    wrong = 0
    for mode in modes:
        engine, read = mode.split("-")[0], mode.endswith("-read")
        for bidi in (False, True):
            cell: dict = {}
            for src in range(gpus):
                for dst in range(gpus):
                    why = _cuda.peer_status(src, dst)
                    if why and (engine == "sm" or read or bidi):
                        cell[(src, dst)] = why
                        continue
                    # A block per pair, as each pair is a series of its own (as links' pairs are).
                    block = f"peer {mode} {'bidirectional' if bidi else 'unidirectional'} {src}->{dst}"
                    reporter.block(block, {"ce": "copy engine, cudaMemcpyPeerAsync", "sm": "SM copy kernel"}[engine]
                                   + (", issued by the GPU that reads" if read else "")
                                   + (", both directions at once" if bidi else ""))
                    cell[(src, dst)] = []
                    for size in cfg.sizes:
                        reporter.step(f"{block} {src}->{dst} {format_size(size)}")
                        # Without peer access the driver stages a copy-engine copy through the host.
                        rec = _measure(reporter, _cuda.PeerCopy(dst, src, size, engine, bidi, read), "peer_copy", mode,
                                       size, block, cfg.policy, moved=2 if bidi else 1, pair=[src, dst],
                                       bidirectional=bidi, peer_access=not why)
                        cell[(src, dst)].append(rec)
                        wrong += rec["wrong"]
            matrices[(mode, bidi)] = cell
    return matrices, wrong


def print_matrices(matrices: dict, gpus: int, echo) -> None:
    """Bandwidth matrices at the largest size and the latency matrices (copy engine, one direction,
    written and read) at the smallest, laid out like CUDA's p2pBandwidthLatencyTest; N/A where peer access is unsupported,
    with the reason."""
    reasons = set()
    staged = False

    def table(title, cell, value):
        nonlocal staged
        echo("#")
        echo(f"# {title}")
        echo("#  src\\dst" + "".join(f"{d:>10}" for d in range(gpus)))
        for s in range(gpus):
            row = []
            for d in range(gpus):
                v = cell.get((s, d))
                if isinstance(v, str):
                    reasons.add(v)
                    row.append(f"{'N/A':>10}")
                    continue
                # Without peer access the driver stages a copy-engine copy through host memory.
                mark = "" if v[-1].get("peer_access", True) else "s"
                staged = staged or bool(mark)
                row.append(f"{value(v) + mark:>10}")
            echo(f"#{s:>8}" + "".join(row))

    for (mode, bidi), cell in matrices.items():
        table(f"{'bidirectional' if bidi else 'unidirectional'} {mode} bandwidth (GB/s"
              f"{', both directions summed' if bidi else ''}), largest size", cell,
              lambda recs: f"{recs[-1]['algbw_gbps']:.1f}")
    for mode in dict.fromkeys(mode for mode, _ in matrices if mode.startswith("ce")):  # written, read
        table(f"unidirectional {mode} latency (us), smallest size", matrices[(mode, False)],
              lambda recs: f"{recs[0]['time_us']['median']:.2f}")
    for r in sorted(reasons):
        echo(f"# N/A: {r}")
    if staged:
        echo("# s: no peer access: the driver staged the copy through host memory")


def run_copies(cfg, reporter, src: int, dst: int, staging_chunk: int) -> int:
    """Host<->device from pinned and pageable memory on GPU `src`, then GPU src -> GPU dst staged
    through pinned host memory beside the direct peer copy (what losing P2P costs). Returns the bytes
    that arrived wrong."""
    from ..node.gpu import cuda_module
    _cuda = cuda_module()
    tests = [
        ("h2d", "pinned", "host to device, pinned host memory", lambda s: _cuda.HostCopy(src, s, "h2d", True)),
        ("h2d", "pageable", "host to device, pageable host memory", lambda s: _cuda.HostCopy(src, s, "h2d", False)),
        ("d2h", "pinned", "device to host, pinned host memory", lambda s: _cuda.HostCopy(src, s, "d2h", True)),
        ("d2h", "pageable", "device to host, pageable host memory", lambda s: _cuda.HostCopy(src, s, "d2h", False)),
        ("staged", "pinned2", f"cuda:{src} -> pinned host -> cuda:{dst}, {format_size(staging_chunk)} chunks, two streams",
         lambda s: _cuda.StagedCopy(dst, src, s, staging_chunk)),
    ]
    why = _cuda.peer_status(src, dst)
    if not why:
        tests.append(("peer_copy", "ce", f"cuda:{src} -> cuda:{dst} direct (copy engine)",
                      lambda s: _cuda.PeerCopy(dst, src, s, "ce", False)))
    wrong = 0
    for op, mode, description, rig in tests:
        block = f"{op} {mode} cuda:{src}"
        reporter.block(block, description)
        for size in cfg.sizes:
            reporter.step(f"{block} {format_size(size)}")
            wrong += _measure(reporter, rig(size), op, mode, size, block, cfg.policy, pair=[src, dst])["wrong"]
    if why:
        reporter.warn(f"no direct copy cuda:{src} -> cuda:{dst} to compare with: {why}")
    return wrong


# The per-GPU summary's columns: (op, mode) of the host copies, and which of them are judged.
_HOST_COPIES = [("h2d", "pinned"), ("d2h", "pinned"), ("h2d", "pageable"), ("d2h", "pageable")]
_JUDGED = [("h2d", "pinned"), ("d2h", "pinned")]


def per_gpu_summary(records: list[dict], slow_fraction: float) -> dict:
    """`copy --src all`: each GPU's host copies at the largest size measured, side by side, and the
    GPUs whose pinned copies (the PCIe link's own figure: pageable ones add the host's memcpy) fall
    below slow_fraction of the median of the other GPUs (with two GPUs, each is judged against the
    other), each named with the remedy: {"size_bytes", "table" (lines), "findings"}."""
    largest = max(r["size_bytes"] for r in records)
    value = {(r["pair"][0], r["op"], r["mode"]): r["algbw_gbps"] for r in records
             if r["size_bytes"] == largest and (r["op"], r.get("mode")) in _HOST_COPIES}
    gpus = sorted({g for g, _, _ in value})
    table = ["#", f"# host<->device bandwidth per GPU (GB/s), {format_size(largest)}",
             "#  GPU" + "".join(f"{op + ' ' + mode:>14}" for op, mode in _HOST_COPIES)]
    table += [f"#{g:>5}" + "".join(f"{value[(g, op, mode)]:>14.1f}" if (g, op, mode) in value else f"{'-':>14}"
                                   for op, mode in _HOST_COPIES) for g in gpus]
    findings = []
    for op, mode in _JUDGED:
        measured = {g: value[(g, op, mode)] for g in gpus if (g, op, mode) in value}
        for g, v in measured.items():
            others = [o for h, o in measured.items() if h != g]
            median = float(np.median(others)) if others else 0.0
            if median > 0 and v < slow_fraction * median:
                findings.append({"device": g, "op": op, "mode": mode, "gbps": v, "others_median_gbps": median,
                                 "text": f"cuda:{g}: {op} {mode} {v:.1f} GB/s at {format_size(largest)}, {v / median:.0%} "
                                         f"of the other GPUs' median {median:.1f}: its PCIe link or its path to host "
                                         f"memory is slow; remedy: compare its link generation and width with the "
                                         f"others' (nvidia-smi -q -d PCI, commbench topo) and its CPUs' NUMA node "
                                         f"(commbench doctor)"})
    return {"size_bytes": largest, "table": table, "findings": findings}
