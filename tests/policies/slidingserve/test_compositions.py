"""The named compositions and the flat options that change them: every name runs its
composition, options map onto the parts, and an option that does nothing is refused."""

from __future__ import annotations

import re
from typing import Any

import pytest
from factories import TokenLinearModel

from slidingserve.core import EngineLimits
from slidingserve.policies import PolicyContext, make_policy
from slidingserve.policies.slidingserve import (
    DESIGN,
    PAPER,
    SC_EDF,
    SC_MLPS,
    SlidingServeConfig,
    SlidingServePolicy,
    compose,
    flatten,
)
from slidingserve.policies.slidingserve.budget import BudgetConfig, FixedSplit, PaperSplit
from slidingserve.policies.slidingserve.constructor import ConstructorConfig
from slidingserve.policies.slidingserve.options import OPTIONS
from slidingserve.policies.slidingserve.ordering import EdfOrder, MlpsOrder
from slidingserve.policies.slidingserve.triage import TriageConfig

NAMED = {
    "slidingserve": DESIGN,
    "slidingserve-paper": PAPER,
    "slidingserve-sc": SC_EDF,
    "slidingserve-sc-mlps": SC_MLPS,
}


def build(name: str, **options: Any) -> SlidingServePolicy:
    context = PolicyContext(EngineLimits(), TokenLinearModel(0.01, 1e-5))
    built = make_policy(name, context, options)
    assert isinstance(built, SlidingServePolicy)
    return built


@pytest.mark.parametrize(("name", "composition"), NAMED.items())
def test_each_name_runs_its_composition(name: str, composition: SlidingServeConfig) -> None:
    assert build(name).config == composition
    assert compose(composition, {}) == composition
    assert compose(composition, flatten(composition)) == composition


def test_the_paper_and_the_design_differ_where_the_readme_says() -> None:
    assert PAPER.ordering == MlpsOrder() and DESIGN.ordering == EdfOrder(lost_last=True)
    assert PAPER.triage is None and DESIGN.triage == TriageConfig("drop-largest", "ema")
    assert PAPER.constructor == ConstructorConfig() and DESIGN.constructor is None
    assert PAPER.budget == BudgetConfig(PaperSplit())
    budget = DESIGN.budget
    assert (budget.time_margin, budget.iteration_cap, budget.token_quantum) == (1.1, 2.0, 128)
    assert budget.tight_cache_cap == 1.0
    assert (PAPER.features, DESIGN.features) == ("paper", "rich")
    assert not PAPER.preempt_lost_first and DESIGN.preempt_lost_first
    assert not PAPER.preempt_most_slack and DESIGN.preempt_most_slack


def test_a_composition_has_no_default_parts() -> None:
    with pytest.raises(TypeError):
        SlidingServeConfig()  # type: ignore[call-arg]


def test_every_option_is_flat_and_known() -> None:
    assert set(flatten(PAPER)) | set(flatten(DESIGN)) <= set(OPTIONS)
    assert len(OPTIONS) == 33


class TestChangingAPart:
    def test_a_new_choice_starts_from_that_parts_defaults(self) -> None:
        config = compose(DESIGN, {"sorter": "mlps"})
        assert config.ordering == MlpsOrder()  # DESIGN's lost_last went with EDF
        assert config.budget == DESIGN.budget and config.triage == DESIGN.triage

    def test_the_same_choice_keeps_the_base_settings(self) -> None:
        config = compose(DESIGN, {"chunker": "paper"})
        assert config.budget == BudgetConfig(
            PaperSplit(), time_margin=1.1, iteration_cap=2.0, token_quantum=128, tight_cache_cap=1.0
        )

    def test_the_constructor_comes_with_its_defaults_and_the_options_given(self) -> None:
        config = compose(DESIGN, {"batch_constructor": True, "max_anchors": 2})
        assert config.constructor == ConstructorConfig(max_anchors=2)

    def test_settings_that_stop_applying_are_dropped(self) -> None:
        # DESIGN's margin and cap mean nothing to a fixed budget without a constructor.
        assert compose(DESIGN, {"chunker": "fixed"}).budget == BudgetConfig(
            FixedSplit(), token_quantum=128
        )
        # The EMA's decay stays only while a part reads the EMA.
        assert compose(SC_EDF, {"overload": "drop-largest"}).throughput_decay == 0.9


REFUSED = [
    ("slidingserve", {"alpha": 2.0}, "alpha does nothing.*sorter=edf"),
    ("slidingserve", {"epsilon": 0.01}, "epsilon does nothing.*sorter=edf"),
    ("slidingserve-paper", {"lost_last": True}, "lost_last does nothing.*MLPS"),
    ("slidingserve", {"sorter": "mlps", "lost_last": False}, "lost_last does nothing"),
    ("slidingserve-paper", {"window": 2}, "window does nothing.*chunker=window"),
    ("slidingserve", {"chunker": "paper", "window": 1}, "window does nothing"),
    ("slidingserve-sc", {"triage_rate": "ema"}, "triage_rate does nothing.*overload=none"),
    ("slidingserve", {"overload": "none", "triage_rate": "ema"}, "triage_rate does nothing"),
    ("slidingserve", {"chunker": "fixed", "time_margin": 1.2}, "time_margin does nothing"),
    ("slidingserve", {"chunker": "fixed", "iteration_cap": 1}, "iteration_cap does nothing"),
    ("slidingserve", {"max_anchors": 4}, "max_anchors does nothing.*batch_constructor=false"),
    ("slidingserve", {"max_knapsack_items": 4}, "max_knapsack_items does nothing"),
    ("slidingserve", {"knapsack_quantum": 16}, "knapsack_quantum does nothing"),
    ("slidingserve", {"verify_rounds": 1}, "verify_rounds does nothing"),
    ("slidingserve-sc-mlps", {"leftover_fill": True}, "leftover_fill does nothing"),
    ("slidingserve-sc", {"throughput_decay": 0.5}, "throughput_decay does nothing.*EMA"),
    ("slidingserve", {"admission_test": "queue"}, "admission_test does nothing.*admission=false"),
    (
        "slidingserve",
        {"triage_rate": "predicted", "throughput_decay": 0.5},
        "throughput_decay does nothing",
    ),
]


@pytest.mark.parametrize(("name", "options", "message"), REFUSED)
def test_an_option_that_does_nothing_is_refused(
    name: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(name, **options)


ACCEPTED = [
    ("slidingserve", {"sorter": "mlps", "alpha": 2.0}),
    ("slidingserve-paper", {"sorter": "edf", "lost_last": True}),
    ("slidingserve-paper", {"chunker": "window", "window": 3}),
    ("slidingserve-paper", {"chunker": "fixed", "time_margin": 1.2}),  # the constructor's T_cur
    ("slidingserve-sc", {"overload": "relegate", "triage_rate": "predicted"}),
    ("slidingserve-sc", {"sorter": "mlps", "throughput_decay": 0.5}),
    ("slidingserve", {"batch_constructor": True, "verify_rounds": 1}),
    ("slidingserve", {"admission": True, "admission_test": "queue"}),
]


@pytest.mark.parametrize(("name", "options"), ACCEPTED)
def test_the_same_option_where_it_applies_is_taken(name: str, options: dict[str, Any]) -> None:
    config = build(name, **options).config
    assert {k: flatten(config)[k] for k in options} == options


def test_unknown_options_and_choices_are_refused_with_the_known_ones() -> None:
    unknown = re.escape("unknown option(s) sortr for slidingserve; known:")
    with pytest.raises(ValueError, match=unknown):
        build("slidingserve", sortr="edf")
    with pytest.raises(ValueError, match="unknown sorter 'fifo'; known: mlps, edf"):
        build("slidingserve", sorter="fifo")
    with pytest.raises(ValueError, match="batch_constructor must be true or false"):
        build("slidingserve", batch_constructor="yes")


def test_a_composition_built_directly_is_checked_across_parts() -> None:
    fixed = BudgetConfig(FixedSplit(), time_margin=1.2)
    with pytest.raises(ValueError, match="tight_cache_cap and release_decodes do nothing"):
        SlidingServeConfig(ordering=EdfOrder(), budget=fixed, features="paper")
    SlidingServeConfig(
        ordering=EdfOrder(), budget=fixed, features="paper", constructor=ConstructorConfig()
    )
    with pytest.raises(ValueError, match="throughput_decay does nothing"):
        SlidingServeConfig(
            ordering=EdfOrder(),
            budget=BudgetConfig(PaperSplit()),
            features="paper",
            throughput_decay=0.5,
        )


def test_an_unknown_admission_test_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown admission_test 'hope'; known: alone, queue"):
        build("slidingserve", admission=True, admission_test="hope")


def test_prefix_first_moves_cached_waiting_requests_ahead_in_edf_only() -> None:
    assert compose(DESIGN, {"prefix_first": 0.5}).ordering == EdfOrder(
        lost_last=True, prefix_first=0.5
    )
    with pytest.raises(ValueError, match="prefix_first does nothing"):
        compose(DESIGN, {"sorter": "mlps", "prefix_first": 0.5})
    with pytest.raises(ValueError, match="prefix_first"):
        compose(DESIGN, {"prefix_first": -1})
