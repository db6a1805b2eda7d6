"""Named workloads and request generation: mixes, determinism, CRN, trimming, SLOs, sources."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slidingserve.core.request import SLO, Request
from slidingserve.workloads import (
    TRACE_FILES,
    WORKLOADS,
    ArrivalConfig,
    OverloadWindow,
    WorkloadConfig,
    generate_requests,
    get_workload,
    length_sources,
    sample_workload,
    trim_to_context,
)

TRACE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
BIG_CONTEXT = 1_000_000  # tokens: no trimming


def make_config(name: str = "mixed-v1", n: int = 2000, **changes: object) -> WorkloadConfig:
    return WorkloadConfig(name, n, **changes)  # type: ignore[arg-type]


def lengths_of(requests: list[Request]) -> list[tuple[int, int]]:
    return [(r.prompt_len, r.output_len) for r in requests]


def write_trace(path: Path, rows: list[tuple[int, int]]) -> Path:
    lines = ["num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio"]
    lines += [f"{p},{o},{p + o},{p / o}" for p, o in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class TestNamedWorkloads:
    def test_the_four_workloads(self) -> None:
        assert list(WORKLOADS) == ["sharegpt", "arxiv", "mixed-v1", "mixed-v2"]
        assert get_workload("mixed-v1").probabilities.tolist() == [0.75, 0.25]
        assert get_workload("mixed-v2").probabilities.tolist() == pytest.approx([5 / 6, 1 / 6])

    def test_unknown_workload_lists_the_known_ones(self) -> None:
        with pytest.raises(ValueError, match="'mixed-v3'; known: sharegpt, arxiv, mixed-v1"):
            get_workload("mixed-v3")
        with pytest.raises(ValueError, match="unknown workload"):
            make_config("mixed-v3")

    @pytest.mark.parametrize(("name", "share"), [("mixed-v1", 0.75), ("mixed-v2", 5 / 6)])
    def test_mix_ratio_by_request_count(self, name: str, share: float) -> None:
        requests = generate_requests(make_config(name, 20_000), 5.0, 0, BIG_CONTEXT)
        conversational = sum(r.slo.ttft == 2.0 for r in requests) / len(requests)
        assert conversational == pytest.approx(share, abs=0.01)

    def test_sources_and_classes_of_the_sample(self) -> None:
        sample = sample_workload(make_config("mixed-v1", 500), 1.0, 0, BIG_CONTEXT)
        names = [source.workload_class for source in sample.spec.sources]
        classes = [names[k] for k in sample.source_index.tolist()]
        assert set(classes) == {"conversational", "summarization"}
        assert [c == "conversational" for c in classes] == (sample.source_index == 0).tolist()


class TestDeterminismAndCRN:
    def test_same_seed_same_requests(self) -> None:
        config = make_config()
        first = generate_requests(config, 3.0, 42, 8192)
        again = generate_requests(config, 3.0, 42, 8192)
        assert [(r.request_id, r.arrival, r.prompt_len, r.output_len, r.slo) for r in first] == [
            (r.request_id, r.arrival, r.prompt_len, r.output_len, r.slo) for r in again
        ]

    def test_different_seeds_differ(self) -> None:
        config = make_config(n=50)
        assert lengths_of(generate_requests(config, 1.0, 1, 8192)) != lengths_of(
            generate_requests(config, 1.0, 2, 8192)
        )

    @pytest.mark.parametrize(
        "arrival", [ArrivalConfig(), ArrivalConfig("gamma", 3.0)], ids=["poisson", "gamma"]
    )
    def test_rate_changes_only_the_time_scale(self, arrival: ArrivalConfig) -> None:
        config = make_config(arrival=arrival)
        slow = generate_requests(config, 1.0, 9, 8192)
        fast = generate_requests(config, 2.0, 9, 8192)
        assert lengths_of(fast) == lengths_of(slow)
        assert [r.slo for r in fast] == [r.slo for r in slow]
        assert [r.arrival for r in fast] == [r.arrival / 2.0 for r in slow]

    def test_overload_keeps_lengths_and_classes(self) -> None:
        burst = ArrivalConfig(overload=OverloadWindow(10.0, 20.0, 4.0))
        plain = generate_requests(make_config(), 5.0, 3, 8192)
        loaded = generate_requests(make_config(arrival=burst), 5.0, 3, 8192)
        assert lengths_of(loaded) == lengths_of(plain)
        assert [r.slo for r in loaded] == [r.slo for r in plain]

    def test_prepared_sources_give_the_same_requests(self) -> None:
        config = make_config(n=300)
        prepared = length_sources(config)
        assert lengths_of(generate_requests(config, 1.0, 4, 8192, prepared)) == lengths_of(
            generate_requests(config, 1.0, 4, 8192)
        )

    def test_negative_seed_is_refused(self) -> None:
        with pytest.raises(ValueError, match="seed must be at least 0"):
            generate_requests(make_config(n=5), 1.0, -1, 8192)


class TestRequests:
    def test_ids_arrivals_and_slos(self) -> None:
        config = make_config(n=400, slo_preset="relaxed", slo_scale=0.5)
        requests = generate_requests(config, 2.0, 0, 8192)
        assert [r.request_id for r in requests] == [f"r{i}" for i in range(400)]
        arrivals = [r.arrival for r in requests]
        assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
        assert {r.slo for r in requests} == {SLO(2.0, 0.05), SLO(6.0, 0.05)}

    def test_single_source_workload_has_one_class(self) -> None:
        requests = generate_requests(make_config("arxiv", 100), 1.0, 0, 8192)
        assert {r.slo for r in requests} == {SLO(6.0, 0.05)}


class TestTrimming:
    def test_rule(self) -> None:
        prompt = np.array([10, 99, 100, 500, 120], dtype=np.int64)
        output = np.array([5, 50, 7, 500, 1], dtype=np.int64)
        trimmed_prompt, trimmed_output = trim_to_context(prompt, output, 100)
        assert trimmed_prompt.tolist() == [10, 99, 99, 99, 99]
        assert trimmed_output.tolist() == [5, 1, 1, 1, 1]

    def test_generated_requests_follow_the_rule(self) -> None:
        config = make_config(n=3000)
        full = generate_requests(config, 1.0, 5, BIG_CONTEXT)
        short = generate_requests(config, 1.0, 5, 2048)
        assert any(p + o > 2048 for p, o in lengths_of(full))
        for (p, o), (tp, to) in zip(lengths_of(full), lengths_of(short), strict=True):
            assert tp == min(p, 2047)
            assert to == min(o, 2048 - tp)
            assert tp + to <= 2048 and to >= 1

    @pytest.mark.parametrize("max_model_len", [1, 0, 2.5])
    def test_context_must_hold_two_tokens(self, max_model_len: int) -> None:
        with pytest.raises(ValueError, match="max_model_len"):
            generate_requests(make_config(n=5), 1.0, 0, max_model_len)


class TestTraceSources:
    def test_trace_dir_resamples_the_csvs(self, tmp_path: Path) -> None:
        write_trace(tmp_path / TRACE_FILES["sharegpt"], [(100, 10), (200, 20)])
        write_trace(tmp_path / TRACE_FILES["arxiv"], [(3000, 300)])
        config = make_config(n=400, trace_dir=tmp_path)
        for request in generate_requests(config, 1.0, 0, 8192):
            if request.slo.ttft == 2.0:
                assert (request.prompt_len, request.output_len) in {(100, 10), (200, 20)}
            else:
                assert (request.prompt_len, request.output_len) == (3000, 300)

    def test_explicit_file_for_one_source(self, tmp_path: Path) -> None:
        path = write_trace(tmp_path / "my_arxiv.csv", [(7, 3)])
        config = make_config(n=400, trace_files=(("arxiv", path),))
        assert config.trace_path("sharegpt") is None
        requests = generate_requests(config, 1.0, 0, 8192)
        summaries = [(r.prompt_len, r.output_len) for r in requests if r.slo.ttft == 6.0]
        chats = [(r.prompt_len, r.output_len) for r in requests if r.slo.ttft == 2.0]
        assert summaries and set(summaries) == {(7, 3)}
        assert len(set(chats)) > 50  # embedded ShareGPT table

    def test_explicit_file_for_a_source_the_workload_lacks(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="has no source 'arxiv'"):
            make_config("sharegpt", trace_files=(("arxiv", tmp_path / "a.csv"),))

    @pytest.mark.skipif(not TRACE_DIR.is_dir(), reason="shared trace data absent")
    def test_real_traces_give_the_trace_means(self) -> None:
        config = make_config("sharegpt", 20_000, trace_dir=TRACE_DIR)
        requests = generate_requests(config, 1.0, 0, BIG_CONTEXT)
        assert np.mean([r.prompt_len for r in requests]) == pytest.approx(2340, rel=0.03)
        assert np.mean([r.output_len for r in requests]) == pytest.approx(439, rel=0.03)


class TestConfigValidation:
    @pytest.mark.parametrize("n", [0, -5, 1.5, True])
    def test_num_requests(self, n: int) -> None:
        with pytest.raises(ValueError, match="num_requests"):
            make_config(n=n)

    def test_slo_choice_is_checked_up_front(self) -> None:
        with pytest.raises(ValueError, match="unknown SLO preset"):
            make_config(slo_preset="tight")
        with pytest.raises(ValueError, match="SLO scale must be positive"):
            make_config(slo_scale=0.0)

    def test_bad_rate(self) -> None:
        with pytest.raises(ValueError, match="arrival rate"):
            generate_requests(make_config(n=5), 0.0, 0, 8192)
