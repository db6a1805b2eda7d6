"""Exact 0/1 knapsack by dynamic programming over the capacity, vectorised with numpy.

One numpy pass per item over the capacity vector, a bit table of decisions for the
backtrack. Ties in value go to more items, then to more weight: the same order the
BatchConstructor uses to compare anchors (docs/design.md §6, step 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

_RELATIVE_TIE = 1e-9  # values this close (relative) count as equal


class KnapsackSolution(NamedTuple):
    chosen: tuple[int, ...]  # indices of the chosen items, ascending
    value: float  # Σ values of the chosen items
    weight: int  # Σ weights (unquantised) of the chosen items


def solve_knapsack(
    values: Sequence[float], weights: Sequence[int], capacity: int, quantum: int = 1
) -> KnapsackSolution:
    """Maximise (Σ value, count, Σ weight) over subsets with Σ weight ≤ `capacity`.

    With `quantum` > 1 weights are rounded up to multiples of it (and the capacity down),
    which keeps every answer feasible and shrinks the table by that factor.
    """
    if len(values) != len(weights):
        raise ValueError(f"{len(values)} values but {len(weights)} weights")
    if quantum < 1:
        raise ValueError(f"quantum must be at least 1, got {quantum}")
    cells = max(capacity, 0) // quantum
    sizes = [-(-w // quantum) for w in weights]
    value = np.zeros(cells + 1)
    count = np.zeros(cells + 1, dtype=np.int64)
    weight = np.zeros(cells + 1, dtype=np.int64)
    taken = np.zeros((len(values), cells + 1), dtype=bool)
    for item, (v, w, size) in enumerate(zip(values, weights, sizes, strict=True)):
        if w < 0 or v < 0:
            raise ValueError(f"item {item}: negative value or weight")
        if size > cells:
            continue
        _add_item(value, count, weight, taken[item], float(v), int(w), size)
    chosen = _backtrack(taken, sizes, cells)
    return KnapsackSolution(
        chosen, float(sum(values[i] for i in chosen)), int(sum(weights[i] for i in chosen))
    )


def _add_item(
    value: np.ndarray,
    count: np.ndarray,
    weight: np.ndarray,
    taken: np.ndarray,
    item_value: float,
    item_weight: int,
    size: int,
) -> None:
    """One DP pass: cell c may take the item on top of the best of cell c − size."""
    stop = value.size - size
    new_value = value[:stop] + item_value
    new_count = count[:stop] + 1
    new_weight = weight[:stop] + item_weight
    old_value, old_count, old_weight = value[size:], count[size:], weight[size:]
    tolerance = _RELATIVE_TIE * np.maximum(1.0, np.abs(old_value))
    tie = np.abs(new_value - old_value) <= tolerance
    better = (new_value > old_value + tolerance) | (
        tie & ((new_count > old_count) | ((new_count == old_count) & (new_weight > old_weight)))
    )
    taken[size:] = better
    # Assign through copies: the right-hand sides read the pre-update prefix.
    value[size:] = np.where(better, new_value, old_value)
    count[size:] = np.where(better, new_count, old_count)
    weight[size:] = np.where(better, new_weight, old_weight)


def _backtrack(taken: np.ndarray, sizes: Sequence[int], cells: int) -> tuple[int, ...]:
    chosen = []
    cell = cells
    for item in range(len(sizes) - 1, -1, -1):
        if taken[item, cell]:
            chosen.append(item)
            cell -= sizes[item]
    return tuple(sorted(chosen))
