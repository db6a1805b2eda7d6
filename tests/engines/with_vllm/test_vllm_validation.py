"""The SLO checks of requests: the logits-processor validator and the HTTP middleware."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm", minversion="0.32")

from starlette.applications import Starlette  # noqa: E402
from starlette.middleware.base import BaseHTTPMiddleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402

from slidingserve.core.slo_args import SLODefaults  # noqa: E402
from slidingserve.engines.vllm.runtime import SLO_DEFAULTS_ENV, engine_kwargs  # noqa: E402
from slidingserve.engines.vllm.server import server_environment  # noqa: E402
from slidingserve.engines.vllm.validation import (  # noqa: E402
    SLOValidator,
    slo_defaults,
    slo_middleware,
)

BAD_SLOS = [
    ({"ttft_ms": -5}, "ttft_ms must be positive"),
    ({"tbt_ms": "fast"}, "tbt_ms must be a number"),
    ({"ttft_ms": 1e12}, "over an hour"),
    ({"protected": "maybe"}, "protected must be"),
]
GOOD_SLO = {"ttft_ms": "250", "tbt_ms": 40, "protected": "true", "tier": "gold"}


@pytest.fixture(scope="module")
def validating_llm(tiny_model: Path, offline_process: None) -> Iterator[Any]:
    """vLLM's own scheduler, with the SLO validator as a logits processor."""
    llm = vllm.LLM(
        model=str(tiny_model),
        logits_processors=[SLOValidator],
        **engine_kwargs(max_model_len=512, max_num_batched_tokens=256),
    )
    yield llm
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def generate(llm: Any, extra_args: dict[str, object] | None) -> list[int]:
    params = vllm.SamplingParams(max_tokens=3, ignore_eos=True, extra_args=extra_args)
    outputs = llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}], params, use_tqdm=False)
    return list(outputs[0].outputs[0].token_ids)


@pytest.mark.parametrize(("extra_args", "message"), BAD_SLOS)
def test_validator_rejects_a_bad_slo_and_the_engine_keeps_working(
    validating_llm: Any, extra_args: dict[str, object], message: str
) -> None:
    with pytest.raises(VLLMValidationError, match=message):
        generate(validating_llm, extra_args)
    assert validating_llm.llm_engine.get_num_unfinished_requests() == 0
    assert len(generate(validating_llm, GOOD_SLO)) == 3


def test_validator_lets_requests_without_slo_or_with_other_keys_through(
    validating_llm: Any,
) -> None:
    assert len(generate(validating_llm, None)) == 3
    assert len(generate(validating_llm, {"another_plugin": "x"})) == 3


async def echo(request: Request) -> Response:
    """Stands for vLLM's endpoint: answers with the body it reads."""
    return JSONResponse({"echo": json.loads(await request.body())})


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """An app with the middleware installed the way vLLM's `--middleware` does it."""
    monkeypatch.setenv(SLO_DEFAULTS_ENV, json.dumps({"ttft_ms": 1000, "tbt_ms": 30}))
    routes = [
        Route(path, echo, methods=["POST"]) for path in ("/v1/completions", "/v1/chat/completions")
    ] + [Route("/v1/embeddings", echo, methods=["POST"])]
    app = Starlette(routes=routes)
    app.add_middleware(BaseHTTPMiddleware, dispatch=slo_middleware)
    with TestClient(app) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("xargs", "message"), BAD_SLOS)
def test_middleware_answers_a_bad_slo_with_400(
    client: TestClient, path: str, stream: bool, xargs: dict[str, object], message: str
) -> None:
    response = client.post(path, json={"prompt": "hi", "stream": stream, "vllm_xargs": xargs})
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"]
    assert (error["code"], error["param"], error["type"]) == (400, "vllm_xargs", "BadRequestError")


def test_middleware_passes_good_requests_with_their_body(client: TestClient) -> None:
    body = {"prompt": "hi", "stream": True, "vllm_xargs": GOOD_SLO}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200
    assert response.json() == {"echo": body}


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "hi"},
        [1, 2, 3],
    ],
)
def test_middleware_leaves_requests_without_slo_args_to_the_endpoint(
    client: TestClient, body: object
) -> None:
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200
    assert response.json() == {"echo": body}


def test_middleware_only_looks_at_completion_endpoints(client: TestClient) -> None:
    body = {"input": "hi", "vllm_xargs": {"ttft_ms": -5}}
    assert client.post("/v1/embeddings", json=body).status_code == 200


def test_middleware_leaves_a_body_that_is_not_json_to_the_endpoint(client: TestClient) -> None:
    with pytest.raises(json.JSONDecodeError):  # the echo endpoint's own failure
        client.post("/v1/completions", content=b"{not json")


def test_the_api_server_reads_the_slo_margin_the_engine_plans_with() -> None:
    env = server_environment(ttft_ms=900, tbt_ms=30, slo_margin_ms=25, base={})
    assert slo_defaults(env[SLO_DEFAULTS_ENV]) == SLODefaults(900.0, 30.0, margin_ms=25.0)
    older = slo_defaults('{"ttft_ms": 900, "tbt_ms": 30}')  # written before margins existed
    assert older == SLODefaults(900.0, 30.0)
    with pytest.raises(ValueError, match="SLO margin"):
        slo_defaults('{"ttft_ms": 900, "tbt_ms": 30, "margin_ms": -3}')
