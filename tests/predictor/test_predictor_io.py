from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.predictor import (
    BatchLatencyPredictor,
    LinearModel,
    ModelChoice,
    PredictorMetadata,
    Sample,
    Scenario,
    fit_predictor,
    load_predictor,
    predictor_from_dict,
    predictor_to_dict,
    random_batch_shapes,
    save_predictor,
)
from slidingserve.predictor.io import FORMAT_VERSION, batch_to_dict
from slidingserve.predictor.report import NO_SAMPLES, AccuracyReport, ErrorStats

if TYPE_CHECKING:
    from pathlib import Path


def make_predictor() -> BatchLatencyPredictor:
    global_model = LinearModel(0.004, (1e-10, 2e-10, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6))
    mixed = LinearModel(-0.001, (0.0, 1e-9, 0.0, 1e-5, 4e-8, 2e-5, 0.0))
    decode = LinearModel(0.003, (0.0, 0.0, 1e-8, 3e-5, 1e-8, 0.0, 0.0))
    return BatchLatencyPredictor(
        global_model,
        {Scenario.MIXED: mixed, Scenario.DECODE_ONLY: decode},
        {Scenario.MIXED: ModelChoice.EXPERT, Scenario.DECODE_ONLY: ModelChoice.GLOBAL},
    )


def make_metadata() -> PredictorMetadata:
    report = AccuracyReport(
        overall=ErrorStats(10, 0.001, 0.002, 0.99, 0.03),
        by_scenario={Scenario.MIXED: ErrorStats(1, 0.001, 0.001, math.nan, 0.02)},
    )
    return PredictorMetadata(
        model="llama-3-8b",
        hardware="a100-80gb-tp1",
        num_samples=10,
        created="2026-11-01T00:00:00+00:00",
        training=report,
        validation=AccuracyReport(NO_SAMPLES, {}),
    )


def same_report(a: AccuracyReport | None, b: AccuracyReport | None) -> bool:
    """Equality that treats NaN as equal to NaN."""
    if a is None or b is None:
        return a is b
    flat = [(a.overall, b.overall)] + [(a.by_scenario[s], b.by_scenario[s]) for s in a.by_scenario]
    return a.by_scenario.keys() == b.by_scenario.keys() and all(
        x == y or (math.isnan(x) and math.isnan(y))
        for p, q in flat
        for x, y in zip(p, q, strict=True)
    )


class TestRoundTrip:
    def test_file_round_trip_is_exact(self, tmp_path: Path) -> None:
        path = tmp_path / "predictor.json"
        predictor, metadata = make_predictor(), make_metadata()
        save_predictor(path, predictor, metadata)
        loaded = load_predictor(path)
        assert loaded.predictor == predictor
        assert loaded.metadata.model == "llama-3-8b"
        assert loaded.metadata.created == metadata.created
        assert same_report(loaded.metadata.training, metadata.training)
        assert same_report(loaded.metadata.validation, metadata.validation)

    def test_file_is_plain_json_with_null_for_undefined(self, tmp_path: Path) -> None:
        path = tmp_path / "predictor.json"
        save_predictor(path, make_predictor(), make_metadata())
        data = json.loads(path.read_text())
        assert data["choice"] == {"mixed": "expert", "decode_only": "global"}
        assert data["metadata"]["training"]["by_scenario"]["mixed"]["r2"] is None

    def test_metadata_from_a_fit(self, tmp_path: Path) -> None:
        shapes = random_batch_shapes(300, np.random.default_rng(0))
        fit = fit_predictor([Sample.from_shape(s, 0.001 + 1e-5 * s.num_tokens) for s in shapes])
        metadata = PredictorMetadata.from_fit(fit, "m", "h")
        assert metadata.num_samples == 300
        assert metadata.created.endswith("+00:00")
        save_predictor(tmp_path / "p.json", fit.predictor, metadata)
        loaded = load_predictor(tmp_path / "p.json")
        assert loaded.predictor == fit.predictor
        assert same_report(loaded.metadata.validation, fit.validation)


def good_dict() -> dict[str, Any]:
    return predictor_to_dict(make_predictor(), make_metadata())


def corrupt(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    data = good_dict()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


class TestMalformed:
    @pytest.mark.parametrize(
        ("path", "value", "message"),
        [
            (("format",), "other", "format"),
            (("format_version",), 99, "format_version 99"),
            (("global", "weights"), [1e-9] * 6, "global: expected 7 weights"),
            (("global", "weights", 2), -1.0, "x3 must be finite and ≥ 0"),
            (("global", "intercept"), "fast", "global.intercept: expected a finite number"),
            (("global",), KeyError, "global: missing"),
            (("experts", "mixed", "weights"), "none", "experts.mixed.weights"),
            (("experts", "huge"), {"intercept": 0, "weights": [0] * 7}, "unknown scenario 'huge'"),
            (("choice", "prefill_only"), "expert", "prefill_only chooses its expert"),
            (("choice", "mixed"), "best", "choice.mixed: expected one of"),
            (("metadata", "num_samples"), -3, "metadata.num_samples"),
            (("metadata", "model"), KeyError, "metadata.model: missing"),
            (("metadata", "training", "overall", "mae"), "x", "metadata.training.overall.mae"),
            (("feature_names",), ["a"], "feature_names"),
        ],
    )
    def test_names_the_bad_field(
        self, path: tuple[str | int, ...], value: object, message: str
    ) -> None:
        with pytest.raises(ValueError, match=message):
            predictor_from_dict(corrupt(path, value))

    def test_not_an_object(self) -> None:
        with pytest.raises(ValueError, match="file: expected an object, got list"):
            predictor_from_dict([1, 2])

    def test_bad_json_names_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.json"
        path.write_text('{"format": ')
        with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
            load_predictor(path)

    def test_file_error_names_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(corrupt(("global", "weights"), [0.0] * 3)))
        with pytest.raises(ValueError, match=r"bad\.json: global"):
            load_predictor(path)


def make_batches() -> tuple[TimedBatch, ...]:
    return (
        TimedBatch(BatchShape((120, 7), ((64, 32),)), 0.0125),
        TimedBatch(BatchShape((), ((256, 0), (3, 900))), 0.031),
        TimedBatch(BatchShape((5,), ()), 0.004),
    )


class TestBatches:
    def test_round_trip_keeps_every_batch_exactly(self, tmp_path: Path) -> None:
        path = tmp_path / "predictor.json"
        save_predictor(path, make_predictor(), make_metadata(), batches=make_batches())
        loaded = load_predictor(path)
        assert loaded.batches == make_batches()
        assert loaded.predictor == make_predictor()

    def test_file_holds_one_batch_a_line_after_the_coefficients(self, tmp_path: Path) -> None:
        path = tmp_path / "predictor.json"
        save_predictor(path, make_predictor(), make_metadata(), batches=make_batches())
        text = path.read_text()
        lines = text.splitlines()
        start = lines.index('  "batches": [')
        assert lines[start + 1] == (
            '    {"decode_contexts": [120, 7], "prefill_chunks": [[64, 32]], "seconds": 0.0125},'
        )
        assert lines[start + 4 :] == ["  ]", "}"]
        data = json.loads(text)
        assert data["format_version"] == FORMAT_VERSION == 3
        assert list(data)[-1] == "batches" and len(data["batches"]) == 3

    def test_without_batches_the_key_is_absent(self, tmp_path: Path) -> None:
        path = tmp_path / "predictor.json"
        save_predictor(path, make_predictor(), make_metadata())
        assert "batches" not in json.loads(path.read_text())
        assert load_predictor(path).batches == ()

    def test_a_version_1_file_still_loads_without_batches(self, tmp_path: Path) -> None:
        old = good_dict()
        old["format_version"] = 1
        path = tmp_path / "old.json"
        path.write_text(json.dumps(old, indent=2))
        loaded = load_predictor(path)
        assert loaded.predictor == make_predictor()
        assert loaded.batches == ()
        assert loaded.metadata.format_version == 1

    def test_a_profile_s_batches_round_trip(self, tmp_path: Path) -> None:
        shapes = random_batch_shapes(200, np.random.default_rng(1))
        batches = tuple(TimedBatch(s, 0.002 + 3e-5 * s.num_tokens) for s in shapes)
        save_predictor(tmp_path / "p.json", make_predictor(), make_metadata(), batches)
        assert load_predictor(tmp_path / "p.json").batches == batches

    @pytest.mark.parametrize(
        ("batch", "message"),
        [
            (
                {"decode_contexts": [1], "prefill_chunks": [], "seconds": 0},
                "seconds: expected a pos",
            ),
            ({"decode_contexts": [1], "prefill_chunks": []}, r"batches\[1\].seconds: missing"),
            ({"decode_contexts": [-1], "prefill_chunks": [], "seconds": 1}, "decode_contexts"),
            ({"decode_contexts": [], "prefill_chunks": [[0, 5]], "seconds": 1}, "at least one"),
            ({"decode_contexts": [], "prefill_chunks": [[4]], "seconds": 1}, r"chunks\[0\]"),
            ({"decode_contexts": [], "prefill_chunks": [], "seconds": 1}, "an empty batch"),
            ({"decode_contexts": 3, "prefill_chunks": [], "seconds": 1}, "expected a list"),
        ],
    )
    def test_a_bad_batch_is_named(self, batch: dict[str, object], message: str) -> None:
        data = predictor_to_dict(make_predictor(), make_metadata(), make_batches()[:1])
        data["batches"] = [batch_to_dict(make_batches()[0]), batch]
        with pytest.raises(ValueError, match=message) as error:
            predictor_from_dict(data)
        assert "batches[1]" in str(error.value)


def make_rich_predictor() -> BatchLatencyPredictor:
    weights = (0.0, 1e-9, 1e-8, 2e-5, 3e-8, 1.5e-5, 1e-6, 2e-3, 1e-10, 4e-3, 1e-6, 2e-6, 3e-6)
    mixed = LinearModel(0.002, tuple(2 * w for w in weights))
    return BatchLatencyPredictor(
        LinearModel(0.004, weights),
        {Scenario.MIXED: mixed},
        {Scenario.MIXED: ModelChoice.EXPERT},
        features="rich",
    )


class TestFeatureSets:
    def test_a_rich_predictor_round_trips_with_its_feature_set(self, tmp_path: Path) -> None:
        path = tmp_path / "rich.json"
        save_predictor(path, make_rich_predictor(), make_metadata())
        data = json.loads(path.read_text())
        assert data["features"] == "rich"
        assert len(data["feature_names"]) == 13
        names = ["num_prefills", "prefill_cached_attention", "token_tiles"]
        assert data["feature_names"][7:10] == names
        loaded = load_predictor(path).predictor
        assert loaded == make_rich_predictor()
        shape = BatchShape((300,) * 40, ((700, 100), (90, 0)))
        assert loaded.predict(shape) == make_rich_predictor().predict(shape)

    def test_a_paper_file_names_its_seven_features(self) -> None:
        data = good_dict()
        assert data["features"] == "paper"
        assert data["feature_names"] == [
            *("prefill_attention", "prefill_square", "cached_tokens", "num_decodes"),
            *("decode_kv", "prefill_tokens", "max_chunk"),
        ]

    @pytest.mark.parametrize("version", [1, 2, 3])
    def test_a_file_without_a_feature_set_is_paper(self, version: int) -> None:
        old = good_dict()
        del old["features"]
        old["format_version"] = version
        loaded = predictor_from_dict(old)
        assert loaded.predictor == make_predictor()
        assert loaded.predictor.features == "paper"

    def test_a_rich_file_read_as_paper_is_refused(self) -> None:
        data = predictor_to_dict(make_rich_predictor(), make_metadata())
        del data["features"]
        with pytest.raises(ValueError, match="feature_names: expected"):
            predictor_from_dict(data)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"features": "fancy"}, "features: unknown feature set 'fancy'"),
            ({"features": 7}, "features: expected a string"),
            ({"global": {"intercept": 0.0, "weights": [0.0] * 7}}, "global: expected 13 weights"),
        ],
    )
    def test_a_bad_rich_file_names_the_field(self, change: dict[str, object], message: str) -> None:
        data = predictor_to_dict(make_rich_predictor(), make_metadata())
        data.update(change)
        with pytest.raises(ValueError, match=message):
            predictor_from_dict(data)
