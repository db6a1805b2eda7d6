"""vLLM's OpenAI server started with `server_command`: SLOs in `vllm_xargs`, bad ones refused,
the adapter's health counts in the server log and on `/metrics`.

The server runs in a subprocess on 127.0.0.1 and a free port; every wait is bounded and the
server's process group is killed at the end whatever happens.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.live.servers import serving  # noqa: E402

REQUEST_TIMEOUT = 60.0
MAX_TOKENS = 8
ENGINE_ARGS = [
    "--served-model-name", "tiny",
    "--max-model-len", "512",
    "--max-num-batched-tokens", "256",
    "--max-num-seqs", "16",
]  # fmt: skip


class Reply(NamedTuple):
    status: int
    events: list[dict[str, object]]  # the JSON events of a stream, or the one JSON body


HEALTH_SECONDS = 1.0  # between two health lines in the log (60 in production)
HEALTH_LINE = re.compile(
    r"slidingserve: (\d+) steps, (\d+) fell back to vLLM \(empty plan\), (\d+) plan "
    r"mismatches, (\d+) failed refits, (\d+) failed policy refits"
)


@pytest.fixture(scope="module")
def server_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's log (`server.log`) and Prometheus multiprocess folder (`metrics`)."""
    folder = tmp_path_factory.mktemp("server")
    (folder / "metrics").mkdir()
    return folder


@pytest.fixture(scope="module")
def server(tiny_model: Path, server_folder: Path) -> Iterator[str]:
    """The base URL of a running server scheduled by SlidingServe."""

    def command(port: int) -> list[str]:
        return server_command(
            str(tiny_model), "slidingserve", port=port, ttft_ms=1500, tbt_ms=100,
            health_log_seconds=HEALTH_SECONDS, extra_vllm_args=ENGINE_ARGS,
        )  # fmt: skip

    env = server_environment(ttft_ms=1500, tbt_ms=100, metrics_dir=server_folder / "metrics")
    with serving(command, env, server_folder / "server.log") as base:
        yield base


def post(base: str, path: str, body: dict[str, object]) -> Reply:
    """POST `body`; the events of a stream (`[DONE]` excluded), or the JSON reply."""
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            if not body.get("stream"):
                return Reply(response.status, [json.loads(response.read())])
            events = []
            for raw in response:
                line = raw.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[len("data: ") :]))
            return Reply(response.status, events)
    except urllib.error.HTTPError as error:
        return Reply(error.code, [json.loads(error.read())])


def completion(xargs: dict[str, object] | None, *, stream: bool) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "tiny",
        "prompt": "the request latency deadline",
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if xargs is not None:
        body["vllm_xargs"] = xargs
    return body


def streamed_tokens(reply: Reply) -> int:
    """Completion tokens of a stream that ran to max_tokens, from its closing usage event."""
    last_choices = [event["choices"] for event in reply.events if event.get("choices")][-1]
    assert isinstance(last_choices, list)
    assert last_choices[0]["finish_reason"] == "length", reply.events
    usage = reply.events[-1]["usage"]
    assert isinstance(usage, dict), reply.events[-1]
    tokens: int = usage["completion_tokens"]
    return tokens


GOOD_SLO = {"ttft_ms": 800, "tbt_ms": 200, "protected": "true", "tier": "gold"}


def test_streamed_completion_with_slo(server: str) -> None:
    reply = post(server, "/v1/completions", completion(GOOD_SLO, stream=True))
    assert reply.status == 200
    assert not [event for event in reply.events if "error" in event]
    assert streamed_tokens(reply) == MAX_TOKENS


def test_completion_without_slo_uses_the_defaults(server: str) -> None:
    reply = post(server, "/v1/completions", completion(None, stream=False))
    assert reply.status == 200
    usage = reply.events[0]["usage"]
    assert isinstance(usage, dict)
    assert usage["completion_tokens"] == MAX_TOKENS


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("xargs", [{"ttft_ms": -5}, {"tbt_ms": "fast"}, {"protected": "maybe"}])
def test_bad_slo_gets_400_and_the_next_request_streams(
    server: str, xargs: dict[str, object], stream: bool
) -> None:
    bad = post(server, "/v1/completions", completion(xargs, stream=stream))
    assert 400 <= bad.status < 500
    error = bad.events[0]["error"]
    assert isinstance(error, dict)
    assert next(iter(xargs)) in str(error["message"])

    good = post(server, "/v1/completions", completion({"ttft_ms": 900}, stream=True))
    assert good.status == 200
    assert streamed_tokens(good) == MAX_TOKENS


def test_chat_completion_with_slo_and_a_bad_one(server: str) -> None:
    body: dict[str, object] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hello please answer"}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "vllm_xargs": GOOD_SLO,
    }
    good = post(server, "/v1/chat/completions", body)
    assert good.status == 200
    usage = good.events[0]["usage"]
    assert isinstance(usage, dict)
    assert usage["completion_tokens"] == MAX_TOKENS
    bad = post(server, "/v1/chat/completions", {**body, "vllm_xargs": {"ttft_ms": 0}})
    assert bad.status == 400


def logged_health(log: Path, timeout: float = 10.0) -> list[tuple[int, ...]]:
    """The counts of every health line in the server log, waiting for at least one."""
    deadline = time.monotonic() + timeout
    while True:
        found = HEALTH_LINE.findall(log.read_text(errors="replace"))
        if found or time.monotonic() > deadline:
            return [tuple(int(n) for n in counts) for counts in found]
        time.sleep(0.2)


def metric(base: str, name: str) -> float | None:
    with urllib.request.urlopen(base + "/metrics", timeout=REQUEST_TIMEOUT) as response:
        text = response.read().decode()
    found = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return None if found is None else float(found.group(1))


def test_health_counts_reach_the_server_log_and_metrics(server: str, server_folder: Path) -> None:
    for _ in range(2):  # two requests more than a health interval apart: a line between
        assert post(server, "/v1/completions", completion(None, stream=False)).status == 200
        time.sleep(HEALTH_SECONDS + 0.2)
    lines = logged_health(server_folder / "server.log")
    assert lines, "no health line in the server log"
    steps, _, _, failed_refits, failed_policy_refits = lines[-1]
    assert steps >= MAX_TOKENS  # one request alone takes a step per token
    assert (failed_refits, failed_policy_refits) == (0, 0)
    exported = metric(server, "slidingserve:steps_total")
    assert exported is not None and exported >= steps  # published at every step
    assert metric(server, "slidingserve:plan_mismatches_total") is not None
