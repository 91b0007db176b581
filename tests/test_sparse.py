"""BM25: formulas against hand computation, both backends, updates, filters, I/O, SciFact."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import rank_bm25

from ragbench.errors import ConfigError
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.registry import components
from ragbench.text.tokenize import TokenizerConfig, WordTokenizer

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "beir" / "scifact"
PLAIN = TokenizerConfig(stopwords="none", stemmer=None)  # terms are the lowercased words

CORPUS = {
    "d1": "the cat sat on the mat",
    "d2": "cat cat cat dog",
    "d3": "a dog and a bird in the house tonight with more words here",
    "d4": "bird song",
    "d5": "nothing in common",
}
VARIANTS = ["robertson", "lucene", "atire", "bm25l", "bm25+"]
BACKENDS = [("bm25s", v) for v in VARIANTS] + [
    ("rank_bm25", v) for v in ("robertson", "bm25l", "bm25+")
]


def build(corpus: dict[str, str] = CORPUS, **options: object) -> BM25Index:
    index = BM25Index(BM25Config(tokenizer=PLAIN, **options))
    index.add(list(corpus), list(corpus.values()))
    return index


def reference_scores(
    corpus: dict[str, str], query: str, variant: str, k1: float, b: float, delta: float
) -> tuple[dict[str, float], float]:
    """BM25 by the book (Kamphuis et al. 2020, with the (k1 + 1) numerator everywhere): the
    score of every document, and that of a document containing no query term."""
    docs = {i: Counter(t.split()) for i, t in corpus.items()}
    lengths = {i: sum(c.values()) for i, c in docs.items()}
    n, avgdl = len(docs), sum(lengths.values()) / len(docs)

    def idf(df: int) -> float:
        return {
            "robertson": max(0.0, math.log((n - df + 0.5) / (df + 0.5))),
            "lucene": math.log(1 + (n - df + 0.5) / (df + 0.5)),
            "atire": math.log(n / df),
            "bm25l": math.log((n + 1) / (df + 0.5)),
            "bm25+": math.log((n + 1) / df),
        }[variant]

    def weight(tf: int, norm: float) -> float:
        if variant == "bm25l":
            c = tf / norm
            return (k1 + 1) * (c + delta) / (k1 + c + delta)
        if variant == "bm25+":
            return tf * (k1 + 1) / (k1 * norm + tf) + delta
        return tf * (k1 + 1) / (tf + k1 * norm)

    terms = [t for t in query.split() if any(t in c for c in docs.values())]
    dfs = {t: sum(t in c for c in docs.values()) for t in terms}
    scores = {
        doc_id: sum(
            idf(dfs[t]) * weight(tfs[t], 1 - b + b * lengths[doc_id] / avgdl) for t in terms
        )
        for doc_id, tfs in docs.items()
    }
    return scores, sum(idf(dfs[t]) * weight(0, 1.0) for t in terms)


def test_lucene_score_by_hand() -> None:
    # "cat" in d1 (tf 1, 6 terms) and d2 (tf 3, 4 terms); N = 5, avgdl = 28 / 5 = 5.6
    k1, b = 1.2, 0.75
    idf = math.log(1 + (5 - 2 + 0.5) / (2 + 0.5))
    d1 = idf * 1 * (k1 + 1) / (1 + k1 * (1 - b + b * 6 / 5.6))
    d2 = idf * 3 * (k1 + 1) / (3 + k1 * (1 - b + b * 4 / 5.6))
    ranking = build().search(["cat"], 5)
    assert ranking.ids[0].tolist() == ["d2", "d1", "", "", ""]
    np.testing.assert_allclose(ranking.scores[0, :2], [d2, d1], rtol=1e-6)


@pytest.mark.parametrize(("backend", "variant"), BACKENDS)
@pytest.mark.parametrize("params", [(1.2, 0.75, 0.5), (0.9, 0.4, 1.0), (2.0, 1.0, 0.25)])
def test_every_variant_matches_the_formula(
    backend: str, variant: str, params: tuple[float, float, float]
) -> None:
    k1, b, delta = params
    index = build(backend=backend, variant=variant, k1=k1, b=b, delta=delta)
    for query in ["cat", "dog bird", "cat dog bird the", "bird bird house unknownword"]:
        expected, no_match = reference_scores(CORPUS, query, variant, k1, b, delta)
        got = dict(index.search([query], 5).row(0))
        assert set(got) == {d for d, s in expected.items() if s > no_match + 1e-9}, (query, got)
        for doc_id, score in got.items():
            assert score == pytest.approx(expected[doc_id], rel=1e-5), (query, doc_id)


def test_parameters_change_scores_as_expected() -> None:
    corpus = {"short": "cat dog", "long": "cat a b c d e f g h i", "tf3": "cat cat cat x y z w"}
    corpus |= {f"other{i}": "bird fish" for i in range(5)}  # cat in 3 of 8: idf > 0 everywhere

    def scores(**options: object) -> dict[str, float]:
        return dict(build(corpus, **options).search(["cat"], 3).row(0))

    no_length = scores(b=0.0)
    assert no_length["short"] == pytest.approx(no_length["long"])
    full_length = scores(b=1.0)
    assert full_length["short"] > full_length["long"]
    binary = scores(k1=0.0)  # no tf saturation term: every matching document ties
    assert binary["short"] == pytest.approx(binary["tf3"]) == pytest.approx(binary["long"])
    assert (
        scores(k1=2.0)["tf3"] / scores(k1=2.0)["short"]
        > scores(k1=0.5)["tf3"] / scores(k1=0.5)["short"]
    )
    by_variant = {v: scores(variant=v)["short"] for v in VARIANTS}
    assert len({round(s, 6) for s in by_variant.values()}) == len(VARIANTS)
    assert scores(variant="bm25+", delta=1.0)["long"] > scores(variant="bm25+", delta=0.0)["long"]


def test_documents_without_query_terms_are_not_hits() -> None:
    for variant in ("lucene", "bm25l", "bm25+"):
        ranking = build(variant=variant).search(["song"], 5)  # only d4 has it
        assert ranking.ids[0].tolist() == ["d4", "", "", "", ""]
        assert np.isneginf(ranking.scores[0, 1:]).all()


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_empty_and_unknown_queries_give_empty_rows(backend: str) -> None:
    index = BM25Index(BM25Config(backend=backend, variant="bm25+"))  # default tokenizer
    index.add(list(CORPUS), list(CORPUS.values()))
    ranking = index.search(["", "the and of", "zzzz qqqq", "cats"], 3)
    assert ranking.ids.shape == (4, 3)
    assert (ranking.ids[:3] == "").all() and np.isneginf(ranking.scores[:3]).all()
    assert ranking.ids[3].tolist() == ["d2", "d1", ""]  # "cats" stems to "cat"


@pytest.mark.parametrize(("backend", "variant"), BACKENDS)
def test_equal_scores_rank_in_indexing_order_also_at_the_cut(backend: str, variant: str) -> None:
    """Like Lucene: of equal scores, the document indexed first ranks first, whichever
    backend, for plain and weighted queries (the cut-off keeps the first indexed)."""
    ids = ["t5", "t1", "x", "t4", "t2", "t3"] + [f"other{i}" for i in range(6)]
    texts = ["tulip", "tulip", "rose garden", "tulip", "tulip", "tulip"] + ["rose"] * 6
    index = BM25Index(BM25Config(backend=backend, variant=variant))
    index.add(ids, texts)  # tulip in fewer than half the documents: robertson's idf > 0
    for ranking in (index.search(["tulip"], 3), index.search_weighted([{"tulip": 1.0}], 3)):
        assert ranking.ids[0].tolist() == ["t5", "t1", "t4"]
        assert len(set(ranking.scores[0].tolist())) == 1


def test_k_larger_than_the_corpus_pads() -> None:
    ranking = build().search(["cat", "bird"], 10)
    assert ranking.ids.shape == (2, 10)
    assert ranking.ids[1, :2].tolist() == ["d4", "d3"]
    assert (ranking.ids[:, 2:] == "").all()
    assert (BM25Index().search(["cat"], 2).ids == "").all()  # empty index


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_incremental_add_and_delete_equal_a_fresh_build(backend: str) -> None:
    variant = "bm25+"
    incremental = BM25Index(BM25Config(backend=backend, variant=variant, tokenizer=PLAIN))
    items = list(CORPUS.items())
    incremental.add([i for i, _ in items[:2]], [t for _, t in items[:2]])
    incremental.search(["cat"], 3)  # builds, so the next changes must re-index
    incremental.add([i for i, _ in items[2:]], [t for _, t in items[2:]])
    incremental.add(["d2", "extra"], ["dog dog", "cat bird"])  # replace d2, add one
    incremental.delete(["d1", "unknown"])
    final = {**{i: t for i, t in items if i != "d1"}, "d2": "dog dog", "extra": "cat bird"}
    fresh = build(final, backend=backend, variant=variant)
    assert incremental.count() == len(incremental) == fresh.count() == 5
    queries = ["cat", "dog", "bird house", "song cat"]
    a, b = incremental.search(queries, 5), fresh.search(queries, 5)
    assert (a.ids == b.ids).all()
    np.testing.assert_allclose(a.scores, b.scores)


@pytest.mark.parametrize(
    ("backend", "variant"), [("bm25s", "lucene"), ("bm25s", "bm25l"), ("rank_bm25", "robertson")]
)
@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_round_trip(backend: str, variant: str, mmap: bool, tmp_path: Path) -> None:
    index = BM25Index(BM25Config(backend=backend, variant=variant, k1=0.9, b=0.5))
    meta = [{"n": i} for i in range(len(CORPUS))]
    index.add(list(CORPUS), list(CORPUS.values()), meta)
    queries = ["cat", "bird dog", "house song"]
    before = index.search(queries, 4)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", mmap=mmap)
    assert loaded.config == index.config and loaded.count() == 5
    after = loaded.search(queries, 4)
    assert (before.ids == after.ids).all()
    np.testing.assert_allclose(before.scores, after.scores)
    assert loaded.search(["cat"], 4, filter={"n": 0}).ids[0, 0] == "d1"
    loaded.add(["d6"], ["song song song"])  # the tokenized corpus came back too
    assert loaded.search(["song"], 1).ids[0, 0] == "d6"


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_filters_match_every_key_exactly(backend: str) -> None:
    index = BM25Index(BM25Config(backend=backend, variant="bm25+", tokenizer=PLAIN))
    meta = [
        {"lang": "en", "section": "ops"},
        {"lang": "en", "section": "dev"},
        {"lang": "de", "section": "ops"},
        {"lang": "en", "section": "ops"},
        {"lang": "en"},
    ]
    index.add(list(CORPUS), list(CORPUS.values()), meta)
    ranking = index.search(["cat dog bird", "dog"], 5, filter={"lang": "en", "section": "ops"})
    assert ranking.ids[0].tolist() == ["d4", "d1", "", "", ""]
    assert ranking.ids[1].tolist() == [""] * 5  # dog is only in d2 and d3
    assert (index.search(["cat"], 5, filter={"lang": "fr"}).ids == "").all()


def test_config_validation_names_the_problem() -> None:
    with pytest.raises(
        ConfigError, match=r"not available with backend 'rank_bm25'; allowed: robertson"
    ):
        components("sparse").parse({"kind": "bm25", "backend": "rank_bm25", "variant": "lucene"})
    with pytest.raises(ConfigError, match="k1"):
        components("sparse").parse({"kind": "bm25", "k1": -1})
    with pytest.raises(ConfigError, match=r"sparse\.b"):
        components("sparse").parse({"kind": "bm25", "b": 1.5})
    index = components("sparse").build({"kind": "bm25", "variant": "atire", "k1": 0.9})
    assert isinstance(index, BM25Index) and index.config.variant == "atire"
    assert BM25Config().tokenizer == TokenizerConfig()


def test_robertson_floors_negative_idf_at_zero_in_both_backends() -> None:
    # "cat" is in 3 of 4 documents: idf = ln((4 - 3 + 0.5) / 3.5) < 0.
    corpus = {"a": "cat x", "b": "cat y", "c": "cat z", "d": "dog w"}
    for backend in ("bm25s", "rank_bm25"):
        index = build(corpus, backend=backend, variant="robertson")
        assert (index.search(["cat"], 4).ids == "").all()
        ranking = index.search(["cat dog"], 4)
        assert ranking.ids[0].tolist() == ["d", "", "", ""]
    # rank-bm25's own default (epsilon=0.25) would give "cat" a positive weight instead:
    okapi = rank_bm25.BM25Okapi([t.split() for t in corpus.values()], k1=1.2, b=0.75)
    assert okapi.idf["cat"] == pytest.approx(0.25 * okapi.average_idf) and okapi.idf["cat"] > 0


def _scifact(n_docs: int, n_queries: int) -> tuple[list[str], list[str], list[str]]:
    if not (SCIFACT / "corpus.jsonl.gz").exists():
        pytest.skip(f"dataset not available: {SCIFACT}")
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for _, line in zip(range(n_docs), f, strict=False)]
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for _, line in zip(range(n_queries), f, strict=False)]
    return [d["_id"] for d in docs], [f"{d['title']} {d['text']}" for d in docs], queries


@pytest.mark.parametrize("variant", ["robertson", "bm25l", "bm25+"])
def test_backends_agree_on_scifact(variant: str) -> None:
    ids, texts, queries = _scifact(1000, 50)
    rankings = []
    for backend in ("bm25s", "rank_bm25"):
        index = BM25Index(BM25Config(backend=backend, variant=variant))
        index.add(ids, texts)
        rankings.append(index.search(queries, 10))
    fast, reference = rankings
    assert (fast.ids != "").sum() > 400  # the comparison is not vacuous
    for q in range(len(queries)):
        assert (fast.ids[q] != "").sum() == (reference.ids[q] != "").sum()
        kth = reference.scores[q, -1]
        above = [set(r.ids[q][r.scores[q] > kth * (1 + 1e-5)]) for r in (fast, reference)]
        assert above[0] == above[1], queries[q]
        hits = fast.ids[q] != ""
        np.testing.assert_allclose(fast.scores[q][hits], reference.scores[q][hits], rtol=1e-5)


def test_scifact_negative_idf_terms_exist() -> None:
    # The robertson comparison above covers terms in more than half of the documents.
    ids, texts, queries = _scifact(1000, 50)
    tokenizer = WordTokenizer()
    df = Counter(t for doc in tokenizer.tokenize_many(texts) for t in set(doc))
    common = {t for t, n in df.items() if n > len(ids) / 2}
    assert common
    assert any(common & set(q) for q in tokenizer.tokenize_many(queries))


@pytest.mark.parametrize(("backend", "variant"), BACKENDS)
def test_score_gives_the_search_scores_of_chosen_texts(backend: str, variant: str) -> None:
    index = build(backend=backend, variant=variant)
    for query in ["cat", "cat cat dog", "dog bird the", "unknownword"]:
        hits = dict(index.search([query], 5).row(0))
        ids = list(hits) or ["d1"]
        expected = [hits[i] for i in ids] if hits else [0.0]
        np.testing.assert_allclose(index.score(query, ids), expected, rtol=1e-6)
