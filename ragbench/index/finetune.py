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

The trained model directory holds ``training.json``: where the pairs came from, their count,
a digest of each training query's text (``query_digest``: a run then tells whether it evaluates
a query the model trained on, ``trained_on``), the settings, the loss per step, wall seconds
and the peak resident memory of the process. ``planned_steps`` counts the steps training will
take before any model loads, with the schedule ``train`` follows (``training_steps``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
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
    "CHECKPOINT_SECONDS",
    "Family",
    "FinetuneConfig",
    "FinetuneError",
    "TrainedOn",
    "Tunable",
    "TunedModel",
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
        if loss in _NEED_NEGATIVES and negatives == 0:
            raise FinetuneError(f"finetune.loss: {loss} needs hard negatives (n_negatives >= 1)")
        if family == "cross-encoder" and negatives == 0:
            raise FinetuneError("finetune: a cross-encoder learns from hard negatives; set some")
        return loss

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


def query_digest(text: str) -> str:
    """A short digest of a query's text, the same for texts that differ only in case and
    whitespace: what ``training.json`` keeps of each training query."""
    words = " ".join(text.split()).casefold()
    return hashlib.sha256(words.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class TrainedOn:
    """What a trained model's ``training.json`` (``record``) says of the queries it trained
    on: their digests (``query_digest``), or — in a record written before they were kept —
    only where its pairs came from (``source``)."""

    record: Path
    source: str
    digests: frozenset[str] | None

    def shared(self, texts: Sequence[str], split_source: str) -> int:
        """How many of ``texts`` the model trained on. Without digests, all of them when its
        pairs came from ``split_source`` (how ``split_pairs`` names the split the texts are
        from), else none."""
        if self.digests is None:
            return len(texts) if self.source == split_source else 0
        return sum(query_digest(t) in self.digests for t in texts)


def trained_on(model: str) -> TrainedOn | None:
    """What the model ``model`` (a name or path, as a config gives it) trained on, when it is
    a folder ``train`` wrote (one with a ``training.json``); None for any other model. A
    ``training.json`` that is not such a record is a ``DataError`` naming it."""
    record = Path(resolve_model(model)).expanduser() / "training.json"
    if not record.is_file():
        return None
    try:
        found = json.loads(record.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{record}: not a readable training record ({exc})") from None
    digests = found.get("query_digests") if isinstance(found, dict) else None
    source = found.get("pairs") if isinstance(found, dict) else None
    if not isinstance(source, str) or not (
        digests is None or (isinstance(digests, list) and all(isinstance(d, str) for d in digests))
    ):
        raise DataError(
            f"{record}: expected a training record with 'pairs' (a string) and "
            "'query_digests' (a list of strings)"
        )
    return TrainedOn(record, source, None if digests is None else frozenset(digests))


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


def _load(family: Family, base: str, max_length: int) -> Any:
    hub_offline()
    if family == "bi-encoder":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(resolve_model(base), device="cpu")
        model.max_seq_length = max_length
        return model
    from sentence_transformers import CrossEncoder

    return CrossEncoder(resolve_model(base), num_labels=1, max_length=max_length, device="cpu")


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


def _step_loss(family: Family, loss: str, model: Any, objective: Any, rows: list[_Row]) -> Any:
    """The loss of one batch of rows."""
    import torch

    width = 1 if loss == "triplet" else min(len(r.negatives) for r in rows)
    if family == "bi-encoder":
        columns = [[r.query for r in rows], [r.positive for r in rows]]
        columns += [[r.negatives[j] for r in rows] for j in range(width)]
        features = [_features(model, column) for column in columns]
        if loss == "margin_mse":
            labels = torch.tensor([r.margins[:width] for r in rows], dtype=torch.float32)
            return objective(features, labels)
        return objective(features, torch.zeros(len(rows)))
    pairs = [(r.query, text) for r in rows for text in [r.positive, *r.negatives[:width]]]
    scores = model(_features(model, pairs))["scores"].view(-1, width + 1)
    if loss == "listwise":
        return torch.nn.functional.cross_entropy(scores, torch.zeros(len(rows), dtype=torch.long))
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    return torch.nn.functional.binary_cross_entropy_with_logits(scores, labels)


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
    if len(pairs) < 2:
        raise FinetuneError(f"finetune: {pairs.source} gives {len(pairs)} pair(s); 2 or more")
    negatives = mine_negatives(pairs, config.negatives, config.n_negatives, embed)
    if loss in _NEED_NEGATIVES and not any(negatives):
        raise FinetuneError(
            f"finetune: {loss} needs hard negatives and {pairs.source} has none (every pool "
            "passage is cut from a positive's document); use loss: mnrl with negatives: none"
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
        raise FinetuneError(f"finetune: {pairs.source} gives no batch of two distinct pairs")
    objective = _objective(loss, model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    warm, total = max(1, int(config.warmup * len(steps))), len(steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm + 1)))
    )
    run = _resume(work, model, optimizer, scheduler)
    _fit(family, loss, model, objective, optimizer, scheduler, steps, rows, run, work, config)
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
    model.train()
    saved = time.perf_counter()
    what = f"training {family} ({loss})"
    with progress.counting(what, len(steps), "steps", done=run.step) as advance:
        while run.step < len(steps):
            started = time.perf_counter()
            torch.manual_seed(config.seed * 1_000_003 + run.step)  # dropout, as if never stopped
            value = _step_loss(family, loss, model, objective, [rows[i] for i in steps[run.step]])
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            run.losses.append(float(value.detach()))
            run.step += 1
            run.seconds += time.perf_counter() - started
            advance(1, f"loss {run.losses[-1]:.4f}")
            if time.perf_counter() - saved > CHECKPOINT_SECONDS and run.step < len(steps):
                _checkpoint(work, model, optimizer, scheduler, run)
                saved = time.perf_counter()
    model.eval()
