"""Fixtures of the vLLM tests: a tiny random Llama built once per session.

Nothing here imports vLLM or torch at import time: without the `vllm` extra every test module
of this folder is skipped and these fixtures are never used.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slidingserve.engines.vllm.runtime import prepare_offline_process
from slidingserve.engines.vllm.tiny_model import make_tiny_llama


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a tiny random Llama with its tokenizer (about 8 s to build)."""
    start = time.perf_counter()
    folder = make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)
    print(f"\ntiny model built in {time.perf_counter() - start:.1f} s")
    return folder


@pytest.fixture(scope="session")
def offline_process() -> None:
    """This process set up for `LLM(...)`: one torch thread, the engine core in-process."""
    prepare_offline_process()
