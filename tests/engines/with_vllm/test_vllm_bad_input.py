"""Hostile request bodies against the SLO middleware, then against a live server (issue 15).

The middleware, called directly with any JSON value under any SLO key, lets a valid SLO
through or answers a 400 whose message is one line naming the key, never raising. A live
server answers such bodies, and a per-request `seed` on a CPU host, with a 400 on a kept-alive
connection that the next request reuses, and logs no traceback. The pure-Python side is in
`tests/core/test_slo_args_fuzz.py`.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")
vllm = pytest.importorskip("vllm", minversion="0.32")

from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402

from slidingserve.core import SLO  # noqa: E402
from slidingserve.core.request import MAX_SLO_SECONDS  # noqa: E402
from slidingserve.core.slo_args import (  # noqa: E402
    DEFAULT_SLO,
    MAX_TIER_NAME,
    SLOArgumentError,
    parse_slo_args,
)
from slidingserve.engines.vllm import validation  # noqa: E402
from slidingserve.engines.vllm.server import server_command, server_environment  # noqa: E402
from slidingserve.engines.vllm.validation import (  # noqa: E402
    SEED_ON_CPU,
    seed_crashes_engine,
    slo_middleware,
)
from slidingserve.live.servers import serving  # noqa: E402

KEYS = ("ttft_ms", "tbt_ms", "protected", "tier")
MAX_MESSAGE = 160  # characters

# Any JSON value; the scalars as in tests/core/test_slo_args_fuzz.py (ints far past a float's
# range, numbers and words as strings, long text).
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**4000), max_value=10**4000),
    st.floats(),
    st.text(),
    st.text(min_size=MAX_TIER_NAME - 1, max_size=4 * MAX_TIER_NAME),
    st.floats().map(repr),
    st.integers(min_value=-(10**400), max_value=10**400).map(str),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


class Answer(NamedTuple):
    passed: bool  # the middleware called the endpoint
    status: int
    error: dict[str, Any] | None  # the `error` of a refusal's JSON body


def make_request(body: bytes, path: str = "/v1/completions") -> Request:
    """A POST of `body` as the ASGI server hands it to the middleware."""
    scope = {
        "type": "http", "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000),
    }  # fmt: skip

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)


def answer(body: bytes) -> Answer:
    """What `slo_middleware` does with `body`: an exception here fails the test."""
    called: list[Request] = []

    async def call_next(request: Request) -> Response:
        called.append(request)
        return Response(status_code=200)

    response = asyncio.run(slo_middleware(make_request(body), call_next))
    error = None
    if response.status_code != 200:
        error = json.loads(bytes(response.body))["error"]
    return Answer(bool(called), response.status_code, error)


def assert_refused(reply: Answer, name: str, param: str = "vllm_xargs") -> None:
    """A 400 in vLLM's error format whose message is one short line naming `name`."""
    assert not reply.passed and reply.status == 400 and reply.error is not None, reply
    message = reply.error["message"]
    assert name in message and "\n" not in message and len(message) <= MAX_MESSAGE, message
    assert (reply.error["code"], reply.error["type"], reply.error["param"]) == (
        400, "BadRequestError", param,
    )  # fmt: skip


def assert_valid(slo: SLO) -> None:
    for seconds in (slo.ttft, slo.tbt):
        assert isinstance(seconds, float) and 0 < seconds <= MAX_SLO_SECONDS
    assert isinstance(slo.protected, bool)
    assert slo.tier is None or (isinstance(slo.tier, str) and len(slo.tier) <= MAX_TIER_NAME)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=json_values)
def test_middleware_passes_a_valid_slo_or_answers_400_naming_the_key(
    key: str, value: object
) -> None:
    body = json.dumps({"prompt": "hi", "vllm_xargs": {key: value}}).encode()
    reply = answer(body)
    try:  # what the body reads back as (NaN included), the way the middleware reads it
        slo: SLO | None = parse_slo_args(json.loads(body)["vllm_xargs"], DEFAULT_SLO)
    except SLOArgumentError:
        slo = None
    if slo is None:
        assert_refused(reply, key)
    else:
        assert reply.passed and reply.status == 200, reply
        assert_valid(slo)


@settings(max_examples=200, deadline=None)
@given(xargs=json_values)
def test_middleware_refuses_vllm_xargs_that_are_not_an_object(xargs: object) -> None:
    reply = answer(json.dumps({"prompt": "hi", "vllm_xargs": xargs}).encode())
    if xargs is None or isinstance(xargs, dict):
        assert reply.passed or "vllm_xargs must be an object" not in str(reply.error)
    else:
        assert_refused(reply, "vllm_xargs must be an object")


@settings(max_examples=200, deadline=None)
@given(payload=json_values)
def test_middleware_never_raises_on_any_json_body(payload: object) -> None:
    reply = answer(json.dumps(payload).encode())
    assert reply.passed or reply.status == 400


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # deeper than json.loads goes: RecursionError
        b'{"vllm_xargs": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
        b'{"vllm_xargs": {"ttft_ms": ' + b"9" * 5000 + b"}}",  # past Python's int digits
        b"{not json",
        b"\xff\xfe\x00",
    ],
    ids=["deep-array", "deep-xargs", "5000-digit-int", "not-json", "not-utf8"],
)
def test_middleware_leaves_a_body_it_cannot_parse_to_the_endpoint(body: bytes) -> None:
    assert answer(body).passed


@pytest.mark.parametrize(
    ("xargs", "kind"),
    [([1, 2], "an array"), ("fast", "a string"), (7, "a number"), (True, "a boolean")],
)
def test_vllm_xargs_not_an_object_is_named_in_the_400(xargs: object, kind: str) -> None:
    reply = answer(json.dumps({"prompt": "hi", "vllm_xargs": xargs}).encode())
    assert_refused(reply, f"vllm_xargs must be an object, got {kind}")


@pytest.mark.parametrize(("on_cpu", "seed", "refused"), [
    (True, 0, True), (True, 12345, True), (True, None, False), (False, 7, False),
])  # fmt: skip
def test_a_per_request_seed_is_refused_on_a_cpu_host(
    monkeypatch: pytest.MonkeyPatch, on_cpu: bool, seed: int | None, refused: bool
) -> None:
    monkeypatch.setattr(validation, "seed_crashes_engine", lambda: on_cpu)
    reply = answer(json.dumps({"prompt": "hi", "seed": seed, "vllm_xargs": {}}).encode())
    if refused:
        assert_refused(reply, SEED_ON_CPU, param="seed")
    else:
        assert reply.passed


def test_the_seed_check_follows_vllms_platform() -> None:
    from vllm.platforms import current_platform

    assert seed_crashes_engine() is current_platform.is_cpu()


# The live server.

REQUEST_TIMEOUT = 60.0
MAX_TOKENS = 4
ENGINE_ARGS = [
    "--served-model-name", "tiny",
    "--max-model-len", "512",
    "--max-num-batched-tokens", "256",
    "--max-num-seqs", "16",
]  # fmt: skip


class Live(NamedTuple):
    base: str  # http://127.0.0.1:port
    log: Path  # everything the server wrote


@pytest.fixture(scope="module")
def live(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server scheduled by SlidingServe, with the middleware and the validator."""
    log = tmp_path_factory.mktemp("bad-input") / "server.log"

    def command(port: int) -> list[str]:
        return server_command(
            str(tiny_model), "slidingserve", port=port, ttft_ms=1500, tbt_ms=100,
            extra_vllm_args=ENGINE_ARGS,
        )  # fmt: skip

    with serving(command, server_environment(ttft_ms=1500, tbt_ms=100), log) as base:
        yield Live(base, log)


class Exchange(NamedTuple):
    status: int
    body: dict[str, Any]


class KeptAlive:
    """One HTTP/1.1 connection, reused for every request; fails if the server drops it."""

    def __init__(self, base: str) -> None:
        url = urlsplit(base)
        assert url.hostname is not None and url.port is not None
        self.connection = http.client.HTTPConnection(
            url.hostname, url.port, timeout=REQUEST_TIMEOUT
        )
        self.connection.connect()
        self.socket = self.connection.sock

    def post(self, body: bytes) -> Exchange:
        self.connection.request(
            "POST", "/v1/completions", body, {"Content-Type": "application/json"}
        )
        response = self.connection.getresponse()
        data = response.read()
        # http.client drops the socket when the server announces a close (then reconnects
        # silently): the same socket after the exchange proves the connection was kept.
        assert self.connection.sock is self.socket, "the server closed the connection"
        return Exchange(response.status, json.loads(data))

    def close(self) -> None:
        self.connection.close()


def completion(**fields: object) -> bytes:
    body = {"model": "tiny", "prompt": "the request latency deadline", "max_tokens": MAX_TOKENS,
            "ignore_eos": True, **fields}  # fmt: skip
    return json.dumps(body).encode()


def assert_generates(exchange: Exchange) -> None:
    assert exchange.status == 200, exchange
    assert exchange.body["usage"]["completion_tokens"] == MAX_TOKENS


def assert_400_naming(exchange: Exchange, name: str) -> None:
    assert exchange.status == 400, exchange
    message = exchange.body["error"]["message"]
    assert name in message and "\n" not in message, message


@pytest.fixture
def connection(live: Live) -> Iterator[KeptAlive]:
    kept = KeptAlive(live.base)
    yield kept
    kept.close()


def new_log_text(live: Live, start: int) -> str:
    """What the server logged since byte `start`, after a moment for the last lines."""
    time.sleep(0.5)
    with live.log.open("rb") as log:
        log.seek(start)
        return log.read().decode(errors="replace")


def test_bad_slos_get_400_and_the_kept_connection_serves_the_next_request(
    live: Live, connection: KeptAlive
) -> None:
    start = live.log.stat().st_size
    assert_400_naming(connection.post(completion(vllm_xargs={"ttft_ms": 10**399})), "ttft_ms")
    assert_generates(connection.post(completion(vllm_xargs={"ttft_ms": 900})))
    bad = [
        ({"tbt_ms": {"ms": 5}}, "tbt_ms"),
        ({"protected": [1, 0]}, "protected"),
        ({"ttft_ms": 1e308}, "ttft_ms"),
        ({"tier": "x" * 10_000}, "tier"),
        ([{"ttft_ms": 5}], "vllm_xargs must be an object"),
    ]
    for xargs, name in bad:
        assert_400_naming(connection.post(completion(vllm_xargs=xargs)), name)
    assert_generates(connection.post(completion(vllm_xargs={"tbt_ms": "80", "protected": 1})))
    assert "Traceback" not in new_log_text(live, start)


def test_bodies_the_middleware_cannot_parse_get_the_endpoints_400(
    live: Live, connection: KeptAlive
) -> None:
    start = live.log.stat().st_size
    for body in (
        b'{"model": "tiny", "prompt": "hi", "vllm_xargs": {"ttft_ms": ' + b"9" * 5000 + b"}}",
        b'{"model": "tiny", "prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    ):
        assert connection.post(body).status == 400
    assert_generates(connection.post(completion()))
    assert "Traceback" not in new_log_text(live, start)


def test_a_per_request_seed_gets_400_on_a_cpu_host_and_the_engine_lives(
    live: Live, connection: KeptAlive
) -> None:
    if not seed_crashes_engine():
        pytest.skip("a per-request seed is refused only where vLLM runs on the CPU")
    start = live.log.stat().st_size
    refused = connection.post(completion(seed=7))
    assert_400_naming(refused, "per-request seed is not supported")
    assert refused.body["error"]["param"] == "seed"
    assert_generates(connection.post(completion(seed=None)))
    assert "Traceback" not in new_log_text(live, start)
