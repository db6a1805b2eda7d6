"""Save and load a predictor's coefficients with their metadata, and optionally the measured
batches it was fitted to, as one JSON file.

The file is one JSON object (format version 3; versions 1 and 2, the same without
`features`, and version 1 also without `batches`, are read too):

    format          "slidingserve-predictor"
    format_version  3
    metadata        {model, hardware, num_samples, created, training, validation}
    features        the feature set the models weigh: "paper" or "rich"; a file without
                    it is "paper" (all that versions 1 and 2 knew)
    feature_names   the names of the features weighed, in order: the first `width` of
                    `Features` (the seven of docs/design.md §3 for "paper")
    global          {"intercept": seconds, "weights": [seconds per feature unit, one per name]}
    experts         {scenario: {"intercept": .., "weights": [..]}}
    choice          {scenario: "expert" | "global"}
    batches         optional: the timed batches of the profile, one a line, each
                    {"decode_contexts": [u, ..], "prefill_chunks": [[c, u], ..], "seconds": s}
                    (tokens cached before the step u, chunk tokens c ≥ 1, measured seconds > 0)

`batches` is what a policy that fits a model of its own (QoServe) is built from, so that it
sees the very measurements the predictor saw.

Files are written whole or not at all (`atomic_write`): a crash while saving leaves the
previous file as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from slidingserve.core.batch import BatchShape, TimedBatch
from slidingserve.core.checks import is_integer, is_number
from slidingserve.core.files import atomic_write
from slidingserve.predictor.features import PAPER, Features, Scenario, feature_set
from slidingserve.predictor.model import BatchLatencyPredictor, LinearModel, ModelChoice
from slidingserve.predictor.report import AccuracyReport, ErrorStats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from slidingserve.predictor.fit import FitResult

FORMAT_NAME = "slidingserve-predictor"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # 2: the same without `features`; 1: also without `batches`
LEGACY_FEATURES = PAPER.name  # the feature set of a file that names none


@dataclass(frozen=True, slots=True)
class PredictorMetadata:
    """Where a predictor's coefficients come from and how good they were."""

    model: str  # the LLM it was profiled on, e.g. "llama-3-8b"
    hardware: str  # e.g. "a100-80gb-tp1"
    num_samples: int  # samples the fit saw, held-out ones included
    created: str  # ISO 8601 timestamp, UTC
    training: AccuracyReport | None = None  # errors on the fitted samples
    validation: AccuracyReport | None = None  # errors on held-out samples
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_fit(cls, result: FitResult, model: str, hardware: str) -> PredictorMetadata:
        """Metadata of a fresh fit, stamped with the current UTC time."""
        created = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(model, hardware, result.num_samples, created, result.training, result.validation)


class LoadedPredictor(NamedTuple):
    predictor: BatchLatencyPredictor
    metadata: PredictorMetadata
    batches: tuple[TimedBatch, ...] = ()  # the measured batches of the fit; () if not saved


def save_predictor(
    path: str | Path,
    predictor: BatchLatencyPredictor,
    metadata: PredictorMetadata,
    batches: Sequence[TimedBatch] = (),
) -> None:
    """Write `predictor`, `metadata` and the timed `batches` it was fitted to (if given) to
    `path` as JSON, each batch on a line of its own."""
    text = _to_text(predictor_to_dict(predictor, metadata, batches))
    with atomic_write(path) as stream:
        stream.write(text + "\n")


def load_predictor(path: str | Path) -> LoadedPredictor:
    """Read a file written by `save_predictor`; ValueError naming the file and the problem if
    it is malformed, truncated or not JSON."""
    data = read_json(path)
    try:
        return predictor_from_dict(data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def read_json(path: str | Path) -> object:
    """The JSON value in the file `path`; a one-line ValueError naming the file if it is not
    JSON (truncated, corrupt, not text)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON, truncated or corrupt ({error})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a JSON text file ({error})") from None


def _to_text(data: dict[str, object]) -> str:
    """Indented JSON, except that each of the (thousands of) batches takes one line."""
    head = json.dumps({k: v for k, v in data.items() if k != "batches"}, indent=2, allow_nan=False)
    if "batches" not in data:
        return head
    lines = ",\n".join("    " + json.dumps(b, allow_nan=False) for b in _list(data["batches"]))
    return f'{head.removesuffix("}").rstrip()},\n  "batches": [\n{lines}\n  ]\n}}'


def predictor_to_dict(
    predictor: BatchLatencyPredictor,
    metadata: PredictorMetadata,
    batches: Sequence[TimedBatch] = (),
) -> dict[str, object]:
    """The JSON-ready form of a predictor, its metadata and its timed batches (the key
    `batches` only when there are some). Always the current `FORMAT_VERSION`."""
    data: dict[str, object] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "metadata": _metadata_to_dict(metadata),
        "features": predictor.features,
        "feature_names": _feature_names(predictor.features),
        "global": _model_to_dict(predictor.global_model),
        "experts": {s.value: _model_to_dict(m) for s, m in predictor.experts.items()},
        "choice": {s.value: c.value for s, c in predictor.choice.items()},
    }
    if batches:
        data["batches"] = [batch_to_dict(batch) for batch in batches]
    return data


def predictor_from_dict(data: object) -> LoadedPredictor:
    """Inverse of `predictor_to_dict`; ValueError with the path of the first bad field."""
    root = _mapping(data, "file")
    if root.get("format") != FORMAT_NAME:
        raise ValueError(f"format: expected {FORMAT_NAME!r}, got {root.get('format')!r}")
    version = _integer(_field(root, "format_version", ""), "format_version")
    if version not in READABLE_VERSIONS:
        raise ValueError(
            f"format_version {version} is not supported (expected one of {READABLE_VERSIONS})"
        )
    features = _features_from(root.get("features", LEGACY_FEATURES))
    names = _field(root, "feature_names", "")
    if names != _feature_names(features):
        raise ValueError(f"feature_names: expected {_feature_names(features)}, got {names!r}")
    experts_data = _mapping(_field(root, "experts", ""), "experts")
    choice_data = _mapping(_field(root, "choice", ""), "choice")
    width = feature_set(features).width
    predictor = _build(
        _model_from(_field(root, "global", ""), "global", width),
        {
            _scenario(k, "experts"): _model_from(v, f"experts.{k}", width)
            for k, v in experts_data.items()
        },
        {_scenario(k, "choice"): _choice(v, f"choice.{k}") for k, v in choice_data.items()},
        features,
    )
    metadata = _metadata_from(_field(root, "metadata", ""), version)
    batches = _batches_from(root.get("batches", []))
    return LoadedPredictor(predictor, metadata, batches)


def batch_to_dict(batch: TimedBatch) -> dict[str, object]:
    """One timed batch as `{"decode_contexts", "prefill_chunks", "seconds"}`."""
    return {
        "decode_contexts": list(batch.shape.decode_contexts),
        "prefill_chunks": [list(chunk) for chunk in batch.shape.prefill_chunks],
        "seconds": batch.seconds,
    }


def batch_from_dict(data: object, where: str = "batch") -> TimedBatch:
    """Inverse of `batch_to_dict`; ValueError naming the bad field (under `where`)."""
    fields = _mapping(data, where)
    decodes = _list(_field(fields, "decode_contexts", where), f"{where}.decode_contexts")
    chunks = _list(_field(fields, "prefill_chunks", where), f"{where}.prefill_chunks")
    shape = BatchShape(
        tuple(_integer(u, f"{where}.decode_contexts[{i}]") for i, u in enumerate(decodes)),
        tuple(_chunk(chunk, f"{where}.prefill_chunks[{i}]") for i, chunk in enumerate(chunks)),
    )
    if shape.num_tokens == 0:
        raise ValueError(f"{where}: an empty batch (no decode, no prefill chunk)")
    seconds = _number(_field(fields, "seconds", where), f"{where}.seconds")
    if seconds <= 0:
        raise ValueError(f"{where}.seconds: expected a positive time, got {seconds!r}")
    return TimedBatch(shape, seconds)


def _batches_from(data: object) -> tuple[TimedBatch, ...]:
    return tuple(
        batch_from_dict(batch, f"batches[{i}]") for i, batch in enumerate(_list(data, "batches"))
    )


def _chunk(data: object, where: str) -> tuple[int, int]:
    values = _list(data, where)
    if len(values) != 2:
        raise ValueError(f"{where}: expected [chunk tokens, cached tokens], got {data!r}")
    tokens, cached = _integer(values[0], f"{where}[0]"), _integer(values[1], f"{where}[1]")
    if tokens < 1:
        raise ValueError(f"{where}[0]: a prefill chunk has at least one token, got {tokens}")
    return tokens, cached


def _feature_names(features: str) -> list[str]:
    return list(Features._fields[: feature_set(features).width])


def _features_from(value: object) -> str:
    name = _string(value, "features")
    try:
        return feature_set(name).name
    except ValueError as error:
        raise ValueError(f"features: {error}") from None


def _build(
    global_model: LinearModel,
    experts: dict[Scenario, LinearModel],
    choice: dict[Scenario, ModelChoice],
    features: str,
) -> BatchLatencyPredictor:
    try:
        return BatchLatencyPredictor(global_model, experts, choice, features)
    except ValueError as error:
        raise ValueError(f"choice: {error}") from None


def _model_to_dict(model: LinearModel) -> dict[str, object]:
    return {"intercept": model.intercept, "weights": list(model.weights)}


def _model_from(data: object, where: str, width: int) -> LinearModel:
    """The model at `where`, which must have `width` weights (one per feature name)."""
    fields = _mapping(data, where)
    intercept = _number(_field(fields, "intercept", where), f"{where}.intercept")
    raw = _field(fields, "weights", where)
    if not isinstance(raw, list):
        raise ValueError(f"{where}.weights: expected a list of numbers, got {raw!r}")
    if len(raw) != width:
        raise ValueError(f"{where}: expected {width} weights (one per feature), got {len(raw)}")
    weights = tuple(_number(w, f"{where}.weights[{i}]") for i, w in enumerate(raw))
    try:
        return LinearModel(intercept, weights)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _metadata_to_dict(metadata: PredictorMetadata) -> dict[str, object]:
    return {
        "model": metadata.model,
        "hardware": metadata.hardware,
        "num_samples": metadata.num_samples,
        "created": metadata.created,
        "training": _report_to_dict(metadata.training),
        "validation": _report_to_dict(metadata.validation),
    }


def _metadata_from(data: object, version: int) -> PredictorMetadata:
    fields = _mapping(data, "metadata")
    return PredictorMetadata(
        model=_string(_field(fields, "model", "metadata"), "metadata.model"),
        hardware=_string(_field(fields, "hardware", "metadata"), "metadata.hardware"),
        num_samples=_integer(_field(fields, "num_samples", "metadata"), "metadata.num_samples"),
        created=_string(_field(fields, "created", "metadata"), "metadata.created"),
        training=_report_from(fields.get("training"), "metadata.training"),
        validation=_report_from(fields.get("validation"), "metadata.validation"),
        format_version=version,
    )


def _report_to_dict(report: AccuracyReport | None) -> dict[str, object] | None:
    if report is None:
        return None
    return {
        "overall": _stats_to_dict(report.overall),
        "by_scenario": {s.value: _stats_to_dict(e) for s, e in report.by_scenario.items()},
    }


def _report_from(data: object, where: str) -> AccuracyReport | None:
    if data is None:
        return None
    fields = _mapping(data, where)
    by_scenario = _mapping(_field(fields, "by_scenario", where), f"{where}.by_scenario")
    return AccuracyReport(
        overall=_stats_from(_field(fields, "overall", where), f"{where}.overall"),
        by_scenario={
            _scenario(k, f"{where}.by_scenario"): _stats_from(v, f"{where}.by_scenario.{k}")
            for k, v in by_scenario.items()
        },
    )


def _stats_to_dict(stats: ErrorStats) -> dict[str, object]:
    """NaN (undefined) is written as null: JSON has no NaN."""
    return {
        k: None if isinstance(v, float) and math.isnan(v) else v for k, v in stats._asdict().items()
    }


def _stats_from(data: object, where: str) -> ErrorStats:
    fields = _mapping(data, where)
    values = {
        name: _optional_number(_field(fields, name, where), f"{where}.{name}")
        for name in ErrorStats._fields
        if name != "n"
    }
    n = _integer(_field(fields, "n", where), f"{where}.n")
    return ErrorStats(n=n, **values)


def _field(fields: Mapping[str, object], key: str, where: str) -> object:
    if key not in fields:
        raise ValueError(f"{where + '.' if where else ''}{key}: missing")
    return fields[key]


def _mapping(data: object, where: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _list(data: object, where: str = "") -> list[object]:
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
    return data


def _number(value: object, where: str) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _optional_number(value: object, where: str) -> float:
    return math.nan if value is None else _number(value, where)


def _integer(value: object, where: str) -> int:
    if not is_integer(value) or value < 0:
        raise ValueError(f"{where}: expected a non-negative integer, got {value!r}")
    return int(value)


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {value!r}")
    return value


def _scenario(name: str, where: str) -> Scenario:
    try:
        return Scenario(name)
    except ValueError:
        known = [s.value for s in Scenario]
        raise ValueError(f"{where}: unknown scenario {name!r} (known: {known})") from None


def _choice(value: object, where: str) -> ModelChoice:
    try:
        return ModelChoice(value)
    except ValueError:
        known = [c.value for c in ModelChoice]
        raise ValueError(f"{where}: expected one of {known}, got {value!r}") from None
