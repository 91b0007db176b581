"""Answer-level metrics: score what a generator answered, per query.

A trial that generates gives, per query, an ``AnswerSample``: the question, the answer (None
without a generator), the contexts the generator read with their document ids, and what the
labeled set knows — a reference answer (None when it has none) and the reference contexts and
ids. ``evaluate_answers`` scores samples with the answer metrics of the metric table (level
``answer``), one float per sample; a sample lacking what a metric ``needs`` scores NaN.

Native metrics, over SQuAD v1.1's answer normalisation (lowercase, drop ASCII punctuation, drop
the articles a/an/the, collapse whitespace; ``normalize_answer``):

- ``exact_match``: 1 when the normalised answer equals the normalised reference, else 0.
- ``token_f1``: F1 of the bags of normalised tokens of answer and reference, as the official
  SQuAD v1.1 script computes it (0 when they share no token).
- ``rouge_l``: F-measure of the longest common subsequence of those token lists,
  2·P·R / (P + R) with P = LCS / |answer|, R = LCS / |reference| (0 when the LCS is empty).
- ``answer_supported``: share of the answer's normalised tokens that occur in its contexts (is
  the answer grounded in what was retrieved? 0 for an answer without tokens); no reference.

Metrics named ``ragas:<Name>`` are ragas' own (``RAGAS_METRICS``), registered here as a
namespace of the metric table and computed by ``ragbench.evaluate.ragas``, which alone imports
ragas — on first computation, never on import or parsing.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple, cast

import numpy as np

from ragbench.errors import ConfigError
from ragbench.evaluate.metrics import (
    Metric,
    MetricNamespace,
    MetricSpec,
    Need,
    parse_metric,
    parse_metrics,
    register_metric,
    register_namespace,
)
from ragbench.llm.client import LLMClient
from ragbench.protocols import Embedder

__all__ = [
    "RAGAS_METRICS",
    "AnswerKernel",
    "AnswerSample",
    "Judges",
    "Need",
    "evaluate_answers",
    "needs",
    "normalize_answer",
]


@dataclass(frozen=True)
class AnswerSample:
    """One query's generation to score."""

    query_id: str
    question: str
    answer: str | None  # None when the trial has no generator
    contexts: list[str]  # texts of the chunks given to the generator (or the top chunks)
    context_ids: list[str]  # the document id of each of those chunks, same order
    reference: str | None  # reference answer, None when the set has none
    reference_contexts: list[str] = field(default_factory=list)  # evidence or relevant docs
    reference_ids: list[str] = field(default_factory=list)  # relevant document ids (grade >= 1)

    def __post_init__(self) -> None:
        if len(self.contexts) != len(self.context_ids):
            raise ValueError(
                f"query {self.query_id!r}: {len(self.contexts)} contexts but "
                f"{len(self.context_ids)} context ids"
            )


class Judges(NamedTuple):
    """The models an answer kernel may call: an LLM judge and embeddings (an OpenAI-compatible
    endpoint or a ragbench ``Embedder``), None where the caller gave none."""

    llm: LLMClient | None
    embeddings: LLMClient | Embedder | None


AnswerKernel = Callable[[Sequence[AnswerSample], Judges], np.ndarray]
"""``kernel(samples, judges)``: one float per sample of an answer metric. It sees only samples
that have what the metric ``needs``, and the judges it needs are not None."""

_PRESENT: dict[str, Callable[[AnswerSample], bool]] = {
    "response": lambda s: s.answer is not None,
    "reference": lambda s: s.reference is not None,
    "reference_contexts": lambda s: bool(s.reference_contexts),
    "reference_ids": lambda s: bool(s.reference_ids),
}


def needs(metric: str | Metric) -> frozenset[Need]:
    """What answer metric ``metric`` needs beyond the question and the contexts: ``response``
    (an answer), ``reference`` (a reference answer), ``reference_contexts``, ``reference_ids``
    (samples without them score NaN), ``llm`` or ``embeddings`` (``evaluate_answers`` raises
    without them). Raises ``ConfigError`` for an unknown or a non-answer metric."""
    parsed = parse_metric(metric)
    if parsed.level != "answer":
        raise ConfigError(f"metric {parsed.name!r} is not an answer metric (level {parsed.level})")
    return parsed.spec.needs


def evaluate_answers(
    samples: Sequence[AnswerSample],
    metrics: Sequence[str | Metric],
    llm: LLMClient | None = None,
    embeddings: LLMClient | Embedder | None = None,
) -> dict[str, np.ndarray]:
    """Per-sample values of answer metrics: canonical metric name → float array aligned with
    ``samples``; NaN where a sample lacks what the metric needs (no answer, no reference, ...).

    ``llm`` judges for LLM metrics and ``embeddings`` embeds for embedding metrics; both are
    asked only by metrics that need them, through ragbench's cache and usage accounting.
    Raises ``ConfigError`` naming the metric for a metric that is not an answer metric, or one
    that needs an ``llm`` or ``embeddings`` that was not given (before computing anything).
    """
    parsed = parse_metrics(metrics)
    judges = Judges(llm, embeddings)
    for m in parsed:
        if m.level != "answer":
            raise ConfigError(
                f"metric {m.name!r} scores a ranking, not answers; use "
                "ragbench.evaluate.labels.evaluate_chunks or ragbench.evaluate.metrics.evaluate"
            )
        for need, given, how in (
            ("llm", llm, "llm=LLMClient(...), a judge"),
            ("embeddings", embeddings, "embeddings=LLMClient(...) or an Embedder"),
        ):
            if need in m.spec.needs and given is None:
                raise ConfigError(f"metric {m.name!r} needs {need}: pass {how}")
    out = {}
    for m in parsed:
        checks = [_PRESENT[n] for n in m.spec.needs if n in _PRESENT]
        applies = np.array([all(c(s) for c in checks) for s in samples], dtype=bool)
        values = np.full(len(samples), np.nan)
        if applies.any():
            values[applies] = m.spec.kernel(
                [samples[i] for i in np.flatnonzero(applies).tolist()], judges
            )
        out[m.name] = values
    return out


# ---------------------------------------------------------------- native metrics

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's ``normalize_answer``: lowercase, drop ASCII punctuation, drop the articles
    a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_NO_PUNCTUATION)).split())


def _tokens(text: str | None) -> list[str]:
    return normalize_answer(text or "").split()


def _f_measure(overlap: int, predicted: int, wanted: int) -> float:
    """2·P·R / (P + R) with P = overlap / predicted and R = overlap / wanted (0 when overlap is
    0)."""
    if overlap == 0:
        return 0.0
    precision, recall = overlap / predicted, overlap / wanted
    return 2 * precision * recall / (precision + recall)


def _exact_match(s: AnswerSample) -> float:
    """1.0 when the normalised answer equals the normalised reference."""
    return float(normalize_answer(s.answer or "") == normalize_answer(s.reference or ""))


def _token_f1(s: AnswerSample) -> float:
    """F1 of the answer's and the reference's token bags (their multiset intersection)."""
    answer, reference = _tokens(s.answer), _tokens(s.reference)
    common = sum((Counter(answer) & Counter(reference)).values())
    return _f_measure(common, len(answer), len(reference))


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``a`` and ``b`` (dynamic programming, one
    row at a time)."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _rouge_l(s: AnswerSample) -> float:
    """ROUGE-L F-measure of the answer's tokens against the reference's."""
    answer, reference = _tokens(s.answer), _tokens(s.reference)
    return _f_measure(_lcs(answer, reference), len(answer), len(reference))


def _answer_supported(s: AnswerSample) -> float:
    """Share of the answer's tokens (repeats counted) that occur in some context."""
    answer = _tokens(s.answer)
    if not answer:
        return 0.0
    seen = {token for context in s.contexts for token in _tokens(context)}
    return sum(token in seen for token in answer) / len(answer)


def _per_sample(score: Callable[[AnswerSample], float]) -> AnswerKernel:
    """An answer kernel applying ``score`` to each sample."""

    def kernel(samples: Sequence[AnswerSample], judges: Judges) -> np.ndarray:
        return np.fromiter(map(score, samples), dtype=np.float64, count=len(samples))

    return kernel


_WITH_REFERENCE: frozenset[Need] = frozenset({"response", "reference"})


def _native(
    name: str,
    score: Callable[[AnswerSample], float],
    doc: str,
    needs: frozenset[Need] = _WITH_REFERENCE,
) -> MetricSpec:
    """The spec of a native answer metric: ``score`` applied to each sample, no cutoff."""
    return MetricSpec(name, _per_sample(score), doc, cutoff="none", level="answer", needs=needs)


for _spec in (
    _native(
        "exact_match",
        _exact_match,
        "1 when the normalised answer equals the normalised reference answer.",
    ),
    _native(
        "token_f1",
        _token_f1,
        "F1 of the answer's and the reference answer's normalised tokens (SQuAD).",
    ),
    _native(
        "rouge_l",
        _rouge_l,
        "F-measure of the longest common token subsequence of answer and reference.",
    ),
    _native(
        "answer_supported",
        _answer_supported,
        "Share of the answer's normalised tokens found in its contexts.",
        frozenset({"response"}),
    ),
):
    register_metric(_spec)


# ---------------------------------------------------------------- ragas metrics


def _ragas(needs: str, doc: str) -> tuple[frozenset[Need], str]:
    """An entry of ``RAGAS_METRICS``: the space-separated ``needs`` and the one-line doc."""
    return cast(frozenset[Need], frozenset(needs.split())), f"ragas: {doc}"


RAGAS_METRICS: dict[str, tuple[frozenset[Need], str]] = {
    "NonLLMContextPrecisionWithReference": _ragas(
        "reference_contexts",
        "average precision of the contexts, relevant when string-similar to a reference context.",
    ),
    "NonLLMContextRecall": _ragas(
        "reference_contexts",
        "share of the reference contexts string-similar to a retrieved context.",
    ),
    "IDBasedContextPrecision": _ragas(
        "reference_ids", "share of the distinct context document ids that are relevant."
    ),
    "IDBasedContextRecall": _ragas(
        "reference_ids", "share of the relevant document ids among the contexts' ids."
    ),
    "NonLLMStringSimilarity": _ragas(
        "response reference", "1 - normalised Levenshtein distance of answer and reference answer."
    ),
    "BleuScore": _ragas(
        "response reference",
        "sacrebleu BLEU / 100 of the answer's sentences against the reference's.",
    ),
    "RougeScore": _ragas(
        "response reference",
        "ROUGE-L F-measure (rouge_score, stemmed) of answer and reference answer.",
    ),
    "ExactMatch": _ragas(
        "response reference", "1 when the answer is the reference answer, character for character."
    ),
    "StringPresence": _ragas(
        "response reference", "1 when the reference answer occurs in the answer."
    ),
    "ChrfScore": _ragas(
        "response reference", "sacrebleu chrF / 100 of the answer against the reference answer."
    ),
    "Faithfulness": _ragas(
        "response llm", "share of the answer's claims that an LLM finds supported by the contexts."
    ),
    "ResponseRelevancy": _ragas(
        "response llm embeddings",
        "mean cosine of the question and questions an LLM derives from the answer.",
    ),
    "LLMContextPrecisionWithReference": _ragas(
        "reference llm", "average precision of the contexts an LLM finds useful for the reference."
    ),
    "LLMContextPrecisionWithoutReference": _ragas(
        "response llm", "average precision of the contexts an LLM finds useful for the answer."
    ),
    "LLMContextRecall": _ragas(
        "reference llm", "share of the reference's statements an LLM attributes to the contexts."
    ),
    "FactualCorrectness": _ragas(
        "response reference llm",
        "F1 of the answer's and the reference's claims as an LLM checks them.",
    ),
    "ContextEntityRecall": _ragas(
        "reference llm", "share of the reference's entities (found by an LLM) in the contexts."
    ),
    "SemanticSimilarity": _ragas(
        "response reference embeddings",
        "cosine similarity of the answer's and the reference answer's embeddings.",
    ),
}
"""The ragas metrics ``ragas:<Name>`` accepts: Name → (what it needs, one-line doc). Name is
the class in ``ragas.metrics``; the needs follow its required columns and whether it asks an
LLM or embeddings (``tests/test_ragas.py`` checks them against ragas)."""


def _ragas_kernel(name: str, samples: Sequence[AnswerSample], judges: Judges) -> np.ndarray:
    """ragas' ``name`` on ``samples`` (imports ragas, through ``ragbench.evaluate.ragas``)."""
    from ragbench.evaluate import ragas

    return ragas.score(name, samples, judges)


def _ragas_spec(name: str) -> MetricSpec:
    wanted, doc = RAGAS_METRICS[name]
    kernel = partial(_ragas_kernel, name)
    return MetricSpec(f"ragas:{name}", kernel, doc, cutoff="none", level="answer", needs=wanted)


register_namespace(MetricNamespace("ragas", tuple(RAGAS_METRICS), _ragas_spec))
