"""What `slidingserve validate` prints and draws: live beside simulated, with the error of
each figure and each policy's rank in either."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from slidingserve.eval.ratios import ratio_interval
from slidingserve.live.agreement import ranks
from slidingserve.live.validation import (
    PolicyCurve,
    Validation,
    VenueResult,
    common_rate,
    ratio_to,
)
from slidingserve.reporting import format_table

CANDIDATE = "slidingserve"  # the policy the ratio table compares with every other


def relative_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured; NaN when nothing was measured."""
    if not measured or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.0f}%"


def _goodput_text(value: float, result: VenueResult) -> str:
    """A goodput; `< lowest rate` where every rate failed, `≥ highest` where every one passed."""
    if value == 0:
        return f"< {min(result.rates):.2f}"
    return f"≥ {value:.2f}" if value >= max(result.rates) else f"{value:.2f}"


def goodput_table(validation: Validation) -> str:
    """Each policy's goodput live (pooled; per-seed mean with its interval) and simulated,
    the error, and the ranks."""
    settings = validation.settings
    live, sim = validation.live, validation.simulated
    live_goodput, sim_goodput = live.goodputs(settings), sim.goodputs(settings)
    live_seeds = live.seed_goodputs(settings)
    live_rank, sim_rank = ranks(live_goodput), ranks(sim_goodput)
    rows = []
    for policy in validation.policies:
        rows.append(
            [
                policy,
                _goodput_text(live_goodput[policy], live),
                ratio_interval(live_seeds[policy]).format().replace(" *", ""),
                _goodput_text(sim_goodput[policy], sim),
                _percent(relative_error(sim_goodput[policy], live_goodput[policy])),
                str(live_rank[policy]),
                str(sim_rank[policy]),
            ]
        )
    header = ["policy", "live", "live per seed", "simulated", "error", "rank live", "rank sim"]
    return format_table(header, rows)


def latency_table(validation: Validation) -> str:
    """TTFT p50 and p99 and TPOT p50 (median over seeds, ms) at the common rate."""
    rate = common_rate(validation.live, validation.settings)
    header = ["policy"]
    for name in ("TTFT p50", "TTFT p99", "TPOT p50"):
        header += [f"{name} live", "sim", "error"]
    rows = []
    for policy in validation.policies:
        row = [policy]
        live = validation.live.curves[policy]
        sim = validation.simulated.curves[policy]
        for field in ("ttft_p50", "ttft_p99", "tpot_p50"):
            measured, predicted = _median_at(live, rate, field), _median_at(sim, rate, field)
            row += [f"{1000 * measured:.0f}", f"{1000 * predicted:.0f}"]
            row.append(_percent(relative_error(predicted, measured)))
        rows.append(row)
    return f"at {rate:.2f} req/s, ms (median over seeds):\n\n" + format_table(header, rows)


def _median_at(curve: PolicyCurve, rate: float, field: str) -> float:
    values = sorted(getattr(trial, field) for trial in curve.at(rate))
    return values[len(values) // 2] if values else math.nan


def ratio_table(validation: Validation) -> str:
    """`slidingserve` ÷ every other policy, per seed, live and simulated."""
    if CANDIDATE not in validation.policies:
        return ""
    rows = []
    for other in validation.policies:
        if other == CANDIDATE:
            continue
        live = ratio_to(validation.live, validation.settings, CANDIDATE, other)
        sim = ratio_to(validation.simulated, validation.settings, CANDIDATE, other)
        rows.append([f"{CANDIDATE} ÷ {other}", live.format(), sim.format()])
    return format_table(["goodput ratio per seed", "live", "simulated"], rows)


def report(validation: Validation) -> str:
    """The whole printout: capacities, goodputs, latencies, ratios."""
    settings = validation.settings
    live, sim = validation.live, validation.simulated
    error = _percent(relative_error(sim.capacity, live.capacity))
    lines = [
        f"{settings.live.workload} ({_arrivals(validation)}), {settings.live.requests} "
        f"requests a trial, seeds {settings.seeds[0]}..{settings.seeds[-1]}, SLO scale "
        f"{live.slo_scale:.3f}, goodput at ≤ {100 * settings.threshold:g}% violating",
        f"capacity (every request at once): live {live.capacity:.2f} req/s, simulated "
        f"{sim.capacity:.2f} ({error}); rates tried: "
        + ", ".join(f"{rate:.2f}" for rate in live.rates),
        f"wall time {validation.wall_s / 60:.1f} min, profile {validation.steps_file}",
        "",
        goodput_table(validation),
        "",
        latency_table(validation),
    ]
    ratios = ratio_table(validation)
    if ratios:
        lines += ["", ratios]
    return "\n".join(lines)


def _arrivals(validation: Validation) -> str:
    arrival = validation.settings.live.arrival
    if arrival.process == "gamma":
        return f"gamma arrivals, CV {arrival.burstiness:g}"
    return f"{arrival.process} arrivals"


def summary(validation: Validation) -> dict[str, Any]:
    """The derived figures the JSON keeps beside the trials."""
    settings = validation.settings
    live, sim = validation.live, validation.simulated
    live_goodput, sim_goodput = live.goodputs(settings), sim.goodputs(settings)
    return {
        "capacity_error": relative_error(sim.capacity, live.capacity),
        "common_rate": common_rate(live, settings),
        "policies": {
            policy: {
                "goodput_live": live_goodput[policy],
                "goodput_simulated": sim_goodput[policy],
                "goodput_error": relative_error(sim_goodput[policy], live_goodput[policy]),
                "goodput_live_per_seed": live.seed_goodputs(settings)[policy],
                "goodput_simulated_per_seed": sim.seed_goodputs(settings)[policy],
                "rank_live": ranks(live_goodput)[policy],
                "rank_simulated": ranks(sim_goodput)[policy],
            }
            for policy in validation.policies
        },
    }


def plot(validation: Validation, path: Path) -> Path:
    """Violating share against the rate: live trials as points (pooled over seeds, with
    their Wilson intervals), the simulated curves as lines, one colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, policy in enumerate(validation.policies):
        colour = colours[index % len(colours)]
        line = validation.simulated.lines.get(policy)
        if line is not None:
            rates = line.rates
            shares = [100 * line.pooled_rate(rate) for rate in rates]
            axes.plot(rates, shares, color=colour, label=f"{policy} (simulated)")
        curve = validation.live.curves[policy]
        rates = curve.rates
        shares = [100 * curve.pooled_rate(rate) for rate in rates]
        bounds = [curve.interval(rate) for rate in rates]
        below = [
            max(0.0, share - 100 * low) for share, (low, _) in zip(shares, bounds, strict=True)
        ]
        above = [
            max(0.0, 100 * high - share) for share, (_, high) in zip(shares, bounds, strict=True)
        ]
        axes.errorbar(
            rates, shares, yerr=[below, above], fmt="o", color=colour, capsize=3,
            label=f"{policy} (live)",
        )  # fmt: skip
    axes.axhline(100 * validation.settings.threshold, color="grey", linestyle=":", linewidth=1)
    axes.set_yscale("symlog", linthresh=1.0)
    axes.set_xlabel("request rate (req/s)")
    axes.set_ylabel("violating requests (%)")
    axes.set_title(f"live (points) and simulated (lines): {validation.settings.live.workload}")
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
