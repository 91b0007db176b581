"""Answer-level metrics: SQuAD's exact match and token F1 (against the official v1.1 script's
functions), ROUGE-L (against the rouge_score package), answer support, NaN where a metric cannot
apply, and the answer level of the metric table (parsing, routing, needs, a new answer metric by
registration alone)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from ragbench.data.labeled import LabeledSet
from ragbench.errors import ConfigError
from ragbench.evaluate.answers import (
    AnswerSample,
    Judges,
    evaluate_answers,
    needs,
    normalize_answer,
)
from ragbench.evaluate.labels import evaluate_chunks
from ragbench.evaluate.metrics import (
    MetricSpec,
    evaluate,
    evaluate_run,
    metric_table,
    parse_metric,
    register_metric,
    unregister_metric,
)
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Chunk, Document, Query, Ranking

# ---------------------------------------------------------------- the official SQuAD v1.1 script
# normalize_answer, f1_score and exact_match_score as published in SQuAD's evaluate-v1.1.py


def squad_normalize_answer(s: str) -> str:
    def remove_articles(text: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text: str) -> str:
        return " ".join(text.split())

    def remove_punc(text: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text: str) -> str:
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def squad_f1_score(prediction: str, ground_truth: str) -> float:
    prediction_tokens = squad_normalize_answer(prediction).split()
    ground_truth_tokens = squad_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def squad_exact_match_score(prediction: str, ground_truth: str) -> bool:
    return squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth)


# (answer, reference, exact match, token F1, ROUGE-L), F1 and ROUGE-L computed by hand
CASES = [
    ("Paris", "paris.", 1.0, 1.0, 1.0),
    ("The Eiffel Tower!", "eiffel   tower", 1.0, 1.0, 1.0),
    # tokens [capital, is, paris] vs [paris]: 1 shared, P 1/3, R 1 → F1 = 2·(1/3)/(4/3) = 0.5
    ("The capital is Paris", "Paris", 0.0, 0.5, 0.5),
    # [cat, sat, on, mat] vs [mat, sat, on, cat]: bag F1 1; LCS [sat, on] = 2 → 0.5
    ("the cat sat on the mat", "a mat sat on a cat", 0.0, 1.0, 0.5),
    # [new, york, new, york] vs [new, york]: common 2, P 1/2, R 1 → 2/3; LCS 2 → 2/3
    ("New York, New York", "new york", 0.0, 2 / 3, 2 / 3),
    ("Shakespeare", "Marlowe", 0.0, 0.0, 0.0),
    # everything is an article or punctuation: both normalise to "" (EM 1, SQuAD v1.1 F1 0)
    ("The.", "a", 1.0, 0.0, 0.0),
    ("", "Paris", 0.0, 0.0, 0.0),
    # [1990s, us, economy, grew] vs [us, economy, grew, in, 1990s]: 4 shared, P 1, R 4/5 →
    # F1 8/9; LCS [us, economy, grew] = 3, P 3/4, R 3/5 → 2/3
    ("1990s: the U.S. economy grew", "The U.S. economy grew in the 1990s", 0.0, 8 / 9, 2 / 3),
    # drops punctuation inside words, keeps articles inside words ("theater", "another")
    ("don't see another theater", "Dont see the other theater", 0.0, 0.75, 0.75),
]


def sample(
    answer: str | None,
    reference: str | None,
    contexts: Sequence[str] = (),
    query_id: str = "q",
) -> AnswerSample:
    ids = [f"d{i}" for i in range(len(contexts))]
    return AnswerSample(query_id, "question?", answer, list(contexts), ids, reference)


NATIVE = ["exact_match", "token_f1", "rouge_l", "answer_supported"]


def test_exact_match_and_token_f1_follow_the_official_squad_script() -> None:
    samples = [sample(a, r) for a, r, *_ in CASES]
    values = evaluate_answers(samples, ["exact_match", "token_f1"])
    for i, (answer, reference, em, f1, _) in enumerate(CASES):
        assert normalize_answer(answer) == squad_normalize_answer(answer)
        assert values["exact_match"][i] == float(squad_exact_match_score(answer, reference)) == em
        assert values["token_f1"][i] == squad_f1_score(answer, reference)
        assert values["token_f1"][i] == pytest.approx(f1, abs=1e-12)
    # the script's regex and punctuation on more text, Unicode included
    for text in ["An apple, a day; the end.", "Ünïcode café — the 'quoted' (bits)", "a\tb\nthe"]:
        assert normalize_answer(text) == squad_normalize_answer(text)


def test_rouge_l_equals_the_rouge_score_package_on_normalised_tokens() -> None:
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    samples = [sample(a, r) for a, r, *_ in CASES]
    values = evaluate_answers(samples, ["rouge_l"])["rouge_l"]
    for (answer, reference, *_, hand), value in zip(CASES, values, strict=True):
        assert value == pytest.approx(hand, abs=1e-12)
        expected = scorer.score(normalize_answer(reference), normalize_answer(answer))
        assert value == pytest.approx(expected["rougeL"].fmeasure, abs=1e-12)
    rng = np.random.default_rng(7)
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    for _ in range(200):
        answer = " ".join(rng.choice(words, size=int(rng.integers(1, 12))))
        reference = " ".join(rng.choice(words, size=int(rng.integers(1, 12))))
        ours = evaluate_answers([sample(answer, reference)], ["rouge_l"])["rouge_l"][0]
        assert ours == pytest.approx(scorer.score(reference, answer)["rougeL"].fmeasure, abs=1e-12)


def test_answer_supported_is_the_share_of_answer_tokens_found_in_the_contexts() -> None:
    contexts = ["Paris is the capital of France.", "It lies on the Seine."]
    samples = [
        sample("Paris, on the Seine.", None, contexts),  # [paris, on, seine] all found → 1
        sample("The capital is Lyon", None, contexts),  # [capital, is, lyon]: 2 of 3
        sample("Lyon Lyon Paris", None, contexts),  # repeats count: 1 of 3
        sample("Paris", None, []),  # no context supports anything → 0
        sample("The!", None, contexts),  # no tokens → 0
    ]
    values = evaluate_answers(samples, ["answer_supported"])["answer_supported"]
    np.testing.assert_allclose(values, [1.0, 2 / 3, 1 / 3, 0.0, 0.0], rtol=0, atol=1e-15)


def test_nan_where_a_metric_cannot_apply() -> None:
    samples = [
        sample("Paris", "Paris", ["Paris"]),
        sample(None, "Paris", ["Paris"]),  # no generator
        sample("Paris", None, ["Paris"]),  # no reference answer
    ]
    values = evaluate_answers(samples, NATIVE)
    for name in ["exact_match", "token_f1", "rouge_l"]:
        assert values[name][0] == 1.0 and np.isnan(values[name][1:]).all(), name
    assert values["answer_supported"][0] == 1.0 and np.isnan(values["answer_supported"][1])
    assert values["answer_supported"][2] == 1.0  # needs no reference
    assert list(values) == NATIVE
    assert evaluate_answers([], NATIVE)["token_f1"].shape == (0,)


def test_needs_say_what_each_answer_metric_needs() -> None:
    for name in ["exact_match", "Token_F1", "rouge_l"]:
        assert needs(name) == {"response", "reference"}
    assert needs("answer_supported") == {"response"}
    assert needs("ragas:faithfulness") == {"response", "llm"}
    assert needs("ragas:ResponseRelevancy") == {"response", "llm", "embeddings"}
    assert needs("ragas:IDBasedContextRecall") == {"reference_ids"}
    with pytest.raises(ConfigError, match=r"'ndcg@10' is not an answer metric"):
        needs("ndcg@10")
    with pytest.raises(ConfigError, match=r"unknown metric 'f2'.*token_f1"):
        needs("f2")


# ---------------------------------------------------------------- the answer level of the table


def test_answer_metrics_parse_without_a_cutoff_and_are_listed() -> None:
    table = metric_table()
    for name in NATIVE:
        metric = parse_metric(name.upper())
        assert (metric.name, metric.family, metric.k, metric.level) == (name, name, None, "answer")
        assert table[name].cutoff == "none" and table[name].higher_is_better
    with pytest.raises(ConfigError, match=r"'token_f1@5' takes no cutoff.*answer_supported"):
        parse_metric("token_f1@5")
    faithfulness = parse_metric("RAGAS:faithfulness")  # any case; ragas' spelling is canonical
    assert faithfulness.name == faithfulness.family == "ragas:Faithfulness"
    assert faithfulness.level == "answer" and faithfulness.k is None
    assert parse_metric(faithfulness.name) == faithfulness
    with pytest.raises(ConfigError, match=r"'ragas:Faithfulness@3' takes no cutoff"):
        parse_metric("ragas:Faithfulness@3")
    with pytest.raises(
        ConfigError, match=r"unknown metric 'ragas:Nope'.*ragas:<Name>.*Faithfulness"
    ):
        parse_metric("ragas:Nope")
    with pytest.raises(ConfigError, match=r"unknown metric 'deepeval:Nope'.*ragas:<Name>"):
        parse_metric("deepeval:Nope")


def test_ranking_evaluators_reject_answer_metrics_and_evaluate_answers_rankings() -> None:
    qrels = {"q1": {"a": 1}}
    ranking = Ranking.from_rows([[("a", 1.0)]])
    for metric in ["token_f1", "ragas:Faithfulness"]:
        with pytest.raises(
            ConfigError, match=rf"'{metric}' scores generated answers.*evaluate_answers"
        ):
            evaluate(qrels, ranking, ["q1"], ["ndcg@5", metric])
        with pytest.raises(ConfigError, match=rf"'{metric}'.*evaluate_answers"):
            evaluate_run(qrels, {"q1": {"a": 1.0}}, [metric])
    text = "a" * 10
    labeled = LabeledSet("toy", [Document("a", text)], [Query("q1", "q1")], qrels)
    table = ChunkTable.from_chunks([Chunk("a:0", "a", 0, 0, 10, text)])
    chunks = Ranking.from_rows([[("a:0", 1.0)]])
    with pytest.raises(ConfigError, match=r"'exact_match'.*evaluate_answers"):
        evaluate_chunks(chunks, ["q1"], table, labeled, ["ndcg@5", "exact_match"])
    with pytest.raises(ConfigError, match=r"'ndcg@5' scores a ranking.*evaluate_chunks"):
        evaluate_answers([sample("a", "a")], ["token_f1", "ndcg@5"])


def test_answer_specs_are_validated() -> None:
    kernel = metric_table()["token_f1"].kernel
    with pytest.raises(ValueError, match="answer metrics take no cutoff"):
        MetricSpec("bad", kernel, "x", level="answer")
    with pytest.raises(ValueError, match="needs are for answer metrics"):
        MetricSpec("bad", kernel, "x", needs=frozenset({"reference"}))
    with pytest.raises(ValueError, match="needs are for answer metrics"):
        MetricSpec("bad", kernel, "x", cutoff="none", level="answer", needs=frozenset({"gpu"}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="belong to a namespace"):
        register_metric(MetricSpec("ragas:Mine", kernel, "x", cutoff="none", level="answer"))
    with pytest.raises(ValueError, match="contexts but"):
        AnswerSample("q", "?", "a", ["one", "two"], ["d1"], None)


def answer_length(samples: Sequence[AnswerSample], judges: Judges) -> np.ndarray:
    """Number of normalised tokens of each answer."""
    return np.array([len(normalize_answer(s.answer or "").split()) for s in samples], float)


@pytest.fixture
def length_metric() -> Iterator[MetricSpec]:
    spec = MetricSpec(
        "answer_length",
        answer_length,
        "Normalised tokens in the answer.",
        cutoff="none",
        level="answer",
        higher_is_better=False,
        aliases=("alen",),
        needs=frozenset({"response"}),
    )
    yield register_metric(spec)
    unregister_metric(spec.name)


def test_a_registered_answer_metric_computes_through_evaluate_answers(
    length_metric: MetricSpec,
) -> None:
    assert parse_metric("ALEN").name == "answer_length"
    assert needs("alen") == {"response"}
    samples = [sample("The capital is Paris.", None), sample(None, None), sample("", None)]
    values = evaluate_answers(samples, ["alen"])["answer_length"]
    np.testing.assert_array_equal(values, [3.0, np.nan, 0.0])
