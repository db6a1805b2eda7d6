"""QoServe's configuration: the published values and the checks on them."""

from __future__ import annotations

from typing import Any

import pytest

from slidingserve.policies.qoserve import QoServeConfig


def test_defaults_are_the_published_values() -> None:
    config = QoServeConfig()
    assert config.token_grid == (128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048, 2552)
    assert config.low_memory_grid == (128, 256, 384, 512)
    assert (config.priority_weight, config.safety_factor) == (0.008, 1.2)
    assert (config.low_memory_divisor, config.low_memory_threshold) == (32, 1000)
    assert (config.initial_throughput, config.throughput_decay) == (8500.0, 0.995)
    assert (config.fallback_chunk, config.decode_chunk_size, config.predictor_split) == (
        128,
        256,
        512,
    )
    assert config.eager_relegation and config.default_decode_count == 15


def test_a_grid_given_as_a_list_is_stored_as_a_tuple() -> None:
    assert QoServeConfig(token_grid=[64, 128]).token_grid == (64, 128)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token_grid": [256, 128]}, "token_grid must be strictly increasing"),
        ({"token_grid": []}, "token_grid must hold at least one"),
        ({"low_memory_grid": [128, 0]}, "low_memory_grid must be at least 1"),
        ({"token_grid": "128"}, "token_grid must be a list"),
        ({"decode_chunk_size": 0}, "decode_chunk_size must be at least 1"),
        ({"fallback_chunk": 1.5}, "fallback_chunk must be an integer"),
        ({"max_batch_tokens": 0}, "max_batch_tokens must be at least 1"),
        ({"safety_factor": 0}, "safety_factor must be above 0"),
        ({"priority_weight": -0.001}, "priority_weight must be at least 0"),
        ({"initial_throughput": float("inf")}, "initial_throughput must be a finite"),
        ({"throughput_decay": 1.0}, "throughput_decay must be below 1"),
        ({"eager_relegation": 1}, "eager_relegation must be true or false"),
    ],
)
def test_bad_values_are_rejected_clearly(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QoServeConfig(**options)
