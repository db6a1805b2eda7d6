"""A real server with admission control, with each admission test (`alone`, `queue`): a
hopeless request gets its 503 before any byte of a stream, streamed or not, on both
completion endpoints; a request that fits is served.

The server runs in a subprocess (`serving`, the tiny model); its engine core publishes its
load in a folder of the test's, which the test waits on before it sends.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from slidingserve.engines.vllm.load_record import read_records  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.live.servers import serving  # noqa: E402

ENGINE_ARGS = ["--served-model-name", "tiny", "--max-model-len", "512"]
RECORD_WAIT = 30.0  # seconds for the engine core's first record
HOPELESS_PROMPT = [5] * 400  # tokens: far more than 1 ms of prefill


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes  # the whole body


@pytest.fixture(scope="module", params=["alone", "queue"])
def server(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[str]:
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
        yield base


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


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_hopeless_request_gets_a_503_before_any_stream_byte(
    server: str, path: str, stream: bool
) -> None:
    answer = send(server, path, request(path, stream, {"ttft_ms": 1}))
    assert answer.status == 503, answer.body[:300]
    assert int(answer.headers["retry-after"]) >= 1
    assert answer.headers["content-type"] == "application/json"
    assert not answer.body.startswith(b"data:")
    error = json.loads(answer.body)["error"]
    assert (error["code"], error["reason"]) == (503, "slo-refused")


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_fits_and_a_protected_one_are_served(server: str, stream: bool) -> None:
    for xargs in ({"ttft_ms": 60_000}, {"ttft_ms": 1, "protected": 1}):
        answer = send(server, "/v1/completions", request("/v1/completions", stream, xargs))
        assert answer.status == 200, answer.body[:300]
        assert answer.body.startswith(b"data:") if stream else b'"choices"' in answer.body
