"""A small fake OpenAI-compatible streaming server for the load generator's tests.

It runs an aiohttp.web app in a thread of its own (own event loop) on 127.0.0.1 and a free
port, and streams each completion with fixed timings measured from when the request came in:
chunk k (k = 0, 1, ...) leaves at `first_delay + k · gap` seconds. How it answers is chosen by
the request's tier (`vllm_xargs.tier`): stream, HTTP error, cut connection, truncated stream,
error event, or too slow. Every wait is bounded and `stop()` always ends the thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

START_TIMEOUT = 5.0  # seconds for the server thread to come up or go down


@dataclass(frozen=True)
class Behaviour:
    """How the fake server answers one request."""

    first_delay: float = 0.05  # seconds from the request to the first chunk
    gap: float = 0.02  # seconds between chunks
    status: int = 200  # anything else: a JSON error body with `message`
    message: str = "fake error"
    reason: str | None = None  # the error's `reason`, as SlidingServe's refusals carry
    drop_after: int | None = None  # cut the connection after this many chunks
    tokens: int | None = None  # stream this many tokens and then [DONE] (None: max_tokens)
    error_after: int | None = None  # send an error event after this many chunks
    token_ids: bool = True  # send `token_ids` in each chunk (as vLLM's return_token_ids)


def sse(payload: Mapping[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


class FakeServer:
    """The server; use as a context manager, or call `start()` and `stop()`."""

    def __init__(
        self,
        behaviours: Mapping[str, Behaviour] | None = None,
        *,
        models: list[dict[str, Any]] | None = None,
    ) -> None:
        self.behaviours = dict(behaviours or {})  # by tier name; "" is the default
        self.models = models if models is not None else [{"id": "fake", "max_model_len": 8192}]
        self.received: list[dict[str, Any]] = []  # request bodies, in arrival order
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def behaviour_for(self, body: Mapping[str, Any]) -> Behaviour:
        xargs = body.get("vllm_xargs") or {}
        tier = xargs.get("tier", "") if isinstance(xargs, dict) else ""
        return self.behaviours.get(tier, self.behaviours.get("", Behaviour()))

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError("the fake server did not start")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(START_TIMEOUT)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start_app())
            self._ready.set()
            loop.run_forever()
        finally:
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

    async def _start_app(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self.models})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        received = asyncio.get_running_loop().time()
        body = await request.json()
        with self._lock:
            self.received.append(body)
        behaviour = self.behaviour_for(body)
        if behaviour.status != 200:
            error = {"message": behaviour.message, "type": "BadRequestError"}
            if behaviour.reason is not None:
                error["reason"] = behaviour.reason
            return web.json_response({"error": error}, status=behaviour.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await self._stream(request, response, body, behaviour, received)
        return response

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        body: Mapping[str, Any],
        behaviour: Behaviour,
        received: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        count = int(body["max_tokens"]) if behaviour.tokens is None else behaviour.tokens
        for k in range(count):
            if k == behaviour.drop_after and request.transport is not None:
                request.transport.abort()
                return
            if k == behaviour.error_after:
                await response.write(sse({"error": {"message": behaviour.message}}))
                break
            due = received + behaviour.first_delay + k * behaviour.gap
            await asyncio.sleep(max(0.0, due - loop.time()))
            choice: dict[str, Any] = {"index": 0, "text": f" t{k}"}
            choice["finish_reason"] = "length" if k == count - 1 else None
            if behaviour.token_ids:
                choice["token_ids"] = [100 + k]
            await response.write(sse({"choices": [choice]}))
        else:
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": count}
            await response.write(sse({"choices": [], "usage": usage}))
        await response.write(sse("[DONE]"))
        await response.write_eof()
