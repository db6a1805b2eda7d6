"""SlidingServe's flat options (`--set slidingserve.window=2`, a `[policies.slidingserve]`
table) mapped onto the parts of a composition.

Four options choose a part: `sorter` (mlps, edf), `overload` (none, drop-largest,
relegate), `chunker` (paper, window, fixed) and `batch_constructor`; the others tune the
part they belong to. `compose(base, options)` changes the composition `base`: a part whose
choice changes starts from its own defaults, one whose choice stays keeps `base`'s
settings. An option the user gives that does nothing in the resulting composition is an
error naming why; a setting of `base` that no longer applies (DESIGN's `lost_last` once
`sorter=mlps`) is simply dropped with its part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from slidingserve.policies.slidingserve.budget import (
    BudgetConfig,
    FixedSplit,
    PaperSplit,
    SplitRule,
    WindowSplit,
)
from slidingserve.policies.slidingserve.config import (
    EMA_UNUSED,
    NO_ADMISSION,
    WINDOWS_UNUSED,
    SlidingServeConfig,
)
from slidingserve.policies.slidingserve.constructor import ConstructorConfig
from slidingserve.policies.slidingserve.ordering import EdfOrder, MlpsOrder, Ordering
from slidingserve.policies.slidingserve.triage import TriageConfig

SORTERS: tuple[str, ...] = ("mlps", "edf")
CHUNKERS: tuple[str, ...] = ("paper", "window", "fixed")
OVERLOADS: tuple[str, ...] = ("none", "drop-largest", "relegate")

KNAPSACK = ("max_anchors", "max_knapsack_items", "knapsack_quantum", "verify_rounds")
SHARED = (
    "features",
    "throughput_decay",
    "max_batch_tokens",
    "admission",
    "preempt_lost_first",
    "preempt_most_slack",
    "yield_violated",
    "kv_headroom",
    "whole_prefills",
    "kv_forecast",
    "low_memory_cap",
    "record_decisions",
)


class Applies(NamedTuple):
    """When an option does something, and what to tell a user who sets it elsewhere."""

    test: Callable[[Mapping[str, Any]], bool]  # on the flat options of the composition
    why: str  # ends "OPTION does nothing in this composition of POLICY: ..."


def _mlps(o: Mapping[str, Any]) -> bool:
    return bool(o["sorter"] == "mlps")


def _constructor(o: Mapping[str, Any]) -> bool:
    return bool(o["batch_constructor"])


def _windows(o: Mapping[str, Any]) -> bool:
    """`config.uses_decode_windows` on flat options."""
    return o["chunker"] != "fixed" or _constructor(o)


def _ema(o: Mapping[str, Any]) -> bool:
    """`config.reads_rate_ema` on flat options."""
    return _mlps(o) or (o["overload"] != "none" and o.get("triage_rate", "ema") == "ema")


_NOT_MLPS = "it is a weight of MLPS's urgency and the order is EDF (sorter=edf)"
_NO_CONSTRUCTOR = "it is a setting of the BatchConstructor, which is off (batch_constructor=false)"

APPLIES: Mapping[str, Applies] = {
    "alpha": Applies(_mlps, _NOT_MLPS),
    "epsilon": Applies(_mlps, _NOT_MLPS),
    "lost_last": Applies(
        lambda o: not _mlps(o), "MLPS (sorter=mlps) already puts lost requests last"
    ),
    "prefix_first": Applies(lambda o: not _mlps(o), "it moves requests in the EDF order only"),
    "triage_rate": Applies(
        lambda o: o["overload"] != "none", "there is no triage (overload=none) to take a rate"
    ),
    "window": Applies(
        lambda o: o["chunker"] == "window", "it counts the windows of chunker=window only"
    ),
    "time_margin": Applies(_windows, WINDOWS_UNUSED),
    "iteration_cap": Applies(_windows, WINDOWS_UNUSED),
    "tight_cache_cap": Applies(_windows, WINDOWS_UNUSED),
    "release_decodes": Applies(_windows, WINDOWS_UNUSED),
    "leftover_fill": Applies(_constructor, _NO_CONSTRUCTOR),
    **{name: Applies(_constructor, _NO_CONSTRUCTOR) for name in KNAPSACK},
    "throughput_decay": Applies(_ema, EMA_UNUSED),
    "admission_test": Applies(lambda o: bool(o["admission"]), NO_ADMISSION),
}
"""The options that apply only in some compositions; every other option always applies."""

OPTIONS: tuple[str, ...] = tuple(
    dict.fromkeys(("sorter", "overload", "chunker", "batch_constructor", "token_quantum"))
    | dict.fromkeys(APPLIES)
    | dict.fromkeys(SHARED)
)
"""Every flat option: the four choices of a part, then the settings."""


def compose(
    base: SlidingServeConfig, options: Mapping[str, Any], owner: str = "slidingserve"
) -> SlidingServeConfig:
    """`base` changed by the flat `options`; ValueError for an unknown option, a bad value
    or an option that does nothing in the result (`owner` names the policy)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        known = ", ".join(sorted(OPTIONS))
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {owner}; known: {known}")
    merged = {**flatten(base), **options}
    _check_choices(merged)
    for name in options:
        rule = APPLIES.get(name)
        if rule is not None and not rule.test(merged):
            raise ValueError(f"{name} does nothing in this composition of {owner}: {rule.why}")
    return from_flat(_applying(merged))


def flatten(config: SlidingServeConfig) -> dict[str, Any]:
    """The flat options that give `config` (only those that apply in it)."""
    options: dict[str, Any] = {
        "features": config.features,
        "throughput_decay": config.throughput_decay,
        "max_batch_tokens": config.max_batch_tokens,
        "admission": config.admission,
        "admission_test": config.admission_test,
        "preempt_lost_first": config.preempt_lost_first,
        "preempt_most_slack": config.preempt_most_slack,
        "yield_violated": config.yield_violated,
        "kv_headroom": config.kv_headroom,
        "whole_prefills": config.whole_prefills,
        "kv_forecast": config.kv_forecast,
        "low_memory_cap": config.low_memory_cap,
        "record_decisions": config.record_decisions,
        "overload": "none",
        "batch_constructor": config.constructor is not None,
        **_ordering_options(config.ordering),
        **_budget_options(config.budget),
    }
    if config.triage is not None:
        options |= {"overload": config.triage.rule, "triage_rate": config.triage.rate}
    if config.constructor is not None:
        constructor = config.constructor
        options |= {name: getattr(constructor, name) for name in (*KNAPSACK, "leftover_fill")}
    return _applying(options)


def _applying(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` without those that do nothing in the composition they describe."""
    return {k: v for k, v in options.items() if k not in APPLIES or APPLIES[k].test(options)}


def from_flat(options: Mapping[str, Any]) -> SlidingServeConfig:
    """The composition the flat `options` describe; each part's settings not given take
    that part's defaults."""

    def pick(*names: str) -> dict[str, Any]:
        return {name: options[name] for name in names if name in options}

    triage = None
    if options["overload"] != "none":
        rate = {"rate": options["triage_rate"]} if "triage_rate" in options else {}
        triage = TriageConfig(options["overload"], **rate)
    constructor = None
    if options["batch_constructor"]:
        constructor = ConstructorConfig(**pick(*KNAPSACK, "leftover_fill"))
    return SlidingServeConfig(
        ordering=_ordering(options),
        budget=BudgetConfig(
            _split_rule(options),
            **pick(
                "time_margin",
                "iteration_cap",
                "release_decodes",
                "token_quantum",
                "tight_cache_cap",
            ),
        ),
        triage=triage,
        constructor=constructor,
        **pick(*SHARED, "admission_test"),
    )


def _check_choices(options: Mapping[str, Any]) -> None:
    for name, known in (("sorter", SORTERS), ("chunker", CHUNKERS), ("overload", OVERLOADS)):
        if options[name] not in known:
            raise ValueError(f"unknown {name} {options[name]!r}; known: {', '.join(known)}")
    if not isinstance(options["batch_constructor"], bool):
        value = options["batch_constructor"]
        raise ValueError(f"batch_constructor must be true or false, got {value!r}")


def _ordering(options: Mapping[str, Any]) -> Ordering:
    if options["sorter"] == "mlps":
        return MlpsOrder(**{k: options[k] for k in ("alpha", "epsilon") if k in options})
    return EdfOrder(**{k: options[k] for k in ("lost_last", "prefix_first") if k in options})


def _split_rule(options: Mapping[str, Any]) -> SplitRule:
    if options["chunker"] == "window":
        return WindowSplit(options["window"]) if "window" in options else WindowSplit()
    return FixedSplit() if options["chunker"] == "fixed" else PaperSplit()


def _ordering_options(ordering: Ordering) -> dict[str, Any]:
    if isinstance(ordering, MlpsOrder):
        return {"sorter": "mlps", "alpha": ordering.alpha, "epsilon": ordering.epsilon}
    return {
        "sorter": "edf",
        "lost_last": ordering.lost_last,
        "prefix_first": ordering.prefix_first,
    }


def _budget_options(budget: BudgetConfig) -> dict[str, Any]:
    rule = budget.rule
    options: dict[str, Any] = {
        "chunker": "paper",
        "time_margin": budget.time_margin,
        "iteration_cap": budget.iteration_cap,
        "release_decodes": budget.release_decodes,
        "token_quantum": budget.token_quantum,
        "tight_cache_cap": budget.tight_cache_cap,
    }
    if isinstance(rule, WindowSplit):
        options |= {"chunker": "window", "window": rule.k}
    elif isinstance(rule, FixedSplit):
        options["chunker"] = "fixed"
    return options
