"""The regime map as a heatmap PNG (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from slidingserve.eval.plots import save_figure
from slidingserve.eval.regime_report import HeatmapGrid, heatmap_grid

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from slidingserve.eval.regimes import RegimeResult

_LEAST_RANGE = math.log2(1.25)  # the colour scale spans at least 0.8× to 1.25×
_MOST_RANGE = 1.0  # and at most 0.5× to 2×: beyond, the colour saturates


def plot_regime_map(result: RegimeResult, path: Path) -> Path:
    """One panel per hardware point: log2 of the mean ratio in colour (blue: the candidate
    ahead, red: behind), every cell labelled `mean [low, high]`; significant cells framed
    in black with `*`."""
    regimes = result.regimes
    grids = [heatmap_grid(result, point) for point in regimes.hardware_labels]
    limit = _colour_range(grids)
    rows, columns = len(grids[0].rows), len(grids[0].columns)
    figure, axes = plt.subplots(
        1,
        len(grids),
        figsize=(1.7 * columns * len(grids) + 2.5, 0.6 * rows + 2.0),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for panel, grid in zip(axes.flat, grids, strict=True):
        image = _draw(panel, grid, limit)
    bar = figure.colorbar(image, ax=list(axes.flat), shrink=0.9)
    ticks = [
        t for t in (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0) if abs(math.log2(t)) <= limit
    ]
    bar.set_ticks([math.log2(t) for t in ticks], labels=[f"{t:g}" for t in ticks])
    bar.set_label(f"{regimes.candidate} ÷ best baseline")
    figure.suptitle(
        f"{regimes.candidate} ÷ best of {', '.join(regimes.baselines)} per seed "
        f"({len(regimes.setup.seeds)} seeds, {regimes.setup.slo_preset} SLOs × scale)\n"
        "mean [95% interval]; * and frame: the interval excludes 1"
    )
    return save_figure(figure, path, dpi=120, tight=False)


def _colour_range(grids: list[HeatmapGrid]) -> float:
    logs = [abs(math.log2(v)) for g in grids for row in g.ratio for v in row if v > 0]
    return min(max([_LEAST_RANGE, *logs]), _MOST_RANGE)


def _draw(panel: Axes, grid: HeatmapGrid, limit: float) -> matplotlib.image.AxesImage:
    values = np.array(
        [[math.log2(v) if v > 0 else math.nan for v in row] for row in grid.ratio], dtype=float
    )
    colours = matplotlib.colormaps["RdBu"].with_extremes(bad="lightgrey")
    image = panel.imshow(values, cmap=colours, vmin=-limit, vmax=limit, aspect="auto")
    for r, (labels, marks) in enumerate(zip(grid.labels, grid.significant, strict=True)):
        for c, (label, significant) in enumerate(zip(labels, marks, strict=True)):
            text = label.replace(" [", "\n[", 1)
            weight = "bold" if significant else "normal"
            dark = abs(values[r, c]) > 0.6 * limit  # the colour map's ends are dark
            panel.text(
                c,
                r,
                text,
                ha="center",
                va="center",
                fontsize=8,
                fontweight=weight,
                color="white" if dark else "black",
            )
            if significant:
                frame = Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="black", lw=2)
                panel.add_patch(frame)
    panel.set_xticks(range(len(grid.columns)), labels=grid.columns)
    panel.set_yticks(range(len(grid.rows)), labels=grid.rows)  # shared: drawn on the first
    panel.set_xlabel("SLO scale")
    panel.set_title(grid.title)
    return image
