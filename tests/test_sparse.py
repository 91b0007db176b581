"""BM25: formulas against hand computation, both backends, updates, filters, I/O, SciFact."""

from __future__ import annotations

import base64
import gzip
import json
import math
from collections import Counter
from pathlib import Path

import bm25s
import numpy as np
import pytest
import rank_bm25

from ragbench.errors import ConfigError, DataError
from ragbench.index import sparse
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


@pytest.mark.parametrize(
    ("backend", "spilled"), [("bm25s", False), ("bm25s", True), ("rank_bm25", True)]
)
def test_incremental_add_and_delete_equal_a_fresh_build(
    backend: str, spilled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if spilled:
        spill(monkeypatch, block=4)
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
def test_save_load_round_trip(
    backend: str, variant: str, mmap: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mmap:  # and from files, the index saved
        spill(monkeypatch, block=4)
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


def spill(monkeypatch: pytest.MonkeyPatch, block: int = 64) -> None:
    """Make indexes read their texts ``block`` term ids at a time, keep their term ids and
    score matrix in temporary files from the first one, and build it 50 entries at a time."""
    monkeypatch.setattr(sparse, "_BLOCK_TOKENS", block)
    monkeypatch.setattr(sparse, "_IN_MEMORY", 0)
    monkeypatch.setattr(sparse, "_PARTITION", 50)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("sizes", ["one block", "blocks", "spilled"])
def test_score_matrix_equals_bm25s_own_index(
    variant: str, sizes: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After adds, replacements (one id given twice in a call) and deletions, whether read in
    one block or many and kept in memory or in files, the arrays bm25s searches equal those of
    its own ``index`` of the same texts, to the bit (robertson's and lucene's scaled by k1 + 1)."""
    if sizes == "blocks":
        monkeypatch.setattr(sparse, "_BLOCK_TOKENS", 64)
    elif sizes == "spilled":
        spill(monkeypatch)
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(80)]
    zipf = 1 / np.arange(1.0, 81.0)

    def texts(n: int) -> list[str]:
        sizes = rng.integers(0, 15, n)
        return [" ".join(rng.choice(words, size, p=zipf / zipf.sum())) for size in sizes]

    config = BM25Config(variant=variant, k1=1.3, b=0.6, delta=0.7, tokenizer=PLAIN)
    index = BM25Index(config)
    live: dict[str, str] = {}

    def add(ids: list[str], batch: list[str]) -> None:
        index.add(ids, batch)
        live.update(zip(ids, batch, strict=True))

    add([f"d{i}" for i in range(80)], texts(80))
    index.search(["w0"], 1)  # built: what follows is indexed again
    add([f"d{i}" for i in range(60, 120)] + ["d61"], texts(61))
    add(["gone"], ["rareword w1"])
    for id_ in ["gone", *rng.choice([f"d{i}" for i in range(120)], 25, replace=False)]:
        del live[id_]
    index.delete(["gone", "unknown", *(f"d{i}" for i in range(120) if f"d{i}" not in live)])
    add(list(live)[3:], texts(len(live) - 3))  # most ids stored are no text's: rewritten
    index.save(tmp_path / "ours")

    tokenize = WordTokenizer(PLAIN).tokenize
    assert index.document_terms(list(live)) == [tokenize(t) for t in live.values()]
    vocab = json.loads((tmp_path / "ours" / "vocab.json").read_text(encoding="utf-8"))
    assert "rareword" not in vocab  # no text has it any more
    ids = {term: i for i, term in enumerate(vocab)}
    reference = bm25s.BM25(k1=1.3, b=0.6, delta=0.7, method=variant)
    token_ids = [[ids[t] for t in tokenize(text)] for text in live.values()]
    reference.index((token_ids, ids), create_empty_token=False, show_progress=False)
    if variant in ("robertson", "lucene"):
        reference.scores["data"] *= np.float32(1.3 + 1)
    reference.save(tmp_path / "reference", show_progress=False)
    names = ["data.csc", "indices.csc", "indptr.csc"]
    names += ["nonoccurrence_array"] if variant in ("bm25l", "bm25+") else []
    for name in names:
        ours = np.load(tmp_path / "ours" / "bm25s" / f"{name}.index.npy")
        theirs = np.load(tmp_path / "reference" / f"{name}.index.npy")
        assert ours.dtype == theirs.dtype, name
        np.testing.assert_array_equal(ours, theirs, err_msg=name)


def test_metadata_keeps_each_distinct_value_once_and_filters_see_it(tmp_path: Path) -> None:
    """Metadata is kept as columns, each distinct value once; a tuple is not taken for a list
    (until JSON makes it one)."""
    index = BM25Index(BM25Config(tokenizer=PLAIN))
    a, b = {"doc": "a", "n": [1]}, {"doc": "b", "n": (1,)}
    ids = ["c0", "c1", "c2", "c3", "c6"]
    texts = ["cat", "cat dog", "dog", "cat bird", "dog bird"]
    index.add(ids, texts, [a, dict(a), {"n": [1], "doc": "a"}, b, {**b, "n": [1]}])
    index.add(["c4", "c5"], ["bird", "cat"])  # no metadata
    index.add(["c1"], ["cat dog"], [{"doc": "c"}])  # replaced, and so is its metadata

    def found(where: dict[str, object]) -> set[str]:
        return set(index.search(["cat dog bird"], 7, filter=where).ids[0].tolist()) - {""}

    assert found({"n": [1]}) == {"c0", "c2", "c6"}
    expected = {"a": {"c0", "c2"}, "b": {"c3", "c6"}, "c": {"c1"}}
    index.save(tmp_path / "bm25")
    for _ in range(2):
        assert {doc: found({"doc": doc}) for doc in expected} == expected
        index = BM25Index.load(tmp_path / "bm25")
    assert found({"n": [1]}) == {"c0", "c2", "c3", "c6"}  # saved, the tuple is a list
    state = json.loads((tmp_path / "bm25" / "index.json").read_text(encoding="utf-8"))
    columns = state["metadata_columns"]["columns"]
    codes = {
        k: np.frombuffer(base64.b64decode(c["codes"]), "<i4").tolist() for k, c in columns.items()
    }
    assert columns["doc"]["values"] == ["a", "b", "c"] and columns["n"]["values"] == [[1], [1]]
    assert codes == {"doc": [0, 2, 0, 1, 1, -1, -1], "n": [0, -1, 0, 1, 0, -1, -1]}


def test_a_folder_saved_before_metadata_was_kept_once_still_loads(tmp_path: Path) -> None:
    index = BM25Index(BM25Config(tokenizer=PLAIN))
    index.add(list(CORPUS), list(CORPUS.values()), [{"n": i % 2} for i in range(len(CORPUS))])
    index.save(tmp_path / "bm25")
    state = json.loads((tmp_path / "bm25" / "index.json").read_text(encoding="utf-8"))
    del state["metadata_columns"]  # that earlier layout: one dict per text
    state["metadata"] = [{"n": i % 2} for i in range(len(CORPUS))]
    (tmp_path / "bm25" / "index.json").write_text(json.dumps(state), encoding="utf-8")
    loaded = BM25Index.load(tmp_path / "bm25")
    queries = ["cat", "dog bird"]
    assert (loaded.search(queries, 5).ids == index.search(queries, 5).ids).all()
    assert loaded.search(["cat"], 5, filter={"n": 1}).ids[0].tolist() == ["d2", "", "", "", ""]


def test_a_folder_without_a_saved_index_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"/empty: not a BM25 index saved by ragbench \(no index"):
        BM25Index.load(tmp_path / "empty")
    build().save(tmp_path / "bm25")
    (tmp_path / "bm25" / "tokens.npy").write_bytes(b"not numpy")
    with pytest.raises(DataError, match=r"bm25: not a BM25 index saved by ragbench \(") as info:
        BM25Index.load(tmp_path / "bm25")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spilled", [False, True])
def test_an_index_memory_mapped_from_a_folder_can_be_saved_back_there(
    spilled: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if spilled:
        spill(monkeypatch, block=4)
    build(variant="bm25+").save(tmp_path / "bm25")
    mapped = BM25Index.load(tmp_path / "bm25", mmap=True)
    mapped.add(["d6"], ["song song cat"])
    mapped.save(tmp_path / "bm25")  # files replaced under the maps, not overwritten
    queries = ["cat", "song", "bird dog"]
    expected = build({**CORPUS, "d6": "song song cat"}, variant="bm25+").search(queries, 6)
    for index in (mapped, BM25Index.load(tmp_path / "bm25", mmap=True)):
        found = index.search(queries, 6)
        assert (found.ids == expected.ids).all()
        np.testing.assert_allclose(found.scores, expected.scores)
    assert sorted(p.name for p in (tmp_path / "bm25").iterdir()) == sorted(sparse._SAVED)


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
@pytest.mark.parametrize("spilled", [False, True])
def test_score_gives_the_search_scores_of_chosen_texts(
    backend: str, variant: str, spilled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if spilled:
        spill(monkeypatch, block=4)
    index = build(backend=backend, variant=variant)
    for query in ["cat", "cat cat dog", "dog bird the", "unknownword"]:
        hits = dict(index.search([query], 5).row(0))
        ids = list(hits) or ["d1"]
        expected = [hits[i] for i in ids] if hits else [0.0]
        np.testing.assert_allclose(index.score(query, ids), expected, rtol=1e-6)
