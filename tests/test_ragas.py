"""ragas metrics through ragbench equal ragas called directly (to 1e-9): the offline metrics on
their own, the LLM and embedding metrics against the scripted OpenAI-compatible server, with
ragas' own LangChain wrappers on the direct path and ragbench's LLMClient (cached, counted) on
ours — so a rerun makes no request. ragas is imported only when a ragas metric is computed."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

import numpy as np
import pytest

from ragbench.errors import ConfigError
from ragbench.evaluate.answers import RAGAS_METRICS, AnswerSample, evaluate_answers
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, LLMConfig
from ragbench.registry import components
from ragbench.testing import ScriptedLLMServer, scripted_llm_server
from tests.paths import REPO

ragas_metrics = pytest.importorskip("ragas.metrics")
import ragas.embeddings as ragas_embeddings  # noqa: E402
import ragas.llms as ragas_llms  # noqa: E402
from langchain_openai import ChatOpenAI, OpenAIEmbeddings  # noqa: E402
from ragas.dataset_schema import SingleTurnSample  # noqa: E402
from ragas.metrics.base import (  # noqa: E402
    MetricType,
    MetricWithEmbeddings,
    MetricWithLLM,
    SingleTurnMetric,
)
from ragas.run_config import RunConfig  # noqa: E402

OFFLINE = [
    "NonLLMContextPrecisionWithReference",
    "NonLLMContextRecall",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "NonLLMStringSimilarity",
    "BleuScore",
    "RougeScore",
    "ExactMatch",
    "StringPresence",
    "ChrfScore",
]
JUDGED = [name for name in RAGAS_METRICS if name not in OFFLINE]

PARIS = "Paris is the capital and largest city of France."
SEINE = "The Seine flows through Paris to the English Channel."
HAMLET = "Hamlet is a tragedy written by William Shakespeare around 1600."
MARLOWE = "Christopher Marlowe was an English playwright and poet."
EVEREST = "Mount Everest is the highest mountain above sea level, at 8849 metres."
K2 = "K2 is the second highest mountain on Earth."
WATER = "Water boils at 100 degrees Celsius at sea level."
LIGHT = "Light travels at about 300000 kilometres per second in a vacuum."

# six samples with varied overlap: exact, paraphrased, partly and not supported, wrong
SAMPLES = [
    AnswerSample(
        "q1",
        "What is the capital of France?",
        "Paris is the capital of France.",
        [PARIS, SEINE],
        ["paris", "seine"],
        "Paris is the capital of France.",
        [PARIS],
        ["paris"],
    ),
    AnswerSample(
        "q2",
        "Who wrote Hamlet?",
        "Hamlet was written by Christopher Marlowe. He was an English poet.",
        [MARLOWE, HAMLET],
        ["marlowe", "hamlet"],
        "William Shakespeare wrote Hamlet.",
        [HAMLET],
        ["hamlet"],
    ),
    AnswerSample(
        "q3",
        "How high is Mount Everest?",
        "Everest is 8849 metres high, the highest mountain above sea level.",
        [K2, EVEREST, EVEREST[:40]],
        ["k2", "everest", "everest"],
        "Mount Everest is 8849 metres high.",
        [EVEREST, "Everest lies in the Himalayas between Nepal and China."],
        ["everest", "himalaya"],
    ),
    AnswerSample(
        "q4",
        "At what temperature does water boil?",
        "Water boils at 100 degrees Celsius.",
        [LIGHT, WATER],
        ["light", "water"],
        "Water boils at 100 degrees Celsius at sea level.",
        [WATER],
        ["water"],
    ),
    AnswerSample(
        "q5",
        "How fast does light travel?",
        "I do not know. Sound travels at 343 metres per second in air.",
        [SEINE, K2],
        ["seine", "k2"],
        "About 300000 kilometres per second.",
        [LIGHT],
        ["light"],
    ),
    AnswerSample(
        "q6",
        "Which river flows through Paris?",
        "The Seine flows through Paris.",
        [SEINE, PARIS, WATER],
        ["seine", "paris", "water"],
        "The Seine",
        [SEINE, PARIS],
        ["seine", "paris"],
    ),
]


def direct_sample(s: AnswerSample) -> SingleTurnSample:
    """The ragas sample a ragas user would build from the same data."""
    return SingleTurnSample(
        user_input=s.question,
        response=s.answer,
        retrieved_contexts=s.contexts,
        retrieved_context_ids=s.context_ids,
        reference=s.reference,
        reference_contexts=s.reference_contexts,
        reference_context_ids=s.reference_ids,
    )


def direct_metric(name: str, **judges: object) -> SingleTurnMetric:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        metric = getattr(ragas_metrics, name)(**judges)
    metric.init(RunConfig())
    return metric


def direct_scores(metric: SingleTurnMetric, samples: Sequence[AnswerSample]) -> np.ndarray:
    """ragas' scores, one ``single_turn_ascore`` per sample."""

    async def run() -> list[float]:
        return [await metric.single_turn_ascore(direct_sample(s)) for s in samples]

    return np.array(asyncio.run(run()), dtype=np.float64)


def assert_parity(
    ours: np.ndarray, direct: np.ndarray, name: str, tolerance: float = 1e-9
) -> float:
    """Equal within ``tolerance`` with NaN in the same places; returns the largest difference."""
    assert ours.shape == direct.shape, name
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(direct), err_msg=name)
    diff = np.abs(ours - direct)[~np.isnan(direct)]
    worst = float(diff.max(initial=0.0))
    assert worst <= tolerance, (name, ours, direct, worst)
    return worst


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with scripted_llm_server() as s:
        yield s


def clients(server: ScriptedLLMServer, root: Path) -> tuple[LLMClient, LLMClient]:
    cache = LLMCache(root)
    llm = LLMClient(LLMConfig(base_url=server.url, model="judge"), cache=cache)
    embeddings = LLMClient(LLMConfig(base_url=server.url, model="embedder"), cache=cache)
    return llm, embeddings


# ---------------------------------------------------------------- parity


def test_offline_ragas_metrics_equal_ragas_directly() -> None:
    ours = evaluate_answers(SAMPLES, [f"ragas:{name}" for name in OFFLINE])
    for name in OFFLINE:
        assert_parity(ours[f"ragas:{name}"], direct_scores(direct_metric(name), SAMPLES), name)
    varied = [n for n in OFFLINE if np.unique(ours[f"ragas:{n}"]).size > 1]
    assert varied == OFFLINE
    assert ours["ragas:ExactMatch"].tolist() == [1, 0, 0, 0, 0, 0]
    assert ours["ragas:StringPresence"].tolist() == [1, 0, 0, 0, 0, 1]


def test_llm_ragas_metrics_equal_ragas_with_its_langchain_wrappers(
    server: ScriptedLLMServer, tmp_path: Path
) -> None:
    llm, embeddings = clients(server, tmp_path)
    ours = evaluate_answers(SAMPLES, [f"ragas:{n}" for n in JUDGED], llm=llm, embeddings=embeddings)
    assert llm.usage.requests > 0 and embeddings.usage.requests > 0
    made = server.total

    chat = ChatOpenAI(base_url=server.url, api_key="x", model="judge", temperature=0)
    vectors = OpenAIEmbeddings(
        base_url=server.url, api_key="x", model="embedder", check_embedding_ctx_length=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        direct_llm = ragas_llms.LangchainLLMWrapper(chat)
        direct_embeddings = ragas_embeddings.LangchainEmbeddingsWrapper(vectors)
    # LLMClient.embed returns float32 vectors (as every ragbench embedder): a cosine of them
    # is within a few float32 epsilons of the float64 one langchain's vectors give
    embedded = embeddings.embed(["x"]).dtype
    rounding = 1e-9 if embedded == np.float64 else 4 * float(np.finfo(embedded).eps)
    worst = {}
    for name in JUDGED:
        wanted, _ = RAGAS_METRICS[name]
        judges: dict[str, object] = {}
        if "llm" in wanted:
            judges["llm"] = direct_llm
        if "embeddings" in wanted:
            judges["embeddings"] = direct_embeddings
        direct = direct_scores(direct_metric(name, **judges), SAMPLES)
        tolerance = rounding if "embeddings" in wanted else 1e-9
        worst[name] = assert_parity(ours[f"ragas:{name}"], direct, name, tolerance)
    assert np.unique(ours["ragas:ResponseRelevancy"]).size > 1
    assert np.unique(ours["ragas:SemanticSimilarity"]).size > 1
    logging.getLogger(__name__).info("largest differences: %s", worst)

    # a rerun, with new clients over the same cache, makes no request
    server_before = server.total
    assert server_before > made  # the direct path did reach the server
    llm, embeddings = clients(server, tmp_path)
    again = evaluate_answers(
        SAMPLES, [f"ragas:{n}" for n in JUDGED], llm=llm, embeddings=embeddings
    )
    assert server.total == server_before
    assert llm.usage.requests == 0 and llm.usage.cached > 0 and llm.usage.prompt_tokens > 0
    assert embeddings.usage.requests == 0 and embeddings.usage.cached > 0
    for name, values in ours.items():
        np.testing.assert_array_equal(again[name], values)


# ---------------------------------------------------------------- the ragas namespace


def test_needs_of_each_ragas_metric_follow_ragas() -> None:
    """Each metric's needs are its ragas required columns (bar those every sample has) plus
    whether its class asks an LLM or embeddings."""
    columns = {
        "response": "response",
        "reference": "reference",
        "reference_contexts": "reference_contexts",
        "reference_context_ids": "reference_ids",
    }
    for name, (wanted, doc) in RAGAS_METRICS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            cls = getattr(ragas_metrics, name)
        required = cls()._required_columns[MetricType.SINGLE_TURN]
        expected = {columns[c] for c in required if c in columns}
        expected |= {"llm"} if issubclass(cls, MetricWithLLM) else set()
        expected |= {"embeddings"} if issubclass(cls, MetricWithEmbeddings) else set()
        assert wanted == expected, name
        assert issubclass(cls, SingleTurnMetric) and doc.startswith("ragas: "), name


def test_importing_and_parsing_do_not_import_ragas() -> None:
    code = (
        "import sys\n"
        "import ragbench.evaluate.answers\n"
        "from ragbench.evaluate.metrics import parse_metric\n"
        "from ragbench.evaluate.answers import needs\n"
        "assert parse_metric('ragas:faithfulness').level == 'answer'\n"
        "assert needs('ragas:ResponseRelevancy') == {'response', 'llm', 'embeddings'}\n"
        "assert 'ragas' not in sys.modules, 'ragas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_judges_are_required_before_anything_is_computed(server: ScriptedLLMServer) -> None:
    llm = LLMClient(LLMConfig(base_url=server.url, model="judge"))
    with pytest.raises(ConfigError, match=r"'ragas:Faithfulness' needs llm"):
        evaluate_answers(SAMPLES, ["ragas:BleuScore", "ragas:Faithfulness"])
    with pytest.raises(ConfigError, match=r"'ragas:ResponseRelevancy' needs embeddings"):
        evaluate_answers(SAMPLES, ["ragas:ResponseRelevancy"], llm=llm)
    assert server.total == 0


def test_samples_without_what_a_ragas_metric_needs_score_nan(server: ScriptedLLMServer) -> None:
    first = SAMPLES[0]
    samples = [
        first,
        AnswerSample("bare", first.question, None, first.contexts, first.context_ids, None),
    ]
    llm = LLMClient(LLMConfig(base_url=server.url, model="judge"))
    names = ["ragas:Faithfulness", "ragas:BleuScore", "ragas:IDBasedContextRecall"]
    values = evaluate_answers(samples, names, llm=llm)
    for name in names:
        assert values[name][0] == pytest.approx(1.0) and np.isnan(values[name][1]), name


def test_an_unparseable_judge_scores_nan_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with scripted_llm_server(mode="echo") as echo:
        llm, _ = clients(echo, tmp_path)
        with caplog.at_level(logging.WARNING, logger="ragbench.evaluate.ragas"):
            values = evaluate_answers(SAMPLES[:2], ["ragas:Faithfulness"], llm=llm)
    assert np.isnan(values["ragas:Faithfulness"]).all()
    assert "ragas:Faithfulness, query q1" in caplog.text and "scored NaN" in caplog.text


def test_several_completions_are_requests_with_successive_seeds(
    server: ScriptedLLMServer,
) -> None:
    """ResponseRelevancy asks 3 completions (strictness) at ragas' temperature 0.3."""
    llm = LLMClient(LLMConfig(base_url=server.url, model="judge", seed=7))
    embeddings = LLMClient(LLMConfig(base_url=server.url, model="embedder"))
    evaluate_answers(SAMPLES[:1], ["ragas:ResponseRelevancy"], llm=llm, embeddings=embeddings)
    chats = [b for b in server.bodies if "messages" in b]
    assert [(b["seed"], b["temperature"]) for b in chats] == [(7, 0.3), (8, 0.3), (9, 0.3)]
    assert llm.usage.requests == 3


def test_a_ragbench_embedder_embeds_for_ragas(server: ScriptedLLMServer, tmp_path: Path) -> None:
    embedder = components("embedder").build({"kind": "hashing"})
    values = evaluate_answers(SAMPLES, ["ragas:SemanticSimilarity"], embeddings=embedder)
    references = embedder.embed([s.reference or "" for s in SAMPLES]).astype(np.float64)
    answers = embedder.embed([s.answer or "" for s in SAMPLES]).astype(np.float64)
    cosine = (references * answers).sum(axis=1) / (
        np.linalg.norm(references, axis=1) * np.linalg.norm(answers, axis=1)
    )
    np.testing.assert_allclose(values["ragas:SemanticSimilarity"], cosine, rtol=0, atol=1e-12)

    llm, _ = clients(server, tmp_path)
    first = evaluate_answers(SAMPLES, ["ragas:ResponseRelevancy"], llm=llm, embeddings=embedder)
    made = server.total
    llm, _ = clients(server, tmp_path)
    again = evaluate_answers(SAMPLES, ["ragas:ResponseRelevancy"], llm=llm, embeddings=embedder)
    assert server.total == made and llm.usage.requests == 0
    np.testing.assert_array_equal(
        first["ragas:ResponseRelevancy"], again["ragas:ResponseRelevancy"]
    )
    assert np.unique(first["ragas:ResponseRelevancy"]).size > 1


def test_ragas_metrics_compute_inside_a_running_event_loop() -> None:
    """A notebook runs an event loop: ragas then runs in a thread of its own."""

    async def in_a_loop() -> dict[str, np.ndarray]:
        return evaluate_answers(SAMPLES, ["ragas:RougeScore"])

    inside = asyncio.run(in_a_loop())
    outside = evaluate_answers(SAMPLES, ["ragas:RougeScore"])
    np.testing.assert_array_equal(inside["ragas:RougeScore"], outside["ragas:RougeScore"])
