"""What the adapter starts a policy with: the live predictor and, for policies that fit a
model of their own (`needs_profile`), the timed batches to fit it to (`build_policy`).

The batches are the measured ones that `slidingserve profile` saved in the predictor file
(`predictor/io.py`), the same the shared predictor was fitted to. Only when the file holds
none, or no file was given, are they synthesized from the starting predictor, with a
warning: such a policy then starts from a guess, while the shared predictor starts from
the measurements. Both refit from the same measured steps once the engine runs
(`OnlineLearner.on_refit`).

`check_policy` builds the policy the same way before any engine starts, so that `serve`
reports a bad option or predictor file at once instead of from a dying engine.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from slidingserve.core.batch import TimedBatch
from slidingserve.policies import PolicyContext, get_policy_class, unrecorded
from slidingserve.predictor import (
    BatchLatencyPredictor,
    LinearModel,
    load_predictor,
    random_batch_shapes,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from slidingserve.core.view import EngineLimits
    from slidingserve.policies import Policy
    from slidingserve.predictor import Features, OnlineLearner, Scenario

logger = logging.getLogger(__name__)

STARTING_GUESS = LinearModel(0.005, (0.0, 0.0, 0.0, 2e-5, 0.0, 5e-5, 0.0))
"""Before any measurement or profile: 5 ms a step, 20 µs a decode, 50 µs a prefill token."""
SYNTHETIC_BATCHES = 2000  # batches synthesized when no measured ones were saved


class StartingPoint(NamedTuple):
    """The predictor file's contents, or the starting guess."""

    predictor: BatchLatencyPredictor
    batches: tuple[TimedBatch, ...]  # measured batches the predictor was fitted to, or ()
    source: str  # where they come from, for the log: the file's path or "the starting guess"


class LivePredictor:
    """Reads the online learner's current predictor at every call (it swaps in refits)."""

    def __init__(self, learner: OnlineLearner) -> None:
        self.learner = learner

    def predict_features(self, scenario: Scenario, x: Features) -> float:
        return self.learner.predictor.predict_features(scenario, x)


def starting_point(path: str | None) -> StartingPoint:
    """The predictor (and its batches) of the predictor file `path`, or the starting guess."""
    if not path:
        return StartingPoint(BatchLatencyPredictor.single(STARTING_GUESS), (), "the starting guess")
    loaded = load_predictor(str(path))
    return StartingPoint(loaded.predictor, loaded.batches, str(path))


def build_policy(
    name: str,
    options: Mapping[str, Any],
    limits: EngineLimits,
    learner: OnlineLearner,
    start: StartingPoint,
) -> Policy:
    """The policy `name` with `options`, predicting with the learner's current predictor and,
    if it fits a model of its own, fitted to `policy_profile(start, ...)`. Logs one line
    (INFO) naming them: each engine core that loaded the adapter says so."""
    policy_class = get_policy_class(name)
    profile: tuple[TimedBatch, ...] = ()
    if policy_class.needs_profile:
        profile = policy_profile(start, limits, name)
    context = PolicyContext(limits, LivePredictor(learner), profile)
    policy = policy_class.from_options(context, unrecorded(policy_class, options))
    logger.info(
        "scheduling by %s, options %s, predictor from %s", name, dict(options), start.source
    )
    return policy


def check_policy(
    name: str, options: Mapping[str, Any], predictor: str | None, limits: EngineLimits
) -> None:
    """Build the policy `name` with `options` from the predictor file `predictor` as the
    adapter will (`build_policy`), and drop it: raises what the engine would raise at start
    (`ValueError`, `TypeError`: an unknown policy or option, a bad value, a predictor file
    that cannot be read), before an engine is started. `limits` stand in for the engine's,
    known only once it runs: no option is checked against them."""
    start = starting_point(predictor)
    policy_class = get_policy_class(name)
    profile: tuple[TimedBatch, ...] = ()
    if policy_class.needs_profile:
        profile = starting_batches(start, limits)
    policy_class.from_options(PolicyContext(limits, start.predictor, profile), options)


def policy_profile(
    start: StartingPoint, limits: EngineLimits, policy: str
) -> tuple[TimedBatch, ...]:
    """The timed batches a policy that fits its own model starts from: the measured ones if
    the predictor file has them, else batches synthesized from the starting predictor."""
    if start.batches:
        count = len(start.batches)
        logger.info("%s fits its model to %d measured batches of %s", policy, count, start.source)
        return start.batches
    logger.warning(
        "%s fits its model to batches synthesized from %s: it holds no measured batches "
        "(profile the engine with `slidingserve profile` to give it some)",
        policy,
        start.source,
    )
    return starting_batches(start, limits)


def starting_batches(start: StartingPoint, limits: EngineLimits) -> tuple[TimedBatch, ...]:
    """The measured batches of the predictor file, else batches synthesized from the
    starting predictor."""
    return start.batches or synthetic_profile(start.predictor, limits)


def synthetic_profile(
    predictor: BatchLatencyPredictor, limits: EngineLimits, count: int = SYNTHETIC_BATCHES
) -> tuple[TimedBatch, ...]:
    """Timed batches predicted by `predictor` (a real engine has no ground truth to sample;
    `slidingserve profile` measures one)."""
    shapes = random_batch_shapes(
        count,
        np.random.default_rng(0),
        max_tokens=limits.max_num_batched_tokens,
        max_decodes=min(limits.max_num_seqs, limits.max_num_batched_tokens),
    )
    return tuple(TimedBatch(shape, predictor.predict(shape)) for shape in shapes)
