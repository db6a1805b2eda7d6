"""SLO presets per workload class (docs/evaluation.md §3), with a global scale knob.

Defaults for an A100 serving Llama-3-8B: "strict" gives conversational requests (ShareGPT) a
2 s TTFT and summarization requests (arXiv) 6 s, both a 50 ms TBT; "relaxed" doubles the TTFTs
and gives 100 ms TBT. `scale` multiplies both targets of every class.
"""

from __future__ import annotations

from slidingserve.core.checks import require_positive
from slidingserve.core.request import SLO

CONVERSATIONAL = "conversational"
SUMMARIZATION = "summarization"
WORKLOAD_CLASSES: tuple[str, ...] = (CONVERSATIONAL, SUMMARIZATION)

SLO_PRESETS: dict[str, dict[str, SLO]] = {
    "strict": {
        CONVERSATIONAL: SLO(ttft=2.0, tbt=0.050),  # seconds
        SUMMARIZATION: SLO(ttft=6.0, tbt=0.050),
    },
    "relaxed": {
        CONVERSATIONAL: SLO(ttft=4.0, tbt=0.100),
        SUMMARIZATION: SLO(ttft=12.0, tbt=0.100),
    },
}
"""Preset name -> workload class -> SLO (read-only by convention; SLO itself is frozen)."""


def slo_for(workload_class: str, preset: str = "strict", scale: float = 1.0) -> SLO:
    """The SLO of `workload_class` under `preset`, both targets multiplied by `scale`."""
    check_slo_choice(preset, scale)
    by_class = SLO_PRESETS[preset]
    if workload_class not in by_class:
        raise ValueError(
            f"unknown workload class {workload_class!r}; known: {', '.join(sorted(by_class))}"
        )
    return by_class[workload_class].scaled(scale)


def check_slo_choice(preset: str, scale: float) -> None:
    """ValueError unless `preset` is known and `scale` is positive and finite."""
    if preset not in SLO_PRESETS:
        raise ValueError(f"unknown SLO preset {preset!r}; known: {', '.join(sorted(SLO_PRESETS))}")
    require_positive("SLO scale", scale)
