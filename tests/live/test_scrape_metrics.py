"""`scrape_metrics`: a Prometheus text page summed over labels, by sample name."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from slidingserve.live.servers import scrape_metrics

PAGE = b"""# HELP vllm:num_requests_running Running requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
slidingserve:tracked_requests 0.0
slidingserve:steps_total 662.0
"""


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_samples_are_summed_over_their_labels(base: str) -> None:
    assert scrape_metrics(base) == {
        "vllm:num_requests_running": 3.0,
        "slidingserve:tracked_requests": 0.0,
        "slidingserve:steps_total": 662.0,
    }
