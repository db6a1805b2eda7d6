"""What `slidingserve validate` prints and draws: live beside simulated, with the error of
each figure and each policy's rank in either."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from slidingserve.eval.ratios import ratio_interval
from slidingserve.live.agreement import ranks
from slidingserve.live.validation import Validation
from slidingserve.live.validation_figures import Goodput, VenueResult, common_rate, ratio_to
from slidingserve.reporting import format_table

CANDIDATE = "slidingserve"  # the policy the ratio table compares with every other


def relative_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured; NaN when nothing was measured."""
    if not measured or math.isnan(measured) or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1


def goodput_error(predicted: Goodput, measured: Goodput) -> float:
    """The relative error of a simulated goodput; NaN where either is only a bound."""
    if not (predicted.exact and measured.exact):
        return math.nan
    return relative_error(predicted.value, measured.value)


def goodput_ranks(goodputs: dict[str, Goodput]) -> dict[str, int]:
    """1 for the highest goodput (a bound ranks by its value)."""
    return ranks({policy: goodput.value for policy, goodput in goodputs.items()})


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.0f}%"


def _seed_mean(goodputs: list[Goodput]) -> str:
    """The mean of the exact per-seed goodputs with its interval, and how many are bounds."""
    exact = [g.value for g in goodputs if g.exact]
    text = ratio_interval(exact).format().replace(" *", "") if exact else "n/a"
    bounds = len(goodputs) - len(exact)
    return f"{text} ({bounds} bound{'s' if bounds != 1 else ''})" if bounds else text


def draw_range(goodputs: list[Goodput]) -> str:
    """The lowest and highest of a simulated goodput over its noise draws (bounds marked),
    the spread noise alone makes; "-" with a single draw."""
    if len(goodputs) < 2:
        return "-"
    low = min(goodputs, key=lambda goodput: goodput.value)
    high = max(goodputs, key=lambda goodput: goodput.value)
    return f"{low.text()} – {high.text()}"


def within_draws(measured: Goodput, draws: list[Goodput]) -> str:
    """Whether the live goodput lies within the simulated draws' range: "yes", "no", or
    "n/a" (a bound, or a single draw)."""
    if len(draws) < 2 or not measured.exact or not all(draw.exact for draw in draws):
        return "n/a"
    values = [draw.value for draw in draws]
    return "yes" if min(values) <= measured.value <= max(values) else "no"


def goodput_table(validation: Validation) -> str:
    """Each policy's goodput live (pooled; the per-seed mean with its interval) and
    simulated (the mean over the noise draws, and their range), the error, whether live
    lies within the draws, and the ranks. `≥`/`<` mark bounds, which have no error."""
    threshold, seeds = validation.settings.threshold, validation.settings.seeds
    live, sim = validation.live.goodputs(threshold), validation.simulated.goodputs(threshold)
    draws = validation.simulated.goodput_draws(threshold)
    live_seeds = validation.live.seed_goodputs(threshold, seeds)
    live_rank, sim_rank = goodput_ranks(live), goodput_ranks(sim)
    rows = [
        [
            policy,
            live[policy].text(),
            _seed_mean(live_seeds[policy]),
            sim[policy].text(),
            draw_range(draws[policy]),
            _percent(goodput_error(sim[policy], live[policy])),
            within_draws(live[policy], draws[policy]),
            str(live_rank[policy]),
            str(sim_rank[policy]),
        ]
        for policy in validation.policies
    ]
    header = [
        "policy", "live", "live per seed", "simulated", "sim draws", "error", "live in draws",
        "rank live", "rank sim",
    ]  # fmt: skip
    return format_table(header, rows)


LATENCIES = (("TTFT p50", "ttft_p50"), ("TTFT p99", "ttft_p99"), ("TPOT p50", "tpot_p50"))


def latency_table(validation: Validation) -> str:
    """TTFT p50 and p99 and TPOT p50 (median over seeds, ms) at a rate every policy ran in
    both venues."""
    rate = common_rate(validation.live, validation.simulated, validation.settings.threshold)
    if rate is None:
        return "no rate every policy ran in both venues: no latency table"
    header = ["policy"]
    for name, _ in LATENCIES:
        header += [f"{name} live", "sim", "error"]
    rows = []
    for policy in validation.policies:
        row = [policy]
        for _, field in LATENCIES:
            measured = validation.live.median_at(policy, rate, field)
            predicted = validation.simulated.median_at(policy, rate, field)
            row += [f"{1000 * measured:.0f}", f"{1000 * predicted:.0f}"]
            row.append(_percent(relative_error(predicted, measured)))
        rows.append(row)
    return f"at {rate:.2f} req/s, ms (median over seeds):\n\n" + format_table(header, rows)


def ratio_table(validation: Validation) -> str:
    """`slidingserve` ÷ every other policy on each seed where both goodputs are exact."""
    if CANDIDATE not in validation.policies:
        return ""
    threshold, seeds = validation.settings.threshold, validation.settings.seeds
    rows = []
    for other in validation.policies:
        if other == CANDIDATE:
            continue
        live = ratio_to(validation.live, threshold, seeds, CANDIDATE, other)
        sim = ratio_to(validation.simulated, threshold, seeds, CANDIDATE, other)
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
        f"{validation.engine}; capacity (every request at once): live {live.capacity:.2f} "
        f"req/s, simulated {sim.capacity:.2f} ({error}); grid: "
        + ", ".join(f"{rate:.2f}" for rate in live.rates),
        *_drift_line(live),
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


def _drift_line(live: VenueResult) -> list[str]:
    """The live capacity at the end against the start: the engine's own drift, a floor
    under any error the twin can be held to."""
    if live.closing_capacity is None or live.drift is None:
        return []
    return [
        f"live capacity after the trials: {live.closing_capacity:.2f} req/s "
        f"({_percent(live.drift)} from the start: the engine's own drift while they ran)"
    ]


def _arrivals(validation: Validation) -> str:
    arrival = validation.settings.live.arrival
    if arrival.process == "gamma":
        return f"gamma arrivals, CV {arrival.burstiness:g}"
    return f"{arrival.process} arrivals"


def summary(validation: Validation) -> dict[str, Any]:
    """The derived figures the JSON keeps beside the trials."""
    threshold, seeds = validation.settings.threshold, validation.settings.seeds
    live, sim = validation.live, validation.simulated
    live_goodput, sim_goodput = live.goodputs(threshold), sim.goodputs(threshold)
    sim_draws = sim.goodput_draws(threshold)
    live_seeds, sim_seeds = (
        live.seed_goodputs(threshold, seeds),
        sim.seed_goodputs(threshold, seeds),
    )
    live_rank, sim_rank = goodput_ranks(live_goodput), goodput_ranks(sim_goodput)
    return {
        "capacity_error": relative_error(sim.capacity, live.capacity),
        "capacity_drift": live.drift,
        "common_rate": common_rate(live, sim, threshold),
        "policies": {
            policy: {
                "goodput_live": live_goodput[policy].value,
                "goodput_live_bound": live_goodput[policy].bound,
                "goodput_simulated": sim_goodput[policy].value,
                "goodput_simulated_bound": sim_goodput[policy].bound,
                "goodput_error": goodput_error(sim_goodput[policy], live_goodput[policy]),
                "goodput_live_per_seed": [list(g) for g in live_seeds[policy]],
                "goodput_simulated_per_seed": [list(g) for g in sim_seeds[policy]],
                "goodput_simulated_draws": [list(g) for g in sim_draws[policy]],
                "rank_live": live_rank[policy],
                "rank_simulated": sim_rank[policy],
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
    axes.set_ylim(bottom=0.0)
    axes.set_xlabel("request rate (req/s)")
    axes.set_ylabel("violating requests (%)")
    axes.set_title(f"live (points) and simulated (lines): {validation.settings.live.workload}")
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
