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
from typing import Any

import pytest

from tests.paths import CHUNKING_EVAL, DEMO, REPO, SCIFACT, require

TUNED = REPO / "experiments" / "scifact-tuned.yaml"
MAN_PAGES = Path("/usr/share/man/man1")
DOC = Path("/usr/share/doc")

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
    row = r"^(exact|hnsw|bm25s?)\s+(300|600)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$"
    rows = re.findall(row, out, re.M)
    assert len(rows) == 8 and all(_is_number(c) for r in rows for c in r[2:]), out
    assert out.count("growth exponents") == 4
    ratios = re.findall(r"^bm25 / bm25s at (300|600): .* top-10 agreement (\d+)%", out, re.M)
    assert [r[0] for r in ratios] == ["300", "600"], out
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [bench_scale.QUERY_VECTORS]


def test_bench_scale_some_stores_only_and_the_scale_curve_kept(tmp_path: Path) -> None:
    """``--stores bm25 bm25s`` measures those two (nothing embedded); ``--only scale`` then
    draws their comparison and keeps the scale curve an earlier run wrote."""
    from benchmarks import bench_scale, bm25s_alone, results

    found = bench_scale.measure((300,), 5, work=tmp_path / "work", stores=["bm25s", "bm25"])
    assert [r["store"] for r in found["rows"]] == ["bm25", "bm25s"] and found["restricted"]
    assert not list((tmp_path / "work").iterdir())  # no vectors
    assert found["corpus"]["chunks"] == 300 and found["corpus"]["mean_words"] > 100
    (pair,) = found["bm25s"]
    assert set(pair["ratios"]) == {"build_s", "peak_mb", "p50_ms"}
    assert pair["bm25s"]["agreement"]["ties_aside"] == 1.0
    curve = [bench_scale.SCALE.heading, "", "Measured by an earlier run.", "", "| index |"]
    out = tmp_path / "RESULTS.md"
    out.write_text("\n".join(["# results", "", "## Speed", "", *curve]) + "\n", encoding="utf-8")
    run = {
        "command": "python -m benchmarks --full --only scale --stores bm25 bm25s",
        "machine": {"commit": "abc1234", "dirty": False, "date": "2026-01-01 00:00 UTC"},
        "other_cpu": 0.0,
        "sections": {"scale": {**found, "_seconds": 1.0}},
    }
    text = results.update(run, out, ["scale"]).read_text(encoding="utf-8")
    assert "\n".join(curve) + "\n\n" + bm25s_alone.BM25S.heading in text
    rows = _table(text, bm25s_alone.BM25S.heading)
    assert len(rows) == 1 and rows[0][0] == "300" and all(_is_number(c) for c in rows[0]), rows
    assert "`--stores bm25 bm25s`" in text and "Measured by `python -m benchmarks" in text


@pytest.mark.parametrize("corpus", ["synthetic", "scifact"])
def test_ragbench_bm25_and_bm25s_alone_give_the_same_top_10(corpus: str) -> None:
    """ragbench's BM25 and bm25s used alone, as the scale benchmark runs them (real bm25s):
    the same top-10, documents tied at the 10th score aside, ranked by the same scores (up to
    the (k1 + 1) factor bm25s leaves out; equal scores in any order)."""
    import numpy as np

    from benchmarks import bench_scale, bm25s_alone
    from ragbench.index.sparse import BM25Config, BM25Index

    if corpus == "synthetic":
        source = bench_scale.Corpus(5, batch=500)
        batches, queries = list(source.batches(3000)), source.queries(100)
    else:
        batches, queries = _scifact_batches(require(SCIFACT), 3000, 100)
    ours, alone = BM25Index(), bm25s_alone.Bm25sAlone()
    for ids, texts in batches:
        ours.add(ids, texts)
        alone.add(ids, texts)
    a, b = ours.search(queries, 10), alone.search(queries, 10)
    assert (a.ids != "").sum() > 500  # not vacuous
    for q in range(len(queries)):
        hits = a.ids[q] != ""
        assert (b.ids[q] != "").sum() == hits.sum(), queries[q]
        expected = a.scores[q][hits] / (BM25Config().k1 + 1)
        np.testing.assert_allclose(b.scores[q][hits], expected, rtol=1e-5)
        kth = expected.min() if hits.all() else -np.inf
        above = a.ids[q][hits][expected > kth * (1 + 1e-5)]
        assert set(b.ids[q][: len(above)]) == set(above), queries[q]  # order: by the scores
    found = bm25s_alone.agreement(b.ids.tolist(), a.ids.tolist(), a.scores.tolist())
    assert found["ties_aside"] == 1.0 and found["top"] > 0.95


def _scifact_batches(
    path: Path, n_docs: int, n_queries: int
) -> tuple[list[tuple[list[str], list[str]]], list[str]]:
    """The first ``n_docs`` SciFact abstracts (title and text) in batches of 1000, and the
    first ``n_queries`` queries."""
    import gzip
    import json

    with gzip.open(path / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for _, line in zip(range(n_docs), f, strict=False)]
    with open(path / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for _, line in zip(range(n_queries), f, strict=False)]
    ids, texts = [d["_id"] for d in docs], [f"{d['title']} {d['text']}" for d in docs]
    batches = [(ids[i : i + 1000], texts[i : i + 1000]) for i in range(0, n_docs, 1000)]
    return batches, queries


def _corpus_sources(tmp: Path) -> Any:
    """Small slices of what the corpus is built from: 150 SciFact abstracts and a chunking
    corpus when shared, a copy of the standard library's ``json`` package with the same README
    in two packages beside it, three /usr/share/doc packages and twelve manual pages when
    present."""
    import gzip
    import itertools
    import json
    import shutil

    from benchmarks import corpus

    python = tmp / "python"
    shutil.copytree(
        Path(json.__file__).parent, python / "json", ignore=shutil.ignore_patterns("__pycache__")
    )
    for package in ("first", "second"):
        (python / package).mkdir()
        (python / package / "README.txt").write_text(json.__doc__ or "", encoding="utf-8")
    debian = None
    if DOC.is_dir():
        debian = tmp / "doc"
        folders = (d for d in sorted(DOC.iterdir()) if d.is_dir() and not d.is_symlink())
        small = (d for d in folders if sum(f.stat().st_size for f in d.rglob("*")) < 50_000)
        for folder in itertools.islice(small, 3):
            shutil.copytree(folder, debian / folder.name, symlinks=True)
    man = None
    if shutil.which("groff") and MAN_PAGES.is_dir():
        man = tmp / "man"
        (man / "man1").mkdir(parents=True)
        for page in _man_pages()[:12]:
            shutil.copy(page, man / "man1" / page.name)
    scifact = chunking = None
    if SCIFACT.is_dir():
        scifact = tmp / "scifact"
        scifact.mkdir()
        with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
            head = "".join(itertools.islice(lines, 150))
        (scifact / "corpus.jsonl").write_text(head, encoding="utf-8")
    if CHUNKING_EVAL.is_dir():
        chunking = tmp / "chunking"
        chunking.mkdir()
        shutil.copy(CHUNKING_EVAL / "corpora" / "state_of_the_union.md", chunking)
    return corpus.Sources(
        scifact=scifact,
        chunking=chunking,
        python=(("lib", python),),
        debian=debian,
        man=man,
    )


def _tree(folder: Path) -> dict[str, bytes]:
    """Every visible file under ``folder`` by relative path, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def test_corpus_is_deduplicated_deterministic_and_loads_whole(tmp_path: Path) -> None:
    """A small corpus: every text once, the manifest's counts those of the files, a seeded
    sample that keeps each source's share and is the same for any number of workers, and
    ``ragbench.load`` reads every file as a document (the manifest and list are hidden)."""
    import json
    from collections import Counter

    import ragbench
    from benchmarks import corpus

    sources = _corpus_sources(tmp_path / "sources")
    whole = corpus.build(tmp_path / "whole", None, seed=3, sources=sources, workers=1)
    files = _tree(tmp_path / "whole")
    assert whole["documents"] == whole["available"] == len(files) > 20
    assert len(set(files.values())) == len(files)  # deduplicated by content
    readmes = [p for p in files if p.endswith("/README.txt")]
    assert len(readmes) == 1 and whole["sources"]["python-docs"]["left_out"]["duplicate text"] == 1
    assert any(p.startswith("python/lib/json/json.decoder.JSONDecoder") for p in files)
    assert all(
        len(b.decode().strip()) >= corpus.MIN_CHARS
        for p, b in files.items()
        if not p.endswith(".pdf")
    )
    if sources.man is not None:
        man = [p for p in files if p.startswith("man/man1/")]
        assert man and all("NAME" in files[p].decode() for p in man)
        assert not any(corpus._PAGE in files[p].decode() for p in man)

    n = min(300, len(files) // 2)
    first = corpus.build(tmp_path / "a", n, seed=3, sources=sources, workers=1)
    assert corpus.build(tmp_path / "b", n, seed=3, sources=sources, workers=2) == first
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    other = corpus.build(tmp_path / "c", n, seed=4, sources=sources, workers=1)
    assert set(_tree(tmp_path / "c")) != set(_tree(tmp_path / "a")) and other["documents"] == n

    sample = _tree(tmp_path / "a")
    assert set(sample) <= set(files) and len(sample) == n == first["documents"]
    folders: Counter[str] = Counter()
    for source, figures in first["sources"].items():
        folders[source.split("-")[0]] += figures["documents"]  # python-api, python-docs
        share = figures["available"] / whole["available"] * n
        assert abs(figures["documents"] - share) < 1, source
    assert Counter(p.split("/")[0] for p in sample) == +folders
    assert sum(f["documents"] for f in first["sources"].values()) == n
    assert sum(first["extensions"].values()) == n
    assert first["bytes"]["total"] == sum(len(b) for b in sample.values())
    manifest = json.loads((tmp_path / "a" / corpus.MANIFEST).read_text(encoding="utf-8"))
    assert manifest == first and manifest["seed"] == 3
    listed = (tmp_path / "a" / corpus.FILES).read_text(encoding="utf-8").split()
    assert sorted(listed) == sorted(sample)

    loader = ragbench.load(tmp_path / "a")
    docs = list(loader)
    assert loader.report.skipped == 0, loader.report.summary()
    assert sorted(d.id for d in docs) == sorted(sample)


def test_corpus_rebuilds_its_own_folder_and_refuses_any_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import corpus
    from ragbench.errors import ConfigError

    sources = _corpus_sources(tmp_path / "sources")
    out = tmp_path / "corpus"
    corpus.build(out, 20, seed=1, sources=sources, workers=1)
    again = corpus.build(out, 10, seed=2, sources=sources, workers=1)
    assert len(_tree(out)) == again["documents"] == 10  # the first build's files are gone

    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.md").write_text("# my notes\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^--out .*mine: holds files this script did not "):
        corpus.build(user, 10, seed=1, sources=sources, workers=1)
    assert corpus.main(["--out", str(user), "--documents", "10"]) == 2
    assert (user / "notes.md").read_text(encoding="utf-8") == "# my notes\n"
    assert list(user.iterdir()) == [user / "notes.md"]
    assert "--out" in capsys.readouterr().err
    assert corpus.main(["--out", str(tmp_path / "new"), "--documents", "0"]) == 2
    assert "--documents 0: expected a positive number or 'all'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"^--documents 99999999: the sources .* give "):
        corpus.build(tmp_path / "new", 99_999_999, seed=1, sources=sources, workers=1)


def test_corpus_cuts_at_headings_and_paragraphs_near_the_target() -> None:
    """``cut`` keeps every word in order, starts a part at a top-level heading, and cuts at
    paragraph breaks near the target; ``parts`` names pieces the loader reads."""
    import json

    from benchmarks import corpus

    paragraphs = "\n\n".join(p for p in (json.__doc__ or "").split("\n\n") if p.strip())
    text = "\n\n".join([paragraphs] * 4 + ["# Second"] + [paragraphs] * 4)
    pieces = corpus.cut(text, iter(lambda: 1500, None))
    assert " ".join(pieces).split() == text.split()
    assert sum(p.startswith("# Second\n") for p in pieces) == 1
    assert all(len(p) <= 1500 * 3 // 2 for p in pieces)
    at = 0
    for piece in pieces[:-1]:  # each ends at a paragraph break
        at = text.index(piece, at) + len(piece)
        assert text[at : at + 2] == "\n\n", piece[-80:]
    long = text * (corpus.MAX_CHARS // len(text) + 1)
    for name in ("README.md", "copyright", "changelog.Debian", "Makefile"):
        named = corpus.parts(name, long)
        assert len(named) > 1 and all(corpus.loadable(n) for n, _ in named), named[0][0]
    assert corpus.parts("README.md", text) == [("README.md", text)]
    assert corpus.unusable("\n".join(str(i * 7.5) for i in range(200))) == "not prose"
    assert corpus.unusable("\n".join(sorted(set(text.split())))) == "not prose"  # a word list
    assert corpus.unusable(text) is None and corpus.unusable(text[:100]) == "too short"


def _man_pages() -> list[Path]:
    """The manual pages of section 1, sorted, no links."""
    return sorted(p for p in MAN_PAGES.glob("*.1.gz") if not p.is_symlink())


def test_corpus_renders_plain_manual_pages_in_one_call_as_each_alone() -> None:
    """Plain manual pages rendered in one groff call come out as each rendered alone, without
    header and footer lines; a page that defines macros is not plain."""
    import gzip
    import itertools
    import shutil

    from benchmarks import corpus

    if not shutil.which("groff") or not MAN_PAGES.is_dir():
        pytest.skip("groff or manual pages not available")
    sources = (gzip.decompress(p.read_bytes()).decode("utf-8", "replace") for p in _man_pages())
    plain = list(itertools.islice((s for s in sources if corpus.plain(s)), 12))
    if len(plain) < 3:
        pytest.skip("fewer than three plain manual pages")
    together = corpus._groff_pages(plain)
    assert together == [corpus._groff_pages([s])[0] for s in plain]
    assert all(text is not None and text.startswith("NAME\n") for text in together)
    assert not corpus.plain(".TH X 1\n.de Y\n..\n.SH NAME\nx \\- y\n")
