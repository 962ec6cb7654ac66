"""Commands about the node itself: inventory, preflight health, what is built."""

from __future__ import annotations

import os
import sys

import click

from .. import __version__
from .group import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as JSON.")
def topo(as_json) -> None:
    """Inventory of GPUs (NVML), host, NUMA, NICs, InfiniBand and library versions."""
    import json

    from ..node.topo import snapshot
    snap = snapshot()
    if as_json:
        click.echo(json.dumps(snap, indent=1))
        return
    for line in _topo_lines(snap):
        click.echo(line)


def _topo_lines(snap: dict) -> list[str]:
    h, g, lib = snap["host"], snap["gpus"], snap["libraries"]
    lines = [f"host {h['hostname']}: {h['cpu_model']}, {h['sockets']} socket(s), {h['cores']} cores, "
             f"{h['memory_bytes'] / 2**30:.1f} GiB, kernel {h['kernel']}"]
    for n in h["numa_nodes"]:
        mem = f"{n['memory_bytes'] / 2**30:.1f} GiB" if n["memory_bytes"] else "memory unknown"
        lines.append(f"  NUMA node {n['node']}: CPUs {n['cpus']}, {mem}")
    for n in h["nics"]:
        if n["type"] == "loopback":
            continue
        speed = f"{n['speed_mbps']} Mb/s" if n["speed_mbps"] else "speed unknown"
        lines.append(f"  NIC {n['name']}: {n['type']}{' (virtual)' if n['virtual'] else ''}, {n['state']}, "
                     f"MTU {n['mtu']}, {speed}")
    lines.append("  InfiniBand: " + ("; ".join(f"{p['hca']}/{p['port']} {p['state']} {p['rate_gbps']} Gb/s "
                                              f"{p['link_layer']}" for p in h["infiniband"]) or "none"))
    if not g["available"]:
        lines.append(f"GPUs: none ({g['reason']})")
    else:
        lines.append(f"GPUs: {len(g['devices'])}, driver {g['driver']}, CUDA {g['cuda_driver']}")
        for d in g["devices"]:
            p, nv = d["pcie"], d["nvlink"]
            lines.append(f"  GPU {d['index']} {d['name']} {d['pci_bus_id']}: PCIe Gen{p['gen_current']}/{p['gen_max']} "
                         f"x{p['width_current']}/{p['width_max']}, NVLink {nv['links_up']}/{nv['links_total']}, "
                         f"CPUs {d['cpu_affinity']}, NUMA {d['numa_node']}, {d['temperature_c']} C, "
                         f"{d['power_w']}/{d['power_limit_w']} W, events: {', '.join(d['clock_event_reasons']) or 'none'}")
        n = len(g["devices"])
        lines.append("  topology " + "".join(f"{'GPU' + str(j):>7}" for j in range(n)))
        for i, row in enumerate(snap["topology"]):
            lines.append(f"  GPU{i:<6}" + "".join(f"{c:>7}" for c in row))
    lines.append(f"libraries: MPI {lib['mpi']}, NCCL {lib['nccl'] or 'not loaded'}, torch {lib['torch']}")
    lines.append(f"fingerprint: {snap['fingerprint']}")
    return lines


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--from", "source", type=click.Path(dir_okay=False), default=None,
              help="Judge a snapshot saved by 'commbench topo --json' instead of this node.")
@click.option("--expect", type=click.Path(dir_okay=False), default=None,
              help='Node-class description (JSON), e.g. {"gpus": 8, "nvlinks_per_gpu": 18, "pcie_gen": 5}.')
def doctor(as_json, source, expect) -> None:
    """Preflight health checks; exit 1 when any check fails."""
    import json

    from ..node.doctor import as_json as checks_json
    from ..node.doctor import check_expect, check_snapshot, exit_status, run_checks, verdict_line
    from ..node.topo import snapshot
    wanted = None
    if expect is not None:
        wanted = _load_json(expect, "--expect")
        check_expect(wanted, expect)
    if source:
        snap = _load_json(source, "--from")
        check_snapshot(snap, source)
    else:
        snap = snapshot()
    checks = run_checks(snap, wanted)
    if as_json:
        click.echo(json.dumps({"fingerprint": snap.get("fingerprint"), "checks": checks_json(checks),
                               "status": "FAIL" if exit_status(checks) else "PASS"}, indent=1))
    else:
        for c in checks:
            remedy = f"\n{'':24}remedy: {c.remedy}" if c.remedy and c.status != "PASS" else ""
            click.echo(f"{c.status:<5} {c.name:<18} {c.evidence}{remedy}")
        click.echo(verdict_line([c.status for c in checks]))
    sys.exit(exit_status(checks))


def _load_json(path: str, flag: str):
    from ..results.document import read_json
    return read_json(path, f"{flag} file")


@cli.command()
@click.option("--verbose", "-v", is_flag=True, help="List the native parts and library versions.")
def version(verbose: bool) -> None:
    """Print the version (and, with -v, what is built)."""
    click.echo(f"commbench {__version__}")
    if verbose:

        from ..node import machine
        try:
            from .. import _host  # noqa: F401
            host = "built"
        except ImportError as e:
            host = f"missing ({e})"
        click.echo(f"native host extension (commbench._host): {host}")
        from ..node.gpu import EMULATION, cuda_absence, cuda_module, visible_gpus
        mod = cuda_module()
        if mod is None:
            click.echo(f"CUDA extension (commbench._cuda): absent: {cuda_absence()}")
        elif mod.emulated:
            click.echo(f"_cuda: emulated ({os.environ[EMULATION]} devices); {mod.versions()} (emulated)")
        else:
            click.echo(f"CUDA extension (commbench._cuda): built; {mod.versions()}")
        if mod is not None:
            gpus, why = visible_gpus()
            click.echo(f"GPUs visible: {gpus}" + (f" ({why})" if why else ""))
        click.echo(f"MPI: {machine.mpi_version() or 'not available'}"
                   + (" (CUDA-aware)" if host == "built" and _host.mpi_cuda_aware() else ""))
