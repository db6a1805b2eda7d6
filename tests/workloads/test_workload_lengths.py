"""Length distributions: embedded tables reproduce the traces; trace resampling keeps pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from slidingserve.workloads import (
    TRACE_FILES,
    LengthTable,
    TraceLengths,
    embedded_distribution,
    load_quantile_tables,
    trace_distribution,
)

TRACE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"

# Trace figures from the data README: mean, p50, p90, p99 (tokens).
README_STATS = {
    ("sharegpt", "prompt"): (2340, 1730, 5696, 7434),
    ("sharegpt", "output"): (439, 415, 834, 998),
    ("arxiv", "prompt"): (2588, 2730, 3702, 3933),
    ("arxiv", "output"): (291, 167, 372, 3271),
}
SAMPLES = 200_000


def embedded_sample(name: str, copula: str = "grid", seed: int = 7) -> LengthTable:
    distribution = embedded_distribution(name, copula)  # type: ignore[arg-type]
    return distribution.sample(SAMPLES, np.random.default_rng(seed))


def moments(values: np.ndarray) -> tuple[float, ...]:
    return (float(values.mean()), *(float(q) for q in np.percentile(values, [50, 90, 99])))


class TestEmbeddedFidelity:
    @pytest.mark.parametrize("copula", ["grid", "gaussian"])
    @pytest.mark.parametrize(("name", "column"), list(README_STATS))
    def test_mean_and_percentiles_match_the_trace(
        self, name: str, column: str, copula: str
    ) -> None:
        sample = embedded_sample(name, copula)
        got = moments(sample.prompt if column == "prompt" else sample.output)
        want = README_STATS[(name, column)]
        assert got[0] == pytest.approx(want[0], rel=0.02), "mean"
        for label, g, w in zip(("p50", "p90", "p99"), got[1:], want[1:], strict=True):
            assert g == pytest.approx(w, rel=0.03), label

    @pytest.mark.parametrize("copula", ["grid", "gaussian"])
    @pytest.mark.parametrize(("name", "spearman"), [("sharegpt", 0.0506), ("arxiv", -0.1138)])
    def test_rank_correlation_is_kept(self, name: str, copula: str, spearman: float) -> None:
        sample = embedded_sample(name, copula)
        assert load_quantile_tables()[name].spearman == pytest.approx(spearman, abs=1e-3)
        got = stats.spearmanr(sample.prompt, sample.output).statistic
        assert got == pytest.approx(spearman, abs=0.02)

    def test_grid_copula_keeps_the_arxiv_tail_shape(self) -> None:
        # In the trace prompt + output <= 4096 always and Pearson is -0.46: long summaries
        # come with short prompts. The rank grid keeps this; a Gaussian copula would not.
        sample = embedded_sample("arxiv")
        assert np.corrcoef(sample.prompt, sample.output)[0, 1] == pytest.approx(-0.46, abs=0.05)
        assert np.mean(sample.prompt + sample.output > 4096) < 0.03
        long_outputs = sample.output > 1000
        assert np.median(sample.prompt[long_outputs]) < 1000

    @pytest.mark.skipif(not TRACE_DIR.is_dir(), reason="shared trace data absent")
    @pytest.mark.parametrize("name", ["sharegpt", "arxiv"])
    def test_mean_product_matches_the_trace(self, name: str) -> None:
        # E[prompt · output] drives decode attention work (KV tokens read per request).
        trace = trace_distribution(TRACE_DIR / TRACE_FILES[name]).table
        sample = embedded_sample(name)
        want = float(np.mean(trace.prompt * trace.output))
        assert float(np.mean(sample.prompt * sample.output)) == pytest.approx(want, rel=0.05)


class TestEmbeddedDistribution:
    def test_same_rng_state_gives_same_sample(self) -> None:
        distribution = embedded_distribution("sharegpt")
        first = distribution.sample(100, np.random.default_rng(3))
        again = distribution.sample(100, np.random.default_rng(3))
        assert np.array_equal(first.prompt, again.prompt)
        assert np.array_equal(first.output, again.output)

    @given(n=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
    @settings(max_examples=30, deadline=None)
    def test_samples_are_positive_integers_within_the_trace_range(self, n: int, seed: int) -> None:
        for name in ("sharegpt", "arxiv"):
            table = load_quantile_tables()[name]
            sample = embedded_distribution(name).sample(n, np.random.default_rng(seed))
            assert len(sample) == n
            assert np.all(sample.prompt >= 1) and np.all(sample.output >= 1)
            assert np.all(sample.prompt <= table.prompt_quantiles[-1])
            assert np.all(sample.output <= table.output_quantiles[-1])

    def test_unknown_name_lists_the_known_ones(self) -> None:
        with pytest.raises(ValueError, match="'nope'; known: arxiv, sharegpt"):
            embedded_distribution("nope")

    def test_unknown_copula(self) -> None:
        with pytest.raises(ValueError, match="unknown copula 'vine'; known: grid, gaussian"):
            embedded_distribution("arxiv", "vine")  # type: ignore[arg-type]


class TestTraceLengths:
    def test_resamples_whole_rows(self) -> None:
        table = LengthTable(
            np.array([10, 20, 30], dtype=np.int64), np.array([1, 2, 3], dtype=np.int64)
        )
        sample = TraceLengths(table).sample(500, np.random.default_rng(0))
        assert set(zip(sample.prompt.tolist(), sample.output.tolist(), strict=True)) == {
            (10, 1),
            (20, 2),
            (30, 3),
        }

    def test_rejects_empty_table(self) -> None:
        empty = np.array([], dtype=np.int64)
        with pytest.raises(ValueError, match="empty trace"):
            TraceLengths(LengthTable(empty, empty.copy()))

    def test_trace_distribution_reads_a_csv(self, tmp_path: Path) -> None:
        path = tmp_path / "t.csv"
        path.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n", encoding="utf-8")
        sample = trace_distribution(path).sample(4, np.random.default_rng(0))
        assert sample.prompt.tolist() == [5] * 4 and sample.output.tolist() == [6] * 4
