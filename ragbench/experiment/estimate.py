"""What a sweep will cost before it runs (``ragbench run --dry-run``): per trial, the work its
stages still have to do and the seconds that takes on this machine.

Work is counted against the stage cache: a cached stage costs nothing, and a missing stage
that trials share is counted once, for the first trial that needs it (the runner computes it
there). Chunkings without a model are computed (they are cheap and land in the cache), so the
texts to embed are counted against the embedding cache. Seconds come from throughput measured
now, in this process: each model with texts to embed loads (its load time counts once) and
embeds a sample of them (the vectors are kept in the embedding cache: the run does not embed
them again); a cross-encoder scores a sample of pairs; BM25 and HNSW builds are timed on a
sample of the chunks and scaled. A trial with work to do also pays its latency pass (the
sampled queries, one at a time, ``repeats`` + 1 times through its query-time models). A
fine-tuning stage makes the pairs it will train on and counts its steps as training does
(``index.finetune.planned_steps``), each about three passes of its batch's texts. LLM calls
are counted (at most one per query and LLM stage; cached calls are not seen) and priced from
the config's ``prices``; their seconds depend on the endpoint and are not estimated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragbench.data.pairs import generated_pairs
from ragbench.experiment.config import Trial
from ragbench.experiment.trial import Context
from ragbench.index.cache import EmbeddingCache
from ragbench.index.finetune import FinetuneConfig, Tunable, planned_steps
from ragbench.llm.client import LLMOptions
from ragbench.registry import ComponentConfig, components
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import Stage
from ragbench.types import Ranking

__all__ = ["Cost", "estimate"]

_SAMPLE = 64  # texts (or pairs) a model's throughput is measured on
_BUILD_SAMPLE = 2000  # chunks a BM25 or HNSW build is timed on
_PROMPT_TOKENS = 300  # an LLM call's prompt besides the context it is given
_REPLY_TOKENS = 200  # an LLM reply when max_tokens does not say
_SENTENCE = re.compile(r"[.!?](?:\s|$)")


@dataclass
class Cost:
    """A trial's estimated cost: what its missing stages do, their seconds on this machine,
    and its LLM calls and their US dollars (None without a price)."""

    work: list[str] = field(default_factory=list)
    seconds: float = 0.0
    llm_calls: int = 0
    dollars: float | None = None


@dataclass
class _Model:
    """A model's measured cost: seconds to load (paid once) and seconds per text or pair."""

    load: float
    per_item: float
    loaded: bool = False

    def seconds(self, items: int) -> float:
        """Seconds for ``items``, the load included the first time it is asked."""
        first = 0.0 if self.loaded else self.load
        self.loaded = True
        return first + items * self.per_item


class _Meter:
    """Throughput measured on this machine, once per model or index kind."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.models: dict[str, _Model] = {}
        self.builds: dict[str, float] = {}

    def embedder(self, config: ComponentConfig, texts: Sequence[str] = ()) -> _Model:
        """The embedder's load time and seconds per text, measured on those of ``texts`` it
        has not embedded yet (their vectors stay in the embedding cache), else on the
        queries."""
        config = _base(config)
        key = config.key()
        if key not in self.models:
            started = time.perf_counter()
            plain = self.ctx.env.embedder(config)
            plain.embed(["warm up"], "query")  # loads the model
            loaded = time.perf_counter()
            sample = _missing(self.ctx, config, texts)[:_SAMPLE]
            if sample:
                self.ctx.env.embedder(config, cached=True).embed(sample, "document")
            else:
                sample = list(self.ctx.query_texts[:_SAMPLE])
                plain.embed(sample, "query")
            per_text = (time.perf_counter() - loaded) / max(1, len(sample))
            self.models[key] = _Model(loaded - started, per_text)
        return self.models[key]

    def reranker(
        self, config: ComponentConfig, queries: Sequence[str], texts: Sequence[str]
    ) -> _Model:
        """The reranker's load time and seconds per (query, text) pair, measured on pairs of
        ``queries`` and ``texts``."""
        key = config.key()
        if key not in self.models:
            reranker = self.ctx.env.component("reranker", config)
            ids = [f"c{i}" for i in range(min(len(texts), 8))]
            chunks = dict(zip(ids, texts, strict=False))
            shown = list(queries[: max(1, _SAMPLE // max(1, len(ids)))])

            def rank(rows: int) -> float:
                ranking = Ranking(np.array([ids] * rows, dtype=object), np.zeros((rows, len(ids))))
                started = time.perf_counter()
                reranker.rerank(shown[:rows], ranking, chunks, len(ids))
                return time.perf_counter() - started

            load = rank(1)
            per_pair = rank(len(shown)) / max(1, len(shown) * len(ids))
            self.models[key] = _Model(load, per_pair)
        return self.models[key]

    def build(self, stage: Stage, texts: Sequence[str], dimension: int) -> float:
        """Seconds to build the stage's index over ``len(texts)`` chunks, timed on a sample."""
        config = stage.config
        assert config is not None
        key = config.key()
        n = min(len(texts), _BUILD_SAMPLE)
        if key not in self.builds and n:
            started = time.perf_counter()
            if stage.area == "bm25_index":
                from ragbench.index.sparse import BM25Index

                index = BM25Index(config)  # type: ignore[arg-type]
                index.add([str(i) for i in range(n)], list(texts[:n]), [{}] * n)
                index.search(["warm up"], 1)
            else:
                store = components("dense").build(config)
                vectors = np.random.default_rng(0).standard_normal((n, dimension))
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                store.add([str(i) for i in range(n)], vectors.astype(np.float32), [{}] * n)
            self.builds[key] = (time.perf_counter() - started) / n
        return self.builds.get(key, 0.0) * len(texts)


def estimate(ctx: Context, trials: Sequence[Trial]) -> list[Cost]:
    """Each trial's cost (in the order given), its shared stages counted once."""
    meter, seen = _Meter(ctx), set[str]()
    prices = ctx.spec.config.prices
    latency = ctx.spec.config.latency
    out = []
    for trial in trials:
        plan = ctx.plan(trial)
        execution = Execution(plan, ctx.env, ctx.cache)
        cost, per_query = Cost(), 0.0
        for stage in plan.stages.values():
            if stage.key in seen or ctx.cache.has(stage.area, stage.key):
                continue
            seen.add(stage.key)
            per_query += _stage(stage, execution, ctx, meter, cost, prices)
        if cost.work and latency.queries:
            sampled = min(latency.queries, len(ctx.query_ids))
            cost.seconds += sampled * (latency.repeats + 1) * per_query
            cost.work.append(f"latency pass over {sampled} queries")
        out.append(cost)
    return out


def _stage(
    stage: Stage,
    execution: Execution,
    ctx: Context,
    meter: _Meter,
    cost: Cost,
    prices: dict[str, Any],
) -> float:
    """Add ``stage``'s work and seconds to ``cost``; returns its model seconds per query (what
    a query costs it in the latency pass)."""
    config, queries = stage.config, ctx.query_texts
    if stage.area == "chunks" and config is not None:
        _chunking(stage, execution, ctx, meter, cost)
        return 0.0
    if stage.area == "doc_vectors" and config is not None:
        texts = [c.text for c in execution[stage.inputs[0]].chunks]
        model = meter.embedder(config, texts)
        todo = _missing(ctx, config, texts)
        cost.seconds += model.seconds(len(todo))
        cost.work.append(f"embed {len(todo):,} of {len(texts):,} chunks")
        return 0.0
    if stage.area == "models" and isinstance(config, Tunable) and config.finetune is not None:
        _training(config, config.finetune, ctx, meter, cost)
        return 0.0
    if stage.area == "query_vectors" and config is not None:
        model = meter.embedder(config)
        cost.seconds += model.seconds(len(queries))
        return model.per_item
    if stage.area in {"bm25_index", "dense_index"} and config is not None:
        _index_build(stage, config, execution, ctx, meter, cost)
        return 0.0
    if isinstance(config, LLMOptions):
        cost.llm_calls += len(queries)
        price = prices.get(config.model)
        if price is not None:
            context = getattr(getattr(config, "context", None), "budget_tokens", 0)
            reply = config.max_tokens or _REPLY_TOKENS
            dollars = (_PROMPT_TOKENS + context) * price.input + reply * price.output
            cost.dollars = (cost.dollars or 0.0) + len(queries) * dollars / 1e6
        cost.work.append(f"{len(queries):,} LLM calls ({stage.name})")
        return 0.0
    candidates = int(getattr(config, "candidates", 0) or 0)
    if stage.area == "rerank" and config is not None and candidates:
        chunks = execution[execution.plan.chunks].chunks
        pairs = len(queries) * candidates
        cost.work.append(f"rerank {pairs:,} pairs")
        try:
            model = meter.reranker(config, queries, [c.text for c in chunks[:8]])
        except Exception:  # a reranker that needs the run's indexes: measured by the run only
            cost.work[-1] += " (not estimated)"
            return 0.0
        cost.seconds += model.seconds(pairs)
        return model.per_item * candidates
    return 0.0


def _chunking(stage: Stage, execution: Execution, ctx: Context, meter: _Meter, cost: Cost) -> None:
    """Add the chunking ``stage``'s work and seconds to ``cost``: a chunker without a model is
    run now (cheap, and cached for the run), one with an embedder is timed on sentences."""
    embedder = getattr(stage.config, "embedder", None)
    if embedder is None:  # no model: computed now, cheap, and cached for the run
        started = time.perf_counter()
        found = execution[stage.name]
        cost.seconds += time.perf_counter() - started
        cost.work.append(f"chunk {len(ctx.labeled.documents):,} documents into {len(found):,}")
        return
    texts = [d.text for d in ctx.labeled.documents]
    sentences = sum(max(1, len(_SENTENCE.findall(t))) for t in texts)
    cost.seconds += meter.embedder(embedder, texts).seconds(sentences)
    cost.work.append(f"embed ~{sentences:,} sentences to chunk")


def _index_build(
    stage: Stage,
    config: ComponentConfig,
    execution: Execution,
    ctx: Context,
    meter: _Meter,
    cost: Cost,
) -> None:
    """Add the work and seconds of building the BM25 or dense index ``stage`` to ``cost``."""
    chunks = execution[stage.inputs[-1]].chunks
    dimension, what = 0, "BM25"
    if stage.area == "dense_index":
        embedder = execution.plan.stages[stage.inputs[0]].config
        assert embedder is not None  # the dense index's input is its document vectors
        dimension, what = ctx.env.embedder(_base(embedder)).dimension, f"{config.kind} dense"
    cost.seconds += meter.build(stage, [c.text for c in chunks], dimension)
    article = "an" if what[0] in "aeiou" else "a"
    cost.work.append(f"build {article} {what} index of {len(chunks):,} chunks")


def _base(config: ComponentConfig) -> ComponentConfig:
    """The component whose model runs as fast as ``config``'s: its base model when it is
    fine-tuned (trained or not), else itself."""
    if isinstance(config, Tunable) and config.finetune is not None:
        return config.model_copy(update={"finetune": None})
    return config


def _training(
    config: Tunable, tuning: FinetuneConfig, ctx: Context, meter: _Meter, cost: Cost
) -> None:
    """Add a fine-tuning stage's work and seconds to ``cost``: the steps training will take
    (``planned_steps``, on the pairs it will train on), each about three times (forward and
    backward) the inference time of the texts in its batch, and the base model's passes
    before them (mining hard negatives, the ``margin_mse`` teacher's margins)."""
    if tuning.pairs == "select" and ctx.env.train is not None:
        pairs = ctx.env.train(tuning.width)
    else:
        pairs = generated_pairs(ctx.env.corpus, tuning.queries, tuning.seed, tuning.width)
    steps = planned_steps(config.family, pairs, tuning)
    loss = tuning.loss_for(config.family)
    negatives = tuning.n_negatives if tuning.negatives != "none" else 0
    per_row = 1 if loss in {"margin_mse", "triplet"} else negatives
    if isinstance(config, ComponentConfig) and config.family == "bi-encoder":
        model = meter.embedder(config)
        cost.seconds += 3 * model.seconds(steps * tuning.batch_size * (2 + per_row))
        before = len(pairs.passages) if tuning.negatives == "model" and negatives else 0
        before += len(pairs) * (2 + negatives) if loss == "margin_mse" else 0
        cost.seconds += model.seconds(before)
        cost.work.append(f"fine-tune {config.model} ({steps:,} steps)")
    else:
        cost.work.append(f"train a cross-encoder from {config.model} ({steps:,} steps, not timed)")


def _missing(ctx: Context, config: ComponentConfig, texts: Sequence[str]) -> list[str]:
    """The distinct ``texts`` the embedder of ``config`` has not embedded yet (all of them
    when it is fine-tuned and the model is not trained yet)."""
    if _base(config) is not config:
        return list(dict.fromkeys(texts))
    identity = ctx.env.embedder(config).identity
    keys = EmbeddingCache.text_keys(texts)
    found = ctx.cache.embeddings.lookup(identity, "document", keys)
    missing = {k: t for k, t, v in zip(keys, texts, found, strict=True) if v is None}
    return list(missing.values())
