"""ragas metrics computed by the real ragas package, with ragbench's LLM layer underneath.

``ragas:<Name>`` (``ragbench.evaluate.answers.RAGAS_METRICS``) is ragas' classic metric class
``ragas.metrics.<Name>``, scored with ``single_turn_ascore`` on one ``SingleTurnSample`` per
``AnswerSample`` (question → ``user_input``, answer → ``response``, contexts and their document
ids → ``retrieved_contexts`` / ``retrieved_context_ids``, reference answer, contexts and ids →
``reference`` / ``reference_contexts`` / ``reference_context_ids``), all samples of a metric
concurrently. LLM metrics ask through ``RagbenchLLM`` and embedding metrics embed through
``RagbenchEmbeddings``: every request goes through an ``LLMClient`` (cached by content, so a
rerun makes none, and counted in its ``Usage``) or a ragbench ``Embedder``.

This module imports ragas; ``ragbench.evaluate.answers`` imports it only when a ``ragas:``
metric is computed. ragas' usage analytics are off unless ``RAGAS_DO_NOT_TRACK`` says otherwise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import warnings
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import ragas.metrics
from langchain_core.exceptions import OutputParserException
from langchain_core.outputs import Generation, LLMResult
from langchain_core.prompt_values import PromptValue
from ragas.dataset_schema import SingleTurnSample
from ragas.embeddings.base import BaseRagasEmbeddings
from ragas.llms.base import BaseRagasLLM
from ragas.metrics.base import MetricWithEmbeddings, MetricWithLLM, SingleTurnMetric
from ragas.prompt.pydantic_prompt import RagasOutputParserException
from ragas.run_config import RunConfig

from ragbench.llm.client import LLMClient
from ragbench.protocols import Embedder, Role

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks

    from ragbench.evaluate.answers import AnswerSample, Judges

__all__ = ["RagbenchEmbeddings", "RagbenchLLM", "ragas_metric", "score"]

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_ROLES = {"human": "user", "ai": "assistant", "system": "system"}


def _no_retries() -> RunConfig:
    """ragas' run config with one attempt: the ``LLMClient`` retries with the openai SDK."""
    return RunConfig(max_retries=1)


_SCHEMA = re.compile(r"as specified in JSON Schema:\n(\{.*?\})Do not use single quotes", re.S)


def _prompt_schema(prompt: str) -> dict[str, Any] | None:
    """The JSON schema a ragas prompt asks its reply to follow (``PydanticPrompt`` writes it
    between "as specified in JSON Schema:" and "Do not use single quotes"), or None."""
    found = _SCHEMA.search(prompt)
    if found is None:
        return None
    try:
        schema = json.loads(found.group(1))
    except json.JSONDecodeError:
        return None
    return schema if isinstance(schema, dict) else None


class RagbenchLLM(BaseRagasLLM):
    """A ragas LLM asking through a ragbench ``LLMClient``: every prompt is cached by content
    and counted in the client's ``Usage``.

    The prompt goes as chat messages (a text prompt is one user message), with the temperature
    ragas asks for (0.01 for one completion, 0.3 for several, as ragas' own wrappers send) and
    the client's seed, max_tokens and model. ``n`` completions are ``n`` requests, the i-th with
    seed + i, so each is its own cache entry. The JSON schema ragas writes into the prompt goes
    with the request as structured output too (``LLMClient.chat``'s ``schema``), which a small
    local model needs to reply in valid JSON. At most ``max_concurrency`` requests of the
    client's config run at once.
    """

    def __init__(self, client: LLMClient) -> None:
        super().__init__(run_config=_no_retries())
        self.client = client
        self._pool = ThreadPoolExecutor(client.config.max_concurrency, "ragas-llm")

    def generate_text(
        self,
        prompt: PromptValue,
        n: int = 1,
        temperature: float | None = 0.01,
        stop: list[str] | None = None,
        callbacks: Callbacks = None,
    ) -> LLMResult:
        """``n`` completions of ``prompt``, as one list of generations."""
        messages = [
            {"role": _ROLES.get(m.type, m.type), "content": str(m.content)}
            for m in prompt.to_messages()
        ]
        params: dict[str, Any] = {
            "temperature": self.get_temperature(n) if temperature is None else temperature
        }
        if stop:
            params["stop"] = list(stop)
        seed = self.client.config.seed
        schema = _prompt_schema(prompt.to_string())
        replies = [
            self.client.chat(messages, schema, **params, **({"seed": (seed or 0) + i} if i else {}))
            for i in range(n)
        ]
        return LLMResult(generations=[[Generation(text=r.text) for r in replies]])

    async def agenerate_text(self, prompt: PromptValue, *args: Any, **kwargs: Any) -> LLMResult:
        """``generate_text`` (the same arguments) in the client's pool of ``max_concurrency``
        threads."""
        call = partial(self.generate_text, prompt, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def is_finished(self, response: LLMResult) -> bool:
        """Always True: the client's replies do not say whether max_tokens cut them (a cut
        reply fails ragas' output parsing instead)."""
        return True


class RagbenchEmbeddings(BaseRagasEmbeddings):
    """ragas embeddings from a ragbench ``LLMClient`` (an embeddings endpoint, cached by
    content and counted in its ``Usage``) or a ragbench ``Embedder`` (queries embedded with the
    ``query`` role, documents with ``document``)."""

    def __init__(self, source: LLMClient | Embedder) -> None:
        super().__init__()
        self.source = source
        self.set_run_config(_no_retries())
        self._local = threading.Lock()

    def _vectors(self, texts: Sequence[str], role: Role) -> list[list[float]]:
        if isinstance(self.source, LLMClient):
            vectors = self.source.embed(texts)
        else:
            with self._local:  # a local model embeds one batch at a time
                vectors = self.source.embed(texts, role=role)
        return np.asarray(vectors, dtype=np.float64).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        return self._vectors([text], "query")[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The vectors of documents."""
        return self._vectors(texts, "document")

    async def aembed_query(self, text: str) -> list[float]:
        """``embed_query`` in a worker thread."""
        return await asyncio.to_thread(self.embed_query, text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """``embed_documents`` in a worker thread."""
        return await asyncio.to_thread(self.embed_documents, texts)


def ragas_metric(name: str, judges: Judges) -> SingleTurnMetric:
    """A ready instance of ``ragas.metrics.<name>`` with the judges its class asks for (an LLM
    metric gets ``RagbenchLLM(judges.llm)``, an embedding metric ``RagbenchEmbeddings``), its
    ``init`` done. The judges it asks for must not be None."""
    with warnings.catch_warnings():  # ragas 0.4 steers to its collections API
        warnings.simplefilter("ignore", DeprecationWarning)
        cls = getattr(ragas.metrics, name)
    kwargs: dict[str, Any] = {}
    if issubclass(cls, MetricWithLLM):
        assert judges.llm is not None, "evaluate_answers checks the metric's needs"
        kwargs["llm"] = RagbenchLLM(judges.llm)
    if issubclass(cls, MetricWithEmbeddings):
        assert judges.embeddings is not None, "evaluate_answers checks the metric's needs"
        kwargs["embeddings"] = RagbenchEmbeddings(judges.embeddings)
    metric: SingleTurnMetric = cls(**kwargs)
    metric.init(_no_retries())
    return metric


def _sample(s: AnswerSample) -> SingleTurnSample:
    return SingleTurnSample(
        user_input=s.question,
        response=s.answer,
        retrieved_contexts=list(s.contexts),
        retrieved_context_ids=list(s.context_ids),
        reference=s.reference,
        reference_contexts=list(s.reference_contexts),
        reference_context_ids=list(s.reference_ids),
    )


async def _one(name: str, metric: SingleTurnMetric, sample: AnswerSample) -> float:
    """ragas' score of one sample; NaN (logged) when the judge's reply stays unparseable after
    ragas' own repair attempts (ragas raises its own error, or langchain's when the repaired
    reply does not parse either)."""
    try:
        return float(await metric.single_turn_ascore(_sample(sample)))
    except (RagasOutputParserException, OutputParserException) as exc:
        log.warning("ragas:%s, query %s: %s; scored NaN", name, sample.query_id, exc)
        return float("nan")


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to completion, in a thread of its own when this thread already runs an
    event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def score(name: str, samples: Sequence[AnswerSample], judges: Judges) -> np.ndarray:
    """ragas' ``name`` of each sample (the kernel of ``ragas:<name>``)."""
    metric = ragas_metric(name, judges)

    async def all_samples() -> list[float]:
        return await asyncio.gather(*(_one(name, metric, s) for s in samples))

    return np.array(_run(all_samples()), dtype=np.float64)
