"""The benchmarks run end to end on tiny slices and write RESULTS.md with every section.

Only structure and numbers-are-numbers are checked: speed targets live in the benchmark output,
never in tests. Parts that need the shared SciFact / chunking-evaluation data skip cleanly
when it is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.paths import CHUNKING_EVAL, DEMO, REPO, SCIFACT, require

TUNED = REPO / "experiments" / "scifact-tuned.yaml"

# The tiny run is a module fixture: one xdist worker runs every test that reads it.
TINY_GROUP = pytest.mark.xdist_group("benchmarks-tiny")
NUMBER = re.compile(r"^[+-]?\d[\d,]*(\.\d+)?(e[+-]?\d+)?(x|%)?$")


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first Markdown table after ``heading``."""
    after = text.split(heading, 1)[1]
    rows = []
    for line in after.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows or line.startswith("#"):
            break
    return rows[2:]  # drop the header and the separator


def _is_number(cell: str) -> bool:
    return bool(NUMBER.match(cell.split(" ")[0]))


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``python -m benchmarks --tiny`` into a temporary file, with its own stage cache."""
    tmp = tmp_path_factory.mktemp("bench")
    _tiny(tmp / "RESULTS.md", tmp / "cache", timeout=600)
    return (tmp / "RESULTS.md").read_text(encoding="utf-8")


def _tiny(out: Path, cache: Path, *args: str, timeout: int) -> None:
    """``python -m benchmarks --tiny [args] --out out`` with ``cache`` as its stage cache."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", *args, "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "RAGBENCH_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@TINY_GROUP
def test_tiny_results_have_every_section(tiny_results: str) -> None:
    for heading in [
        "# ragbench benchmark results",
        "## How to regenerate",
        "## Machine",
        "## Sections",
        "## Quality",
        "### SciFact (BEIR test split)",
        "### Chunking evaluation (Chroma)",
        "### Tuned SciFact sweep",
        "### Cross-encoder reranking path",
        "## Speed",
        "### Against the libraries ragbench wraps",
        "### Engine: 12-trial sweep",
        "### Cross-encoder latency per query",
        "### Peak memory of the SciFact sweep",
    ]:
        assert heading in tiny_results, heading
    assert "Tiny smoke run" in tiny_results
    assert "python -m benchmarks --full" in tiny_results
    machine = dict(r[:2] for r in _table(tiny_results, "## Machine"))
    assert machine["cores"].split()[0].isdigit()
    assert machine["Python"] == sys.version.split()[0]


@TINY_GROUP
def test_tiny_results_are_the_modules_sections_each_stamped(tiny_results: str) -> None:
    from benchmarks import results

    parts = [p.heading for members in results.GROUPS.values() for p in members]
    assert [line for line in tiny_results.splitlines() if line.startswith("### ")] == parts
    for block in tiny_results.split("\n### ")[1:]:
        stamp = block.split("\n")[2]
        verb = "Written" if "\n_Skipped: " in block else "Measured"  # peers skips tiny runs
        assert re.fullmatch(
            verb + r" by `python -m benchmarks --tiny` on \d{4}-\d\d-\d\d \d\d:\d\d UTC at "
            r"commit \w+( \(with uncommitted changes\))?\.( \*\*The machine was busy\*\*.*)?",
            stamp,
        ), block[:300]
    assert "Updated since" not in tiny_results


@TINY_GROUP
def test_tiny_results_name_no_machine_path(tiny_results: str) -> None:
    # /proc files are the kernel's interface, named as the source of a figure, not a machine path
    paths = re.findall(r"(?<![\w.~`/])/[\w.-]+(?:/[\w.-]+)+", tiny_results)
    assert [p for p in paths if not p.startswith("/proc/")] == []
    assert str(REPO) not in tiny_results and tempfile.gettempdir() + "/" not in tiny_results


@TINY_GROUP
def test_only_draws_its_sections_again_and_keeps_the_others_verbatim(
    tiny_results: str, tmp_path: Path
) -> None:
    from benchmarks import results

    out = tmp_path / "RESULTS.md"
    out.write_text(tiny_results, encoding="utf-8")
    _tiny(out, tmp_path / "cache", "--only", "engine", timeout=300)
    before = {b[0]: b for b in results._blocks(tiny_results)}
    after = {b[0]: b for b in results._blocks(out.read_text(encoding="utf-8"))}
    assert list(before) == list(after)
    engine = "### Engine: 12-trial sweep, one chunker and one embedder"
    assert after[engine][2].startswith("Measured by `python -m benchmarks --tiny --only engine`")
    changed = [h for h in before if before[h] != after[h]]
    assert set(changed) <= {engine, "## Sections"}, changed
    rows = {r[0]: r for r in _table(out.read_text(encoding="utf-8"), "## Sections")}
    old_rows = {r[0]: r for r in _table(tiny_results, "## Sections")}
    assert {t for t in rows if rows[t] != old_rows[t]} <= {"Engine (12-trial sweep)"}


@TINY_GROUP
def test_tiny_results_engine_and_metrics_are_numbers(tiny_results: str) -> None:
    engine = {r[0]: r[1] for r in _table(tiny_results, "### Engine: 12-trial sweep")}
    assert len(engine) == 7
    assert all(_is_number(v) for v in engine.values()), engine
    speed = _table(tiny_results, "### Against the libraries ragbench wraps")
    metrics = [r for r in speed if r[0].startswith("metrics")]
    assert len(metrics) == 4
    assert all(_is_number(r[1]) for r in metrics), metrics
    ratios = [r[3] for r in metrics if r[3] != "–"]
    assert ratios and all(_is_number(v) for v in ratios)


@TINY_GROUP
def test_tiny_results_scifact_parts(tiny_results: str) -> None:
    if not SCIFACT.exists():
        assert "dataset not available" in tiny_results
        pytest.skip(f"dataset not available: {SCIFACT}")
    scifact = _table(tiny_results, "### SciFact (BEIR test split)")
    bm25 = [r for r in scifact if r[0].startswith("BM25")]
    assert len(bm25) == 4 and all(_is_number(r[2]) and _is_number(r[3]) for r in bm25)
    assert any(r[0].startswith("hashing embedder, exact") for r in scifact)
    speed = _table(tiny_results, "### Against the libraries ragbench wraps")
    labels = [r[0] for r in speed]
    assert any(label.startswith("BM25 search") for label in labels)
    assert any(label.startswith("embedding") for label in labels)
    assert all(_is_number(r[1]) for r in speed)
    latency = _table(tiny_results, "### Cross-encoder latency per query")
    assert [r[0] for r in latency] == ["5", "10", "20"]
    assert all(_is_number(r[1]) and _is_number(r[2]) for r in latency)
    proof = _table(tiny_results, "### Cross-encoder reranking path")
    assert [r[1] for r in proof] == ["ok", "ok"]
    tuned = _table(tiny_results, "### Tuned SciFact sweep")
    if TUNED.exists():
        assert tuned and all(_is_number(r[2]) and _is_number(r[3]) for r in tuned), tuned
        published = _table(tiny_results, "Against the published SciFact numbers")
        on_test = {r[0]: r[3] for r in tuned}  # metric -> the chosen trial on test
        assert {r[1] for r in published} >= {"BM25 (Anserini flat)", "all-MiniLM-L6-v2 (MTEB)"}
        for metric, _, reference, ours, delta, _ in published:
            assert ours == on_test[metric]
            assert float(delta.split()[0]) == pytest.approx(
                float(ours) - float(reference), abs=2e-4
            )
    memory = tiny_results.split("### Peak memory of the SciFact sweep", 1)[1]
    assert re.search(r"\n\d+ MB: ", memory)


@TINY_GROUP
def test_tiny_results_chunking(tiny_results: str) -> None:
    if not CHUNKING_EVAL.exists():
        pytest.skip(f"dataset not available: {CHUNKING_EVAL}")
    rows = _table(tiny_results, "### Chunking evaluation (Chroma)")
    assert len(rows) == 6
    for row in rows:
        assert _is_number(row[3]) and _is_number(row[5]) and _is_number(row[6]), row


# ---------------------------------------------------------------- each module's main


def test_bench_metrics_main(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_metrics

    assert bench_metrics.main(["--queries", "20", "--depth", "30", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "pytrec_eval (dict run)" in out and "max per-query" in out


def test_bench_retrieval_main(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_retrieval

    dataset = require(SCIFACT)
    argv = ["--dataset", str(dataset), "--docs", "100", "--queries", "3", "--repeat", "1"]
    assert bench_retrieval.main([*argv, "--random-vectors"]) == 0
    out = capsys.readouterr().out
    assert "ragbench vs bm25s" in out and "hnsw recall@10" in out and "random" in out


def test_bench_engine_main(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_engine

    assert bench_engine.main(["--limit-queries", "3", "--embedder", '{"kind": "hashing"}']) == 0
    out = capsys.readouterr().out
    assert "12 trials" in out and "corpus embedded 1.00 times" in out


def test_bench_embed_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_embed
    from benchmarks.models import local_model

    model = local_model("tiny-bi-encoder", tmp_path)
    argv = ["--dataset", "demo", "--texts", "4", "--model", str(model), "--repeat", "1"]
    assert bench_embed.main(argv) == 0
    out = capsys.readouterr().out
    assert "texts/s" in out and "max |ragbench - direct|" in out


def test_bench_rerank_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_rerank

    argv = ["--tiny", "--queries", "2", "--proof-queries", "2", "--candidates", "3", "5"]
    argv += ["--runs", str(tmp_path / "runs"), "--cache", str(tmp_path / "cache")]
    argv += ["--dataset", str(DEMO), "--set", "sweep.reranker[1].max_length=64"]
    argv += ["--set", "sweep.reranker[1].candidates=5"]
    assert bench_rerank.main(argv) == 0
    out = capsys.readouterr().out
    assert "random weights" in out
    assert re.search(r"^\s+3\s+\d+\.\d", out, re.MULTILINE)


def test_bench_quality_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_quality

    sliced = bench_quality.tiny_beir(require(SCIFACT), tmp_path / "scifact", n_queries=3)
    argv = ["--full", "--limit-queries", "3", "--runs", str(tmp_path / "runs")]
    argv += ["--cache", str(tmp_path / "cache"), "--set", f"dataset.path={sliced}"]
    argv += ["--set", "sweep.embedder=[{kind: hashing}]"]
    assert bench_quality.main(argv) == 0
    out = capsys.readouterr().out
    assert '"dense-hnsw"' in out and '"hnsw_ndcg_loss"' in out


def test_bench_scale_corpus_is_seeded_and_a_prefix_of_larger_ones() -> None:
    from benchmarks import bench_scale
    from ragbench.text.tokenize import ENGLISH_STOPWORDS

    def passages(seed: int, n: int) -> list[tuple[str, str]]:
        batches = bench_scale.Corpus(seed, batch=10).batches(n)
        return [pair for ids, texts in batches for pair in zip(ids, texts, strict=True)]

    n = 23  # three batches
    large = passages(3, n)
    assert passages(3, 7) == large[:7]
    assert [i for i, _ in large] == [bench_scale.chunk_id(i) for i in range(n)]
    assert passages(4, 7) != large[:7]
    low, high = bench_scale.PASSAGE_WORDS
    assert all(low <= len(t.split()) <= high for _, t in large)
    corpus = bench_scale.Corpus(3)
    words = bench_scale.vocabulary()
    assert len(words) == len(set(words)) == bench_scale.VOCABULARY
    assert set(words[: len(ENGLISH_STOPWORDS)]) == ENGLISH_STOPWORDS
    assert len(words[100]) < len(words[-1])  # frequent words are shorter
    queries = corpus.queries(5)
    assert queries == bench_scale.Corpus(3).queries(5)
    low, high = bench_scale.QUERY_WORDS
    assert all(low <= len(q.split()) <= high for q in queries)


def test_bench_scale_exponent_is_the_log_log_slope() -> None:
    from benchmarks.bench_scale import exponent

    sizes = [1e4, 1e5, 1e6]
    assert exponent(sizes, [3 * n**1.5 for n in sizes]) == pytest.approx(1.5)
    assert exponent(sizes, [2.0, 2.0, 2.0]) == pytest.approx(0.0)
    assert exponent(sizes[:1], [1.0]) is None


def test_bench_scale_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_scale

    plot = tmp_path / "scale.png"
    argv = ["--sizes", "300", "600", "--queries", "5", "--work", str(tmp_path / "work")]
    assert bench_scale.main([*argv, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^(exact|hnsw|bm25)\s+(300|600)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", out, re.M)
    assert len(rows) == 6 and all(_is_number(c) for r in rows for c in r[2:]), out
    assert out.count("growth exponents") == 3
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [bench_scale.QUERY_VECTORS]
