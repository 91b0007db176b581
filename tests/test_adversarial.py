"""The bad-input matrix: every case is a command a user could type with something wrong in it.

Each case runs the real CLI (``ragbench.cli.main``) and asserts the exit code, that stderr is
one line naming the offending file, key or flag, that no traceback is printed (an
unexpected exception fails the case) and, where it says so, that nothing was written
(``tests.adversarial.check``). A few run as subprocesses too, as a user would; the tests after
the matrix check behaviour a new user found wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adversarial import (
    _DROP,
    DOC,
    GOOD_Q,
    Case,
    _bad_json_set,
    _beir,
    _config,
    _dataset,
    _finished_run,
    _text,
    _unwritable,
    _validate_and_run,
    _yaml,
    check,
    cli,
    run,
)
from tests.paths import DEMO, require

_SIZE = "sweep.chunker[0].size"
_SIZED = {"sweep__chunker": [{"kind": "recursive", "size": 10**23}]}
_SIZED_TRUE = {"sweep__chunker": [{"kind": "recursive", "size": True}]}
_I64 = "9,223,372,036,854,775,807 (int64)"
_RO = "/r: cannot write there"
_PORT = "expected a port from 0 to 65535 (0: any free port)"
_NEGATIVE = "expected a relevance grade >= 0, found -2"
_BLOB = bytes(range(256))
_TWICE = f"""name: twice
dataset: {{path: {DEMO}}}
evaluation: {{metrics: [ndcg@10]}}
sweep: {{retriever: [{{kind: bm25}}], chunker: [{{kind: recursive, size: 400}}]}}
evaluation: {{depth: 5}}
"""
_SIZE_TWICE = _TWICE.rsplit("evaluation:", 1)[0].replace("400", "400, size: 1200")
_SPLIT_TWICE = '{"query": "segments", "split": "test", "split": "dev", "relevant": ["a.md"]}'
_JSON_TWICE = '{"retriever": {"kind": "bm25"}, "retriever": {}}'


def _ro(work: Path) -> str:
    return str(_unwritable(work) / "r")


CASES = [
    # ---------------------------------------------------------------- experiment configs
    Case("missing config", lambda w: ["run", str(w / "nope.yaml"), "--dry-run"], 2, "nope.yaml"),
    Case(
        "not UTF-8",
        lambda w: ["run", _text(w, "latin.yaml", b"name: caf\xe9\n"), "--dry-run"],
        2,
        "latin.yaml",
    ),
    Case(
        "broken YAML",
        lambda w: ["run", _yaml(w, "broken", "name: x\nsweep: {a: [1,\n"), "--dry-run"],
        2,
        "line",
    ),
    Case(
        "a list at the top",
        lambda w: ["run", _yaml(w, "lst", "- 1\n- 2\n"), "--dry-run"],
        2,
        "lst.yaml",
    ),
    Case("empty file", lambda w: ["run", _yaml(w, "empty", ""), "--dry-run"], 2, "empty.yaml"),
    run("unknown top key", 2, "colour", colour="blue"),
    run("bad name", 2, "name", name="has space"),
    run("no dataset", 2, "dataset", dataset=_DROP),
    run("dataset path missing", 2, "/no/such/set", dataset={"path": "/no/such/set"}),
    run("dataset format unknown", 2, "format", dataset={"path": str(DEMO), "format": "csv"}),
    run("unknown axis", 2, "sweep.colour", sweep__colour=[{"kind": "x"}]),
    run("unknown chunker", 2, "sweep.chunker[0].kind", sweep__chunker=[{"kind": "magic"}]),
    run(
        "overlap over size",
        2,
        "sweep.chunker[0].overlap",
        sweep__chunker=[{"kind": "recursive", "size": 100, "overlap": 200}],
    ),
    run(
        "negative size", 2, "sweep.chunker[0].size", sweep__chunker=[{"kind": "fixed", "size": -5}]
    ),
    run(
        "unknown chunker option",
        2,
        "sweep.chunker[0].colour",
        sweep__chunker=[{"kind": "recursive", "size": 300, "colour": 1}],
    ),
    run(
        "empty axis list",
        2,
        "sweep.chunker[0].size",
        sweep__chunker=[{"kind": "recursive", "size": []}],
    ),
    run("bm25 b above 1", 2, "sweep.retriever[0].b", sweep__retriever=[{"kind": "bm25", "b": 2}]),
    run(
        "bm25 unknown backend",
        2,
        "sweep.retriever[0].backend",
        sweep__retriever=[{"kind": "bm25", "backend": "lucene"}],
    ),
    run(
        "unknown fusion",
        2,
        "sweep.retriever[0].fusion",
        sweep__retriever=[{"kind": "hybrid", "fusion": {"kind": "magic"}}],
    ),
    run(
        "convex weights",
        2,
        "sweep.retriever[0].fusion",
        sweep__retriever=[{"kind": "hybrid", "fusion": {"kind": "convex", "weights": [1, 1]}}],
    ),
    run(
        "unknown store",
        2,
        "sweep.retriever[0].store",
        sweep__retriever=[{"kind": "dense", "store": {"kind": "faiss"}}],
    ),
    run("no retriever", 2, "sweep.retriever", sweep__retriever=[]),
    run("unknown reranker", 2, "sweep.reranker[0].kind", sweep__reranker=[{"kind": "magic"}]),
    run(
        "zero candidates",
        2,
        "sweep.reranker[0].candidates",
        sweep__reranker=[{"kind": "dense", "candidates": 0}],
    ),
    run(
        "unknown embedder option",
        2,
        "sweep.embedder[0].colour",
        sweep__embedder=[{"kind": "hashing", "colour": 1}],
    ),
    run(
        "mistyped model",
        2,
        "sweep.embedder[0].model",
        sweep__embedder=[{"kind": "sentence-transformers", "model": "all-MiniLM-L7-v2"}],
        sweep__retriever=[{"kind": "dense"}],
    ),
    run("unknown metric", 2, "ndcg@ten", evaluation={"metrics": ["ndcg@ten"]}),
    run("metric without cutoff", 2, "ndcg", evaluation={"metrics": ["ndcg"]}),
    run("cutoff on r_precision", 2, "r_precision@5", evaluation={"metrics": ["r_precision@5"]}),
    run("cutoff zero", 2, "recall@0", evaluation={"metrics": ["recall@0"]}),
    run("no metrics", 2, "evaluation.metrics", evaluation={"metrics": []}),
    run("depth zero", 2, "evaluation.depth", evaluation={"metrics": ["ndcg@10"], "depth": 0}),
    run("bad level", 2, "evaluation.level", evaluation={"metrics": ["ndcg@10"], "level": "page"}),
    run(
        "same split twice",
        2,
        "report_on",
        evaluation={"metrics": ["ndcg@10"], "select_on": "test", "report_on": "test"},
    ),
    run(
        "folds and report_on",
        2,
        "folds",
        evaluation={"metrics": ["ndcg@10"], "folds": 3, "select_on": "a", "report_on": "b"},
    ),
    run("tpe without n", 2, "search.n", search={"strategy": "tpe"}),
    run(
        "tpe objective",
        2,
        "search.objective",
        search={"strategy": "tpe", "n": 2, "objective": "map"},
    ),
    run("unknown strategy", 2, "search.strategy", search={"strategy": "bayes"}),
    run("baseline missing", 2, "baseline", baseline="no such trial"),
    run(
        "grid over the cap",
        2,
        "100,000",
        sweep__chunker=[
            {"kind": "recursive", "size": list(range(1, 500)), "overlap": [0], "unit": "chars"}
        ],
        sweep__retriever=[{"kind": "bm25", "k1": [x / 10 for x in range(1, 400)]}],
    ),
    run(
        "a key in a config",
        2,
        "sweep.reranker[0].api_key",
        sweep__reranker=[
            {"kind": "llm", "base_url": "https://x.example/v1", "model": "m", "api_key": "sk-1"}
        ],
    ),
    run(
        "any env name",
        2,
        "sweep.reranker[0].api_key_env",
        sweep__reranker=[
            {
                "kind": "llm",
                "base_url": "http://attacker.example",
                "model": "m",
                "api_key_env": "AWS_SECRET_ACCESS_KEY",
            }
        ],
    ),
    run(
        "key over plain http",
        2,
        "sweep.reranker[0]",
        sweep__reranker=[
            {
                "kind": "llm",
                "base_url": "http://attacker.example/v1",
                "model": "m",
                "credential": "OPENAI_API_KEY",
            }
        ],
    ),
    run(
        "base url not http",
        2,
        "sweep.reranker[0].base_url",
        sweep__reranker=[{"kind": "llm", "base_url": "file:///etc/passwd", "model": "m"}],
    ),
    run(
        "span metric on a set without spans",
        2,
        "span",
        dataset={"path": "BEIR"},
        evaluation={"metrics": ["span_recall@5"]},
    ),
    # ---------------------------------------------------------------- run flags
    Case(
        "--set without =",
        lambda w: ["run", _yaml(w, "s1", _config()), "--dry-run", "--set", "evaluation.depth"],
        2,
        "--set",
    ),
    Case(
        "--set bad YAML",
        lambda w: ["run", _yaml(w, "s2", _config()), "--dry-run", "--set", "evaluation.depth=[1,"],
        2,
        "--set",
    ),
    Case(
        "--set no such item",
        lambda w: [
            "run",
            _yaml(w, "s3", _config()),
            "--dry-run",
            "--set",
            "sweep.chunker[7].size=3",
        ],
        2,
        "--set",
    ),
    Case(
        "--set bad value",
        lambda w: ["run", _yaml(w, "s4", _config()), "--dry-run", "--set", "evaluation.depth=-3"],
        2,
        "evaluation.depth",
    ),
    Case(
        "--limit-queries -5",
        lambda w: ["run", _yaml(w, "l1", _config()), "--dry-run", "--limit-queries", "-5"],
        2,
        "--limit-queries",
    ),
    Case(
        "--limit-queries 0",
        lambda w: ["run", _yaml(w, "l2", _config()), "--dry-run", "--limit-queries", "0"],
        2,
        "--limit-queries",
    ),
    Case(
        "--resume --overwrite",
        lambda w: [
            "run",
            _yaml(w, "r1", _config()),
            "--out",
            str(w / "r1"),
            "--resume",
            "--overwrite",
        ],
        2,
        "--resume",
    ),
    Case(
        "existing run",
        lambda w: ["run", _yaml(w, "r2", _config(name="finished")), "--out", _finished_run(w)],
        2,
        "--resume",
    ),
    Case(
        "--workers 0",
        lambda w: [
            "run",
            _yaml(w, "wk", _config()),
            "--out",
            str(w / "wk"),
            "--executor",
            "process",
            "--workers",
            "0",
        ],
        2,
        "--workers",
    ),
    Case(
        "--dataset missing",
        lambda w: ["run", _yaml(w, "ds", _config()), "--dry-run", "--dataset", str(w / "nowhere")],
        2,
        "nowhere",
    ),
    # ---------------------------------------------------------------- datasets
    cli("validate missing", lambda w: ["datasets", "validate", str(w / "absent")], "absent"),
    cli(
        "validate empty folder", lambda w: ["datasets", "validate", str(w / "emptyset")], "emptyset"
    ),
    cli("info unknown format", lambda w: ["datasets", "info", str(DEMO), "--format", "csv"], "csv"),
    cli(
        "queries bad JSON",
        lambda w: ["datasets", "validate", _bad_json_set(w)],
        "queries.jsonl",
        code=1,
    ),
    cli(
        "evidence not in document",
        lambda w: [
            "datasets",
            "validate",
            _dataset(
                w,
                "noevidence",
                [{**GOOD_Q, "evidence": [{"doc_id": "a.md", "text": "not there"}]}],
                {"a.md": DOC},
            ),
        ],
        "queries.jsonl",
        code=1,
    ),
    cli(
        "empty corpus",
        lambda w: ["datasets", "validate", _dataset(w, "nocorpus", [GOOD_Q], {})],
        "corpus",
        code=1,
    ),
    # ---------------------------------------------------------------- eval
    cli(
        "eval qrels dir",
        lambda w: ["eval", "--qrels", str(w), "--run", _text(w, "r.trec", "q1 Q0 d1 1 1.0 t\n")],
        "--qrels",
    ),
    cli(
        "eval run missing",
        lambda w: [
            "eval",
            "--qrels",
            _text(w, "q.tsv", "q1 0 d1 1\n"),
            "--run",
            str(w / "none.trec"),
        ],
        "--run",
    ),
    cli(
        "eval bad metric",
        lambda w: [
            "eval",
            "--qrels",
            _text(w, "q2.tsv", "q1 0 d1 1\n"),
            "--run",
            _text(w, "r2.trec", "q1 Q0 d1 1 1.0 t\n"),
            "--metrics",
            "ndcg@x",
        ],
        "ndcg@x",
    ),
    cli(
        "eval malformed qrels",
        lambda w: [
            "eval",
            "--qrels",
            _text(w, "q3.tsv", "q1 d1\n"),
            "--run",
            _text(w, "r3.trec", "q1 Q0 d1 1 1.0 t\n"),
        ],
        "q3.tsv",
    ),
    cli(
        "eval malformed run",
        lambda w: [
            "eval",
            "--qrels",
            _text(w, "q4.tsv", "q1 0 d1 1\n"),
            "--run",
            _text(w, "r4.trec", "q1 Q0 d1 1 high t\n"),
        ],
        "r4.trec",
    ),
    # ---------------------------------------------------------------- chunk
    cli("chunk bad JSON", lambda w: ["chunk", str(DEMO), "--chunker", "{size: 3"], "--chunker"),
    cli(
        "chunk unknown kind",
        lambda w: ["chunk", str(DEMO), "--chunker", '{"kind": "x"}'],
        "chunker.kind",
    ),
    cli(
        "chunk bad tokenizer",
        lambda w: [
            "chunk",
            str(DEMO),
            "--chunker",
            json.dumps(
                {"kind": "fixed", "size": 50, "unit": "tokens", "tokenizer": str(w / "no-tok")}
            ),
        ],
        "no-tok",
    ),
    cli(
        "chunk missing path",
        lambda w: ["chunk", str(w / "gone"), "--chunker", '{"kind": "none"}'],
        "gone",
    ),
    # ---------------------------------------------------------------- collections
    cli(
        "collection with a slash",
        lambda w: ["search", "x", "--collection", "a/b", "--db", str(w / "db")],
        "--collection",
    ),
    cli(
        "collection with a control char",
        lambda w: ["search", "x", "--collection", "a\x07b", "--db", str(w / "db")],
        "--collection",
    ),
    cli(
        "collection name too long",
        lambda w: ["search", "x", "--collection", "c" * 300, "--db", str(w / "db")],
        "--collection",
    ),
    cli(
        "no such collection",
        lambda w: ["search", "x", "--collection", "nothing", "--db", str(w / "db")],
        "nothing",
    ),
    cli("search -k 0", lambda w: ["search", "x", "-k", "0", "--db", str(w / "db")], "-k"),
    cli(
        "ingest bad --config",
        lambda w: [
            "ingest",
            "--source",
            str(DEMO),
            "--db",
            str(w / "db"),
            "--collection",
            "c1",
            "--config",
            "[1",
        ],
        "--config",
    ),
    cli(
        "ingest unknown key",
        lambda w: [
            "ingest",
            "--source",
            str(DEMO),
            "--db",
            str(w / "db"),
            "--collection",
            "c2",
            "--config",
            '{"store": {}}',
        ],
        "pipeline.store",
    ),
    cli(
        "ingest nothing",
        lambda w: ["ingest", "--db", str(w / "db"), "--collection", "c3"],
        "--source",
    ),
    cli(
        "ingest --from-run without --trial",
        lambda w: ["ingest", "--from-run", str(w), "--db", str(w / "db")],
        "--trial",
    ),
    cli(
        "ingest --from-run not a run",
        lambda w: ["ingest", "--from-run", str(w / "x"), "--trial", "best", "--db", str(w / "db")],
        "x",
    ),
    cli(
        "ingest unknown trial",
        lambda w: [
            "ingest",
            "--from-run",
            _finished_run(w),
            "--trial",
            "nope",
            "--db",
            str(w / "db"),
        ],
        "nope",
    ),
    # ---------------------------------------------------------------- report, compare, cache
    cli("report not a run", lambda w: ["report", str(w)], "manifest.json"),
    cli(
        "report bad metric", lambda w: ["report", _finished_run(w), "--metric", "map@7"], "--metric"
    ),
    cli(
        "report bad baseline",
        lambda w: ["report", _finished_run(w), "--baseline", "zzz"],
        "--baseline",
    ),
    cli(
        "compare bad metric",
        lambda w: ["compare", _finished_run(w), "--metric", "mrr@3"],
        "--metric",
    ),
    cli(
        "cache --older-than ''",
        lambda w: ["cache", "--root", str(w / "c"), "clear", "--older-than", ""],
        "--older-than",
    ),
    cli(
        "cache --older-than 7x",
        lambda w: ["cache", "--root", str(w / "c"), "clear", "--older-than", "7x"],
        "--older-than",
    ),
    # ---------------------------------------------------------------- a new user's report
    # (by case number; 13, 15 and 17 are behaviour, tested in test_serve.py: a re-ingest
    # served, a search waiting for an ingest, JSON answers to every method)
    run("1: size past int64", 2, f"{_SIZE}: expected an integer of at most {_I64}", **_SIZED),
    cli("2: unwritable --out", lambda w: ["report", _finished_run(w), "--out", _ro(w)], _RO),
    cli(
        "3: unwritable cache",
        lambda w: ["run", _yaml(w, "rc", _config()), "--out", str(w / "rc")],
        "RAGBENCH_CACHE",
        absent="rc",
        env=lambda w: {"RAGBENCH_CACHE": _ro(w)},
    ),
    cli("4: --port 70000", lambda w: ["serve", "--port", "70000"], f"--port 70000: {_PORT}"),
    cli("5: --port -1", lambda w: ["serve", "--port", "-1"], f"--port -1: {_PORT}"),
    Case(
        "6: two evaluation blocks",
        lambda w: ["run", _yaml(w, "dup6", _TWICE), "--dry-run"],
        2,
        "dup6.yaml: line 5 invalid YAML (key 'evaluation' given twice, on lines 3 and 5",
    ),
    Case(
        "7: size twice",
        lambda w: ["run", _yaml(w, "dup7", _SIZE_TWICE), "--dry-run"],
        2,
        "dup7.yaml: line 4 invalid YAML (key 'size' given twice, on line 4, columns ",
    ),
    Case(
        "7: --set twice",
        lambda w: [
            "run",
            _yaml(w, "dup7s", _config()),
            "--dry-run",
            "--set",
            "sweep.chunker[0]={kind: fixed, size: 4, size: 8}",
        ],
        2,
        "(key 'size' given twice",
    ),
    *_validate_and_run("7: dup", [_SPLIT_TWICE], "queries.jsonl:1: key 'split' given twice"),
    cli(
        "7: --config twice",
        lambda w: ["ingest", "--source", str(DEMO), "--db", str(w / "db"), "--config", _JSON_TWICE],
        "--config: key 'retriever' given twice",
        absent="db/default",
    ),
    run("8: size true", 2, f"{_SIZE}: expected a number, got true (a boolean)", **_SIZED_TRUE),
    run(
        "9: k1 .inf",
        2,
        "sweep.retriever[0].k1: Input should be a finite number (got inf)",
        sweep__retriever=[{"kind": "bm25", "k1": float("inf")}],
    ),
    *_validate_and_run("10: no queries", [], "no judged queries"),
    *_validate_and_run(
        "11: split ''",
        [{**GOOD_Q, "split": ""}],
        "queries.jsonl:1: query 'q1': expected a split name under 'split'",
    ),
    cli(
        "12: binary --source",
        lambda w: [
            "ingest",
            "--source",
            _text(w, "blob.txt", _BLOB),
            "--db",
            str(w / "db"),
            "--collection",
            "blob",
        ],
        "blob.txt: no documents loaded: binary file",
        absent="db/blob",
    ),
    run(
        "14: ndcg@huge",
        2,
        "metric 'ndcg@99999999999999999999999': the cutoff must be from 1 to 100,000",
        evaluation={"metrics": ["ndcg@99999999999999999999999"]},
    ),
    run(
        "14: depth huge",
        2,
        "evaluation.depth: Input should be less than or equal to 100000",
        evaluation={"metrics": ["ndcg@10"], "depth": 10**6},
    ),
    cli(
        "16: --db a file",
        lambda w: ["search", "x", "--db", _text(w, "dbfile", "")],
        "dbfile: is a file, not a folder of collections",
    ),
    cli(
        "18: search ''",
        lambda w: ["search", "", "--db", str(w / "db")],
        'query: expected a non-empty string, got ""',
    ),
    *_validate_and_run(
        "19: grade",
        [{**GOOD_Q, "qrels": {"b.md": -2}}],
        "query 'q1': qrels['b.md']: expected a relevance grade >= 0, found -2",
    ),
    cli(
        "19: eval grade",
        lambda w: [
            "eval",
            "--qrels",
            _text(w, "q5.tsv", "q1 0 d1 -2\n"),
            "--run",
            _text(w, "r5.trec", "q1 Q0 d1 1 1.0 t\n"),
        ],
        f"q5.tsv:1: {_NEGATIVE}",
    ),
    cli(
        "19: BEIR grade",
        lambda w: ["datasets", "validate", _beir(w, "q1\td1\t-2\n")],
        f"test.tsv:2: {_NEGATIVE}",
        1,
    ),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder each case writes its files into; a tiny BEIR set lives there as ``BEIR``."""
    require(DEMO)
    root = tmp_path_factory.mktemp("adversarial")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": DOC}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "segments"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


def test_the_matrix_is_large_and_its_cases_are_distinct() -> None:
    assert len(CASES) >= 60
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_naming_it(
    case: Case, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    check(case, work, capsys, monkeypatch)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "/no/such/config.yaml"],
        ["eval", "--qrels", "/no/qrels", "--run", "/no/run"],
        ["search", "x", "--collection", "../etc"],
    ],
)
def test_as_a_process_the_message_is_one_line_without_traceback(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
