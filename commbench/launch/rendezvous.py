"""The torch.distributed process group of the ranks (gloo), which carries the untimed collectives of a
torchrun launch and the gloo transport's timed ones, and where rank 0 listens for its peers (the
group's store, the watchdog's side channel)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import select
import signal
import socket
import struct
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
        _watched(world, timeout_s, lambda: dist.init_process_group("gloo", timeout=_TIMEOUT))
        return _ProcessGroup()
    addr = rendezvous_address(world)
    store = None
    if world.rank == 0:
        # wait_for_workers=False: the workers can only connect once the port is published.
        store = dist.TCPStore(addr, 0, world.size, True, timeout=_TIMEOUT, wait_for_workers=False)
    port = world.bcast(store.port if world.rank == 0 else None)
    if world.rank != 0:
        store = dist.TCPStore(addr, port, world.size, False, timeout=_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size, timeout=_TIMEOUT)
    return _ProcessGroup()


def _watched(world, timeout_s: float, meet) -> None:
    """meet() (torchrun's rendezvous), which waits in C++ where no Python handler runs: its store
    retried an unreachable MASTER_ADDR for 300 s, deaf to SIGTERM. A thread ends the rank, with its
    one line, once max(--timeout, RENDEZVOUS_FLOOR_S) has passed or a SIGINT/SIGTERM came (the C
    handler still writes the signal to the wakeup fd)."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    before = signal.set_wakeup_fd(wake_write)
    met = threading.Event()

    def watch() -> None:
        ready, _, _ = select.select([wake_read], [], [], max(timeout_s, RENDEZVOUS_FLOOR_S))
        signals = os.read(wake_read, 16) if ready else b""
        os.close(wake_read)
        if met.is_set():
            return
        if not signals:
            _not_met(world, timeout_s)
        _say(world, f"interrupted ({signal.Signals(signals[-1]).name})")
        os._exit(128 + signals[-1])

    watcher = threading.Thread(target=watch, name="commbench-rendezvous", daemon=True)
    watcher.start()
    try:
        meet()
    finally:
        met.set()
        signal.set_wakeup_fd(before)
        os.close(wake_write)  # the watcher wakes, finds the meeting over, and leaves
        watcher.join()


def _say(world, what: str) -> None:
    sys.stderr.write(one_line(f"commbench: error: rank {world.rank}: the torchrun-style rendezvous at "
                              f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}: {what}") + "\n")
    sys.stderr.flush()


def _not_met(world, timeout_s: float) -> None:
    _say(world, f"did not complete within {max(timeout_s, RENDEZVOUS_FLOOR_S):g} s (--timeout {timeout_s:g} s, at "
                f"least {RENDEZVOUS_FLOOR_S:g} s for the ranks to start): start all {world.size} ranks (WORLD_SIZE) "
                f"with the same MASTER_ADDR and MASTER_PORT, where every rank reaches MASTER_ADDR")
    os._exit(CommbenchError.exit_code)


# Where rank 0 listens, where the user chooses (rendezvous_address).
MASTER_ADDR_VAR = "COMMBENCH_MASTER_ADDR"


def resolve_address(var: str, addr: str, error=CommbenchError) -> tuple:
    """(family, socket address) of `addr`, the value of the variable `var` that says where rank 0
    listens: one that does not resolve held every rank in gloo's rendezvous for its 300 s, c10d
    retrying on stderr and a SIGTERM not heard, whatever --timeout said."""
    try:
        family, _, _, _, where = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as e:
        raise error(f"{var}={addr}: does not resolve ({getattr(e, 'strerror', None) or e}); set it to an address of "
                    f"rank 0's host that every rank reaches") from None
    return family, where


def check_master_address(one_host: bool, host: str) -> None:
    """COMMBENCH_MASTER_ADDR, where set, checked before any rank waits at it: a name that does not
    resolve, or on a run of one host an address that is not this host's, held every rank in gloo's
    rendezvous for its 300 s (--timeout does not reach into it), printing c10d's retries."""
    addr = os.environ.get(MASTER_ADDR_VAR)
    if not addr:
        return
    family, where = resolve_address(MASTER_ADDR_VAR, addr)
    if one_host:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((where[0], 0))
        except OSError as e:
            raise CommbenchError(f"{MASTER_ADDR_VAR}={addr}: not an address of {host}, where every rank runs "
                                 f"({e.strerror}): the ranks would wait there for rank 0; unset it or give one of "
                                 f"this host's addresses") from None


def rendezvous_address(world) -> str:
    """Where rank 0 listens, the same on every rank (collective): COMMBENCH_MASTER_ADDR if set,
    loopback when all ranks share this host, else this host's address that the other hosts reach.
    The host name's own address is taken unless it is a loopback one (Debian's /etc/hosts maps the
    host name to 127.0.1.1) or does not resolve: then the address this host's routes choose towards
    another host's, as that host listed it."""
    if os.environ.get(MASTER_ADDR_VAR):
        return os.environ[MASTER_ADDR_VAR]
    if len(set(world.hosts)) == 1:
        return "127.0.0.1"
    first_on_host = world.hosts.index(world.hosts[world.rank]) == world.rank
    listed = world.gather(interface_addresses() if first_on_host and world.hosts[world.rank] != world.hosts[0] else [])
    return world.root_call(lambda: _reached_address([a for own in listed for a in own]))


def _reached_address(remote: list[str]) -> str:
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError as e:
        named, why = None, str(e)
    if named and not _loopback(named):
        return named
    why = f"it resolves to {named}, a loopback address" if named else why
    local = set(interface_addresses())
    for addr in remote:
        if addr in local:  # the same address on both hosts (a container bridge): no way between them
            continue
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((addr, 9))  # a datagram socket's connect only picks the route: nothing is sent
            source = probe.getsockname()[0]
            if not _loopback(source):
                return source
    raise CommbenchError(f"cannot find this host's address for the other hosts: its name {socket.gethostname()!r} "
                         f"does not serve ({why}) and no route leads to another host's address; set "
                         f"COMMBENCH_MASTER_ADDR to an address the other hosts can reach")


def _loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr).is_loopback


def interface_addresses() -> list[str]:
    """This host's IPv4 addresses other than loopback, in the order of its interfaces (Linux)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):  # an interface with no IPv4 address
                answer = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                addr = socket.inet_ntoa(answer[20:24])
                if not _loopback(addr):
                    found.append(addr)
    return found


_SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's address, in a struct ifreq
