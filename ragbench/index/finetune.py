"""Domain adaptation: fine-tune a bi-encoder, or train a cross-encoder, on in-domain pairs.

A component with a ``finetune`` section (``FinetuneConfig``: an embedder of kind
``sentence-transformers``, a ``cross_encoder`` reranker) runs a model trained here instead of
its base ``model``. The stage graph trains it once per content (``retrieve/graph.py``:
``PlanBuilder.model``; base model, pairs, negatives, settings and seed key a model directory in
the stage cache), so a sweep that varies only the retrieval around it trains it once.

Training follows sentence-transformers: ``mnrl`` (``MultipleNegativesRankingLoss``: each query
against its positive, its hard negatives and every other passage of the batch), ``triplet``
(``TripletLoss`` on the first hard negative) or ``margin_mse`` (``MarginMSELoss``, as GPL
trains: the model's margin between the positive and each hard negative is fit to a teacher's;
see ``teacher_margins``) for a bi-encoder; ``bce`` (binary cross-entropy
over positive and negative pairs) or ``listwise`` (cross-entropy over a query's positive and its
negatives) for a cross-encoder, whose classification head starts random over the base model's
weights (MiniLM's, the one real start offline). Hard negatives are the best-ranked passages of
the pool that are not relevant to the query, by BM25 (``negatives: bm25``), by the base model
(``model``), or none (in-batch negatives only). A batch never holds one query or one positive
passage twice (a false in-batch negative). AdamW with linear warm-up and decay; the dropout of
step ``s`` is seeded by ``(seed, s)``, so a run resumed from its checkpoint (written every
``CHECKPOINT_SECONDS`` into its work folder) goes on as if it had not stopped.

Training runs in bounded memory (``MEMORY_SAVING``): each transformer layer's activations are
recomputed in the backward pass instead of kept (activation checkpointing, dropout replayed, so
the gradients are those of a plain pass), a cross-encoder's batch is scored in parts of at most
``batch_size`` pairs whose gradients add up to the batch's, and activations are allocated apart
from glibc's heaps (``_mapped_allocations``). A batch's peak is then that of one layer over one
forward pass, not of every layer over the whole batch.

A model whose loss over its last steps stays within ``CHANCE_MARGIN`` of a random guess's
(``_chance``: ln of the candidates a query is ranked among, for instance) learnt nothing it can
rank by: its record says so (``not_trained``) and ``TunedModel.usable`` refuses it, so a sweep
fails its trials with that reason instead of scoring a model at chance.

The trained model directory holds ``training.json``: where the pairs came from, their count,
a digest of each training query's text (``query_digest``: a run then tells whether it evaluates
a query the model trained on, ``trained_on``), the settings, the loss per step, the final loss
against chance's, wall seconds and the peak resident memory of the process. ``planned_steps``
counts the steps training will take before any model loads, with the schedule ``train``
follows (``training_steps``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import math
import os
import platform
import resource
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field, field_validator

from ragbench import progress
from ragbench.errors import DataError, RagbenchError
from ragbench.models import hub_offline, resolve_model
from ragbench.registry import ConfigModel

if TYPE_CHECKING:
    from ragbench.data.pairs import TrainingPairs

__all__ = [
    "CHANCE_MARGIN",
    "CHECKPOINT_SECONDS",
    "FINAL_STEPS",
    "MEMORY_SAVING",
    "Family",
    "FinetuneConfig",
    "FinetuneError",
    "TrainedOn",
    "Tunable",
    "TunedModel",
    "base_problem",
    "mine_negatives",
    "planned_steps",
    "query_digest",
    "teacher_margins",
    "train",
    "trained_on",
    "training_steps",
]

log = logging.getLogger(__name__)

Family = Literal["bi-encoder", "cross-encoder"]
CHECKPOINT_SECONDS = 120.0
MEMORY_SAVING = True  # off: a batch's every activation kept at once (sentence-transformers' way)
FINAL_STEPS = 5  # a run's final loss is the mean of its last steps'
CHANCE_MARGIN = 0.05  # a final loss above (1 - this) x a random guess's is that of no training
_MMAP_THRESHOLD = 1 << 20  # bytes: larger allocations are mapped apart while training
_GLIBC_MMAP_CEILING = 32 << 20  # where glibc's own threshold climbs to (64-bit)
CHARS_PER_TOKEN = 4  # a passage window of max_seq_length tokens spans about this many characters
_LOSSES: dict[Family, tuple[str, ...]] = {
    "bi-encoder": ("mnrl", "triplet", "margin_mse"),
    "cross-encoder": ("bce", "listwise"),
}
_NEED_NEGATIVES = ("triplet", "margin_mse", "listwise")  # losses over hard negatives


class FinetuneError(RagbenchError):
    """A model could not be trained (no pairs, a loss that does not fit the model, ...)."""


class FinetuneConfig(ConfigModel):
    """How a model is adapted to the corpus (every field is part of the model's cache key).

    ``pairs``: ``select`` trains on the judged queries of the sweep's selection split
    (``evaluation.select_on``; never a split it reports on), ``generated`` on ``queries``
    queries generated from the corpus itself (no labels). ``loss`` defaults to ``mnrl`` for a
    bi-encoder on judged pairs, ``margin_mse`` on generated ones (their positives are guesses
    and their hard negatives often relevant: on SciFact test, ``mnrl`` on 1,000 generated pairs
    took MiniLM from 0.645 nDCG@10 to 0.610 (positives as openings) and 0.617 (no hard
    negatives), ``margin_mse`` with 2 negatives to 0.661, and to 0.668 on 2,000 queries,
    benchmarks/RESULTS.md), and ``bce`` for a cross-encoder; ``negatives`` hard negatives per
    pair come from BM25 or the base model's ranking. ``max_seq_length`` caps queries and
    passages in tokens. ``learning_rate`` defaults high for the few steps a corpus's pairs
    give (on SciFact's train split, 29 steps: 3e-5 reached 0.685 nDCG@10 on test, 6e-5
    0.701). ``teacher_bm25`` is BM25's share of the ``margin_mse`` teacher (the base model
    has the rest; 0.5 when unset, which keeps it out of the cache key of models trained
    otherwise).
    """

    pairs: Literal["select", "generated"]
    queries: int = Field(1000, gt=0)
    loss: Literal["mnrl", "triplet", "margin_mse", "bce", "listwise"] | None = None
    negatives: Literal["bm25", "model", "none"] = "bm25"
    n_negatives: int = Field(1, ge=0, le=16)
    epochs: int = Field(1, gt=0)
    batch_size: int = Field(32, ge=2)
    learning_rate: float = Field(6e-5, gt=0, lt=1)
    warmup: float = Field(0.1, ge=0, lt=1)
    max_seq_length: int = Field(256, gt=0)
    seed: int = Field(0, ge=0)
    teacher_bm25: float | None = Field(None, ge=0, le=1, exclude_if=lambda value: value is None)

    def check(self, family: Family) -> None:
        """ValueError (a config validator's error) unless this config can train ``family``."""
        try:
            self.loss_for(family)
        except FinetuneError as exc:
            raise ValueError(str(exc).removeprefix("finetune: ")) from None

    def loss_for(self, family: Family) -> str:
        """The loss this config trains ``family`` with (``FinetuneError`` if it cannot)."""
        generated = family == "bi-encoder" and self.pairs == "generated"
        loss = self.loss or ("margin_mse" if generated else _LOSSES[family][0])
        if loss not in _LOSSES[family]:
            raise FinetuneError(
                f"finetune.loss: {loss!r} does not train a {family}; use one of "
                f"{', '.join(_LOSSES[family])}"
            )
        negatives = self.n_negatives if self.negatives != "none" else 0
        if negatives == 0 and (loss in _NEED_NEGATIVES or family == "cross-encoder"):
            raise FinetuneError(self._without_negatives(family, loss))
        return loss

    def _without_negatives(self, family: Family, loss: str) -> str:
        """Why this config, which leaves no hard negatives, cannot train ``family`` with
        ``loss``: naming the key that took them away, and whether ``loss`` was set or is the
        default."""
        key, value = ("negatives", "none") if self.negatives == "none" else ("n_negatives", "0")
        cause, fix = f"{key}: {value}", "negatives: bm25 or model with n_negatives >= 1"
        if family == "cross-encoder":
            return (
                f"finetune.{key}: {value} leaves no hard negatives, which a cross-encoder "
                f"learns from; set {fix}"
            )
        if self.loss is None:
            return (
                f"finetune.{key}: {value} leaves no hard negatives, which {loss} needs (the "
                f"loss chosen by default for {self.pairs} pairs, as loss is not set); set "
                f"loss: mnrl to train without them, or {fix}"
            )
        return (
            f"finetune.loss: {loss} needs hard negatives and {cause} leaves none; set "
            f"loss: mnrl, or {fix}"
        )

    @property
    def width(self) -> int:
        """Characters of a training passage (``max_seq_length`` tokens, roughly)."""
        return self.max_seq_length * CHARS_PER_TOKEN


class Tunable(ConfigModel):
    """Mixin of the configs of components whose model can be fine-tuned: an optional
    ``finetune`` section, left out of the serialised form (so of cache keys and trial ids)
    when absent, and the ``family`` of model it trains."""

    finetune: FinetuneConfig | None = Field(None, exclude_if=lambda value: value is None)
    family: ClassVar[Family]
    model: str

    @field_validator("finetune")
    @classmethod
    def _trainable(cls, value: FinetuneConfig | None) -> FinetuneConfig | None:
        if value is not None:
            value.check(cls.family)
        return value

    def tuned(self, model: Path) -> Self:
        """This config running the trained ``model`` directory instead of fine-tuning."""
        return self.model_copy(update={"model": str(model), "finetune": None})


@dataclass(frozen=True)
class TunedModel:
    """A trained model directory (the value of a fine-tuning stage)."""

    path: Path

    def record(self) -> dict[str, Any]:
        """Its ``training.json``: pairs, settings, losses, seconds, peak memory."""
        found: dict[str, Any] = json.loads((self.path / "training.json").read_text("utf-8"))
        return found

    def usable(self) -> Path:
        """The folder to run the model from; ``FinetuneError`` with its record's reason when
        training left it at chance (``not_trained``), so nothing scores it as a trained model."""
        reason = self.record().get("not_trained")
        if reason:
            raise FinetuneError(str(reason))
        return self.path


def query_digest(text: str) -> str:
    """A short digest of a query's text, the same for texts that differ only in case and
    whitespace: what ``training.json`` keeps of each training query."""
    words = " ".join(text.split()).casefold()
    return hashlib.sha256(words.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class TrainedOn:
    """What a trained model's ``training.json`` (``record``) says of the queries it trained
    on: their digests (``query_digest``), or — in a record written before they were kept —
    only where its pairs came from (``source``); and ``base``: the same of the model it was
    fine-tuned from, when ragbench trained that one too. A model fine-tuned from one that
    trained on a query has trained on it as well."""

    record: Path
    source: str
    digests: frozenset[str] | None
    base: TrainedOn | None = None

    @property
    def lineage(self) -> list[TrainedOn]:
        """This model's record, then its base's, and so on down the chain."""
        chain: list[TrainedOn] = []
        link: TrainedOn | None = self
        while link is not None:
            chain.append(link)
            link = link.base
        return chain

    def shared(self, texts: Sequence[str], split_source: str) -> int:
        """How many of ``texts`` the model, or a model of its ``base`` chain, trained on.
        Without digests, a record counts all of them when its pairs came from
        ``split_source`` (how ``split_pairs`` names the split the texts are from), else
        none."""
        return sum(any(link._saw(t, split_source) for link in self.lineage) for t in texts)

    def records(self, texts: Sequence[str], split_source: str) -> list[Path]:
        """The ``training.json`` of each model of the chain that trained on some of
        ``texts``."""
        return [
            link.record for link in self.lineage if any(link._saw(t, split_source) for t in texts)
        ]

    def _saw(self, text: str, split_source: str) -> bool:
        """Whether this record alone says the model trained on ``text``."""
        if self.digests is None:
            return self.source == split_source
        return query_digest(text) in self.digests


def trained_on(model: str) -> TrainedOn | None:
    """What the model ``model`` (a name or path, as a config gives it) trained on, when it is
    a folder ``train`` wrote (one with a ``training.json``), with what the model it was
    fine-tuned from (its record's ``base``) trained on, down the chain; None for any other
    model. A ``training.json`` that is not such a record, or a chain that comes back to a
    model, is a ``DataError`` naming it."""
    return _trained_on(model, ())


def _trained_on(model: str, below: tuple[Path, ...]) -> TrainedOn | None:
    """``trained_on`` of ``model``, a base of the records ``below`` (the chain so far)."""
    record = Path(resolve_model(model)).expanduser() / "training.json"
    if not record.is_file():
        return None
    if record.resolve() in below:
        raise DataError(
            f"{record}: the models fine-tuned from one another (each record's 'base', from "
            f"{below[0]}) come back to this one; no model can be its own base"
        )
    try:
        found = json.loads(record.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{record}: not a readable training record ({exc})") from None
    digests = found.get("query_digests") if isinstance(found, dict) else None
    source = found.get("pairs") if isinstance(found, dict) else None
    base = found.get("base") if isinstance(found, dict) else None
    if (
        not isinstance(source, str)
        or not (base is None or isinstance(base, str))
        or not (
            digests is None
            or (isinstance(digests, list) and all(isinstance(d, str) for d in digests))
        )
    ):
        raise DataError(
            f"{record}: expected a training record with 'pairs' and 'base' (strings) and "
            "'query_digests' (a list of strings)"
        )
    tuned_from = None if base is None else _trained_on(base, (*below, record.resolve()))
    kept = None if digests is None else frozenset(digests)
    return TrainedOn(record, source, kept, tuned_from)


def mine_negatives(
    pairs: TrainingPairs,
    how: Literal["bm25", "model", "none"],
    n: int,
    embed: Callable[[Sequence[str], str], np.ndarray] | None = None,
) -> list[list[str]]:
    """Per pair, the ids of ``n`` pool passages ranked best for its query by BM25 or by
    ``embed`` (unit vectors) that are cut from no document a pair of that query has as
    positive."""
    if how == "none" or n == 0:
        return [[] for _ in range(len(pairs))]
    ids = list(pairs.passages)
    relevant: dict[str, set[str]] = {}
    for query_id, doc_id in zip(pairs.query_ids, pairs.positive_ids, strict=True):
        relevant.setdefault(query_id, set()).add(doc_id)
    per_document = Counter(pairs.owner(i) for i in ids)
    unique = list(dict.fromkeys(zip(pairs.query_ids, pairs.queries, strict=True)))
    depth = n + max(sum(per_document[d] for d in found) for found in relevant.values())
    texts = [text for _, text in unique]
    if how == "bm25":
        from ragbench.index.sparse import BM25Index

        index = BM25Index()
        index.add(ids, [pairs.passages[i] for i in ids])
        ranked = index.search(texts, depth).ids
    else:
        if embed is None:
            raise FinetuneError("finetune.negatives: model needs the base model to rank with")
        vectors = embed([pairs.passages[i] for i in ids], "document")
        scores = embed(texts, "query") @ vectors.T
        top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
        ranked = np.asarray(ids, dtype=object)[top]
    found = {
        query_id: [d for d in row if d and pairs.owner(d) not in relevant[query_id]][:n]
        for (query_id, _), row in zip(unique, ranked, strict=True)
    }
    return [found[query_id] for query_id in pairs.query_ids]


def training_steps(
    loss: str, pairs: TrainingPairs, negatives: Sequence[int], config: FinetuneConfig
) -> list[list[int]]:
    """The rows of each step ``train`` takes: a row per pair, or for ``margin_mse`` a row per
    (pair, hard negative) — ``negatives`` counts each pair's — in that order (``_rows``), cut
    into batches over ``config.epochs`` (``_batches``)."""
    split = loss == "margin_mse"
    rows = [
        (query_id, positive)
        for query_id, positive, count in zip(
            pairs.query_ids, pairs.positives, negatives, strict=True
        )
        for _ in range(count if split else 1)
    ]
    return _batches(rows, config.batch_size, config.epochs, config.seed)


def planned_steps(family: Family, pairs: TrainingPairs, config: FinetuneConfig) -> int:
    """The steps ``train`` takes on ``pairs`` (0 when it would refuse them), counted before any
    model loads: BM25's hard negatives are mined now; the base model ranks every pool passage,
    so each pair gets ``n_negatives`` of those cut from no document its query has as positive,
    or all there are."""
    if len(pairs) < 2:
        return 0
    n = config.n_negatives if config.negatives != "none" else 0
    if config.negatives == "model" and n:
        relevant: dict[str, set[str]] = {}
        for query_id, doc_id in zip(pairs.query_ids, pairs.positive_ids, strict=True):
            relevant.setdefault(query_id, set()).add(doc_id)
        owners = Counter(pairs.owner(i) for i in pairs.passages)
        counts = [
            min(n, len(pairs.passages) - sum(owners[d] for d in relevant[query_id]))
            for query_id in pairs.query_ids
        ]
    else:
        counts = [len(found) for found in mine_negatives(pairs, config.negatives, n)]
    return len(training_steps(config.loss_for(family), pairs, counts, config))


def _batches(
    rows: Sequence[tuple[str, str]], batch_size: int, epochs: int, seed: int
) -> list[list[int]]:
    """Rows (query id, positive passage) per step over all epochs: each epoch a seeded shuffle
    cut into batches in which no query and no positive passage appears twice (a row that would
    repeat one waits for the next batch): another row's positive is a negative, so it must not
    be this row's."""
    rng = np.random.default_rng(seed)
    steps: list[list[int]] = []
    for _ in range(epochs):
        waiting = [int(i) for i in rng.permutation(len(rows))]
        while waiting:
            batch: list[int] = []
            seen: set[tuple[str, str]] = set()
            left: list[int] = []
            for row in waiting:
                query_id, positive = rows[row]
                marks = {("q", query_id), ("p", positive)}
                if len(batch) < batch_size and not marks & seen:
                    batch.append(row)
                    seen |= marks
                else:
                    left.append(row)
            if len(batch) < 2:  # a lone row has no in-batch negative: the epoch ends
                break
            steps.append(batch)
            waiting = left
    return steps


def base_problem(base: str) -> str | None:
    """Why ``base``, a local path (after ``resolve_model``), holds no model to train: a file, or
    a folder with neither sentence-transformers' ``modules.json`` nor a ``config.json`` naming
    its ``model_type`` (a collection, a run folder). None otherwise, and for a hub id: this is
    the check before loading, which would fail deep inside transformers."""
    local = Path(resolve_model(base)).expanduser()
    if not local.exists() or (local / "modules.json").is_file():
        return None
    try:
        config = json.loads((local / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and isinstance(config.get("model_type"), str):
        return None
    return "not a sentence-transformers model folder (no config.json with a model_type)"


def _load(family: Family, base: str, max_length: int) -> Any:
    problem = base_problem(base)
    if problem is not None:
        raise FinetuneError(f"finetune: base model {base}: {problem}")
    hub_offline()
    if family == "bi-encoder":
        from sentence_transformers import SentenceTransformer

        model: Any = SentenceTransformer(resolve_model(base), device="cpu")
        model.max_seq_length = max_length
    else:
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(resolve_model(base), num_labels=1, max_length=max_length, device="cpu")
    if MEMORY_SAVING:
        model.activation_checkpointing_enable()
    return model


@contextmanager
def _mapped_allocations() -> Iterator[None]:
    """Allocations above ``_MMAP_THRESHOLD`` mapped on their own for the block, and returned to
    the system when freed. glibc otherwise raises its threshold to the largest block freed (up to
    ``_GLIBC_MMAP_CEILING``) and keeps activations below it on its heaps, where the passes of a
    step fragment them: the resident peak of a training step about doubles. Afterwards the
    threshold is glibc's ceiling, where a process that has freed large blocks has it. A no-op
    where the C library is not glibc."""
    libc = ctypes.CDLL(None) if platform.libc_ver()[0] == "glibc" else None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        yield
        return
    m_mmap_threshold = -3  # malloc.h
    mallopt(m_mmap_threshold, _MMAP_THRESHOLD)
    try:
        yield
    finally:
        mallopt(m_mmap_threshold, _GLIBC_MMAP_CEILING)


def _features(model: Any, texts: Sequence[Any]) -> dict[str, Any]:
    features = dict(model.preprocess(list(texts)))
    features.pop("modality", None)
    return features


@dataclass(frozen=True)
class _Row:
    """One training example: a query, its positive, its hard negatives and, for
    ``margin_mse``, the teacher's margin between the positive and each negative."""

    query_id: str
    query: str
    positive: str
    negatives: list[str]
    margins: list[float]

    def triples(self) -> list[tuple[str, float]]:
        """Each hard negative with the teacher's margin for it."""
        return list(zip(self.negatives, self.margins, strict=True))


def _width(loss: str, rows: Sequence[_Row]) -> int:
    """The hard negatives per row a batch of ``rows`` trains on (those all its rows have)."""
    return 1 if loss == "triplet" else min(len(r.negatives) for r in rows)


def _step(
    family: Family,
    loss: str,
    model: Any,
    objective: Any,
    rows: list[_Row],
    pairs_per_pass: int | None,
) -> float:
    """Back-propagate the loss of one batch of rows; returns it. A cross-encoder scores the
    batch in parts of whole rows, at most ``pairs_per_pass`` pairs each (one row when a row has
    more; the whole batch at once when None): each row's loss depends on its own pairs only,
    so the parts' gradients, each weighted by its share of the rows, add up to the batch's."""
    import torch

    width = _width(loss, rows)
    if family == "bi-encoder":
        columns = [[r.query for r in rows], [r.positive for r in rows]]
        columns += [[r.negatives[j] for r in rows] for j in range(width)]
        features = [_features(model, column) for column in columns]
        if loss == "margin_mse":
            labels = torch.tensor([r.margins[:width] for r in rows], dtype=torch.float32)
        else:
            labels = torch.zeros(len(rows))
        value = objective(features, labels)
        value.backward()
        return float(value.detach())
    per_part = len(rows) if pairs_per_pass is None else max(1, pairs_per_pass // (width + 1))
    total = 0.0
    for start in range(0, len(rows), per_part):
        part = rows[start : start + per_part]
        pairs = [(r.query, text) for r in part for text in [r.positive, *r.negatives[:width]]]
        scores = model(_features(model, pairs))["scores"].view(-1, width + 1)
        if loss == "listwise":
            target = torch.zeros(len(part), dtype=torch.long)
            value = torch.nn.functional.cross_entropy(scores, target)
        else:
            labels = torch.zeros_like(scores)
            labels[:, 0] = 1.0
            value = torch.nn.functional.binary_cross_entropy_with_logits(scores, labels)
        value = value * (len(part) / len(rows))
        value.backward()
        total += float(value.detach())
    return total


def _chance(loss: str, objective: Any, rows: Sequence[_Row]) -> float:
    """The loss, on a batch of ``rows``, of a model that knows nothing (``_CHANCE`` says how)."""
    width = _width(loss, rows)
    if loss == "mnrl":
        return math.log(len(rows) * (1 + width))
    if loss == "listwise":
        return math.log(1 + width)
    if loss == "bce":
        share = 1 / (1 + width)
        return -(share * math.log(share) + (1 - share) * math.log(1 - share))
    if loss == "margin_mse":
        return float(np.mean([m * m for r in rows for m in r.margins[:width]]))
    return float(objective.triplet_margin)


_CHANCE = {
    "mnrl": "ln of the passages of its batch a query is ranked among",
    "listwise": "ln of a query's positive and hard negatives",
    "bce": "the entropy of one positive among a query's pairs",
    "margin_mse": "no margin: the mean squared teacher margin",
    "triplet": "equal distances: the triplet margin",
}


def _verdict(
    family: Family,
    loss: str,
    source: str,
    losses: Sequence[float],
    chance: Sequence[float],
) -> tuple[float, float, str | None]:
    """The final loss (the mean of the last ``FINAL_STEPS`` steps'), a random guess's over the
    same steps, and why the model is not trained when the first is within ``CHANCE_MARGIN`` of
    the second (None when it learnt)."""
    last = min(FINAL_STEPS, len(losses))
    final = float(np.mean(losses[-last:]))
    guess = float(np.mean(chance[-last:]))
    if final < (1 - CHANCE_MARGIN) * guess:
        return final, guess, None
    return (
        final,
        guess,
        f"finetune: the {family} trained on {source} is not trained: its {loss} loss over its "
        f"last {last} steps, {final:.3f}, stays within {CHANCE_MARGIN:.0%} of a random guess's, "
        f"{guess:.3f} ({_CHANCE[loss]}); change its finetune settings (learning_rate, epochs, "
        "pairs)",
    )


def teacher_margins(
    model: Any, pairs: TrainingPairs, negatives: Sequence[Sequence[str]], bm25_share: float
) -> list[list[float]]:
    """Per pair, the teacher's margin between its positive and each of its ``negatives`` (pool
    ids): BM25's margin and ``model``'s (the base model, cosine) each divided by its spread over
    all pairs, mixed ``bm25_share : 1 - bm25_share`` and put back in the model's units. No label
    is absolute: a negative the teacher ranks above the positive (a likely relevant passage
    that no pair names) teaches the model to rank it higher, which is what makes pairs
    generated without labels safe to train on (GPL's pseudo-labels; BM25 and the base model
    stand in for its cross-encoder, which cannot be had offline)."""
    from ragbench.index.sparse import BM25Index

    ids = {text: passage_id for passage_id, text in pairs.passages.items()}
    missing = [p for p in pairs.positives if p not in ids]
    if missing:
        raise FinetuneError(f"finetune: a positive is no pool passage: {missing[0][:80]!r}")
    index = BM25Index()
    index.add(list(pairs.passages), list(pairs.passages.values()))
    lexical = [
        index.score(query, [ids[positive], *found])
        for query, positive, found in zip(pairs.queries, pairs.positives, negatives, strict=True)
    ]
    texts = list(
        dict.fromkeys([*pairs.positives, *(pairs.passages[d] for n in negatives for d in n)])
    )
    at = {text: i for i, text in enumerate(texts)}
    passages = model.encode(texts, batch_size=32, normalize_embeddings=True)
    queries = model.encode(list(pairs.queries), batch_size=32, normalize_embeddings=True)
    dense = [
        passages[[at[positive], *(at[pairs.passages[d]] for d in found)]] @ query
        for query, positive, found in zip(queries, pairs.positives, negatives, strict=True)
    ]
    bm25 = [s[0] - s[1:] for s in lexical]
    cosine = [s[0] - s[1:] for s in dense]
    spread_b = float(np.std(np.concatenate(bm25))) or 1.0
    spread_d = float(np.std(np.concatenate(cosine))) or 1.0
    return [
        list(bm25_share * b * spread_d / spread_b + (1 - bm25_share) * c)
        for b, c in zip(bm25, cosine, strict=True)
    ]


@dataclass
class _Run:
    """A training run's state, as checkpointed: the step reached and the losses so far."""

    step: int = 0
    losses: list[float] | None = None
    seconds: float = 0.0


def _checkpoint(work: Path, model: Any, optimizer: Any, scheduler: Any, run: _Run) -> None:
    import torch

    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "run": run.__dict__,
    }
    tmp = work / "checkpoint.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, work / "checkpoint.pt")


def _resume(work: Path, model: Any, optimizer: Any, scheduler: Any) -> _Run:
    """The run a checkpoint in ``work`` holds, its state loaded into the model, optimizer and
    scheduler; a fresh run when there is none, or when it is damaged or another model's (it is
    logged and removed: the checkpoint is only a cache of the training so far)."""
    import pickle

    import torch

    path = work / "checkpoint.pt"
    if not path.exists():
        return _Run(losses=[])
    try:
        state = torch.load(path, weights_only=False)
        run = _Run(**state["run"])
        shapes = {name: tuple(value.shape) for name, value in model.state_dict().items()}
        if {name: tuple(value.shape) for name, value in state["model"].items()} != shapes:
            raise ValueError("its weights are not this model's")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        LookupError,
        TypeError,
        pickle.UnpicklingError,
    ) as exc:
        log.warning("training checkpoint %s is unreadable (%s); training starts again", path, exc)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        return _Run(losses=[])
    log.info("training resumes at step %d from %s", run.step, path)
    return run


def _rows(
    pairs: TrainingPairs,
    negatives: Sequence[Sequence[str]],
    margins: Sequence[list[float]],
    split: bool,
) -> list[_Row]:
    """A row per pair, or with ``split`` a row per (pair, hard negative): GPL's triples, each
    hard negative an example of its own."""
    rows = [
        _Row(i, q, p, [pairs.passages[d] for d in found], margin)
        for i, q, p, found, margin in zip(
            pairs.query_ids, pairs.queries, pairs.positives, negatives, margins, strict=True
        )
    ]
    if split:
        rows = [replace(r, negatives=[n], margins=[m]) for r in rows for n, m in r.triples()]
    return rows


def train(
    family: Family,
    base: str,
    pairs: TrainingPairs,
    config: FinetuneConfig,
    work: Path,
    embed: Callable[[Sequence[str], str], np.ndarray] | None = None,
) -> TunedModel:
    """Train ``base`` on ``pairs`` as ``config`` says, in ``work`` (resumed from its checkpoint
    when an earlier run stopped); the model is saved to ``work/model``."""
    import torch

    loss = config.loss_for(family)
    too_few = pairs.too_few("pairs: select")
    if too_few is not None:
        raise FinetuneError(f"finetune: {too_few}")
    negatives = mine_negatives(pairs, config.negatives, config.n_negatives, embed)
    if loss in _NEED_NEGATIVES and not any(negatives):
        raise FinetuneError(
            f"finetune: {loss} needs hard negatives and the pairs {pairs.origin} have none "
            "(every pool passage is cut from a positive's document); use loss: mnrl with "
            "negatives: none"
        )
    if work.exists() and not work.is_dir():  # damage in the cache: the checkpoints' place
        log.warning("training: %s is a file where its checkpoints belong; removing it", work)
        work.unlink()
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = _load(family, base, config.max_seq_length)
    margins = (
        teacher_margins(model, pairs, negatives, _share(config))
        if loss == "margin_mse"
        else [[] for _ in negatives]
    )
    rows = _rows(pairs, negatives, margins, split=loss == "margin_mse")
    steps = training_steps(loss, pairs, [len(found) for found in negatives], config)
    if not steps:
        raise FinetuneError(
            f"finetune: the pairs {pairs.origin} give no batch of two distinct pairs"
        )
    objective = _objective(loss, model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    warm, total = max(1, int(config.warmup * len(steps))), len(steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm + 1)))
    )
    run = _resume(work, model, optimizer, scheduler)
    with _mapped_allocations() if MEMORY_SAVING else nullcontext():
        _fit(family, loss, model, objective, optimizer, scheduler, steps, rows, run, work, config)
    assert run.losses is not None
    chance = [_chance(loss, objective, [rows[i] for i in step]) for step in steps]
    final, guess, not_trained = _verdict(family, loss, pairs.source, run.losses, chance)
    if not_trained:
        log.warning("%s", not_trained)
    out = work / "model"
    shutil.rmtree(out, ignore_errors=True)
    model.save(str(out))
    record = {
        "family": family,
        "base": base,
        "pairs": pairs.source,
        "n_pairs": len(pairs),
        "pairs_key": pairs.key,
        "query_digests": sorted({query_digest(text) for text in pairs.queries}),
        "settings": config.model_dump(mode="json"),
        "loss": loss,
        "steps": len(steps),
        "losses": run.losses,
        "final_loss": final,
        "chance_loss": guess,
        "not_trained": not_trained,
        "seconds": run.seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    (out / "training.json").write_text(json.dumps(record, indent=1), "utf-8")
    (work / "checkpoint.pt").unlink(missing_ok=True)
    return TunedModel(out)


def _share(config: FinetuneConfig) -> float:
    return 0.5 if config.teacher_bm25 is None else config.teacher_bm25


def _objective(loss: str, model: Any) -> Any:
    from sentence_transformers.sentence_transformer import losses

    if loss == "mnrl":
        return losses.MultipleNegativesRankingLoss(model)
    if loss == "triplet":
        return losses.TripletLoss(model)
    if loss == "margin_mse":
        return losses.MarginMSELoss(model)
    return None  # the cross-encoder losses are computed from its scores (``_step_loss``)


def _fit(
    family: Family,
    loss: str,
    model: Any,
    objective: Any,
    optimizer: Any,
    scheduler: Any,
    steps: list[list[int]],
    rows: list[_Row],
    run: _Run,
    work: Path,
    config: FinetuneConfig,
) -> None:
    """The optimisation loop from ``run.step``: progress shows the steps, the loss and the
    time left; a checkpoint is written every ``CHECKPOINT_SECONDS``."""
    import torch

    assert run.losses is not None
    per_pass = config.batch_size if MEMORY_SAVING else None
    model.train()
    saved = time.perf_counter()
    what = f"training {family} ({loss})"
    with progress.counting(what, len(steps), "steps", done=run.step) as advance:
        while run.step < len(steps):
            started = time.perf_counter()
            torch.manual_seed(config.seed * 1_000_003 + run.step)  # dropout, as if never stopped
            batch = [rows[i] for i in steps[run.step]]
            value = _step(family, loss, model, objective, batch, per_pass)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            run.losses.append(value)
            run.step += 1
            run.seconds += time.perf_counter() - started
            advance(1, f"loss {run.losses[-1]:.4f}")
            if time.perf_counter() - saved > CHECKPOINT_SECONDS and run.step < len(steps):
                _checkpoint(work, model, optimizer, scheduler, run)
                saved = time.perf_counter()
    model.eval()
