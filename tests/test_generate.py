"""`ragbench datasets generate`: span-labeled sets generated from documents (ict, headings, and
an LLM against the scripted server over real HTTP) validate, record where each query came from,
and run in a sweep."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.data.generate import (
    GenerationResult,
    HeadingsMethod,
    IctMethod,
    LLMMethod,
    build_method,
    generate,
)
from ragbench.data.spans import load_spans
from ragbench.data.validate import validate_dataset
from ragbench.errors import ConfigError
from ragbench.experiment.runner import run
from ragbench.pipeline import RAGPipeline
from ragbench.testing import ScriptedLLMServer
from tests.paths import CHUNKING_EVAL, DEMO, SCIFACT, require

HASHING = {"kind": "hashing", "dim": 256}

GUIDE = """\
# Kestrel storage guide

Kestrel writes every record to an append-only log on disk. Each partition of a
topic has its own log directory. Old segments are deleted by a background task.

## Retention

Records older than seven days are removed by default. Short line here.

| Key | Default |
|-----|---------|
| `log.retention.ms` | 604800000 |

```bash
# set retention to one day for this topic
kestrelctl topic alter clickstream --config log.retention.ms=86400000
```

## Overview

This overview section only repeats what the other sections say about storage.

## Tiny

Too short.
"""
PORTS = """\
<html><head><title>Ports</title></head><body>
<h1>Network ports</h1>
<p>Brokers listen for clients on port 7422 and for other brokers on port 7423.</p>
<h2>Admin <code>API</code></h2>
<p>The admin API is served on port 7480 and needs a token from the identity provider.</p>
<h2>Examples</h2>
<p>Running kestrelctl ping checks that a broker answers on the client port.</p>
</body></html>
"""


def _corpus(root: Path, files: Mapping[str, str]) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _queries(result: GenerationResult) -> list[dict[str, Any]]:
    lines = (result.path / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _evidence(query: dict[str, Any]) -> list[str]:
    return [e["text"] for e in query.get("evidence", [])]


def _valid(result: GenerationResult) -> None:
    report = validate_dataset(result.path)
    assert report.ok, str(report)


# ---------------------------------------------------------------- offline methods


def test_ict_on_a_hand_checkable_document(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", {"guide.md": GUIDE, "ports.html": PORTS})
    method = IctMethod(window=1, min_words=5, evidence_terms=1)
    result = generate(corpus, tmp_path / "set", method, n=100)
    _valid(result)
    queries = {q["text"]: q for q in _queries(result)}
    first = "Kestrel writes every record to an append-only log on disk."
    second = "Each partition of a\ntopic has its own log directory."
    third = "Old segments are deleted by a background task."
    retention = "Records older than seven days are removed by default."
    # evidence: the neighbour that shares a term ("log"); a sentence whose neighbours share
    # none is judged at the document level only; the second sentence is the first's evidence,
    # so it is not cut out for a query of its own
    assert {text: (_evidence(q), q.get("qrels")) for text, q in queries.items()} == {
        first: ([second], None),
        third: ([], {"guide.md": 2}),
        retention: ([], {"guide.md": 2}),
    }
    assert (result.queries, result.candidates) == (3, 4)
    assert result.dropped == {"overlaps another query": 1}
    assert result.skipped == {
        "code or table": 6,
        "short sentence": 2,  # "Short line here.", "Too short."
        "refers back": 1,  # "This overview section ..."
        "numbers": 2,  # the ports
        "no neighbouring sentence": 1,  # the only sentence of "Examples"
    }
    assert queries[third]["type"] == "ict"
    assert queries[third]["metadata"] == {
        "method": "ict",
        "sources": [{"doc_id": "guide.md", "start": 25, "end": 77}],
        "repeated": 0.0,  # the share of its terms its neighbours repeat
        "cut": {"doc_id": "guide.md", "start": 136, "end": 183},  # with the space before it
        "generator": {
            "method": "ict",
            "n": 100,
            "level": "document",  # n counts the queries judged at it
            "seed": 0,
            "window": 1,
            "min_words": 5,
            "evidence_terms": 1,
            "repeated_share": 0.45,
            "keep_numbers": False,
            "keep_references": False,
            "source": str(corpus.resolve()),  # what the user calls the dataset
        },
    }
    assert GUIDE[136:183] == " " + third
    # the files are copied as they are; the set loads them with each query's sentence cut out
    assert sorted(p.name for p in (result.path / "corpus").iterdir()) == ["guide.md", "ports.html"]
    assert (result.path / "corpus" / "guide.md").read_text(encoding="utf-8") == GUIDE
    loaded = load_spans(result.path)
    guide = loaded.doc_index["guide.md"].text
    assert guide.startswith(f"# Kestrel storage guide\n\n{second}\n\n## Retention\n\nShort line")
    assert all(text not in guide for text in queries)
    assert all(
        guide[e["start"] : e["end"]] == e["text"]
        for q in queries.values()
        for e in q.get("evidence", [])
    )
    assert {q.id for q in loaded.queries} == {q["id"] for q in queries.values()}
    # the default asks a neighbour for three shared terms: here, no sentence has span evidence
    strict = _queries(
        generate(corpus, tmp_path / "strict", IctMethod(window=1, min_words=5), n=100)
    )
    assert [q.get("evidence") for q in strict] == [None] * len(strict)


REPEATING = """\
Moraine dams hold glacier lakes above the valley villages. Moraine dams of glacier lakes fail \
above the valley villages in spring. Farmers grow barley and potatoes on terraces that face \
south, and moraine dams of glacier lakes sometimes flood those terraces.
"""


def test_a_sentence_its_neighbours_repeat_is_judged_at_the_span_levels_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its neighbours would give its document away by the words they repeat: a document-level
    run leaves it out, a span-level run scores it."""
    corpus = _corpus(tmp_path / "docs", {"lakes.md": REPEATING})
    result = generate(corpus, tmp_path / "set", IctMethod(window=1), n=3, level="span")
    queries = {q["text"].split()[2]: q for q in _queries(result)}  # by their third word
    # the second sentence repeats 7 of the first's 8 terms (stemmed, without stopwords:
    # morain dam glacier lake abov valley villag, not hold) and 4 of the third's 14 (morain dam
    # glacier lake: 0.286, not above the default 0.45)
    repeated = {word: (q["metadata"]["repeated"], q.get("levels")) for word, q in queries.items()}
    assert repeated == {"hold": (0.875, ["chunk", "span"]), "barley": (0.286, None)}
    assert result.dropped == {"overlaps another query": 1}  # the middle one, their evidence
    data = load_spans(result.path)
    assert data.levels == {queries["hold"]["id"]: frozenset({"chunk", "span"})}
    assert main(["datasets", "info", str(result.path)]) == 0
    assert "judged       1 at the chunk and span levels only\n" in capsys.readouterr().out

    def evaluated(level: str, metric: str, labels: Path = result.path) -> list[str]:
        config = {
            "name": f"levels-{level}",
            "dataset": {"path": str(labels)},
            "evaluation": {"level": level, "metrics": [metric]},
            "sweep": {
                "chunker": [{"kind": "sentence", "size": 20}],
                "retriever": [{"kind": "bm25"}],
            },
        }
        out = tmp_path / f"{labels.name}-{level}"
        done = run(config, out, cache_root=tmp_path / "cache", progress=False)
        return sorted(done.per_query["query_id"].unique())

    assert evaluated("document", "recall@5") == [queries["barley"]["id"]]
    assert evaluated("span", "span_recall@5") == sorted(q["id"] for q in queries.values())
    # a set of span-level queries alone cannot be run at the document level
    alone = tmp_path / "alone"
    shutil.copytree(result.path, alone)
    (alone / "queries.jsonl").write_text(json.dumps(queries["hold"]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"every judged query .* other levels than 'document'"):
        evaluated("document", "recall@5", alone)
    # with --repeated-share 1 every query is judged at the document level as well
    loose = generate(corpus, tmp_path / "loose", IctMethod(window=1, repeated_share=1.0), n=3)
    assert all("levels" not in q for q in _queries(loose))


def test_n_counts_the_queries_judged_at_the_level_and_a_short_corpus_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--level`` names the evaluation level the N queries are judged at; a corpus that gives
    fewer says so in one line, and a level that is none is a one-line error."""
    corpus = _corpus(tmp_path / "docs", {"lakes.md": REPEATING})
    out = tmp_path / "document"
    argv = ["datasets", "generate", str(corpus), "--window", "1", "--out"]
    assert main([*argv, str(out), "--n", "5"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        "--n 5: the documents give only 1 query judged at the document level (every one of "
        "the 3 candidates was drawn; see what was skipped and dropped)"
    )
    # "hold" and the middle sentence: their neighbours repeat most of their terms
    assert printed[2] == "dropped: not judged at the document level 2"
    assert [q.get("levels") for q in map(json.loads, (out / "queries.jsonl").open())] == [None]
    out = tmp_path / "span"
    assert main([*argv, str(out), "--n", "2", "--level", "span"]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 2 queries written")
    spans = load_spans(out)
    assert {q.id for q in spans.queries} == spans.judged_at("span") == set(spans.evidence)
    assert main([*argv, str(tmp_path / "bad"), "--level", "x"]) == 2
    said = capsys.readouterr().err
    assert said.endswith("--level: expected one of document, chunk, span, got 'x'\n")
    assert said.count("\n") == 1 and not (tmp_path / "bad").exists()


def test_ict_skips_code_numbers_and_sentences_that_refer_back(tmp_path: Path) -> None:
    """What a query may not be (code-like, with digits, opening by referring back, ending by
    pointing ahead, inside an HTML comment), and the flags that allow some."""
    text = (
        "Brokers replicate every partition across the cluster nodes. "
        "However, replicas can lag behind the leader for a while. "
        "The cluster keeps 3 replicas of every partition by default. "
        "Set replica_lag_max = value(ms) in broker_config to tune it. "
        "Operators watch the replication lag on the cluster dashboard. "
        "Admins restart a lagging replica with the following command:\n\n"
        "<!-- Editors keep this page short and move long examples elsewhere. -->\n\n"
        "Brokers report the replication lag of every partition they lead."
    )
    corpus = _corpus(tmp_path / "docs", {"a.md": text})

    def kept(**options: Any) -> set[str]:
        out = tmp_path / f"set{len(list(tmp_path.iterdir()))}"
        method = IctMethod(min_words=5, **{"window": 1, **options})
        found = generate(corpus, out, method, n=10)
        return {q["text"].split()[0] for q in _queries(found)}

    assert kept() <= {"Brokers", "Operators"}
    assert "However," in kept(keep_references=True) | kept(keep_references=True, window=2)
    assert "The" in kept(keep_numbers=True) | kept(keep_numbers=True, window=2)
    everything = kept(keep_numbers=True, keep_references=True)
    assert not {"Set", "Admins", "Editors"} & everything  # code-like, pointing ahead, a comment


TOOLBELT_PROSE = (
    "The toolbelt collects helpers that make long running client sessions easier to manage.",
    "To get the latest release from the package index, run the installer in a terminal window.",
    "Interactive sessions show how a base address keeps every request short and readable.",
    "A session created this way also retries failed requests when the server is unavailable.",
    "Every helper in the toolbelt is tested against the current release of the library.",
)
TOOLBELT = f"""\
Installing the toolbelt

{TOOLBELT_PROSE[0]}

{TOOLBELT_PROSE[1]}

$ pip install requests-toolbelt --upgrade --user
Collecting requests-toolbelt
Successfully installed requests-toolbelt

{TOOLBELT_PROSE[2]}

>>> from toolbelt import sessions, adapters, auth, cookies, downloadutils, multipart, streaming

    import os
    import sys
    from pathlib import Path
    from collections import Counter
    from requests_toolbelt import sessions

python -m pip install --user requests-toolbelt and then restart the shell session.

pip install requests-toolbelt sphinx-rtd-theme mkdocs-material black isort pytest

{TOOLBELT_PROSE[3]}

{TOOLBELT_PROSE[4]}
"""


def test_ict_takes_no_query_from_unfenced_code_in_plain_text(tmp_path: Path) -> None:
    """A .txt file has no code fences: a shell transcript, a >>> prompt, imports and commands
    read as prose sentences, and none of them may become a query."""
    corpus = _corpus(tmp_path / "docs", {"toolbelt.txt": TOOLBELT})
    result = generate(corpus, tmp_path / "set", IctMethod(window=1, min_words=5), n=50)
    _valid(result)
    texts = [" ".join(q["text"].split()) for q in _queries(result)]
    assert len(texts) >= 3
    assert set(texts) <= set(TOOLBELT_PROSE)
    assert result.skipped["code-like"] == 5  # the transcript, the prompt, imports, 2 commands


def test_a_title_is_a_heading_and_no_query_stays_findable_in_its_document(
    tmp_path: Path,
) -> None:
    """A BEIR-style document (title + " " + text) gives no query that runs the title into the
    first sentence; a sentence repeated in the corpus is no query (cutting it would leave a
    copy); what is cut leaves no query of five words or more verbatim anywhere."""
    repeated = "All rights to this study are reserved by the authors."
    records = [
        {
            "_id": name,
            "title": f"Study {name} of tidal energy",
            "text": f"Turbines in channel {name} produced power for many months. {repeated} "
            f"The blades of model {name} wore down slowly over two winters. "
            f"Maintenance costs for site {name} fell after the second year of service.",
        }
        for name in ("alpha", "bravo", "charlie", "delta")
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = generate(corpus, tmp_path / "set", IctMethod(window=1, min_words=5), n=20)
    _valid(result)
    texts = [q["text"] for q in _queries(result)]
    assert texts and all(not t.startswith("Study") and repeated not in t for t in texts)
    assert result.dropped.get("repeated in the corpus", 0) >= 1
    documents = load_spans(result.path).documents
    assert all(t.casefold() not in d.text.casefold() for t in texts for d in documents)


def test_headings_on_markdown_and_html(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", {"guide.md": GUIDE, "ports.html": PORTS})
    result = generate(corpus, tmp_path / "set", HeadingsMethod(min_words=5), n=100)
    _valid(result)
    queries = {q["text"]: q for q in _queries(result)}
    assert {text: _evidence(q) for text, q in queries.items()} == {
        "Kestrel storage guide": [GUIDE[25:183]],
        "Retention": [GUIDE[GUIDE.index("Records older") : GUIDE.index("\n\n## Overview")]],
        "Network ports": [
            "Brokers listen for clients on port 7422 and for other brokers on port 7423."
        ],
        "Admin API": [
            "The admin API is served on port 7480 and needs a token from the identity provider."
        ],
    }  # not "Overview", "Examples" (generic), "Tiny" (short), "# set retention" (code)
    assert result.skipped == {"generic heading": 2, "short section": 1}
    admin = queries["Admin API"]["metadata"]
    assert admin["cut"] == {"doc_id": "ports.html", "start": 92, "end": 101}  # the heading line
    # offsets into the document as loaded, after "Network ports" (13 characters) is cut out
    assert admin["sources"] == [{"doc_id": "ports.html", "start": 92 - 13, "end": 185 - 13 - 9}]
    assert admin["level"] == 2
    loaded = load_spans(result.path).doc_index
    assert "Network ports" not in loaded["ports.html"].text
    assert "Kestrel storage guide" not in loaded["guide.md"].text


def test_sampling_is_stratified_over_documents_and_sections_and_seeded(tmp_path: Path) -> None:
    def section(doc: str, name: str) -> str:
        sentences = [
            f"Document {doc} section {name} sentence {i} has plenty of words."
            for i in ("one", "two", "three")
        ]
        return f"## Section {name}\n\n" + " ".join(sentences) + "\n\n"

    corpus = _corpus(
        tmp_path / "docs", {f"{doc}.md": section(doc, "A") + section(doc, "B") for doc in "xyz"}
    )
    # a section's sentences repeat each other's words: they are judged at the span levels only
    spans = IctMethod()
    three = _queries(generate(corpus, tmp_path / "three", spans, n=3, seed=1, level="span"))
    assert sorted(q["metadata"]["sources"][0]["doc_id"] for q in three) == ["x.md", "y.md", "z.md"]
    six = _queries(generate(corpus, tmp_path / "six", spans, n=6, seed=1, level="span"))
    places = sorted((q["text"].split()[1], q["text"].split()[3]) for q in six)
    assert places == [(doc, name) for doc in "xyz" for name in "AB"]  # every section once
    again = generate(corpus, tmp_path / "again", spans, n=6, seed=1, level="span")
    assert (again.path / "queries.jsonl").read_bytes() == (
        tmp_path / "six/queries.jsonl"
    ).read_bytes()
    other = _queries(generate(corpus, tmp_path / "other", spans, n=6, seed=2, level="span"))
    assert [q["text"] for q in other] != [q["text"] for q in six]


@pytest.mark.parametrize("method", ["ict", "headings"])
def test_the_demo_corpus_gives_a_valid_set_that_runs_in_a_sweep(
    method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "set"
    argv = ["datasets", "generate", str(DEMO), "--out", str(out), "--method", method, "--n", "12"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{out}: 12 queries written (method {method}) from 58 documents")
    assert "dropped: " in printed and "LLM requests" not in printed
    data = load_spans(out)
    assert len(data.queries) == 12 and validate_dataset(out).ok
    demo = load_spans(DEMO).doc_index
    for query in data.queries:
        assert query.metadata["method"] == method and query.metadata["type"] == method
        assert query.metadata["generator"]["n"] == 12
        for source in query.metadata["sources"]:
            assert source["doc_id"] in demo and source["start"] < source["end"]
    assert len({doc for q in data.queries for doc in data.qrels[q.id]}) == 12  # one each
    assert data.evidence  # some have span evidence (ict: a neighbour sharing three terms)
    config = {
        "name": f"generated-{method}",
        "dataset": {"path": str(out)},
        "evaluation": {"metrics": ["ndcg@10", "recall@5", "span_recall@5"]},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 400, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}],
        },
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    assert len(result.trials) == 2 and set(result.trials["status"]) == {"ok"}
    # deployed, a trial indexes the documents whole: the cut sentences are back
    deployed = RAGPipeline.from_trial(result.path, "best")
    for query in data.queries:
        cut = query.metadata["cut"]
        source = (out / "corpus" / cut["doc_id"]).read_text(encoding="utf-8")
        indexed = [" "] * len(source)  # the document as its deployed chunks cover it
        for chunk in deployed.chunks.values():
            if chunk.doc_id == cut["doc_id"]:
                indexed[chunk.start : chunk.end] = chunk.text
        assert "".join(indexed)[cut["start"] : cut["end"]] == source[cut["start"] : cut["end"]]
        taken = source[cut["start"] : cut["end"]].strip()
        assert method == "headings" or taken not in data.doc_index[cut["doc_id"]].text
    assert result.trials["ndcg@10"].max() > 0.2


@pytest.mark.parametrize("dataset", [SCIFACT, CHUNKING_EVAL], ids=["beir", "chunking_evaluation"])
def test_a_labeled_set_lends_its_corpus(dataset: Path, tmp_path: Path) -> None:
    source = require(dataset)
    result = generate(source, tmp_path / "set", IctMethod(), n=5)
    _valid(result)
    written = load_spans(result.path)
    assert len(written.queries) == 5
    if dataset == SCIFACT:  # documents of a JSONL corpus are written as one JSONL file
        assert [p.name for p in (result.path / "corpus").iterdir()] == ["contexts.jsonl"]
    else:  # whole files are copied
        assert {d.id for d in written.documents} == {p.name for p in (source / "corpora").iterdir()}


# ---------------------------------------------------------------- llm


Edit = Callable[[str, dict[str, Any]], dict[str, Any]]


class EditingServer(ScriptedLLMServer):
    """The scripted server, with each JSON reply passed through ``edit(input, reply)`` (the
    prompt's input part): stands in for a model that paraphrases, reflows or invents."""

    def __init__(self, edit: Edit) -> None:
        super().__init__()
        self.edit = edit

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = super().answer(path, body)
        if path.endswith("/chat/completions"):
            given = str(body["messages"][-1]["content"]).rsplit("input: ", 1)[-1]
            for choice in payload["choices"]:
                reply = json.loads(choice["message"]["content"])
                choice["message"]["content"] = json.dumps(self.edit(given, reply))
        return status, payload


def _unchanged(given: str, reply: dict[str, Any]) -> dict[str, Any]:
    return reply


def _method(server: ScriptedLLMServer, cache: Path, **options: Any) -> LLMMethod:
    method = build_method(
        "llm",
        base_url=server.url,
        model="scripted",
        llm_cache=str(cache),
        embedder=HASHING,
        **{"min_words": 5, **options},
    )
    assert isinstance(method, LLMMethod)
    return method


SERVICES = {
    "alpha.md": "Service alpha stores its segments on the fast local disks. "
    "It replicates every segment to two other brokers.",
    "bravo.md": "Service bravo keeps the compaction log for fourteen days before it removes old "
    "files. It also writes a checkpoint every hour.",
    "charlie.md": "Service charlie accepts client connections on port nine thousand. "
    "Its admin console needs a separate login.",
    "delta.md": "Service delta encrypts every message with a rotating cluster key. "
    "Keys rotate on the first day of each month.",
}


def _reflow_or_invent(given: str, reply: dict[str, Any]) -> dict[str, Any]:
    """alpha: verbatim; charlie: reflowed; bravo: two typos (fuzzy); delta: invented."""
    first = reply["excerpts"][0]
    if "charlie" in given:
        first = first.replace(" ", "\n   ", 3)
    elif "bravo" in given:
        first = first.replace("compaction", "compacton").replace("fourteen", "fourten")
    elif "delta" in given:
        first = "Service delta was designed by a committee of volunteers in another decade."
    return {**reply, "excerpts": [first, *reply["excerpts"][1:]]}


def test_llm_excerpts_are_located_exactly_by_whitespace_or_fuzzily(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", SERVICES)
    with EditingServer(_reflow_or_invent) as server:
        result = generate(corpus, tmp_path / "set", _method(server, tmp_path / "cache"), n=4)
        assert server.requests["/v1/chat/completions"] == 4
        # the same typos are rejected when the bar is higher (the replies come from the cache)
        strict = _method(server, tmp_path / "cache", min_match=99.0)
        stricter = generate(corpus, tmp_path / "strict", strict, n=4)
        assert server.total == 4
    assert stricter.dropped == {"unlocatable excerpt": 2} and stricter.cached == 4
    _valid(result)
    assert (result.queries, result.requests, result.cached) == (3, 4, 0)
    assert result.dropped == {"unlocatable excerpt": 1}  # delta's invented excerpt
    assert str(result).startswith("--n 4: the documents give only 3 queries judged at the")
    queries = {q["metadata"]["sources"][0]["doc_id"]: q for q in _queries(result)}
    assert sorted(queries) == ["alpha.md", "bravo.md", "charlie.md"]
    for doc_id, query in queries.items():
        assert _evidence(query) == [SERVICES[doc_id]]  # both sentences, joined into one span
        assert query["type"] == "llm" and query["answer"]
        assert query["metadata"]["generator"]["prompt_version"] == 1
    how = {doc_id: q["metadata"]["matches"][0] for doc_id, q in queries.items()}
    assert how["alpha.md"] == {"how": "exact", "score": 100.0}
    assert how["charlie.md"]["how"] == "whitespace" and "\n   " in how["charlie.md"]["excerpt"]
    assert how["bravo.md"]["how"] == "fuzzy" and 90 <= how["bravo.md"]["score"] < 100


def test_llm_drops_near_duplicates_and_questions_that_copy(tmp_path: Path) -> None:
    docs = {**SERVICES, "echo.md": SERVICES["alpha.md"].replace("fast local", "fast, local")}

    def paraphrase(given: str, reply: dict[str, Any]) -> dict[str, Any]:
        if "charlie" in given:
            return {**reply, "question": "Which port should applications use to reach charlie?"}
        return reply

    corpus = _corpus(tmp_path / "docs", docs)
    with EditingServer(paraphrase) as server:
        result = generate(corpus, tmp_path / "set", _method(server, tmp_path / "cache"), n=5)
        assert result.dropped == {"duplicate": 1}  # alpha or echo, whichever came later
        assert result.queries == 4 and {q["text"] for q in _queries(result)} >= {
            "Which port should applications use to reach charlie?"
        }
        kept = generate(corpus, tmp_path / "all", _method(server, tmp_path / "c", dedup=1.0), n=5)
        assert kept.queries == 5 and kept.dropped == {}
        copying = generate(
            corpus, tmp_path / "own", _method(server, tmp_path / "cache", max_overlap=0.5), n=5
        )
        assert server.requests["/v1/chat/completions"] == 10  # two caches, five passages each
    # the other questions repeat their excerpt word for word
    assert copying.dropped == {"overlap": 4}
    assert [q["text"] for q in _queries(copying)] == [
        "Which port should applications use to reach charlie?"
    ]


def test_multi_hop_questions_need_evidence_in_two_documents(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "docs", SERVICES)
    with EditingServer(_unchanged) as server:
        method = _method(server, tmp_path / "cache", passage_words=8, multi_hop=2, dedup=1.0)
        result = generate(corpus, tmp_path / "set", method, n=5)
        assert server.requests["/v1/chat/completions"] == 5
    _valid(result)
    queries = _queries(result)
    assert [q["type"] for q in queries] == ["llm"] * 3 + ["multi_hop"] * 2
    for query in queries[3:]:
        sources = query["metadata"]["sources"]
        assert len(sources) == 2 and sources[0]["doc_id"] != sources[1]["doc_id"]
        assert {e["doc_id"] for e in query["evidence"]} == {s["doc_id"] for s in sources}

    def one_sided(given: str, reply: dict[str, Any]) -> dict[str, Any]:
        return {**reply, "excerpts": reply["excerpts"][:1]} if "passage_1" in given else reply

    with EditingServer(one_sided) as server:
        method = _method(server, tmp_path / "other", passage_words=8, multi_hop=2, dedup=1.0)
        dropped = generate(corpus, tmp_path / "one-sided", method, n=5)
    # n counts queries: two more single passages stand in for the pairs dropped
    assert dropped.dropped == {"evidence in one document": 2} and dropped.queries == 5


def test_a_rerun_of_the_cli_makes_no_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus(tmp_path / "docs", SERVICES)
    with EditingServer(_unchanged) as server:
        for attempt in ("first", "second"):
            argv = [
                "datasets", "generate", str(corpus), "--out", str(tmp_path / attempt),
                "--method", "llm", "--base-url", server.url, "--model", "scripted",
                "--llm-cache", str(tmp_path / "cache"), "--embedder", json.dumps(HASHING),
                "--n", "3", "--min-words", "5",
            ]  # fmt: skip
            assert main(argv) == 0
        assert server.requests["/v1/chat/completions"] == 3
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"{tmp_path / 'first'}: 3 queries written (method llm)")
    assert "LLM requests: 3 made, 0 cached" in printed
    assert "LLM requests: 0 made, 3 cached" in printed
    first, second = (tmp_path / "first/queries.jsonl", tmp_path / "second/queries.jsonl")
    assert first.read_bytes() == second.read_bytes()


# ---------------------------------------------------------------- bad input


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


LLM = ["--method", "llm", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--n", "0"], "--n: expected an integer >= 1, got 0"),
        (["--n", "many"], "--n: expected an integer, got 'many'"),
        (["--window", "0"], "--window: expected an integer >= 1, got 0"),
        (["--method", "magic"], "--method: expected one of ict, headings, llm, got 'magic'"),
        (["--method", "headings", "--window", "2"], "--window: applies to --method ict only"),
        (["--dedup", "0.9"], "--dedup: applies to --method llm only"),
        (["--method", "llm"], "--method llm: give --base-url and --model"),
        ([*LLM, "--min-match", "101"], "--min-match: expected a number from 0.0 to 100.0"),
        ([*LLM, "--max-overlap", "nan"], "--max-overlap: expected a number from 0.0 to 1.0"),
        ([*LLM, "--multi-hop", "9", "--n", "5"], "--multi-hop: expected an integer from 0 to 5"),
        ([*LLM, "--embedder", "{x"], "--embedder: invalid JSON"),
        ([*LLM, "--embedder", '{"kind": "nope"}'], "--embedder.kind: unknown embedder kind"),
        (
            "--method llm --base-url https://elsewhere.example/v1 --model m "
            "--credential OPENAI_API_KEY".split(),
            "--base-url: credential 'OPENAI_API_KEY' may not be sent to https://elsewhere.example",
        ),
    ],
)
def test_bad_flags_are_one_line_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["datasets", "generate", str(DEMO), "--out", str(tmp_path / "set"), *flags]
    assert message in one_line_exit_2(argv, capsys)
    assert not (tmp_path / "set").exists()


def test_bad_corpus_and_output_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file.txt").write_text("x")
    err = one_line_exit_2(["datasets", "generate", str(DEMO), "--out", str(taken)], capsys)
    assert f"{taken}: already exists and is not an empty folder" in err
    plain = _corpus(tmp_path / "plain", {"notes.txt": "No headings here. " * 30})
    argv = [
        "datasets",
        "generate",
        str(plain),
        "--out",
        str(tmp_path / "x"),
        "--method",
        "headings",
    ]
    assert f"{plain}: no headings (Markdown # or HTML <h1>-<h6>)" in one_line_exit_2(argv, capsys)
    argv = ["datasets", "generate", str(tmp_path / "missing"), "--out", str(tmp_path / "y")]
    assert "missing: no such file or folder" in one_line_exit_2(argv, capsys)


def test_generate_reads_the_files_the_globs_select(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus(tmp_path / "docs", {"guide.md": GUIDE, "ports.html": PORTS})
    (corpus / "build").mkdir()
    (corpus / "build" / "old.md").write_text(GUIDE.replace("Kestrel", "Osprey"), encoding="utf-8")
    (corpus / "queries.jsonl").write_text('{"query": "q", "relevant": ["guide.md"]}\n')

    def written(out: str, *globs: str) -> list[str]:
        argv = ["datasets", "generate", str(corpus), "--out", str(tmp_path / out)]
        assert main([*argv, *globs, "--min-words", "5"]) == 0
        files = (tmp_path / out / "corpus").rglob("*")
        return sorted(str(p.relative_to(tmp_path / out / "corpus")) for p in files if p.is_file())

    assert written("a", "--exclude", "build/**", "--exclude", "*.html") == ["guide.md"]
    label = corpus / "queries.jsonl"  # not read as labels: the globs select from the folder
    expected = f"skipped {label}: label file of a labeled set, not a document\n"
    assert capsys.readouterr().err == expected
    assert written("b", "--include", "build/*") == ["build/old.md"]
    assert capsys.readouterr().err == ""
    argv = ["datasets", "generate", str(DEMO), "--out", str(tmp_path / "x"), "--exclude", "a/**"]
    err = one_line_exit_2(argv, capsys)
    assert err.startswith("ragbench datasets generate: --include/--exclude: ")
    assert "is a labeled set (spans format)" in err
