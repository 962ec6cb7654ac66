"""The fabric catalog (fabrics.json, a source per row) and verdicts: measured link bandwidth against
what the fabric should deliver. Host shared memory and TCP over loopback are measured on the spot:
where the run runs, by the run (on_the_spot), and stored in its result file; an analysis reads that
figure and never measures the machine that reads the file."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Optional

from ..errors import CommbenchError

PASS_PCT = 80.0
FAIL_PCT = 60.0
# A figure this far above its expectation is no pass: no link delivers a quarter more than its rate,
# so the expectation (a fabric the run did not cross) or the method (a cache-sized message) is off.
ABOVE_PCT = 125.0


@lru_cache(maxsize=1)
def catalog() -> dict[str, dict]:
    rows = json.loads(resources.files("commbench").joinpath("fabrics.json").read_text())
    return {r["name"]: r for r in rows}


@dataclass(frozen=True)
class Expectation:
    name: str
    bandwidth_gbps: float
    alpha_us: Optional[tuple[float, float]]
    source: str


def memcpy_gbps(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes copied per second by one large memcpy on this node (best of `repeats`; the first also
    faults the pages in)."""
    import numpy as np
    src, dst = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def tcp_loopback_gbps(nbytes: int = 256 << 20) -> float:
    """One TCP stream over 127.0.0.1: bytes received per second."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = [0]

    def sink():
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        with conn:
            while received[0] < nbytes:
                got = conn.recv_into(buf)
                if not got:
                    break
                received[0] += got
    thread = threading.Thread(target=sink)
    thread.start()
    payload = bytes(1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as c:
        t0 = time.perf_counter()
        for _ in range(nbytes // len(payload)):
            c.sendall(payload)
    thread.join()
    elapsed = time.perf_counter() - t0
    server.close()
    return received[0] / elapsed / 1e9


MEASURES = {"memcpy": memcpy_gbps, "tcp": tcp_loopback_gbps}


def measured_here(name: str) -> bool:
    """The catalog's fabric `name` is measured on the spot rather than given."""
    return "measured" in catalog().get(name, {})


def measure_on_the_spot(name: str, host: str) -> dict:
    """The run's measurement of fabric `name` on its host, as the result file's on_the_spot keeps it."""
    return {"bandwidth_gbps": round(MEASURES[catalog()[name]["measured"]](), 4), "host": host}


def expectation(name: Optional[str], expect_gbps: Optional[float] = None, expect_us: Optional[float] = None,
                on_the_spot: Optional[dict] = None, source: str = "the run") -> Optional[Expectation]:
    """--fabric NAME, or --expect-gbps/--expect-us for a fabric the catalog lacks. A fabric measured on
    the spot takes the figure the run measured (`on_the_spot`, its result file's), or is refused."""
    if expect_gbps is not None:
        return Expectation("custom", expect_gbps, (0.0, expect_us) if expect_us is not None else None, "--expect-gbps")
    if name is None:
        return None
    row = catalog().get(name)
    if row is None:
        raise CommbenchError(f"unknown fabric '{name}': choose from {', '.join(catalog())}, or give --expect-gbps")
    alpha = tuple(row["alpha_us"]) if expect_us is None else (0.0, expect_us)
    if not measured_here(name):
        return Expectation(name, row["bandwidth_gbps"], alpha, row["source"])
    spot = (on_the_spot or {}).get(name)
    if spot is None:
        raise CommbenchError(f"--fabric {name} is measured on the spot by the run it judges, on the run's host, and "
                             f"{source} holds no such measurement: give the run --fabric {name}, or judge it with "
                             f"--expect-gbps")
    bw = spot["bandwidth_gbps"]
    return Expectation(name, bw, alpha, f"{row['source']} ({bw:.1f} GB/s on {spot['host']}, by the run)")


def nic_rate(text: str, option: str = "--nic-rate") -> float:
    """A NIC's rate in GB/s from a catalog fabric's name (one of a given rate, not measured on the spot) or
    a positive figure."""
    try:
        gbps = float(text)
    except ValueError:
        row = catalog().get(text)
        if row is None or measured_here(text):
            names = ", ".join(name for name in catalog() if not measured_here(name))
            raise CommbenchError(f"{option} {text}: give a rate in GB/s or a fabric of the catalog: {names}") from None
        return float(row["bandwidth_gbps"])
    if not (math.isfinite(gbps) and gbps > 0):
        raise CommbenchError(f"{option} {text}: a rate in GB/s is a positive number")
    return gbps


def guess_fabric(meta: dict) -> Optional[str]:
    """NVLink of the generation the GPUs report, for a GPU run on one host; None otherwise (host
    fabrics are too varied to guess: name one with --fabric)."""
    hosts = meta.get("machine", {}).get("hosts", [])
    devices = ((meta.get("topology") or {}).get("gpus") or {}).get("devices") or []
    if len(hosts) != 1 or meta.get("config", {}).get("device") != "cuda" or not devices:
        return None
    versions = {d["nvlink"]["version"] for d in devices if d["nvlink"]["links_up"]}
    name = f"nvlink{versions.pop()}" if len(versions) == 1 else None
    return name if name in catalog() else None


def verdict(measured_gbps: Optional[float], expected: Expectation, pass_pct: float = PASS_PCT,
            fail_pct: float = FAIL_PCT) -> tuple[str, Optional[float]]:
    """(PASS/WARN/FAIL, percent of expected): WARN too above ABOVE_PCT."""
    if measured_gbps is None:
        return "FAIL", None
    pct = 100.0 * measured_gbps / expected.bandwidth_gbps
    if pct > ABOVE_PCT:
        return "WARN", pct
    return ("PASS" if pct >= pass_pct else "FAIL" if pct < fail_pct else "WARN"), pct
