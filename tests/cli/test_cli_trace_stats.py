"""The `slidingserve trace-stats` command end to end: text, PNGs, JSON, and bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slidingserve.cli import main

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
MOONCAKE = SHARED / "mooncake_conversation_trace.jsonl"
SHAREGPT = SHARED / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def vidur_csv(tmp_path: Path) -> Path:
    """Four requests a second apart; prompts 100..400."""
    return write(
        tmp_path,
        "vidur.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n1,200,20\n2,300,30\n3,400,40\n",
    )


def mooncake_jsonl(tmp_path: Path) -> Path:
    """Three requests at 0 ms and one at 1,500 ms; one prompt over 8,192 tokens."""
    lines = [(0, 100, 5), (0, 300, 7), (0, 200, 9), (1500, 9000, 3)]
    return write(
        tmp_path,
        "moon.jsonl",
        "".join(
            json.dumps({"timestamp": t, "input_length": p, "output_length": o, "hash_ids": []})
            + "\n"
            for t, p, o in lines
        ),
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["trace-stats", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def payload(out_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((out_dir / "trace_stats.json").read_text())
    return result


def block(text: str, path: Path) -> list[str]:
    """The lines describing `path`: from its header to the next blank line."""
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"{path}: ")))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_describes_each_file_and_writes_a_png_each_and_one_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv, jsonl, out = vidur_csv(tmp_path), mooncake_jsonl(tmp_path), tmp_path / "out"
    code, text, err = run(capsys, csv, jsonl, "--out-dir", out)
    assert code == 0 and err == ""
    even = block(text, csv)
    assert even[0] == f"{csv}: 4 requests"
    assert "3.0 s (0.1 min), 1.00 req/s" in even[1]
    assert "count CV 0.00, busiest 1 (busiest minute 4)" in even[2]
    assert "CV 0.00; CV within a minute median 0.00, max 0.00 (1 minute with" in even[3]
    assert even[-2].split() == ["prompt", "250", "250", "370", "397", "400"]
    assert even[-1].split() == ["output", "25", "25", "37", "40", "40"]
    bursty = block(text, jsonl)
    assert bursty[0] == f"{jsonl}: 4 requests"
    assert "1.5 s (0.0 min), 2.00 req/s" in bursty[1]
    assert "count CV 0.50, busiest 3" in bursty[2]
    assert "gaps          CV 1.41;" in bursty[3]
    assert "25.0% over 8,192" in bursty[4]
    for png in ("vidur.png", "moon.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
        assert f"wrote {out / png}" in text
    files = payload(out)["files"]
    assert [f["source"] for f in files] == [str(csv), str(jsonl)]
    assert files[0]["prompt"]["p50"] == 250.0 and files[0]["arrivals"]["gap_cv"] == 0.0
    assert files[1]["arrivals"]["busiest_second"] == 3
    assert files[1]["prompt_share_over"] == {"4096": 0.25, "8192": 0.25, "32768": 0.0}
    assert payload(out)["errors"] == []


def test_no_plot_writes_only_the_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, _ = run(capsys, vidur_csv(tmp_path), "--no-plot", "--out-dir", tmp_path / "out")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["trace_stats.json"]


def test_a_length_only_file_has_no_arrival_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "lengths.csv", "num_prefill_tokens,num_decode_tokens\n5,1\n7,3\n")
    code, text, _ = run(capsys, path, "--out-dir", tmp_path / "out")
    assert code == 0
    lines = block(text, path)
    assert lines[1].split() == ["arrivals", "no", "arrival", "times"]
    assert not any(line.lstrip().startswith(("per second", "gaps")) for line in lines)
    assert payload(tmp_path / "out")["files"][0]["arrivals"] is None
    assert (tmp_path / "out" / "lengths.png").exists()


def test_columns_name_other_headers_and_their_time_unit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "own.csv", "t,in,out\n0,5,1\n250,6,1\n500,7,1\n")
    code, _, _ = run(
        capsys,
        path,
        "--columns",
        "prompt=in,output=out,time=t,time_unit=ms",
        "--no-plot",
        "--out-dir",
        tmp_path / "out",
    )
    assert code == 0
    arrivals = payload(tmp_path / "out")["files"][0]["arrivals"]
    assert arrivals["duration"] == 0.5 and arrivals["mean_rate"] == pytest.approx(4.0)


def test_files_with_one_stem_get_distinct_pngs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = vidur_csv(tmp_path / "a"), vidur_csv(tmp_path / "b")
    code, _, _ = run(capsys, first, second, "--out-dir", tmp_path / "out")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["vidur-2.png", "vidur.png"]


def test_a_bad_file_is_reported_and_the_others_still_described(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = vidur_csv(tmp_path)
    bad = write(tmp_path, "bad.csv", "num_prefill_tokens,num_decode_tokens\n5,1\n6,x\n")
    code, text, err = run(capsys, bad, good, "--no-plot", "--out-dir", tmp_path / "out")
    assert code == 2
    assert err == (
        f"slidingserve trace-stats: error: {bad}, line 3: num_decode_tokens is 'x', "
        "not an integer\n"
    )
    assert block(text, good)[0] == f"{good}: 4 requests"
    assert str(bad) not in text
    written = payload(tmp_path / "out")
    assert [f["source"] for f in written["files"]] == [str(good)]
    assert len(written["errors"]) == 1 and "line 3" in written["errors"][0]


def test_only_bad_files_write_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text, err = run(capsys, tmp_path / "absent.jsonl", "--out-dir", tmp_path / "out")
    assert code == 2 and text == ""
    assert err.startswith(f"slidingserve trace-stats: error: {tmp_path / 'absent.jsonl'}: ")
    assert not (tmp_path / "out").exists()


def test_bad_columns_are_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, vidur_csv(tmp_path), "--columns", "size=in")
    assert code == 2
    assert err.startswith("slidingserve trace-stats: error: trace columns are prompt=COL")
    assert err.count("\n") == 1


@pytest.mark.skipif(not MOONCAKE.exists(), reason="shared Mooncake trace absent")
def test_the_shared_mooncake_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text, _ = run(capsys, MOONCAKE, "--no-plot", "--out-dir", tmp_path)
    assert code == 0
    stats = payload(tmp_path)["files"][0]
    # data/README: 12,031 rows, 3.4 req/s, per-second count CV 1.5; prompts 6,909 / 27,367 /
    # 85,400 / 126,195, 55% within 8k; outputs 350 / 597 / 1,119 / 2,000
    assert stats["rows"] == 12_031
    assert stats["arrivals"]["mean_rate"] == pytest.approx(3.4, abs=0.05)
    assert stats["arrivals"]["second_count_cv"] == pytest.approx(1.5, abs=0.05)
    prompt, output = stats["prompt"], stats["output"]
    assert [round(prompt[q]) for q in ("p50", "p90", "p99", "max")] == [6909, 27367, 85400, 126195]
    assert [round(output[q]) for q in ("p50", "p90", "p99", "max")] == [350, 597, 1119, 2000]
    assert stats["prompt_share_over"]["8192"] == pytest.approx(0.45, abs=0.005)
    assert f"{MOONCAKE}: 12,031 requests" in text
    assert "prompt  12,035  6,909  27,367  85,400  126,195" in text
    # measured: 288,500 blocks, 105,710 of them (36.6%) repeat an earlier row's
    assert stats["blocks"] == {
        "blocks": 288_500,
        "repeated": 105_710,
        "repeat_share": 105_710 / 288_500,
    }
    assert "prompt blocks 288,500 of 512 tokens; 37% repeat an earlier one" in text


@pytest.mark.skipif(not SHAREGPT.exists(), reason="shared ShareGPT trace absent")
def test_the_shared_sharegpt_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, _ = run(capsys, SHAREGPT, "--no-plot", "--out-dir", tmp_path)
    assert code == 0
    stats = payload(tmp_path)["files"][0]
    # data/README: 30,731 rows; prompts 2340/1730/5696/7434/8141, outputs 439/415/834/998/1024
    assert stats["rows"] == 30_731 and stats["arrivals"] is None
    keys = ("mean", "p50", "p90", "p99", "max")
    assert [round(stats["prompt"][k]) for k in keys] == [2340, 1730, 5696, 7434, 8141]
    assert [round(stats["output"][k]) for k in keys] == [439, 415, 834, 998, 1024]
    assert stats["prompt_share_over"]["8192"] == 0.0


def test_repeated_prompt_blocks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = [[0, 1, 2], [0, 1, 3], [4], [3, 0]]  # 9 blocks; 0, 1, then 3 and 0 repeat
    path = write(
        tmp_path,
        "ids.jsonl",
        "".join(
            json.dumps({"timestamp": k, "input_length": 9, "output_length": 1, "hash_ids": ids})
            + "\n"
            for k, ids in enumerate(rows)
        ),
    )
    code, text, _ = run(
        capsys, path, "--no-plot", "--trace-block-size", "16", "--out-dir", tmp_path
    )
    assert code == 0
    assert payload(tmp_path)["files"][0]["blocks"] == {
        "blocks": 9,
        "repeated": 4,
        "repeat_share": 4 / 9,
    }
    assert "prompt blocks 9 of 16 tokens; 44% repeat an earlier one" in text


def test_no_block_line_without_hash_ids(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text, _ = run(capsys, vidur_csv(tmp_path), "--no-plot", "--out-dir", tmp_path)
    assert code == 0 and "prompt blocks" not in text
    assert payload(tmp_path)["files"][0]["blocks"] is None
