"""The stage graph: a pipeline compiled to an ordered list of stages, run with or without a cache.

A trial (one component per sweep axis) compiles to a :class:`Plan`. Each :class:`Stage` has a
name, the stages it reads, a key — the hash of its cache area, its inputs' keys and the config
slice that defines it — a compute function and a codec that saves and loads its artifact. Keys
are known before anything runs, so the same plan serves three executors:

* the sweep runs every stage through the stage cache (``Execution`` with a ``StageCache``);
* ``--dry-run`` reads only the keys (``Plan.keys``) to say what is cached;
* ``RAGPipeline`` keeps the index-time values live (``retrieve/live.py``) and runs the
  query-time stages in memory over them (``provided``).

Two sources feed a plan: ``corpus`` (the documents) and ``queries`` (the query texts). Index-time
stages (chunks, vectors, indexes) depend on the corpus alone; query-time stages produce per-query
values and record seconds per query (their ``latency`` name is the column they fill).

Steps — the components of step axes (query, retriever, reranker, postprocess, and any axis a
plugin registers) — add their stages through :class:`PlanBuilder`: they ask it for resources
(``ragbench.retrieve.resources``: chunks, document vectors, a dense or BM25 index, query vectors)
and declare what they need by what they ask for. ``compile_plan`` never names a kind.
See ARCHITECTURE.md for the recipe to add a stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbench.data.pairs import TrainingPairs, generated_pairs, generated_source
from ragbench.errors import ConfigError
from ragbench.index.cache import CachedEmbedder, EmbeddingCache, default_cache_root
from ragbench.index.finetune import Tunable, TunedModel, train
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, LLMOptions
from ragbench.models import model_identity
from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig, axes, components
from ragbench.retrieve import artifacts
from ragbench.retrieve.artifacts import (
    ChunkSet,
    Codec,
    Queries,
    QueryVectors,
    Timed,
    query_texts,
)
from ragbench.retrieve.timed import QUALITY_BATCH, embed_queries
from ragbench.text.chunkers import chunk_documents
from ragbench.types import Document, Ranking

__all__ = [
    "SOURCES",
    "Env",
    "Plan",
    "PlanBuilder",
    "Stage",
    "StepConfig",
    "check_template",
    "collapse",
    "compile_plan",
    "component_key",
    "stage_key",
]

SOURCES = ("corpus", "queries", "train")


def stage_key(stage: str, *parts: str | int | float) -> str:
    """Hash of a stage name and its inputs' keys."""
    payload = json.dumps([stage, *parts], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _models(value: Any) -> list[str]:
    """Every ``model`` string inside a config dump (nested components included)."""
    if isinstance(value, dict):
        found = [str(value["model"])] if isinstance(value.get("model"), str) else []
        return found + [m for v in value.values() for m in _models(v)]
    if isinstance(value, list | tuple):
        return [m for v in value for m in _models(v)]
    return []


def component_key(config: ComponentConfig) -> str:
    """Config hash plus the identity of every model it names (local files are hashed)."""
    models = _models(config.model_dump(mode="json"))
    return stage_key("component", config.key(), *(model_identity(m) for m in models))


Update = Literal["append", "batch", "extend", "derive", "fixed"]
"""How a live index-time value follows a change of the corpus (``Stage.update``)."""


@dataclass(frozen=True)
class Stage:
    """One step of a plan: ``compute(env, *values of inputs)`` gives its artifact.

    ``area`` is the cache area the artifact is stored under; ``index`` marks index-time
    artifacts (built once per corpus, counted as build time); ``latency`` names the per-query
    seconds a query-time artifact carries (``value.seconds``); ``config`` is the component it
    runs (the dry run prices it). ``update`` says how a pipeline keeps an index-time value up
    to date as documents come and go (``LiveExecution.extend`` / ``delete``):

    * ``append`` — computed over each new document alone and appended (chunk sets, which read
      the corpus); a deleted document's chunks are dropped;
    * ``batch`` — computed over the new documents' values for the stages that read it
      (document vectors); a live copy no longer matches the chunks and is dropped (a
      query-time reader then computes what it needs);
    * ``extend`` — ``extend(value, *inputs over the new documents)`` adds them in place
      (indexes), and ``value.delete(chunk ids)`` removes;
    * ``derive`` — recomputed from the live values when next read (a ``window``
      postprocess's windows);
    * ``fixed`` — computed once, from the first documents when nothing gave it, and kept as
      documents change (a fine-tuned model).
    """

    name: str
    area: str
    inputs: tuple[str, ...]
    key: str
    compute: Callable[..., Any]
    codec: Codec
    index: bool = False
    latency: str | None = None
    extend: Callable[..., Any] | None = None
    config: ComponentConfig | None = None
    update: Update = "derive"


Pairs = Callable[[int], TrainingPairs]
"""Training pairs of a labeled split, their passages at most the given characters wide."""


@dataclass
class Env:
    """What a plan runs against: the corpus, the query texts, a metadata filter, the training
    pairs of the selection split (``train``, for models fine-tuned on ``pairs: select``; the
    ``work`` folder keeps their training checkpoints), and the components (models) shared by
    every plan run with this env."""

    corpus: Sequence[Document] = ()
    queries: Sequence[str] = ()
    filter: Mapping[str, Any] | None = None
    warm_up: bool = True
    embeddings: EmbeddingCache | None = None
    llm_cache: LLMCache | None = None
    train: Pairs | None = None
    work: Path | None = None
    _components: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    _tuned: dict[str, TunedModel] = field(default_factory=dict, repr=False)

    def component(self, family: str, config: ComponentConfig) -> Any:
        """The component of ``config``, built once per env (models load once)."""
        key = (family, config.key())
        if key not in self._components:
            self._components[key] = components(family).build(config)
        return self._components[key]

    def embedder(
        self, config: ComponentConfig, cached: bool = False, model: TunedModel | None = None
    ) -> Embedder:
        """The embedder of ``config`` (running its trained ``model`` when it is fine-tuned;
        see ``tuned``); with ``cached``, behind the env's per-text cache of document vectors
        (queries always reach the model: their latency is measured)."""
        embedder: Embedder = self.component("embedder", self.tuned(config, model))
        if cached and self.embeddings is not None:
            return CachedEmbedder(embedder, self.embeddings, roles=("document",))
        return embedder

    def tuned(self, config: ComponentConfig, model: TunedModel | None = None) -> ComponentConfig:
        """``config`` as it runs: a fine-tuned component with its trained ``model`` (a stage's
        value, remembered for the env's later calls that have none at hand; ``FinetuneError``
        when training left it at chance), any other as is."""
        if not isinstance(config, Tunable) or config.finetune is None:
            return config
        if model is not None:
            self._tuned[config.key()] = model
        found = self._tuned.get(config.key())
        if found is None:
            raise ConfigError(
                f"{config.label()}: its fine-tuned model is not trained in this run (a plan "
                "trains it in its fine-tuning stage, before anything runs the model)"
            )
        return config.tuned(found.usable())

    def llm(self, config: LLMOptions, where: str) -> LLMClient:
        """The client of ``config``, one per env, its calls cached in the env's LLM cache
        (``where`` names the config's key path in errors)."""
        key = ("llm", config.model_dump_json())
        if key not in self._components:
            self._components[key] = LLMClient(config, self.llm_cache, where)
        client: LLMClient = self._components[key]
        return client

    def clients(self) -> list[LLMClient]:
        """Every LLM client the env has made (their usage counts requests)."""
        return [c for c in self._components.values() if isinstance(c, LLMClient)]

    def source(self, name: str) -> Any:
        """The value of a source: ``corpus``, ``queries`` or ``train``."""
        return {"corpus": self.corpus, "queries": self.queries, "train": self.train}[name]


def check_template(
    text: str,
    required: frozenset[str] | set[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> str:
    """``text`` if it is a prompt template with every ``{field}`` of ``required`` and no field
    outside ``required`` and ``optional`` (else ValueError naming them; literal braces are
    written ``{{`` and ``}}``)."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        message = f"not a prompt template ({exc}); write literal braces as {{{{ }}}}"
        raise ValueError(message) from None
    missing, unknown = required - fields, fields - required - set(optional)
    if missing or unknown:
        wanted = ", ".join(f"{{{f}}}" for f in sorted(required))
        raise ValueError(
            f"a prompt template needs {wanted}"
            + (f"; unknown fields: {', '.join(sorted(unknown))}" if unknown else "")
        )
    return text


class StepConfig(ComponentConfig):
    """Base of the configs of step axes: they plan their own query-time stages.

    ``plan`` adds stages through the builder and returns the name of the ranking it produces
    (None when it produces none, e.g. a query transform that only replaces ``g.queries``).
    ``wants`` says how many hits it needs from upstream to give ``k`` (a reranker wants its
    ``candidates``).
    """

    def wants(self, k: int) -> int:
        """Upstream hits needed to output ``k``."""
        return k

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str | None:
        """Add this step's stages to ``g``; the name of its output ranking (or None)."""
        raise NotImplementedError(f"{type(self).__name__} does not plan any stage")


@dataclass(frozen=True)
class Plan:
    """An ordered list of stages (inputs first), the ranking it outputs, the chunks stage that
    ranking's ids refer to, the axes it used, the stage holding its answers (if a generator
    answers), the stage holding the query texts the retrievers searched with, and the
    first-stage lists its steps declared (``(name, stage)``: each BM25 and dense search),
    which say what each retriever found before fusion or reranking."""

    stages: Mapping[str, Stage]
    output: str
    chunks: str
    axes: frozenset[str]
    answers: str | None = None
    queries: str = "queries"
    lists: tuple[tuple[str, str], ...] = ()

    def keys(self) -> dict[str, str]:
        """Stage name → artifact key."""
        return {name: stage.key for name, stage in self.stages.items()}

    def index_stages(self) -> list[Stage]:
        """The index-time stages, in order."""
        return [s for s in self.stages.values() if s.index]

    def by_latency_name(self, per_stage: Mapping[str, Any]) -> dict[str, Any]:
        """Per-stage seconds (by stage name, in plan order) summed per latency name: stages
        reported under one name (two BM25 searches of a hybrid) add up."""
        found: dict[str, Any] = {}
        for name, seconds in per_stage.items():
            column = str(self.stages[name].latency)
            found[column] = found[column] + seconds if column in found else seconds
        return found


class PlanBuilder:
    """Collects the stages of one plan; steps add theirs with ``add``.

    ``configs`` is the trial: one component config per axis. ``queries`` names the stage whose
    value is the query texts the retrievers see (the ``queries`` source until a query step
    replaces it with its ``Queries``; ``varied`` when that gives some queries several texts);
    ``answers`` names the stage holding a generator's answers; ``result_chunks`` the chunk set
    a post-retrieval step's ranking refers to, when it is not the trial's chunks; ``lists``
    the first-stage lists (``(name, stage)``) retrievers planned.
    """

    def __init__(
        self, configs: Mapping[str, ComponentConfig], sources: Mapping[str, str] | None = None
    ) -> None:
        self.configs = dict(configs)
        self.stages: dict[str, Stage] = {}
        self.used: set[str] = set()
        self.queries = "queries"
        self.varied = False
        self.answers: str | None = None
        self.result_chunks: str | None = None
        self.lists: list[tuple[str, str]] = []
        self._keys = {name: (sources or {}).get(name, name) for name in SOURCES}
        self._by_key: dict[str, str] = {}

    @property
    def sources(self) -> dict[str, str]:
        """The keys of the plan's sources (for compiling a sub-plan over the same data)."""
        return dict(self._keys)

    def config(self, axis: str) -> ComponentConfig:
        """The trial's component on ``axis`` (recorded as used by the plan)."""
        if axis not in self.configs:
            raise KeyError(f"the trial has no {axis!r}")
        self.used.add(axis)
        return self.configs[axis]

    def key(self, name: str) -> str:
        """The key of a stage or source."""
        return self._keys[name] if name in self._keys else self.stages[name].key

    def add(
        self,
        name: str,
        area: str,
        inputs: Sequence[str],
        parts: Sequence[str | int | float],
        compute: Callable[..., Any],
        codec: Codec,
        *,
        index: bool = False,
        latency: str | None = None,
        extend: Callable[..., Any] | None = None,
        config: ComponentConfig | None = None,
        update: Update = "derive",
    ) -> str:
        """Add a stage keyed by ``area``, its inputs' keys and ``parts``; returns its name.

        A stage with the same key as one already added is that stage (two steps asking for the
        same resource share it); a different stage under a taken name gets a ``#n`` suffix.
        A stage with ``extend`` is updated in place (``update="extend"``).
        """
        key = stage_key(area, *(self.key(i) for i in inputs), *parts)
        if key in self._by_key:
            return self._by_key[key]
        unique, n = name, 1
        while unique in self.stages:
            n += 1
            unique = f"{name}#{n}"
        update = "extend" if extend is not None else update
        self.stages[unique] = Stage(
            unique, area, tuple(inputs), key, compute, codec, index, latency, extend, config, update
        )
        self._by_key[key] = unique
        return unique

    def adopt(self, plan: Plan) -> dict[str, str]:
        """Add another plan's index-time stages (compiled with the same sources) to this one,
        sharing those it already has; returns that plan's stage names → names here."""
        names: dict[str, str] = {source: source for source in SOURCES}
        for stage in plan.index_stages():
            if stage.key in self._by_key:
                names[stage.name] = self._by_key[stage.key]
                continue
            unique, n = stage.name, 1
            while unique in self.stages:
                n += 1
                unique = f"{stage.name}#{n}"
            inputs = tuple(names[i] for i in stage.inputs)
            self.stages[unique] = dataclasses.replace(stage, name=unique, inputs=inputs)
            self._by_key[stage.key] = unique
            names[stage.name] = unique
        return names

    # ------------------------------------------------------------ resources steps ask for

    def chunks(self, chunker: ComponentConfig | None = None) -> str:
        """The corpus chunked by ``chunker`` (default: the trial's)."""
        chunker = chunker or self.config("chunker")
        name = "chunks" if chunker == self.configs.get("chunker") else f"chunks:{chunker.label()}"

        def compute(env: Env, corpus: Sequence[Document]) -> ChunkSet:
            return ChunkSet(chunk_documents(env.component("chunker", chunker), corpus))

        parts = (component_key(chunker),)
        return self.add(
            name,
            "chunks",
            ("corpus",),
            parts,
            compute,
            artifacts.CHUNKS,
            index=True,
            config=chunker,
            update="append",
        )

    def model(self, config: ComponentConfig) -> tuple[str, ...]:
        """The stage that trains ``config``'s model when it is fine-tuned (``finetune``;
        ``ragbench.index.finetune``), as the inputs of the stages that run the model: on the
        selection split's pairs (source ``train``) or on pairs generated from the corpus."""
        if not isinstance(config, Tunable) or config.finetune is None:
            return ()
        tuning, family = config.finetune, config.family
        base = config.model_copy(update={"finetune": None})

        def compute(env: Env, corpus: Sequence[Document], split: Pairs | None = None) -> Any:
            if tuning.pairs == "generated":
                pairs = generated_pairs(corpus, tuning.queries, tuning.seed, tuning.width)
            elif split is None:
                raise ConfigError(
                    f"{config.label()}: finetune.pairs: select trains on the selection split "
                    "(evaluation.select_on), and this run has none"
                )
            else:
                pairs = split(tuning.width)
            mining = tuning.negatives == "model" and family == "bi-encoder"
            embed = env.embedder(base).embed if mining else None
            work = (env.work or default_cache_root() / "training") / stage_key(
                "training", component_key(base), tuning.model_dump_json(), pairs.key
            )
            return train(family, config.model, pairs, tuning, work, embed)

        inputs = ("corpus", "train") if tuning.pairs == "select" else ("corpus",)
        parts: tuple[str, ...] = (family, component_key(base), tuning.model_dump_json())
        if tuning.pairs == "generated":  # how pairs are made and the loss they default to
            parts += (generated_source(tuning.queries, tuning.seed), tuning.loss_for(family))
        name = f"finetune:{family}"
        return (
            self.add(
                name,
                "models",
                inputs,
                parts,
                compute,
                artifacts.MODEL,
                index=True,
                config=config,
                update="fixed",
            ),
        )

    def doc_vectors(
        self, embedder: ComponentConfig | None = None, chunker: ComponentConfig | None = None
    ) -> str:
        """Document vectors of the chunks, rows in chunk order (texts embedded before by the
        same model come from the embedding cache)."""
        embedder = embedder or self.config("embedder")

        def compute(env: Env, chunks: ChunkSet, *model: TunedModel) -> np.ndarray:
            texts = [c.text for c in chunks.chunks]
            tuned = model[0] if model else None
            return env.embedder(embedder, cached=True, model=tuned).embed(texts, "document")

        inputs = (self.chunks(chunker), *self.model(embedder))
        parts = (component_key(embedder),)
        return self.add(
            "doc_vectors",
            "doc_vectors",
            inputs,
            parts,
            compute,
            artifacts.VECTORS,
            index=True,
            config=embedder,
            update="batch",
        )

    def dense_index(
        self,
        store: ComponentConfig,
        embedder: ComponentConfig | None = None,
        chunker: ComponentConfig | None = None,
    ) -> str:
        """A dense store of kind ``store`` over the document vectors."""

        def extend(index: Any, vectors: np.ndarray, chunks: ChunkSet) -> Any:
            index.add(chunks.ids, np.asarray(vectors), chunks.metadata)
            return index

        def compute(env: Env, vectors: np.ndarray, chunks: ChunkSet) -> Any:
            return extend(components("dense").build(store), vectors, chunks)

        inputs = (self.doc_vectors(embedder, chunker), self.chunks(chunker))
        codec = artifacts.dense_index_codec(store)
        return self.add(
            "dense_index",
            "dense_index",
            inputs,
            (component_key(store),),
            compute,
            codec,
            index=True,
            extend=extend,
            config=store,
        )

    def bm25_index(self, config: BM25Config, chunker: ComponentConfig | None = None) -> str:
        """A BM25 index of ``config`` over the chunk texts."""

        def extend(index: BM25Index, chunks: ChunkSet) -> BM25Index:
            index.add(chunks.ids, [c.text for c in chunks.chunks], chunks.metadata)
            return index

        def compute(env: Env, chunks: ChunkSet) -> BM25Index:
            index = extend(BM25Index(config), chunks)
            index.search(["warm up"], 1)  # builds the backend index inside the timed step
            return index

        inputs = (self.chunks(chunker),)
        return self.add(
            "bm25_index",
            "bm25_index",
            inputs,
            (component_key(config),),
            compute,
            artifacts.BM25_INDEX,
            index=True,
            extend=extend,
            config=config,
        )

    def query_vectors(
        self, embedder: ComponentConfig | None = None, queries: str | None = None
    ) -> str:
        """Vectors of the query texts — the current ones (after a query transform), or the
        stage or source ``queries`` — embedded in batches, each query's share of its batch timed."""
        embedder = embedder or self.config("embedder")

        def compute(env: Env, queries: Sequence[str] | Queries, *model: TunedModel) -> QueryVectors:
            texts = query_texts(queries)
            tuned = env.embedder(embedder, model=model[0] if model else None)
            return QueryVectors(*embed_queries(tuned, texts, env.warm_up, QUALITY_BATCH))

        return self.add(
            "query_vectors",
            "query_vectors",
            (queries or self.queries, *self.model(embedder)),
            (component_key(embedder),),
            compute,
            artifacts.QUERY_VECTORS,
            latency="embed_query",
            config=embedder,
        )


def compile_plan(
    configs: Mapping[str, ComponentConfig], k: int, sources: Mapping[str, str] | None = None
) -> Plan:
    """The plan of a trial whose final ranking holds ``k`` hits per query.

    Demand flows backwards first (each step's ``wants``), then every step axis plans its
    stages in pipeline order. ``sources`` gives the keys of ``corpus`` and ``queries``.
    """
    steps = [a.name for a in axes() if a.step and a.name in configs]
    out: dict[str, int] = {}
    need = k
    for name in reversed(steps):
        out[name] = need
        need = _step(configs[name], name).wants(need)
    g = PlanBuilder(configs, sources)
    ranking: str | None = None
    for name in steps:
        g.used.add(name)
        produced = _step(configs[name], name).plan(g, ranking, out[name])
        if produced is not None and ranking is None and g.varied:
            produced = collapse(g, produced, out[name])  # one row per query again
        ranking = produced or ranking
    if ranking is None:
        raise ValueError("the trial's steps produce no ranking (a retriever is needed)")
    chunks = g.result_chunks or g.chunks()
    found = tuple(dict.fromkeys(g.lists))
    return Plan(dict(g.stages), ranking, chunks, frozenset(g.used), g.answers, g.queries, found)


def collapse(g: PlanBuilder, ranking: str, k: int) -> str:
    """Fuse the rows of a ranking over several texts per query (a multi-query or decomposing
    transform) into one row per query, by reciprocal rank fusion (k = 60)."""

    def compute(env: Env, found: Timed, queries: Queries) -> Timed:
        owner = np.asarray(queries.owner)
        n = int(owner.max()) + 1 if len(owner) else 0
        fused = []
        for row in range(n):
            scores: dict[str, float] = {}
            for i in np.flatnonzero(owner == row):
                for rank, (cid, _) in enumerate(found.ranking.row(int(i)), start=1):
                    scores[cid] = scores.get(cid, 0.0) + 1.0 / (60 + rank)
            fused.append(sorted(scores.items(), key=lambda p: (-p[1], p[0]))[:k])
        seconds = np.bincount(owner, weights=found.seconds, minlength=n)
        return Timed(Ranking.from_rows(fused, k), seconds)

    return g.add(
        "fuse_queries", "fuse_queries", (ranking, g.queries), (k,), compute, artifacts.RANKING
    )


def _step(config: ComponentConfig, axis: str) -> StepConfig:
    if not isinstance(config, StepConfig):
        raise TypeError(
            f"{axis} kind {config.kind!r}: its config must derive from StepConfig to plan stages"
        )
    return config
