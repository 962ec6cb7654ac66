"""Does adding ranks pay? From a sweep of one collective at several rank counts: the alpha-beta fit
of each count through the algorithm's cost model, a data-parallel step (compute, then the
collective over the gradients) measured and predicted at each count, speedup and efficiency, the
regime, and the same model carried to counts that were not measured.

Everything here is a pure function of a result file's records and the workload, so a run can be
judged again later for another workload (`commbench scale --from RUN`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from ..collectives.impls import algorithm_of
from ..errors import CommbenchError
from ..sizes import format_size
from .fit import fit_records, usable
from .verdicts import span

SHARED_GPU_VERDICT = "not judged: the ranks shared GPUs (COMMBENCH_SHARED_GPU), so the times are not the GPUs'"
# Efficiency at or above which adding ranks is "scaling well".
EFFICIENT = 0.80
EXTRAPOLATE = (16, 32, 64, 128, 256, 512, 1024)


# A step's regime (Workload.regime): the collective is small beside the compute at or below this share
# of it (compute-bound), and hidden while what it adds to the step stays at or below this share of it.
REGIME_SHARE = 0.10


@dataclass(frozen=True)
class Workload:
    compute_ms: float  # one step's compute on one rank
    grad_bytes: int  # the gradients all-reduced each step
    overlap: float = 0.0  # share of the communication hidden behind compute
    strong: bool = False  # a fixed global batch: compute shrinks as 1/p (else each rank keeps its batch)
    # Measured by `overlap` (--overlap-from): the compute's time beside the collective over alone, and
    # where overlap and it come from; 1.0 and None for a guessed --overlap.
    compute_slowdown: float = 1.0
    overlap_source: Optional[str] = None

    def parts(self, ranks: int, comm_ms: float) -> tuple[float, float]:
        """(compute, exposed communication) of a step. The hidden share of the collective runs beside
        the compute, and never hides more than the compute lasts; while the two run together the
        compute takes compute_slowdown times as long."""
        compute = self.compute_ms / ranks if self.strong else self.compute_ms
        hidden = min(self.overlap * comm_ms, compute)
        compute += (self.compute_slowdown - 1.0) * min(comm_ms, compute)
        return compute, comm_ms - hidden

    def step_ms(self, ranks: int, comm_ms: float) -> float:
        return sum(self.parts(ranks, comm_ms))

    def regime(self, ranks: int, comm_ms: float) -> str:
        """compute-bound (the collective small beside the compute), hidden communication (large, but
        what it adds to the step small), or exposed communication."""
        compute, exposed = self.parts(ranks, comm_ms)
        if comm_ms <= REGIME_SHARE * compute:
            return "compute-bound"
        return "hidden communication" if exposed <= REGIME_SHARE * (compute + exposed) else "exposed communication"

    def speedup(self, ranks: int, step_ms: float, step1_ms: float) -> float:
        """Throughput against one rank: with a fixed global batch, step time alone; otherwise p
        batches per step."""
        return step1_ms / step_ms if self.strong else ranks * step1_ms / step_ms

    def describe(self) -> str:
        measured = (f" (measured: {self.overlap_source}; compute x{self.compute_slowdown:.2f} beside it)"
                    if self.overlap_source else "")
        return (f"compute {self.compute_ms:g} ms per step, gradients {format_size(self.grad_bytes)}, "
                f"overlap {self.overlap:.0%}{measured}, {'strong' if self.strong else 'weak'} scaling "
                f"({'fixed global batch' if self.strong else 'fixed batch per rank'})")


def measured_overlap(doc: dict, coll, grad_bytes: int, path: str) -> dict:
    """The overlap and the compute's slowdown that `overlap` measured for `coll` at the size nearest
    the gradients (on a log scale), as Workload's fields: what `scale --overlap-from` takes instead of
    a guessed --overlap."""
    rows = [r for r in doc.get("results", []) if r.get("op") == coll.name and "overlap_pct" in r]
    if not rows:
        raise CommbenchError(f"{path} holds no overlap records of {coll.name}: give a result file of "
                             f"'commbench overlap {coll.name}'")
    near = min(rows, key=lambda r: abs(math.log(max(r["size_bytes"], 1) / grad_bytes)))
    return {"overlap": near["overlap_pct"] / 100.0, "compute_slowdown": near["slowdown_compute"] or 1.0,
            "overlap_source": f"{path}, {coll.name} {near['impl']} at {format_size(near['size_bytes'])}"}


@dataclass(frozen=True)
class Line:
    """t(n) = alpha_messages*alpha + bytes_factor*n/BW for one count: a fit's alpha and bandwidth
    carried through the cost model of `ranks`."""
    alpha_us: float
    bandwidth_gbps: float
    source: str  # where alpha and BW come from, printed beside every number made with them

    def time_ms(self, model, n: int) -> float:
        return (model.alpha_messages * self.alpha_us * 1e-3 + model.bytes_factor * n / (self.bandwidth_gbps * 1e9) * 1e3)


def _measured_ms(rows: list[dict], n: int) -> tuple[Optional[float], str]:
    """The collective's time at n bytes from the measured medians: interpolated in log-log between
    the nearest sizes, or None outside the swept range."""
    sizes = np.array([r["size_bytes"] for r in rows], dtype=float)
    times = np.array([r["time_us"]["median"] for r in rows], dtype=float) * 1e-3
    if not len(rows) or n < sizes[0] or n > sizes[-1]:
        return None, f"{format_size(n)} lies outside the swept sizes"
    return float(np.exp(np.interp(math.log(n), np.log(sizes), np.log(times)))), "measured"


def _segment_line(fit: dict, n: int, ranks: int) -> Line:
    """The fit's line for the segment holding n (the nearest one outside them): the latency of small
    messages and the bandwidth of large ones are different segments of a library's curve."""
    seg = min(fit["segments"], key=lambda s: 0 if s["size_min"] <= n <= s["size_max"]
              else min(abs(math.log(n / s["size_min"])), abs(math.log(n / s["size_max"]))))
    where = f"fit of {ranks} ranks, {span([seg['size_min'], seg['size_max']])}"
    if seg["alpha_us"] < 0:  # a bandwidth-bound segment's intercept: no latency to carry to other counts
        return Line(0.0, seg["bandwidth_gbps"] or math.inf, f"{where} (its alpha is negative: taken as 0)")
    return Line(seg["alpha_us"], seg["bandwidth_gbps"] or math.inf, where)


def analyse(records: list[dict], coll, impl: str, workload: Workload, extrapolate=EXTRAPOLATE,
            fabric=None, ranks_per_host: Optional[int] = None, shared_gpu: bool = False) -> dict:
    """The scaling table of one impl: a row per measured count, then predicted counts; no verdict where
    the ranks shared GPUs (COMMBENCH_SHARED_GPU: the times are NCCL's sockets and the GPU's time slices)."""
    rows_by_ranks: dict[int, list[dict]] = {}
    for r in records:
        if r["impl"] == impl and r["op"] == coll.name and usable(r):
            rows_by_ranks.setdefault(r["ranks"], []).append(r)
    if not rows_by_ranks:
        raise CommbenchError(f"no measured rows of {coll.name} {impl} to judge scaling by")
    for rows in rows_by_ranks.values():
        rows.sort(key=lambda r: r["size_bytes"])
    fits = {f["ranks"]: f for f in fit_records(records) if f["impl"] == impl and f["op"] == coll.name
            and "skipped" not in f and f["bandwidth_gbps"]}
    counts = sorted(rows_by_ranks)
    n = workload.grad_bytes
    step1 = workload.step_ms(1, 0.0)
    table = []
    for p in counts:
        model = coll.cost_model(algorithm_of(impl), p)
        measured, how = (0.0, "one rank: no communication") if p == 1 else _measured_ms(rows_by_ranks[p], n)
        base = max((q for q in fits if q < p), default=None)
        predicted, source = None, "no fit of fewer ranks to predict from"
        if p == 1:
            predicted, source = 0.0, "one rank: no communication"
        elif base is not None:
            line = _segment_line(fits[base], n, base)
            predicted, source = line.time_ms(model, n), f"{model.name}; alpha, BW from the {line.source}"
        fit = fits.get(p)
        row = {"ranks": p, "measured": True,
               "alpha_us": fit["alpha_us"] if fit else None, "bandwidth_gbps": fit["bandwidth_gbps"] if fit else None,
               "latency_term_ms": model.alpha_messages * fit["alpha_us"] * 1e-3 if fit and model else None,
               "bandwidth_term_ms": model.bytes_factor * n / (fit["bandwidth_gbps"] * 1e9) * 1e3 if fit and model else None,
               "comm_ms": measured, "comm_how": how, "predicted_comm_ms": predicted, "prediction": source}
        table.append(_judge(row, workload, step1))
    table += _extrapolated(coll, impl, fits, counts, workload, step1, n, extrapolate, fabric, ranks_per_host)
    measured_rows = [r for r in table if r["measured"] and r["speedup"] is not None]
    bend = next((r["ranks"] for r in measured_rows if r["efficiency"] < EFFICIENT), None)
    return {"op": coll.name, "impl": impl, "workload": asdict(workload), "workload_text": workload.describe(),
            "efficient": EFFICIENT, "rows": table, "bend_at": bend,
            "verdict": SHARED_GPU_VERDICT if shared_gpu else _verdict(measured_rows, bend)}


def _judge(row: dict, workload: Workload, step1: float) -> dict:
    """Step time, speedup and efficiency from the measured communication (or the predicted one where
    nothing was measured at that count)."""
    comm = row["comm_ms"] if row["comm_ms"] is not None else row["predicted_comm_ms"]
    for key, value in (("", comm), ("predicted_", row["predicted_comm_ms"])):
        step = workload.step_ms(row["ranks"], value) if value is not None else None
        row[f"{key}regime"] = workload.regime(row["ranks"], value) if value is not None else None
        row[f"{key}step_ms"] = step
        row[f"{key}speedup"] = workload.speedup(row["ranks"], step, step1) if step else None
        row[f"{key}efficiency"] = row[f"{key}speedup"] / row["ranks"] if step else None
    return row


def _extrapolated(coll, impl, fits, counts, workload, step1, n, extrapolate, fabric, ranks_per_host) -> list[dict]:
    """Counts beyond those measured, through the cost model with the largest measured count's alpha
    and BW; with a fabric, its figures for the counts that leave one host."""
    if not fits:
        return []
    top = max(fits)
    own = _segment_line(fits[top], n, top)
    out = []
    for p in sorted(q for q in extrapolate if q > max(counts)):
        model = coll.cost_model(algorithm_of(impl), p)
        line = own
        if fabric is not None and ranks_per_host and p > ranks_per_host:
            alpha = fabric.alpha_us[1] if fabric.alpha_us else own.alpha_us
            line = Line(alpha, fabric.bandwidth_gbps, f"fabric {fabric.name} ({fabric.bandwidth_gbps:g} GB/s, alpha "
                                                      f"{alpha:g} us) beyond {ranks_per_host} ranks per host")
        predicted = line.time_ms(model, n)
        row = {"ranks": p, "measured": False, "alpha_us": line.alpha_us, "bandwidth_gbps": line.bandwidth_gbps,
               "latency_term_ms": model.alpha_messages * line.alpha_us * 1e-3,
               "bandwidth_term_ms": model.bytes_factor * n / (line.bandwidth_gbps * 1e9) * 1e3,
               "comm_ms": None, "comm_how": "not measured", "predicted_comm_ms": predicted,
               "prediction": f"{model.name}; alpha, BW from the {line.source}"}
        out.append(_judge(row, workload, step1))
    return out


def _verdict(rows: list[dict], bend: Optional[int]) -> str:
    """scaling well / diminishing returns / slower than fewer ranks, over the measured counts."""
    if not rows or len(rows) < 2:
        return "one count measured: nothing to compare"
    worse = [b["ranks"] for a, b in zip(rows, rows[1:]) if b["speedup"] < a["speedup"]]
    if worse:
        return f"slower than fewer ranks from {worse[0]} ranks on: adding ranks costs throughput"
    if bend is None:
        return f"scaling well: efficiency at or above {EFFICIENT:.0%} up to {rows[-1]['ranks']} ranks"
    return f"diminishing returns: efficiency falls below {EFFICIENT:.0%} at {bend} ranks, where the curve bends away from linear"


def lines(result: dict) -> list[str]:
    """The console table of one analysis."""
    def num(v, fmt):
        return format("-" if v is None else format(v, fmt.lstrip("0123456789")), f">{fmt.split('.')[0]}")
    out = [f"# scale: {result['op']} {result['impl']}: {result['workload_text']}",
           f"# {'ranks':>5} {'alpha':>9} {'BW':>8} {'lat.term':>9} {'bw.term':>9} {'comm':>9} {'pred.comm':>9} "
           f"{'step':>9} {'speedup':>8} {'effic.':>7} {'regime':<21}  basis",
           f"# {'':>5} {'(us)':>9} {'(GB/s)':>8} {'(ms)':>9} {'(ms)':>9} {'(ms)':>9} {'(ms)':>9} {'(ms)':>9} "
           f"{'(x)':>8} {'(%)':>7}"]
    for r in result["rows"]:
        eff = None if r["efficiency"] is None else 100 * r["efficiency"]
        basis = r["comm_how"] if r["measured"] else "predicted: " + r["prediction"]
        if r["measured"] and r["ranks"] > 1:
            basis += f"; predicted from {r['prediction']}" if r["predicted_comm_ms"] is not None else f"; {r['prediction']}"
        out.append(f"  {r['ranks']:>5} {num(r['alpha_us'], '9.2f')} {num(r['bandwidth_gbps'], '8.3f')} "
                   f"{num(r['latency_term_ms'], '9.3f')} {num(r['bandwidth_term_ms'], '9.3f')} "
                   f"{num(r['comm_ms'], '9.3f')} {num(r['predicted_comm_ms'], '9.3f')} {num(r['step_ms'], '9.3f')} "
                   f"{num(r['speedup'], '8.2f')} {num(eff, '7.1f')} {r['regime'] or '-':<21}  {basis}")
    out.append(f"# verdict: {result['verdict']}")
    return out


def plot(results: list[dict], path: str) -> None:
    """Speedup against ranks (log2), the ideal line, measured points and the predicted curve."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5.5))
    top = max(r["ranks"] for res in results for r in res["rows"])
    ax.plot([1, top], [1, top], color="grey", linestyle=":", label="ideal (linear)")
    for res in results:
        measured = [r for r in res["rows"] if r["measured"] and r["speedup"] is not None]
        predicted = [r for r in res["rows"] if r["predicted_speedup"] is not None]
        dots = ax.plot([r["ranks"] for r in measured], [r["speedup"] for r in measured], "o-",
                       label=f"{res['op']} {res['impl']}: measured")
        ax.plot([r["ranks"] for r in predicted], [r["predicted_speedup"] for r in predicted], "--",
                color=dots[0].get_color(), label=f"{res['op']} {res['impl']}: predicted")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("speedup against 1 rank")
    ax.set_title(results[0]["workload_text"], fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
