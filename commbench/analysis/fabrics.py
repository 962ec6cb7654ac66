"""The fabric catalog (fabrics.json, a source per row) and verdicts: measured link bandwidth against
what the fabric should deliver. Host shared memory and TCP over loopback are measured on the spot."""

from __future__ import annotations

import json
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
    """Bytes copied per second by one large memcpy on this node (best of `repeats`)."""
    import torch
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
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


def expectation(name: Optional[str], expect_gbps: Optional[float] = None,
                expect_us: Optional[float] = None) -> Optional[Expectation]:
    """--fabric NAME, or --expect-gbps/--expect-us for a fabric the catalog lacks."""
    if expect_gbps is not None:
        return Expectation("custom", expect_gbps, (0.0, expect_us) if expect_us is not None else None, "--expect-gbps")
    if name is None:
        return None
    row = catalog().get(name)
    if row is None:
        raise CommbenchError(f"unknown fabric '{name}': choose from {', '.join(catalog())}, or give --expect-gbps")
    measured = {"memcpy": memcpy_gbps, "tcp": tcp_loopback_gbps}.get(row.get("measured", ""))
    bw = measured() if measured else row["bandwidth_gbps"]
    alpha = tuple(row["alpha_us"]) if expect_us is None else (0.0, expect_us)
    return Expectation(name, bw, alpha, row["source"] + (f" ({bw:.1f} GB/s here)" if measured else ""))


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
    """(PASS/WARN/FAIL, percent of expected)."""
    if measured_gbps is None:
        return "FAIL", None
    pct = 100.0 * measured_gbps / expected.bandwidth_gbps
    return ("PASS" if pct >= pass_pct else "FAIL" if pct < fail_pct else "WARN"), pct
