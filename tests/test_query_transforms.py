"""Query transforms in sweeps: RM3 pseudo-relevance feedback checked by hand on a tiny corpus and
against BM25 searched by hand, and every LLM transform end to end against the scripted
OpenAI-compatible server — the texts searched are the server's replies, multi-text queries are
fused per query, tokens are recorded and a rerun makes no request."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ragbench.data import load_dataset
from ragbench.data.trec import read_run
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.runner import run
from ragbench.experiment.trial import RunSpec, context
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.retrieve.artifacts import Queries
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.query import expand_query
from ragbench.testing import ScriptedLLMServer, scripted_llm_server
from tests.paths import DEMO, require

LIMIT = 8
WORDS = {"stopwords": "none", "stemmer": None}  # terms are the words themselves
# q001, the first demo query, and its content words as the scripted server keeps them.
Q001 = (
    "Why do workers that take too long on their work get thrown out and then cause another "
    "reshuffle?"
)
CONTENT = "workers that take too long their work get thrown out then cause another reshuffle"


def _sweep(queries: list[dict[str, Any]], limit: int = LIMIT) -> dict[str, Any]:
    return {
        "name": "transforms",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@10"], "depth": 10},
        "sweep": {"chunker": [{"kind": "none"}], "query": queries, "retriever": [{"kind": "bm25"}]},
    }


def _execution(config: dict[str, Any], trial_id: str, cache: Path, limit: int) -> Execution:
    """The stages of a finished trial, loaded from the run's stage cache."""
    loaded = load_config(config)
    trial = next(t for t in expand(loaded) if t.id == trial_id)
    ctx = context(RunSpec(loaded, limit, str(cache)))
    return Execution(ctx.plan(trial), ctx.env, ctx.cache)


def _trec_order(pairs: dict[str, float]) -> list[str]:
    """trec_eval's order: score descending, then id descending."""
    return [d for d, _ in sorted(sorted(pairs.items(), reverse=True), key=lambda p: -p[1])]


# ---------------------------------------------------------------- prf (RM3), offline


def _tiny_index(**options: Any) -> BM25Index:
    index = BM25Index(BM25Config(tokenizer=WORDS, **options))
    texts = ["apple banana apple", "apple cherry", "cherry date", "elder fig"]
    index.add(["d1", "d2", "d3", "d4"], texts)
    return index


def test_rm3_weights_follow_the_rm1_formula_by_hand() -> None:
    # "apple" hits d1 (tf 2, |d| 3) and d2 (tf 1, |d| 2); avgdl 9/4, k1 1.2, b 0.75 (lucene):
    # tf parts 2·2.2/(2 + 1.2·1.25) = 44/35 and 2.2/(1 + 1.2·(11/12)) = 22/21 (same idf), so the
    # feedback weights are w1 = 6/11, w2 = 5/11 and RM1 gives
    # apple 6/11·2/3 + 5/11·1/2 = 13/22, cherry 5/11·1/2 = 5/22, banana 6/11·1/3 = 4/22.
    index = _tiny_index()
    two = expand_query(index, "apple", fb_docs=10, fb_terms=2, original_weight=0.5)
    # the two heaviest (apple, cherry) renormalised to 13/18 and 5/18, mixed half and half
    assert two == pytest.approx({"apple": 0.5 + 0.5 * 13 / 18, "cherry": 0.5 * 5 / 18}, rel=1e-6)
    every = expand_query(index, "apple", fb_docs=10, fb_terms=10, original_weight=0.7)
    assert sum(every.values()) == pytest.approx(1.0)
    assert every == pytest.approx(
        {"apple": 0.7 + 0.3 * 13 / 22, "cherry": 0.3 * 5 / 22, "banana": 0.3 * 4 / 22}, rel=1e-6
    )
    assert sorted(every, key=every.__getitem__, reverse=True) == ["apple", "cherry", "banana"]
    # one feedback text: only its own words, by their share of it
    one = expand_query(index, "apple", fb_docs=1, fb_terms=10, original_weight=0.5)
    assert one == pytest.approx({"apple": 0.5 + 0.5 * 2 / 3, "banana": 0.5 / 3}, rel=1e-6)
    # words of no feedback text never enter; the query's own words keep original_weight
    mixed = expand_query(index, "zebra apple", fb_docs=10, fb_terms=10, original_weight=0.5)
    assert set(mixed) == {"zebra", "apple", "cherry", "banana"}
    assert mixed["zebra"] == pytest.approx(0.25)
    assert mixed["apple"] == pytest.approx(0.25 + 0.5 * 13 / 22, rel=1e-6)
    # nothing found: the query's own term distribution
    assert expand_query(index, "zebra zebra yak", 10, 10, 0.5) == pytest.approx(
        {"zebra": 2 / 3, "yak": 1 / 3}
    )


@pytest.mark.parametrize(
    ("backend", "variant"),
    [("bm25s", v) for v in ("robertson", "lucene", "atire", "bm25l", "bm25+")]
    + [("rank_bm25", v) for v in ("robertson", "bm25l", "bm25+")],
)
def test_search_weighted_with_unit_weights_is_plain_search(backend: str, variant: str) -> None:
    labeled = load_dataset(str(require(DEMO)))
    index = BM25Index(BM25Config(backend=backend, variant=variant))
    index.add([d.id for d in labeled.documents], [d.text for d in labeled.documents])
    texts = [q.text for q in labeled.queries[:20]]
    weights = [Counter(index.terms(t)) for t in texts]  # a repeated term counts twice in search
    assert sum(all(c == 1 for c in w.values()) for w in weights) >= 10  # mostly unit weights
    k = index.count()  # every hit: no tie at a cut-off
    plain = index.search(texts, k)
    weighted = index.search_weighted([{t: float(c) for t, c in w.items()} for w in weights], k)
    for row in range(len(texts)):
        expected, got = dict(plain.row(row)), dict(weighted.row(row))
        assert expected, texts[row]
        assert got.keys() == expected.keys()
        for doc, score in expected.items():
            assert got[doc] == pytest.approx(score, rel=1e-5)


def test_a_prf_trial_is_bm25_searched_by_hand_with_the_expanded_terms(tmp_path: Path) -> None:
    prf = {"kind": "prf", "fb_docs": 5, "fb_terms": 8, "original_weight": 0.6}
    config = _sweep([{"kind": "none"}, prf], limit=15)
    cache = tmp_path / "cache"
    result = run(config, tmp_path / "run", cache_root=cache, limit_queries=15, progress=False)
    trials = result.trials.set_index("label")
    assert set(trials["status"]) == {"ok"} and len(trials) == 2
    expanded = trials.loc["bm25 | none | query:prf(fb_docs=5, fb_terms=8, original_weight=0.6)"]
    index = BM25Index(BM25Config())
    documents = load_dataset(str(DEMO)).documents
    index.add([d.id for d in documents], [d.text for d in documents])
    queries = pd.read_parquet(result.path / "queries.parquet")
    scored = read_run(result.path / "runs" / f"{expanded['trial_id']}.trec")
    stage = _execution(config, expanded["trial_id"], cache, 15)["prf"]
    assert isinstance(stage, Queries) and stage.terms is not None
    for row, (query_id, text) in enumerate(zip(queries["query_id"], queries["text"], strict=True)):
        terms = expand_query(index, text, 5, 8, 0.6)
        assert stage.terms[row] == pytest.approx(terms)
        own = set(index.terms(text))
        assert stage.notes is not None and set(stage.notes[row]) == set(terms) - own
        by_hand = dict(index.search_weighted([terms], 10).row(0))
        theirs = scored.get(query_id, {})
        assert _trec_order(theirs) == _trec_order(by_hand), query_id
        assert [theirs[d] for d in by_hand] == pytest.approx(list(by_hand.values()), rel=1e-6)
    assert expanded["ndcg@10"] != trials.loc["bm25 | none", "ndcg@10"]


# ---------------------------------------------------------------- LLM transforms


@pytest.fixture()
def server() -> ScriptedLLMServer:
    with scripted_llm_server() as running:
        yield running


def test_every_llm_transform_searches_the_replies_fuses_and_reruns_for_free(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    llm = {"base_url": server.url, "model": "scripted"}
    transforms = [
        {"kind": "rewrite", **llm},
        {"kind": "hyde", **llm, "mode": ["replace", "append"]},
        {"kind": "multi_query", **llm, "n": 2},
        {"kind": "decompose", **llm, "n": 2},
    ]
    config = _sweep(transforms)
    cache = tmp_path / "cache"
    first = run(config, tmp_path / "a", cache_root=cache, limit_queries=LIMIT, progress=False)
    trials = first.trials
    assert len(trials) == 5 and set(trials["status"]) == {"ok"}
    made = server.total
    # each prompt was sent once: hyde's two modes share their calls
    assert made == 4 * LIMIT == trials["llm_requests"].sum()
    assert pd.read_parquet(first.path / "queries.parquet")["text"].iloc[0] == Q001
    rotated = CONTENT.split(" ", 1)[1] + " workers"
    passage = f"{CONTENT}. The documentation explains {CONTENT}."
    searched = {  # what the server replies for q001, parsed by each transform
        "rewrite": [CONTENT],
        "hyde:replace": [passage],
        "hyde:append": [f"{Q001}\n{passage}"],
        "multi_query": [Q001, CONTENT, rotated],
        "decompose": [
            "Why do workers that take too long on their work get thrown out",
            "then cause another reshuffle",
        ],
    }
    usage_of = {}  # prompt → the usage the server reported for it
    for body in server.bodies:
        usage_of[body["messages"][0]["content"]] = server.answer("/chat/completions", body)[1]
    for _, row in trials.iterrows():
        params = json.loads(row["config"])["query"]
        name = params["kind"] + (f":{params['mode']}" if params["kind"] == "hyde" else "")
        execution = _execution(config, row["trial_id"], cache, LIMIT)
        queries = execution[execution.plan.queries]
        assert isinstance(queries, Queries) and queries.usage is not None
        owned = [t for t, o in zip(queries.texts, queries.owner, strict=True) if o == 0]
        assert owned == searched[name], name
        assert sorted(set(queries.owner.tolist())) == list(range(LIMIT))
        # tokens per query: the server's usage of each query's prompt
        prompts = [b["messages"][0]["content"] for b in server.bodies]
        mine = [p for p in prompts if p.startswith(_prompt_head(params["kind"]))]
        assert len(mine) == LIMIT
        assert queries.usage.prompt_tokens.sum() == sum(
            usage_of[p]["usage"]["prompt_tokens"] for p in mine
        )
        assert row["tokens.query.prompt"] == pytest.approx(queries.usage.prompt_tokens.mean())
        assert queries.usage.completion_tokens.min() > 0
        if name in ("multi_query", "decompose"):
            _check_fused_by_hand(execution, first.path, row["trial_id"])
    # a second run in a new directory: every call comes from the cache
    again = run(config, tmp_path / "b", cache_root=cache, limit_queries=LIMIT, progress=False)
    assert server.total == made and (again.trials["llm_requests"] == 0).all()
    columns = ["trial_id", "query_id", "metric"]
    pd.testing.assert_frame_equal(
        again.per_query.sort_values(columns).reset_index(drop=True),
        first.per_query.sort_values(columns).reset_index(drop=True),
    )


def _prompt_head(kind: str) -> str:
    """The first words of each transform's default prompt."""
    return {
        "rewrite": "Rewrite the search query",
        "hyde": "Write a short passage",
        "multi_query": "Write 2 different rephrasings",
        "decompose": "Split the query into at most 2",
    }[kind]


def _check_fused_by_hand(execution: Execution, run_dir: Path, trial_id: str) -> None:
    """q001's ranking is the RRF (k = 60) of the BM25 rankings of its texts."""
    queries = execution[execution.plan.queries]
    per_text = execution["bm25"].ranking
    chunks = execution[execution.plan.chunks].by_id  # whole documents: one chunk each
    scores: dict[str, float] = {}
    for i in np.flatnonzero(queries.owner == 0):
        for rank, (chunk, _) in enumerate(per_text.row(int(i)), start=1):
            doc = chunks[chunk].doc_id
            scores[doc] = scores.get(doc, 0.0) + 1 / (60 + rank)
    fused = dict(sorted(scores.items(), key=lambda p: (-p[1], p[0]))[:10])
    scored = read_run(run_dir / "runs" / f"{trial_id}.trec")["q001"]
    assert _trec_order(scored) == _trec_order(fused)
    assert [scored[d] for d in fused] == pytest.approx(list(fused.values()))
    assert len(per_text.ids) == len(queries.texts) > LIMIT  # one BM25 row per text
