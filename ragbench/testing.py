"""An OpenAI-compatible HTTP server on 127.0.0.1 with scripted, deterministic replies.

For tests, notebooks and demos without a model: every LLM feature of ragbench talks to an
endpoint through the official ``openai`` SDK, and this server answers it over real HTTP —
``/v1/chat/completions``, ``/v1/embeddings`` and ``/v1/models`` — counting requests, so a test
can assert that a cached rerun makes none.

Replies depend only on the request. Chat replies follow ``mode`` (``auto`` picks per request):

- ``json``: the prompt carries a JSON schema (ragas' prompts do: "... complies with the following
  schema as specified in JSON Schema: {...}"), or the request asks for structured output (a
  ``tools`` function or a ``json_schema`` response format, as instructor does); the reply is an
  instance of the schema built from the prompt's own words (lists of its sentences, verdict 1
  where a sentence shares most of its words with the rest of the input, ``noncommittal`` 0) —
  as a tool call when tools were offered. A request for ``n`` choices gets ``n`` equal ones.
- ``judge``: a relevance judgement (prompts ending in ``Score (0-10):``): the share of the
  query's words found in the passage, scaled to 0–10.
- ``transform``: query transforms (prompts ending in ``Rewritten query:``, ``Passage:``,
  ``Paraphrases:`` or ``Sub-questions:``): the content words of the prompt's ``Query:`` line —
  as they are (a rewrite), as a passage, rotated once per paraphrase (as many as the prompt's
  first number asks for), or split at "and" / commas (sub-questions).
- ``extract``: a prompt with a ``Question:``: the sentence of the rest of the prompt that shares
  the most words with the question (an extractive answer).
- ``echo``: the last user message.

Embeddings are a bag of hashed words (``dim`` floats, unit length), so similar texts get similar
vectors. ``fail_next(n, status)`` makes the next ``n`` requests fail (retry tests).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = ["Mode", "ScriptedLLMServer", "scripted_llm_server"]

Mode = Literal["auto", "json", "judge", "transform", "extract", "echo"]

_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_SCHEMA = re.compile(r"JSON Schema:\s*(\{.*?\})\s*Do not use single quotes", re.S)
_INPUT = re.compile(r"input:\s*(\{.*\})\s*Output:\s*$", re.S)
_STOP = frozenset(
    "a an and are as at be by do does for from how i if in is it of on or the to was what when "
    "where which who why with you your".split()
)


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(_words(s)) >= 2]


def _overlap(part: str, whole: str) -> float:
    """Share of ``part``'s distinct words that occur in ``whole``."""
    wanted = set(_words(part))
    return len(wanted & set(_words(whole))) / len(wanted) if wanted else 0.0


def _extract(prompt: str) -> str:
    head, _, question = prompt.rpartition("Question:")
    question = question.split("\n\n")[0] if head else prompt
    candidates = _sentences(head) or [head.strip()]
    return max(candidates, key=lambda s: (_overlap(question, s), -len(s)))


def _judge(prompt: str) -> str:
    query = prompt.split("Query:", 1)[-1].split("\n", 1)[0]
    passage = prompt.split("Query:", 1)[-1].split("\n", 1)[-1]
    return str(round(10 * _overlap(query, passage)))


_TRANSFORMS = ("Rewritten query:", "Passage:", "Paraphrases:", "Sub-questions:")


def _transform(prompt: str) -> str:
    query = prompt.rsplit("Query:", 1)[-1].split("\n", 1)[0].strip()
    content = [w for w in _WORD.findall(query) if w.lower() not in _STOP] or [query]
    ending = prompt.rstrip().rsplit("\n", 1)[-1].strip()
    if ending == "Rewritten query:":
        return " ".join(content)
    if ending == "Passage:":
        return f"{' '.join(content)}. The documentation explains {' '.join(content)}."
    if ending == "Paraphrases:":
        wanted = re.search(r"\d+", prompt)
        count = int(wanted.group()) if wanted else 3
        return "\n".join(" ".join(content[i:] + content[:i]) for i in range(count))
    parts = [p.strip(" ?.") for p in re.split(r",| and ", query) if p.strip(" ?.")]
    if len(parts) < 2:
        half = max(1, len(content) // 2)
        parts = [" ".join(content[:half]), " ".join(content[half:])]
    return "\n".join(p for p in parts if p)


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value, in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


class _Filler:
    """Builds a deterministic instance of a JSON schema from the words of a prompt's input."""

    def __init__(self, schema: Mapping[str, Any], source: Any) -> None:
        self.defs = schema.get("$defs", {})
        texts = _strings(source)
        self.context = " ".join(texts)
        self.sentences = [s for t in texts for s in _sentences(t)] or [self.context or "none"]

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        return self.defs[ref.rsplit("/", 1)[-1]] if ref else schema

    def fill(self, schema: Mapping[str, Any], name: str = "", sentence: str = "") -> Any:
        schema = self._resolve(schema)
        if "anyOf" in schema:
            options = [o for o in schema["anyOf"] if o.get("type") != "null"]
            return self.fill(options[0], name, sentence) if options else None
        if "enum" in schema:
            return schema["enum"][0]
        kind = schema.get("type")
        if kind == "object":
            properties = schema.get("properties", {})
            first = next((v for k, v in properties.items() if self._is_text(v)), None)
            text = sentence or self.sentences[0]
            return {
                key: self.fill(value, key, text if value is first else sentence)
                for key, value in properties.items()
            }
        if kind == "array":
            items = schema.get("items", {})
            return [self.fill(items, name, s) for s in self.sentences[:3]]
        if kind == "string":
            return sentence or self.sentences[0]
        if kind in ("integer", "number"):
            if "noncommittal" in name:
                return 0
            supported = _overlap(sentence, self.context) >= 0.5 if sentence else True
            return 1 if supported else 0
        if kind == "boolean":
            return True
        return None

    def _is_text(self, schema: Mapping[str, Any]) -> bool:
        return self._resolve(schema).get("type") == "string"


def _requested_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a request asks its reply to follow (tools or response format)."""
    tools = body.get("tools") or []
    if tools:
        return dict(tools[0].get("function", {}).get("parameters") or {})
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return dict(fmt.get("json_schema", {}).get("schema") or {})
    return None


def _json_reply(prompt: str, schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        schema = json.loads(_SCHEMA.search(prompt).group(1))  # type: ignore[union-attr]
    found = _INPUT.search(prompt)
    try:
        source = json.loads(found.group(1)) if found else prompt
    except json.JSONDecodeError:
        source = prompt
    return json.dumps(_Filler(schema, source).fill(schema))


def _reply(mode: Mode, body: Mapping[str, Any]) -> str:
    messages = list(body.get("messages") or [])
    prompt = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "system")
    last = next(
        (str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), ""
    )
    schema = _requested_schema(body)
    if mode == "auto":
        if schema is not None or _SCHEMA.search(prompt):
            mode = "json"
        elif prompt.rstrip().endswith("Score (0-10):"):
            mode = "judge"
        elif prompt.rstrip().endswith(_TRANSFORMS):
            mode = "transform"
        elif "Question:" in prompt:
            mode = "extract"
        else:
            mode = "echo"
    replies: dict[str, Callable[[], str]] = {
        "json": lambda: _json_reply(prompt, schema),
        "judge": lambda: _judge(last),
        "transform": lambda: _transform(prompt),
        "extract": lambda: _extract(prompt),
        "echo": lambda: last,
    }
    return replies[mode]()


def _embedding(text: str, dim: int) -> list[float]:
    vector = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "little") % dim] += 1.0 if digest[4] & 1 else -1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _tokens(text: str) -> int:
    return len(_WORD.findall(text))


class ScriptedLLMServer:
    """The server; ``url`` is its ``/v1`` base URL once started (see the module docstring)."""

    def __init__(self, mode: Mode = "auto", dim: int = 64) -> None:
        self.mode, self.dim = mode, dim
        self.requests: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        if self._server is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def total(self) -> int:
        """Requests received so far (failed ones included)."""
        return sum(self.requests.values())

    def fail_next(self, n: int, status: int = 429) -> None:
        """Answer the next ``n`` requests with HTTP ``status``."""
        with self._lock:
            self._failures.extend([status] * n)

    def start(self) -> ScriptedLLMServer:
        """Listen on a free loopback port in a background thread."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The (status, JSON body) the server sends for a request to ``path``."""
        if path.endswith("/chat/completions"):
            messages = list(body.get("messages") or [])
            content = _reply(self.mode, body)
            prompt = " ".join(str(m.get("content") or "") for m in messages)
            usage = {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(content)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            message: dict[str, Any] = {"role": "assistant", "content": content}
            tools = body.get("tools") or []
            if tools:
                name = tools[0].get("function", {}).get("name", "answer")
                call = {"name": name, "arguments": content}
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"call_{digest[:8]}", "type": "function", "function": call}
                    ],
                }
            return 200, {
                "id": f"chatcmpl-{digest[:12]}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [
                    {
                        "index": i,
                        "message": message,
                        "finish_reason": "tool_calls" if tools else "stop",
                    }
                    for i in range(int(body.get("n") or 1))
                ],
                "usage": usage,
            }
        if path.endswith("/embeddings"):
            inputs = body.get("input")
            texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
            data = [
                {"object": "embedding", "index": i, "embedding": _embedding(str(t), self.dim)}
                for i, t in enumerate(texts)
            ]
            tokens = sum(_tokens(str(t)) for t in texts)
            return 200, {
                "object": "list",
                "data": data,
                "model": body.get("model", "scripted"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        if path.endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
        return 404, {"error": {"message": f"no route {path}", "type": "not_found"}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _respond(self, body: Mapping[str, Any]) -> None:
                with server._lock:
                    server.requests[self.path] += 1
                    server.bodies.append(dict(body))
                    server.headers.append(dict(self.headers.items()))
                    failure = server._failures.pop(0) if server._failures else None
                if failure is not None:
                    status, payload = failure, {"error": {"message": "scripted failure"}}
                else:
                    status, payload = server.answer(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                self._respond(body if isinstance(body, dict) else {})

            def do_GET(self) -> None:
                self._respond({})

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: tests read the counters instead

        return Handler


@contextmanager
def scripted_llm_server(mode: Mode = "auto", dim: int = 64) -> Iterator[ScriptedLLMServer]:
    """A started :class:`ScriptedLLMServer`, stopped on exit."""
    with ScriptedLLMServer(mode, dim) as server:
        yield server
