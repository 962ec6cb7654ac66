"""What every output format shows of a numerics result (`commbench numerics`): its header, its rows
as cells and its plot of the error against the rank count (its facts: report.numerics_facts); each
format's own render_numerics lays them out. Such a file holds no timings: its figures are in the `numerics`
section, and `results` is empty."""

from __future__ import annotations

import warnings

TITLE = "commbench numerics report"
SECTION = "Numerics: does the answer depend on the rank count?"
COLUMNS = ("dtype", "impl", "ranks", "max rel", "mean rel", "max", "max err", "not CR", "ranks", "repeat", "drift",
           "not")
UNITS = ("", "", "", "error", "error", "ulp", "/uΣ|x|", "(%)", "same", "same", "(max rel)", "finite")
LEGEND = [
    "error = the reduced vector against the exact sum of all contributions rounded once to the dtype "
    "(the correctly rounded sum, CR); rel = |error| / |CR| over the elements whose sum is not 0",
    "ulp = the correctly rounded sum's unit in the last place; err/uΣ|x| = |error| / (the dtype's unit "
    "roundoff u x the sum of the contributions' magnitudes): adding C contributions in any order keeps it "
    "within C (C - 1 against the exact sum)",
    "not CR = elements that differ from the correctly rounded sum; ranks same = every rank holds the same bits; "
    "repeat same = every call gave the same bits",
    "drift = max |vector - vector at the smallest rank count| / |CR|, same impl and dtype; "
    "not finite = inf or NaN where CR is finite",
]


def header(doc: dict) -> list[str]:
    """The lines above the table: what ran where, on which data."""
    n, m, cfg = doc["numerics"], doc["machine"], doc["config"]
    tool = doc["tool"]
    return [
        f"# commbench {tool['version']}" + (f" ({tool['git_commit'][:12]})" if tool["git_commit"] else ""),
        f"# numerics: all-reduce (sum) of {n['contributions']} contributions of {n['count']} elements "
        f"(data {n['data']}, seed {n['seed']}) at {', '.join(map(str, n['ranks']))} rank(s); launched "
        f"{m['ranks']} on {len(m['hosts'])} host(s): {', '.join(m['hosts'])} (launcher: {m['launcher']})",
        f"# MPI: {m['mpi'] or 'not available'}; torch {m['torch']}, Python {m['python']}, {m['cpu_model']}",
        f"# impls: {', '.join(cfg['impls'])}; dtypes: {', '.join(n['dtypes'])}; device {cfg.get('device', 'cpu')}; "
        f"{n['repeats']} calls each",
        *(f"# {line}" for line in LEGEND),
    ]


def ordered(doc: dict) -> list[dict]:
    """The rows by dtype, impl and rank count, so that the drift reads down a column."""
    dtypes, impls = doc["numerics"]["dtypes"], doc["config"]["impls"]
    return sorted(doc["numerics"]["rows"], key=lambda r: (dtypes.index(r["dtype"]), impls.index(r["impl"]), r["ranks"]))


def cells(row: dict) -> tuple:
    yes = {True: "yes", False: "NO"}
    return (row["dtype"], row["impl"], str(row["ranks"]), f"{row['max_rel_error']:.2e}", f"{row['mean_rel_error']:.2e}",
            f"{row['max_ulps']:.3g}", f"{row['max_error_u_abs_sum']:.3g}", f"{100 * row['not_correctly_rounded']:.2f}",
            yes[row["ranks_identical"]], yes[row["repeat_identical"]],
            "-" if row["drift_max_rel"] is None else f"{row['drift_max_rel']:.2e}", str(row["nonfinite"]))


def table(doc: dict) -> list[list[str]]:
    """The header row, then the rows: for the report's Markdown and HTML tables."""
    return [[f"{c} {u}".strip() for c, u in zip(COLUMNS, UNITS)]] + [list(cells(r)) for r in ordered(doc)]


def plot(doc: dict, path, image_format=None) -> None:
    """Relative error against the rank count, one panel per dtype, one colour per impl (solid: max,
    dotted: mean); an exact result (error 0) is drawn as a triangle on the panel's floor."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        # matplotlib's tick arithmetic overflows on a log axis that reaches 1e308: an error that large is
        # the data's own (a sum that cancels to nearly 0), drawn as it is, and the warning no news of it.
        warnings.simplefilter("ignore", RuntimeWarning)
        _draw(doc, path, plt, image_format)


def _draw(doc: dict, path, plt, image_format) -> None:
    n, impls = doc["numerics"], doc["config"]["impls"]
    rows = n["rows"]
    positive = [r[k] for r in rows for k in ("max_rel_error", "mean_rel_error") if r[k] > 0]
    floor = min(positive) / 10 if positive else 1e-20
    fig, axes = plt.subplots(1, len(n["dtypes"]), figsize=(1 + 4.2 * len(n["dtypes"]), 4.6), squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, dtype in zip(axes[0], n["dtypes"]):
        for i, impl in enumerate(impls):
            series = sorted((r for r in rows if r["dtype"] == dtype and r["impl"] == impl), key=lambda r: r["ranks"])
            if not series:
                continue
            x = [r["ranks"] for r in series]
            for key, style in (("max_rel_error", "-"), ("mean_rel_error", ":")):
                y = [r[key] for r in series]
                ax.plot(x, [max(v, floor) for v in y], style, marker="o", ms=4, color=colors[i % len(colors)],
                        label=impl if key == "max_rel_error" else None)
                exact = [xi for xi, v in zip(x, y) if v == 0]
                ax.plot(exact, [floor] * len(exact), "v", ms=8, color=colors[i % len(colors)])
        ax.set_xscale("log", base=2)
        ax.set_xticks(n["ranks"], [str(p) for p in n["ranks"]])
        ax.set_yscale("log")
        ax.set_title(dtype)
        ax.set_xlabel("ranks")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("relative error (solid: max, dotted: mean, ▼: 0)")
    axes[0][0].legend(fontsize=8, loc="best")
    fig.suptitle(f"all-reduce against the exact sum: data {n['data']}, {n['contributions']} contributions of "
                 f"{n['count']} elements")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=image_format)
    plt.close(fig)
