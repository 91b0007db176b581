"""Sweeps on a sample of the documents: what a sample keeps (judged documents, the corpus' mix),
that it is seeded and enters the fingerprint, ``--sample`` on ``run`` and ``optimize``, the
report's line, and a deploy command that indexes the whole folder."""

from __future__ import annotations

import json
import random
import shlex
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ragbench import optimize as optimize_module
from ragbench.cli import main
from ragbench.data.labeled import LabeledSet
from ragbench.data.sample import Sampled, choose, sample_set
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.store import RunStore
from ragbench.pipeline import RAGPipeline
from ragbench.report.agreement import agreement, run_agreement
from ragbench.report.compare import compare_runs, write_comparison
from ragbench.text.loaders import load
from ragbench.types import Document, Query
from tests.paths import DEMO

HASHING = "sweep.embedder=[{kind: hashing, dim: 64}]"
QUICK = [HASHING, "latency.queries=0"]

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def _sentence(i: int, j: int) -> str:
    """Eleven made-up words (no digit), drawn afresh for each document ``i`` and sentence
    ``j``, so that neighbouring sentences share few terms."""
    pick = random.Random(i * 1000 + j)
    words = ["".join(pick.choices(SYLLABLES, k=3)) for _ in range(11)]
    return f"The {' '.join(words)}."


def _folder(root: Path) -> Path:
    """Twelve documents: two folders, Markdown and text, short and long ones."""
    for i in range(12):
        folder = "guides" if i % 2 else "notes"
        suffix = ".md" if i % 3 else ".txt"
        sentences = 4 if i < 6 else 12
        text = " ".join(_sentence(i, j) for j in range(sentences)) + "\n"
        path = root / folder / f"doc{i:02d}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _labeled(documents: int = 40, queries: int = 10) -> LabeledSet:
    """``documents`` documents of growing size; query i judges documents i and i + 1."""
    docs = [
        Document(f"part{i % 2}/d{i:03d}.txt", "word " * (10 + 5 * i), {"format": "txt"})
        for i in range(documents)
    ]
    qrels = {f"q{i}": {docs[i].id: 1, docs[i + 1].id: 0} for i in range(queries)}
    return LabeledSet("toy", docs, [Query(f"q{i}", f"query {i}") for i in range(queries)], qrels)


def test_a_sample_keeps_every_judged_document_and_queries_when_they_fit() -> None:
    labeled = _labeled()
    sampled, info = sample_set(labeled, 24, seed=0)
    ids = {d.id for d in sampled.documents}
    judged = {d for grades in labeled.qrels.values() for d in grades}
    assert len(ids) == 24 and judged <= ids  # grade 0 judgements are kept too
    assert len(sampled.queries) == 10 and info == Sampled(24, 40, 0)
    assert sampled.qrels == labeled.qrels


def test_queries_are_sampled_when_their_documents_would_fill_the_sample() -> None:
    labeled = _labeled()
    sampled, info = sample_set(labeled, "25%", seed=1)  # 10 documents, 11 judged
    assert info is not None and info.documents == 10
    assert info.queries == len(sampled.queries) and info.queries_of == 10
    ids = {d.id for d in sampled.documents}
    judged = {d for q in sampled.queries for d in labeled.qrels[q.id]}
    assert len(judged) <= 5 and judged <= ids  # at most half the sample, every one kept
    assert info.text() == f"10 of 40 documents (seed 1), {info.queries} of 10 queries"


def test_a_sample_keeps_the_mix_of_folders_formats_and_sizes(tmp_path: Path) -> None:
    documents = list(load(_folder(tmp_path / "docs")))
    picked = choose(documents, 6, seed=3)
    assert len(picked) == 6

    def mix(docs: list[Document]) -> tuple[Counter[str], Counter[str], Counter[bool]]:
        return (
            Counter(d.id.split("/")[0] for d in docs),
            Counter(Path(d.id).suffix for d in docs),
            Counter(len(d.text) > 800 for d in docs),
        )

    for whole, half in zip(mix(documents), mix(picked), strict=True):
        for key, count in whole.items():
            assert abs(half[key] - count / 2) <= 1, (key, half, whole)


def test_a_sample_is_seeded_whatever_the_order_and_changes_the_fingerprint() -> None:
    labeled = _labeled()
    first, _ = sample_set(labeled, 30, seed=0)
    again, _ = sample_set(labeled, 30, seed=0)
    other, _ = sample_set(labeled, 30, seed=1)
    reordered = LabeledSet("toy", labeled.documents[::-1], labeled.queries, labeled.qrels)
    shuffled, _ = sample_set(reordered, 30, seed=0)
    ids = sorted(d.id for d in first.documents)
    assert ids == sorted(d.id for d in again.documents) == sorted(d.id for d in shuffled.documents)
    assert ids != sorted(d.id for d in other.documents)
    assert first.fingerprint == again.fingerprint
    assert len({labeled.fingerprint, first.fingerprint, other.fingerprint}) == 3
    whole, none = sample_set(labeled, "all", seed=0)
    assert whole is labeled and none is None


def _run_config(tmp_path: Path, docs: Path) -> Path:
    labels = [
        {"query": "harbour lantern story", "relevant": ["guides/doc01.md"]},
        {"query": "copper meadow part", "relevant": ["notes/doc02.md"]},
    ]
    (docs / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in labels) + "\n")
    config = {
        "name": "sampled",
        "dataset": {"path": str(docs)},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": 0},
        "sweep": {"retriever": [{"kind": "bm25"}]},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_run_sample_is_recorded_in_the_manifest_and_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    docs = _folder(tmp_path / "docs")
    config = _run_config(tmp_path, docs)
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out), "--sample", "50%"]) == 0
    printed = capsys.readouterr().out
    manifest = RunStore(out).manifest()
    assert manifest["dataset"]["sample"] == {"documents": 6, "of": 12, "seed": 0}
    assert manifest["dataset"]["documents"] == 6
    assert "Sample: the sweep ran on 6 of 12 documents (seed 0)" in printed
    assert "every document" in printed  # a labeled set is deployed whole from the run
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "a sample of 6 of 12 documents (seed 0)" in report
    # another sample is another dataset: a resume of the run is refused, naming the sample
    for flags, change in (
        (["--sample", "7"], "50% of the documents then, 7 documents now"),
        (["--sample", "all"], "50% of the documents then, every document now"),
        (["--sample", "50%", "--set", "dataset.sample_seed=4"], "seed 0 then, 4 now"),
    ):
        assert main(["run", str(config), "--out", str(out), *flags, "--resume"]) == 2
        error = capsys.readouterr().err
        assert f"cannot resume, the sample changed since the run started ({change})" in error


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sample", "0"], "--sample: expected a number of documents (1 or more)"),
        (["--sample", "120%"], "got '120%'"),
        (["--sample", "some"], 'a percentage ("25%") or "all", got \'some\''),
    ],
)
def test_bad_samples_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    docs = _folder(tmp_path / "docs")
    config = _run_config(tmp_path, docs)
    for command in (["run", str(config)], ["optimize", str(docs)]):
        assert main([*command, *argv]) == 2
        error = capsys.readouterr().err
        assert message in error and len(error.strip().splitlines()) == 1, error


def test_a_bad_sample_in_a_config_names_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _folder(tmp_path / "docs")
    config = _run_config(tmp_path, docs)
    raw = yaml.safe_load(config.read_text())
    raw["dataset"]["sample"] = -3
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("dataset.sample: expected a number of documents (1 or more), a "
                          'percentage ("25%") or "all", got -3')  # fmt: skip
    raw["dataset"]["sample"] = 5
    raw["evaluation"].update(select_on="test", report_on="train")
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config)]) == 2
    assert "dataset.sample: a sample keeps the documents of one split's" in capsys.readouterr().err


@pytest.mark.slow
def test_optimize_sweeps_a_sample_and_deploys_the_whole_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    docs = _folder(tmp_path / "docs")
    argv = ["optimize", str(docs), "--out", "out", "--n", "20", "--sample", "50%", "--seed", "2"]
    assert main([*argv, *(f"--set={s}" for s in QUICK)]) == 0
    printed = capsys.readouterr().out
    assert "sample:        6 of 12 documents (seed 2; --sample all sweeps every one)" in printed
    assert "generated from 6 documents" in printed
    assert "Sample: the sweep ran on 6 of 12 documents (seed 2)" in printed
    labels = next((tmp_path / "out").glob("labels-*"))
    assert len([p for p in (labels / "corpus").rglob("*") if p.is_file()]) == 6

    deploy = shlex.split(printed.rsplit("deploy:", 1)[1].strip())
    assert deploy[:2] == ["ragbench", "ingest"]
    assert any(word.endswith(str(docs.resolve())) for word in deploy)  # the whole folder
    db = tmp_path / "db"
    assert main([*deploy[1:], "--db", str(db)]) == 0
    deployed = RAGPipeline.open(db / "default")
    assert sorted(deployed.document_ids) == sorted(d.id for d in load(docs))


def test_optimize_samples_by_default_above_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    documents = list(load(_folder(tmp_path / "docs")))
    chars = sum(len(d.text) for d in documents)
    assert optimize_module.default_size(documents) is None  # far below the budget
    monkeypatch.setattr(optimize_module, "SAMPLE_CHARS", chars // 2)
    assert optimize_module.default_size(documents) == 6  # the documents of about half the text
    monkeypatch.setattr(optimize_module, "SAMPLE_CHARS", chars)
    assert optimize_module.default_size(documents) is None


def _two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """The config of ``_run_config`` with two BM25 trials, run on a sample of 6 of the 12
    documents and on all of them (the same config name); its path and the two run folders."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    config = _run_config(tmp_path, _folder(tmp_path / "docs"))
    raw = yaml.safe_load(config.read_text())
    raw["sweep"]["retriever"] = [{"kind": "bm25", "k1": [0.9, 1.5]}]
    config.write_text(yaml.safe_dump(raw))
    sampled, whole = tmp_path / "sampled", tmp_path / "whole"
    assert main(["run", str(config), "--out", str(sampled), "--sample", "6"]) == 0
    assert main(["run", str(config), "--out", str(whole)]) == 0
    return config, sampled, whole


def test_compare_and_agreement_name_each_run_and_the_documents_it_ranked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, sampled, whole = _two_runs(tmp_path, monkeypatch)
    table, warnings = compare_runs([sampled, whole])
    assert sorted(set(table["run"])) == [f"sampled ({sampled})", f"sampled ({whole})"]
    documents = dict(zip(table["run"], table["documents"], strict=False))
    assert documents[f"sampled ({sampled})"] == "a sample of 6 of 12 documents (seed 0)"
    assert documents[f"sampled ({whole})"] == "all 12 documents"
    assert any(w.startswith("runs differ in documents") for w in warnings)
    written = write_comparison(table, warnings, tmp_path / "cmp")
    for kind in ("md", "csv"):
        text = written[kind].read_text(encoding="utf-8")
        assert "a sample of 6 of 12 documents (seed 0)" in text and str(sampled) in text
    # one name alone when the names differ
    alone, _ = compare_runs([whole])
    assert set(alone["run"]) == {"sampled"}

    found = agreement(whole, sampled).to_markdown()
    assert "| documents | real all 12 documents, synthetic a sample of 6 of 12 documents" in found
    # a sampled config would rank each set's own sample: refused before any sweep
    raw = yaml.safe_load(config.read_text())
    raw["dataset"]["sample"] = 6
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"dataset\.sample: a sample draws each set's own"):
        run_agreement(str(config), tmp_path / "docs", tmp_path / "docs", out=tmp_path / "agr")
    assert not (tmp_path / "agr").exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("queries", "many", "dataset.sample.queries: expected an integer >= 0, got 'many'"),
        ("queries", 1.5, "dataset.sample.queries: expected an integer >= 0, got 1.5"),
        ("include", 5, "dataset.sample.include: expected a list of strings, got 5"),
        (
            "documents",
            100,
            "dataset.sample.documents: expected at most the 12 documents of 'of', got 100",
        ),
        ("seed", -1, "dataset.sample.seed: expected an integer >= 0, got -1"),
    ],
)
def test_a_recorded_sample_of_another_type_or_range_is_a_manifest_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object, message: str
) -> None:
    good = {"documents": 6, "of": 12, "seed": 0, "queries": 1, "queries_of": 2}
    with pytest.raises(DataError, match=r"^x\.json: dataset\.sample\."):
        Sampled.from_dict({**good, field: value}, "x.json: dataset.sample")
    assert Sampled.from_dict(good).text() == "6 of 12 documents (seed 0), 1 of 2 queries"
    with pytest.raises(DataError, match="queries: expected at most the 2 of 'queries_of'"):
        Sampled.from_dict({**good, "queries": 3})
    # in a run folder: every reader gives the one line naming the file
    run = tmp_path / "run"
    run.mkdir()
    manifest = {
        "config": {"name": "x", "dataset": {}, "evaluation": {"metrics": ["ndcg@10"]}},
        "dataset": {"path": "d", "split": "test", "name": "d", "documents": 6,
                    "sample": {**good, field: value}},
        "dataset_fingerprint": "f",
        "queries": {"count": 1},
        "evaluation": {"level": "document", "relevance_level": 1},
        "cache_root": "c",
    }  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for command in (["report", str(run), "--out", str(tmp_path / "r")], ["compare", str(run)]):
        assert main(command) == 2
        error = capsys.readouterr().err.strip()
        assert error.endswith(f"{run / 'manifest.json'}: {message}"), error
        assert len(error.splitlines()) == 1


def test_a_sample_too_small_for_a_query_and_a_bad_set_value_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    config = _run_config(tmp_path, _folder(tmp_path / "docs"))
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--sample", "1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(
        "dataset.sample: the sample of 1 document(s) keeps none of the 2 queries (each one's "
        "judged documents would fill more than half of it); use a larger --sample (or "
        "--sample all)"
    )
    assert main(["run", str(config), "--set", "dataset.sample=0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("--set dataset.sample=0: expected a number of documents (1 or more), "
                          'a percentage ("25%") or "all", got 0')  # fmt: skip
    assert str(config) not in error
    assert main(["run", str(config), "--set", "sweep.retriever=[{kind: bm25, k1: -1}]"]) == 2
    error = capsys.readouterr().err.strip()
    assert "--set sweep.retriever=[{kind: bm25, k1: -1}]: sweep.retriever[0].k1: " in error
    raw = yaml.safe_load(config.read_text())
    raw["evaluation"]["depth"] = 0  # the file's own value still names the file
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--set", "dataset.sample=5"]) == 2
    assert f"{config}: evaluation.depth: " in capsys.readouterr().err


def test_optimize_counts_your_queries_and_those_the_sample_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    docs = _folder(tmp_path / "docs")
    judged = ["guides/doc01.md", "notes/doc02.md", "guides/doc05.md"]
    labels = [{"query": f"query {i}", "relevant": [doc]} for i, doc in enumerate(judged)]
    (docs / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in labels))
    small = [
        "--set=sweep.retriever=[{kind: bm25}]",
        "--set=sweep.chunker=[{kind: recursive, size: 500}]",
    ]
    # 4 documents: their judged ones may fill 2, so 2 of the 3 queries are kept
    argv = ["optimize", str(docs), "--out", "out", "--sample", "4", *small]
    assert main([*argv, *(f"--set={s}" for s in QUICK)]) == 0
    printed = capsys.readouterr().out
    assert "(yours: 3 queries, 2 in the sample; --generate generates labels instead)" in printed


def test_a_config_error_from_the_sample_flag_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "name": "split",
        "dataset": {"path": str(DEMO)},
        "evaluation": {"metrics": ["ndcg@10"], "select_on": "dev", "report_on": "test"},
        "sweep": {"retriever": [{"kind": "bm25"}]},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), "utf-8")
    argv = ["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r"), "--sample", "5"]
    assert main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "ragbench run: --sample 5: a sample keeps the documents of one split's" in err, err


def _topics(topics: int, each: int) -> list[Document]:
    """``topics`` × ``each`` documents of one folder, format and size: a topic's documents share
    its own words, no two topics share any."""
    docs = []
    for t in range(topics):
        words = [f"{SYLLABLES[t]}{SYLLABLES[j]}" for j in range(12)]
        for d in range(each):
            text = " ".join(words[(d + j) % 12] for j in range(8))
            docs.append(Document(f"t{t:02d}d{d}.txt", text, {"format": "txt"}))
    return docs


def test_a_sample_keeps_the_nearest_neighbours_of_its_seeds() -> None:
    documents = _topics(20, 5)
    picked = choose(documents, 20, seed=0)
    assert len(picked) == 20
    topics = Counter(d.id[:3] for d in picked)
    # 10 seeds and, for each, documents of its own topic: at most 10 topics, none alone
    assert len(topics) <= 10 and min(topics.values()) >= 2, topics
    again = choose(documents[::-1], 20, seed=0)
    assert sorted(d.id for d in again) == sorted(d.id for d in picked)
