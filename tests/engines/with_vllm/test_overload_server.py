"""A real server with admission control, with each admission test (`alone`, `queue`): a
hopeless request gets its 503 before any byte of a stream, streamed or not, on both
completion endpoints; a request that fits is served; in a burst no answer is a 200
without a token (the engine's own refusals are answered with a 503,
`refused_answers.py`).

The server runs in a subprocess (`serving`, the tiny model); its engine core publishes its
load in a folder of the test's, which the test waits on before it sends.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.engines.vllm.load_record import read_records  # noqa: E402
from slidingserve.engines.vllm.refused_answers import carries_output  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.live.servers import serving  # noqa: E402

ENGINE_ARGS = ["--served-model-name", "tiny", "--max-model-len", "512"]
RECORD_WAIT = 30.0  # seconds for the engine core's first record
HOPELESS_PROMPT = [5] * 400  # tokens: far more than 1 ms of prefill
BURST_PROMPT = [7] * 120  # tokens
BURST_TEXT = " ".join(["the"] * 120)  # about as many tokens
PATHS = ("/v1/completions", "/v1/chat/completions")


class Served(NamedTuple):
    base: str  # the server's URL
    load_dir: Path  # where its engine core publishes its load
    test: str  # the admission test: "alone" or "queue"


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes  # the whole body


@pytest.fixture(scope="module", params=["alone", "queue"])
def server(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Served]:
    """A server with admission control, once with each admission test."""
    folder = tmp_path_factory.mktemp("overload")
    load_dir = folder / "load"
    load_dir.mkdir()
    options = {"admission": True, "admission_test": request.param}

    def command(port: int) -> list[str]:
        return server_command(
            str(tiny_model), "slidingserve", port=port, policy_options=options,
            load_dir=load_dir, extra_vllm_args=ENGINE_ARGS,
        )  # fmt: skip

    env = server_environment(load_dir=load_dir)
    with serving(command, env, folder / "server.log") as base:
        deadline = time.monotonic() + RECORD_WAIT
        records = read_records(load_dir, time.time())
        while not records and time.monotonic() < deadline:
            time.sleep(0.1)
            records = read_records(load_dir, time.time())
        assert records, "the engine core published no record"
        # the queue-aware test publishes the queue it saw; the test alone does not
        assert all((r.queue is not None) == (request.param == "queue") for r in records)
        yield Served(base, load_dir, request.param)


def send(base: str, path: str, body: dict[str, object]) -> Answer:
    """POST `body` and read the status, headers and whole body."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=60)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, headers, response.read())
    finally:
        connection.close()


def request(path: str, stream: bool, xargs: Mapping[str, object]) -> dict[str, object]:
    body: dict[str, object] = {"model": "tiny", "max_tokens": 4, "stream": stream}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": " ".join(["the"] * 400)}]
    else:
        body["prompt"] = HOPELESS_PROMPT
    return {**body, "vllm_xargs": xargs}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_hopeless_request_gets_a_503_before_any_stream_byte(
    server: Served, path: str, stream: bool
) -> None:
    answer = send(server.base, path, request(path, stream, {"ttft_ms": 1}))
    assert answer.status == 503, answer.body[:300]
    assert int(answer.headers["retry-after"]) >= 1
    assert answer.headers["content-type"] == "application/json"
    assert not answer.body.startswith(b"data:")
    error = json.loads(answer.body)["error"]
    assert (error["code"], error["reason"]) == (503, "slo-refused")


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_fits_and_a_protected_one_are_served(server: Served, stream: bool) -> None:
    for xargs in ({"ttft_ms": 60_000}, {"ttft_ms": 1, "protected": 1}):
        answer = send(server.base, "/v1/completions", request("/v1/completions", stream, xargs))
        assert answer.status == 200, answer.body[:300]
        assert answer.body.startswith(b"data:") if stream else b'"choices"' in answer.body


def test_a_burst_gets_tokens_or_a_503_never_an_empty_200(server: Served) -> None:
    """Twelve requests at once, each of which fits the published queue alone where about
    two fit together (on the published rate; the tiny model may drain the queue faster).
    Whatever is refused, by the API server or by the engine, is a 503, streamed or not,
    chat or completion: no answer is a 200 without a token. (The API server's count of
    the requests it let through is tested on a stand-in app, `test_overload_middleware`:
    here the engine's speed decides how many are refused.)"""
    if server.test != "queue":
        pytest.skip("the test alone publishes no queue: each request is tested by itself")
    records = read_records(server.load_dir, time.time())
    rate = max(r.queue.rate for r in records if r.queue is not None)
    xargs = {"ttft_ms": 2.5 * len(BURST_PROMPT) / rate * 1000}
    shapes = [(path, stream) for path in PATHS for stream in (False, True)] * 3
    with ThreadPoolExecutor(len(shapes)) as pool:
        answers = list(
            pool.map(lambda s: send(server.base, s[0], burst(s[0], s[1], xargs)), shapes)
        )
    statuses = [a.status for a in answers]
    assert set(statuses) <= {200, 503}, statuses
    refusals = [json.loads(a.body)["error"] for a in answers if a.status == 503]
    assert all(e["reason"] == "slo-refused" for e in refusals)
    for answer, (_, stream) in zip(answers, shapes, strict=True):
        if answer.status == 200:
            assert has_tokens(answer.body, stream), answer.body[:300]


def burst(path: str, stream: bool, xargs: Mapping[str, object]) -> dict[str, object]:
    body = request(path, stream, xargs)
    if path.endswith("chat/completions"):
        return {**body, "messages": [{"role": "user", "content": BURST_TEXT}]}
    return {**body, "prompt": BURST_PROMPT}


def has_tokens(body: bytes, stream: bool) -> bool:
    """Whether a 200's body carries output: an event with some (streamed), or a choice that
    finished by its length or a stop (not streamed)."""
    if stream:
        return any(carries_output(event) for event in body.split(b"\n\n"))
    choices = json.loads(body)["choices"]
    return all(choice["finish_reason"] in ("length", "stop") for choice in choices)
