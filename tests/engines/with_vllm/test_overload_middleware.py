"""The middleware's admission check on a minimal app: a hopeless request gets its 503 (or
429) before the endpoint runs, streamed or not, on both completion endpoints; a burst is
counted against the published queue; an engine's refusal is answered with a 503 too."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", minversion="0.32")

from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from slidingserve.engines.vllm import validation
from slidingserve.engines.vllm.load_record import (
    ADMITTED_MARK,
    LOAD_DIR_ENV,
    LoadRecord,
    QueueView,
    record_path,
    write_record,
)
from slidingserve.engines.vllm.overload import ADMISSION_GUARD_ENV, REFUSAL_STATUS_ENV, LetThrough
from slidingserve.engines.vllm.runtime import SLO_DEFAULTS_ENV
from slidingserve.engines.vllm.validation import slo_middleware

PATHS = ["/v1/completions", "/v1/chat/completions"]
OTHER_PATH = "/inference/v1/generate"  # another endpoint that reaches the engine
RATE = 1000.0  # tokens per second: a TTFT of 100 ms leaves time for 100 tokens


class WordTokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [0] * len(text.split())


async def endpoint(request: Request) -> Response:
    """Stands for vLLM's endpoint: streams two events, or answers with one JSON object; as
    vLLM 0.32 answers a request its engine refused when the prompt's first token id is 0
    (an empty stream, or a choice with the stop reason `slo-refused`)."""
    body = json.loads(await request.body())
    refused = body.get("prompt", [1])[0] == 0
    if body.get("stream"):
        events = [b'data: {"choices": [{"text": "a"}]}\n\n', b"data: [DONE]\n\n"]
        return StreamingResponse(iter(events[1:] if refused else events), media_type=SSE)
    refusal = {"text": "", "finish_reason": "abort", "stop_reason": "slo-refused"}
    choice = refusal if refused else {"text": "a"}
    # the id vLLM would take from the header, if there is one
    answer = {"choices": [choice], "id": request.headers.get("x-request-id")}
    return Response(json.dumps(answer), media_type=JSON)


SSE = "text/event-stream"
JSON = "application/json"


def body(path: str, stream: bool, tokens: int, ttft_ms: float = 100) -> dict[str, object]:
    """A request whose prompt has `tokens` tokens, as text for chat, as ids otherwise."""
    xargs = {"ttft_ms": ttft_ms}
    if path.endswith("chat/completions"):
        messages = [{"role": "user", "content": " ".join(["w"] * tokens)}]
        return {"messages": messages, "stream": stream, "vllm_xargs": xargs}
    return {"prompt": [1] * tokens, "stream": stream, "vllm_xargs": xargs}


def publish(folder: Path, rate: float = RATE, queued: float = 2.5, age: float = 0.0) -> None:
    write_record(record_path(folder, 0), LoadRecord(time.time() - age, rate, queued))


def make_client(monkeypatch: pytest.MonkeyPatch, folder: Path, status: str | None) -> TestClient:
    monkeypatch.setenv(SLO_DEFAULTS_ENV, json.dumps({"ttft_ms": 1000, "tbt_ms": 30}))
    monkeypatch.setenv(LOAD_DIR_ENV, str(folder))
    if status is not None:
        monkeypatch.setenv(REFUSAL_STATUS_ENV, status)
    routes = [Route(path, endpoint, methods=["POST"]) for path in [*PATHS, OTHER_PATH]]
    app = Starlette(routes=routes)
    app.add_middleware(BaseHTTPMiddleware, dispatch=slo_middleware)  # as vLLM's --middleware
    app.state.engine_client = SimpleNamespace(renderer=SimpleNamespace(tokenizer=WordTokenizer()))
    monkeypatch.setattr(validation, "LET_THROUGH", LetThrough())  # each test its own count
    return TestClient(app)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[TestClient]:
    with make_client(monkeypatch, tmp_path, None) as test_client:
        yield test_client


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_hopeless_request_gets_a_503_with_retry_after_and_a_json_error(
    client: TestClient, tmp_path: Path, path: str, stream: bool
) -> None:
    publish(tmp_path, queued=2.5)
    response = client.post(path, json=body(path, stream, tokens=150))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3"
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["reason"] == "slo-refused"
    assert (error["code"], error["type"], error["param"]) == (503, "Service Unavailable", None)
    assert "150 prompt tokens" in error["message"] and "150 ms" in error["message"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_429_when_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str, stream: bool
) -> None:
    publish(tmp_path)
    with make_client(monkeypatch, tmp_path, "429") as client:
        response = client.post(path, json=body(path, stream, tokens=150))
    assert response.status_code == 429
    assert "retry-after" in response.headers
    error = response.json()["error"]
    assert (error["code"], error["type"], error["reason"]) == (
        429,
        "Too Many Requests",
        "slo-refused",
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_fits_reaches_the_endpoint(
    client: TestClient, tmp_path: Path, path: str, stream: bool
) -> None:
    publish(tmp_path)
    response = client.post(path, json=body(path, stream, tokens=90))
    assert response.status_code == 200
    assert response.text.startswith("data:" if stream else "{")


@pytest.mark.parametrize("path", PATHS)
def test_the_admission_guard_refuses_what_fits_only_without_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str
) -> None:
    publish(tmp_path)
    monkeypatch.setenv(ADMISSION_GUARD_ENV, "20")  # read at each request
    response = client.post(path, json=body(path, False, tokens=90))  # 90 ms of 100
    assert response.status_code == 503
    assert "admission guard of 20 ms" in response.json()["error"]["message"]


@pytest.mark.parametrize("case", ["stale", "missing", "corrupt"])
def test_without_a_fresh_record_the_hopeless_request_goes_through(
    client: TestClient, tmp_path: Path, case: str
) -> None:
    if case == "stale":
        publish(tmp_path, age=60.0)
    elif case == "corrupt":
        record_path(tmp_path, 0).write_text("{")
    response = client.post("/v1/completions", json=body("/v1/completions", True, tokens=5000))
    assert response.status_code == 200


def test_a_bad_slo_is_still_a_400(client: TestClient, tmp_path: Path) -> None:
    publish(tmp_path)
    payload = body("/v1/completions", False, tokens=150, ttft_ms=-1)
    assert client.post("/v1/completions", json=payload).status_code == 400


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_by_the_engine_is_answered_with_a_503(
    client: TestClient, tmp_path: Path, stream: bool
) -> None:
    publish(tmp_path)
    refused = {"prompt": [0] * 20, "stream": stream}
    response = client.post("/v1/completions", json=refused)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3"
    error = response.json()["error"]
    assert error["reason"] == "slo-refused" and "the engine refused" in error["message"]
    protected = {**refused, "vllm_xargs": {"protected": 1}}  # never refused: passed unread
    assert client.post("/v1/completions", json=protected).status_code == 200
    served = client.post("/v1/completions", json={"prompt": [1] * 20, "stream": stream})
    assert served.status_code == 200
    assert served.text.startswith("data:" if stream else "{")


def test_without_records_a_refusal_by_the_engine_passes_as_vllm_sends_it(
    client: TestClient,
) -> None:
    response = client.post("/v1/completions", json={"prompt": [0] * 20, "stream": True})
    assert (response.status_code, response.text) == (200, "data: [DONE]\n\n")


def test_a_burst_is_counted_against_the_published_queue(client: TestClient, tmp_path: Path) -> None:
    """400-token requests with a 1 s TTFT at 1,000 tokens/s: each fits the empty queue
    alone, two fit together; the third is refused behind the two let through."""
    queue = QueueView(time.time(), RATE, (), decode_seats=10)
    write_record(record_path(tmp_path, 0), LoadRecord(time.time(), RATE, 0.0, queue))
    answers = [
        client.post("/v1/completions", json=body("/v1/completions", False, 400, ttft_ms=1000))
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 503]
    assert "800 queued ahead" in answers[2].json()["error"]["message"]


def publish_queue(folder: Path) -> None:
    queue = QueueView(time.time(), RATE, (), decode_seats=10)
    write_record(record_path(folder, 0), LoadRecord(time.time(), RATE, 0.0, queue))


def sent_id(client: TestClient, payload: dict[str, object], header: str | None = None) -> object:
    """The request id the endpoint saw for `payload` (None: vLLM makes its own)."""
    headers = {"X-Request-Id": header} if header is not None else {}
    answer = client.post("/v1/completions", json=payload, headers=headers)
    assert answer.status_code == 200
    return answer.json()["id"]


def test_a_request_that_passed_the_queue_test_reaches_the_engine_marked_admitted(
    client: TestClient, tmp_path: Path
) -> None:
    publish_queue(tmp_path)
    first, second = (sent_id(client, body("/v1/completions", False, 10)) for _ in range(2))
    assert isinstance(first, str) and first.startswith(ADMITTED_MARK)
    assert isinstance(second, str) and second.startswith(ADMITTED_MARK) and first != second


def test_only_a_tested_request_of_one_prompt_without_an_id_of_its_own_is_marked(
    client: TestClient, tmp_path: Path
) -> None:
    publish(tmp_path)  # a rate but no queue: a short prompt is let through untested
    assert sent_id(client, body("/v1/completions", False, 10)) is None
    publish_queue(tmp_path)
    several: dict[str, object] = {"prompt": [[1] * 10, [1] * 20], "vllm_xargs": {"ttft_ms": 1000}}
    assert sent_id(client, several) is None  # one of its requests was counted
    own = body("/v1/completions", False, 10)
    assert sent_id(client, own, header="client-7") == "client-7"
    assert sent_id(client, {**own, "request_id": "client-8"}) is None  # vLLM reads the body
    # A client's id never carries the mark: only the API server's answer does.
    assert sent_id(client, own, header=f"x-{ADMITTED_MARK}-1") == "x--1"
    forged = {**own, "request_id": f"{ADMITTED_MARK}-2", "vllm_xargs": {"protected": 1}}
    assert sent_id(client, forged) == "-2"
    elsewhere = client.post(OTHER_PATH, json=own, headers={"X-Request-Id": f"{ADMITTED_MARK}-3"})
    assert elsewhere.json()["id"] == "-3"
