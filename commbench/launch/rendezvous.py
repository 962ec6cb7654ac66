"""The torch.distributed process group of the ranks (gloo), which carries the untimed collectives of a
torchrun launch and the gloo transport's timed ones, and where rank 0 listens for its peers (the
group's store, the watchdog's side channel)."""

from __future__ import annotations

import datetime
import os
import socket
import sys
import threading

from ..errors import CommbenchError, one_line
from ..node.gpu import DEFAULT_TIMEOUT_S

# gloo's own bound on a wait; the watchdog (--timeout) ends a stalled run first.
_TIMEOUT = datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
# The least a torchrun-style rank waits for its peers, whatever --timeout says: they are still
# loading torch (3.6 s of CPU each), and on a busy node, ranks started together reached the
# rendezvous more than 2 s apart.
RENDEZVOUS_FLOOR_S = 10.0


class _ProcessGroup:
    def close(self) -> None:
        import torch.distributed as dist
        dist.destroy_process_group()


def all_gather_flat(out, own, group) -> None:
    """Every rank's `own` tensor, in rank order, into the flat `out`: torch 2.14 names the call
    all_gather_single and warns on every rank's stderr at the older name, which earlier releases
    alone have."""
    import torch.distributed as dist
    call = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    call(out, own, group=group)


def join(world, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """The torch.distributed gloo group over all ranks, created on first use. Under MPI, rank 0 opens
    the rendezvous store on its own address and publishes it, so this works across hosts too. A
    world of some of the ranks (World.subset) already has its group. Under torchrun the ranks must
    meet within `timeout_s`."""
    if world.group is not None:
        return
    world.attached("gloo", lambda: _open(world, timeout_s))


def _open(world, timeout_s: float) -> _ProcessGroup:
    import torch.distributed as dist
    if world.launcher == "torchrun":
        # Nothing else ends a rank whose peers never come (torchrun's store waits in C++), so a
        # timer does, with the rank's one line.
        timer = threading.Timer(max(timeout_s, RENDEZVOUS_FLOOR_S), _not_met, (world, timeout_s))
        timer.daemon = True
        timer.start()
        try:
            dist.init_process_group("gloo", timeout=_TIMEOUT)
        finally:
            timer.cancel()
        return _ProcessGroup()
    addr = world.root_call(lambda: rendezvous_address(world.hosts))
    store = None
    if world.rank == 0:
        # wait_for_workers=False: the workers can only connect once the port is published.
        store = dist.TCPStore(addr, 0, world.size, True, timeout=_TIMEOUT, wait_for_workers=False)
    port = world.bcast(store.port if world.rank == 0 else None)
    if world.rank != 0:
        store = dist.TCPStore(addr, port, world.size, False, timeout=_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size, timeout=_TIMEOUT)
    return _ProcessGroup()


def _not_met(world, timeout_s: float) -> None:
    sys.stderr.write(one_line(
        f"commbench: error: rank {world.rank}: the torchrun-style rendezvous at {os.environ.get('MASTER_ADDR')}:"
        f"{os.environ.get('MASTER_PORT')} did not complete within {max(timeout_s, RENDEZVOUS_FLOOR_S):g} s "
        f"(--timeout {timeout_s:g} s, at least {RENDEZVOUS_FLOOR_S:g} s for the ranks to start): start all "
        f"{world.size} ranks (WORLD_SIZE) with the same MASTER_ADDR and MASTER_PORT") + "\n")
    sys.stderr.flush()
    os._exit(CommbenchError.exit_code)


def rendezvous_address(hosts: list[str]) -> str:
    """Where rank 0 listens: COMMBENCH_MASTER_ADDR if set, loopback when all ranks share this host,
    else this host's resolvable address."""
    if os.environ.get("COMMBENCH_MASTER_ADDR"):
        return os.environ["COMMBENCH_MASTER_ADDR"]
    if len(set(hosts)) == 1:
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as e:
        raise CommbenchError(f"cannot resolve this host's address for the gloo rendezvous ({e}); "
                             f"set COMMBENCH_MASTER_ADDR to an address the other hosts can reach") from None
