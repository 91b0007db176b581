"""Reports and exports of generation sweeps: answer and ragas metrics tested like rank metrics
(NaN queries left out with a note), tokens and cost per query beside latency, the
quality-vs-cost Pareto plot, answers in the drill-down (escaped), skipped metrics in the
summary, and ``ragbench export ragas`` read back by ragas itself."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

import numpy as np
import pandas as pd
import pytest

from ragbench import build_chunker, chunk_documents
from ragbench.cli import main
from ragbench.data import load_dataset
from ragbench.errors import DataError
from ragbench.evaluate.significance import compare
from ragbench.experiment.runner import run
from ragbench.report import plots
from ragbench.report.export import export_ragas
from ragbench.report.markdown import summary_lines
from ragbench.report.report import Report
from ragbench.report.tables import md_text, trial_table
from ragbench.testing import scripted_llm_server
from tests.paths import DEMO, require

ragas = pytest.importorskip("ragas")

LIMIT = 8
HASHING = {"kind": "hashing", "dim": 256}
RAGAS = ["ragas:IDBasedContextRecall", "ragas:NonLLMContextRecall"]
ANSWER_METRICS = ["token_f1", "answer_supported", *RAGAS]
PRICES = {"input": 1.0, "output": 4.0}  # US dollars per million tokens
EVIL = "<img src=x onerror=alert(1)> & `tick` | [link](https://evil.example) **bold**"


def _config(generators: list[dict[str, Any]], metrics: list[str]) -> dict[str, Any]:
    return {
        "name": "gen-report",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": metrics, "depth": 10},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 500, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}, {"kind": "hybrid"}],
            "generator": generators,
        },
        "prices": {"scripted": PRICES},
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def gen_run(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    """bm25 and hybrid × the extractive generator and an LLM one (the scripted server)."""
    with scripted_llm_server() as server:
        llm = {"kind": "llm", "base_url": server.url, "model": "scripted", "max_concurrency": 2}
        config = _config(
            [{"kind": "extractive"}, llm], ["token_f1", "ndcg@10", *ANSWER_METRICS[1:]]
        )
        out = tmp_path_factory.mktemp("gen") / "run"
        result = run(config, out, cache_root=cache, limit_queries=LIMIT, progress=False)
    assert set(result.trials["status"]) == {"ok"} and len(result.trials) == 4
    return result.path


@pytest.fixture(scope="module")
def retrieval_run(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    """The same retrievers without a generator: context metrics read the top chunks."""
    config = _config([{"kind": "none"}], ["ndcg@10", *RAGAS])
    out = tmp_path_factory.mktemp("ret") / "run"
    return run(config, out, cache_root=cache, limit_queries=LIMIT, progress=False).path


def _copy(run_dir: Path, where: Path) -> Path:
    shutil.copytree(run_dir, where)
    return where


def _llm_ids(run_dir: Path) -> list[str]:
    trials = pd.read_parquet(run_dir / "trials.parquet")
    return list(trials.loc[trials["param.generator.kind"] == "llm", "trial_id"])


# ---------------------------------------------------------------- the trial table


def test_answer_and_ragas_metrics_get_means_intervals_and_tests(gen_run: Path) -> None:
    report = Report.from_run(gen_run)
    assert report.metric == "token_f1" and report.metrics == [
        "token_f1",
        "ndcg@10",
        *ANSWER_METRICS[1:],
    ]
    frame = report.to_dataframe()
    per_query = pd.read_parquet(gen_run / "per_query.parquet")
    for metric in ANSWER_METRICS:
        expected = compare(per_query, report.baseline, metric)
        for trial_id, row in frame.iterrows():
            assert row[metric] == pytest.approx(expected.loc[trial_id, "mean"])
            assert row[f"{metric} ci_low"] == pytest.approx(expected.loc[trial_id, "ci_low"])
            assert row[f"{metric} ci_low"] <= row[metric] <= row[f"{metric} ci_high"]
            assert row[f"{metric} p_adj"] == pytest.approx(
                expected.loc[trial_id, "p_adjusted"], nan_ok=True
            )
    trials = pd.read_parquet(gen_run / "trials.parquet").set_index("trial_id")
    assert np.allclose(frame["token_f1"], trials.loc[frame.index, "token_f1"])
    assert frame["token_f1"].is_monotonic_decreasing
    shown = report.display_table()
    assert shown.loc[report.baseline, "ragas:IDBasedContextRecall"].endswith("(base)")


def test_tokens_and_cost_per_query_sit_beside_latency(
    gen_run: Path, retrieval_run: Path, tmp_path: Path
) -> None:
    report = Report.from_run(gen_run)
    frame = report.to_dataframe()
    answers = pd.read_parquet(gen_run / "answers.parquet")
    llm = _llm_ids(gen_run)
    spent = answers[answers["trial_id"].isin(llm)].groupby("trial_id")
    prompt, completion = spent["prompt_tokens"].mean(), spent["completion_tokens"].mean()
    cost = (prompt * PRICES["input"] + completion * PRICES["output"]) / 1e6
    assert (prompt > 0).all() and (completion > 0).all()
    assert np.allclose(frame.loc[llm, "generate prompt tokens"], prompt[llm])
    assert np.allclose(frame.loc[llm, "generate completion tokens"], completion[llm])
    assert np.allclose(frame.loc[llm, "total tokens"], (prompt + completion)[llm])
    assert np.allclose(frame.loc[llm, "generate USD"], cost[llm])
    assert np.allclose(frame.loc[llm, "total USD"], cost[llm])
    extractive = [t for t in frame.index if t not in llm]
    assert (frame.loc[extractive, ["total tokens", "total USD"]] == 0).all().all()
    shown = report.display_table()
    for trial_id in llm:
        assert (
            shown.loc[trial_id, "tokens/query"] == f"{prompt[trial_id] + completion[trial_id]:,.1f}"
        )
        assert shown.loc[trial_id, "USD/query"] == f"{cost[trial_id]:.3g}"
    columns = list(report.display_table(stages=True).columns)
    assert columns.index("generate p50/p95 ms") < columns.index("generate tokens in/out")
    assert columns.index("generate USD/query") < columns.index("tokens/query")
    markdown = report.to_markdown()
    assert "| generate tokens in/out | generate USD/query |" in markdown
    html = report.write(("html",), out=tmp_path)["html"].read_text()
    assert '<th class="">generate tokens in/out</th>' in html and "USD/query" in html
    printed = trial_table(pd.read_parquet(gen_run / "trials.parquet"), report.metrics)
    assert np.allclose(printed.loc[frame.index, "tokens/query"], frame["total tokens"])
    assert np.allclose(printed.loc[frame.index, "USD/query"], frame["total USD"])
    assert list(printed.columns[-3:]) == ["tokens/query", "USD/query", "index_build_s"]
    retrieval = trial_table(pd.read_parquet(retrieval_run / "trials.parquet"), ["ndcg@10"])
    assert "tokens/query" not in retrieval and "USD/query" not in retrieval
    plain = Report.from_run(retrieval_run)
    assert not any("tokens" in c or "USD" in c for c in plain.to_dataframe().columns)
    assert "USD" not in plain.to_markdown()


def test_quality_vs_cost_pareto_uses_dollars_or_says_it_uses_tokens(
    gen_run: Path, retrieval_run: Path
) -> None:
    report = Report.from_run(gen_run)
    figure = report.figures()["pareto_cost"]
    axis = figure.axes[0]
    assert axis.get_xlabel() == "LLM cost per query (US dollars)"
    drawn = np.concatenate([c.get_offsets()[:, 0] for c in axis.collections[:2]])
    assert sorted(drawn) == pytest.approx(sorted(report.spend["cost.total"]))
    unpriced = report.trials.assign(**{"cost.generate": np.nan, "cost.total": np.nan})
    axis = plots.quality_vs_cost(unpriced, "token_f1").axes[0]
    assert axis.get_xlabel() == (
        "LLM tokens per query (prompt + completion; costs unknown: no prices given)"
    )
    drawn = np.concatenate([c.get_offsets()[:, 0] for c in axis.collections[:2]])
    assert sorted(drawn) == pytest.approx(sorted(report.spend["tokens.total"]))
    with pytest.raises(DataError, match="no trial called an LLM"):
        plots.quality_vs_cost(Report.from_run(retrieval_run).trials, "ndcg@10")
    assert "pareto_cost" not in Report.from_run(retrieval_run).figures()


# ---------------------------------------------------------------- drill-down and summary


def test_the_drilldown_shows_each_trials_answer_escaped(gen_run: Path, tmp_path: Path) -> None:
    copy = _copy(gen_run, tmp_path / "run")
    trials = pd.read_parquet(copy / "trials.parquet")
    worst = str(trials.sort_values("token_f1")["trial_id"].iloc[0])
    report = Report.from_run(copy, baseline=worst)
    assert report.best != report.baseline
    answers = pd.read_parquet(copy / "answers.parquet")
    answers.loc[answers["trial_id"] == report.best, "answer"] = EVIL
    answers.to_parquet(copy / "answers.parquet", index=False)
    drill = report.drilldown(n=3)
    assert len(drill) == 3
    said = answers.set_index(["trial_id", "query_id"])["answer"]
    demo = load_dataset(DEMO)
    for row in drill.itertuples():
        assert row.answer_a == said[(report.baseline, row.query_id)] != EVIL
        assert row.answer_b == EVIL
        assert row.gold["reference"] == demo.answers[row.query_id]
    paths = report.write(("html", "md"), out=tmp_path / "out")
    page = paths["html"].read_text()
    assert "onerror=alert(1)>" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<b>Answer</b>") == 2 * len(report.drilldown(n=8))
    assert "<b>Reference answer</b>" in page
    markdown = paths["md"].read_text()
    assert f"  - best answer: {md_text(EVIL)}" in markdown and "<img" not in markdown


def test_the_summary_names_skipped_metrics_and_why(tmp_path: Path) -> None:
    corpus = tmp_path / "set" / "corpus"
    corpus.mkdir(parents=True)
    texts = {
        "a.md": "Retention deletes closed segments after seven days.",
        "b.md": "Compaction keeps the last value for every key.",
        "c.md": "Replication copies every partition to three brokers.",
    }
    for name, text in texts.items():
        (corpus / name).write_text(text + "\n")
    queries = [
        {
            "id": f"q{i}",
            "text": text.split(" ", 2)[-1],
            "evidence": [{"doc_id": doc, "text": text[:30]}],
        }
        for i, (doc, text) in enumerate(texts.items())
    ]
    (tmp_path / "set" / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    config = {
        "name": "skips",
        "dataset": {"path": str(tmp_path / "set")},
        "evaluation": {"metrics": ["ndcg@10", "token_f1", "answer_supported"], "depth": 10},
        "sweep": {
            "retriever": [{"kind": "bm25"}],
            "generator": [{"kind": "extractive", "context": {"budget_tokens": [8, 1500]}}],
        },
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    report = Report.from_run(result.path)
    assert report.metrics == ["ndcg@10", "answer_supported"]
    note = "- **token_f1** skipped by the run: dataset 'set' has no reference answers."
    assert note in summary_lines(report)
    page = report.write(("html", "md"))["html"].read_text()
    assert (
        "<li><b>token_f1</b> skipped by the run: dataset &#x27;set&#x27; has no reference" in page
    )


def test_queries_without_a_value_are_left_out_with_a_note(gen_run: Path, tmp_path: Path) -> None:
    copy = _copy(gen_run, tmp_path / "run")
    per_query = pd.read_parquet(copy / "per_query.parquet")
    trial = _llm_ids(copy)[0]
    queries = sorted(set(per_query["query_id"]))
    mine = per_query["trial_id"] == trial
    unparsed = mine & (per_query["metric"] == "token_f1") & per_query["query_id"].isin(queries[:2])
    sparse = (
        mine & (per_query["metric"] == "answer_supported") & (per_query["query_id"] != queries[0])
    )
    per_query.loc[unparsed | sparse, "value"] = np.nan
    per_query.to_parquet(copy / "per_query.parquet", index=False)
    report = Report.from_run(copy)
    assert report.compared["token_f1"] == LIMIT - 2 and report.compared["answer_supported"] == 1
    assert "answer_supported" not in report.metrics and "token_f1" in report.metrics
    kept = per_query[(per_query["metric"] == "token_f1") & ~per_query["query_id"].isin(queries[:2])]
    expected = compare(kept, report.baseline, "token_f1")
    frame = report.to_dataframe()
    assert np.allclose(frame["token_f1"], expected.loc[frame.index, "mean"])
    assert np.allclose(
        report.trials.set_index("trial_id").loc[frame.index, "token_f1"], frame["token_f1"]
    )
    lines = summary_lines(report)
    assert any(
        line.startswith(f"- **token_f1**: 2 of {LIMIT} queries have no value for some trial")
        and line.endswith(f"tests use the other {LIMIT - 2}.")
        for line in lines
    )
    assert any(
        line.startswith(f"- **answer_supported**: only 1 of {LIMIT} queries") for line in lines
    )
    assert report.baseline != trial
    drilled = set(report.drilldown(trial, n=LIMIT)["query_id"])
    assert drilled and not drilled & set(queries[:2])  # no difference without a value
    report.write(("html", "md"), out=tmp_path / "out")
    with pytest.raises(
        DataError,
        match=rf"per_query\.parquet: answer_supported has a value for every trial on 1 of {LIMIT}",
    ):
        Report.from_run(copy, metric="answer_supported")


# ---------------------------------------------------------------- export to ragas


def _direct(name: str, samples: list[Any]) -> np.ndarray:
    """ragas' own score of each sample (the metric class called directly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        metric = getattr(ragas.metrics, name)()

    async def scores() -> list[float]:
        return [await metric.single_turn_ascore(s) for s in samples]

    return np.array(asyncio.run(scores()))


def _check_export(run_dir: Path, path: Path, trial_id: str) -> list[Any]:
    """The exported samples agree with the run directory and score what the run scored."""
    samples = ragas.EvaluationDataset.from_jsonl(path).samples
    queries = pd.read_parquet(run_dir / "queries.parquet")
    demo = load_dataset(DEMO)
    assert [s.user_input for s in samples] == list(queries["text"]) and len(samples) == LIMIT
    for sample, query in zip(samples, queries.itertuples(), strict=True):
        assert sample.reference == demo.answers[query.query_id] == query.reference
        evidence = demo.evidence[query.query_id]
        assert sample.reference_contexts == [
            demo.doc_index[e.doc_id].text[e.start : e.end] for e in evidence
        ]
        assert sample.reference_context_ids == [
            d for d, g in json.loads(query.qrels).items() if g >= 1
        ]
        assert len(sample.retrieved_contexts) == len(sample.retrieved_context_ids) > 0
        for text, doc_id in zip(
            sample.retrieved_contexts, sample.retrieved_context_ids, strict=True
        ):
            assert text in demo.doc_index[doc_id].text
    per_query = pd.read_parquet(run_dir / "per_query.parquet")
    for metric in RAGAS:
        values = per_query[(per_query["trial_id"] == trial_id) & (per_query["metric"] == metric)]
        scored = values.set_index("query_id").loc[queries["query_id"], "value"].to_numpy()
        assert np.allclose(_direct(metric.removeprefix("ragas:"), samples), scored, atol=1e-9)
    return samples


def test_export_ragas_writes_the_generators_contexts_and_answers(
    gen_run: Path, tmp_path: Path
) -> None:
    done = export_ragas(gen_run)
    report = Report.from_run(gen_run)
    best = str(report.trials.set_index("trial_id")["token_f1"].idxmax())
    assert done.trial_id == best and done.path == gen_run / "ragas" / f"{best}.jsonl"
    assert done.rows == LIMIT
    chunker = build_chunker({"kind": "recursive", "size": 500, "overlap": 0})
    chunks = {c.id: c for c in chunk_documents(chunker, load_dataset(DEMO).documents)}
    for trial_id in _llm_ids(gen_run):
        done = export_ragas(gen_run, trial_id, tmp_path / trial_id / "x.jsonl")
        samples = _check_export(gen_run, done.path, trial_id)
        answers = pd.read_parquet(gen_run / "answers.parquet")
        answers = answers[answers["trial_id"] == trial_id]
        assert [s.response for s in samples] == list(answers["answer"])
        used = [json.loads(ids) for ids in answers["chunk_ids"]]
        assert [s.retrieved_context_ids for s in samples] == [
            [chunks[c].doc_id for c in ids] for ids in used
        ]
        assert [s.retrieved_contexts for s in samples] == [
            [chunks[c].text for c in ids] for ids in used
        ]


def test_export_ragas_of_a_trial_without_a_generator_has_its_top_chunks(
    retrieval_run: Path,
) -> None:
    demo = load_dataset(DEMO)
    for trial_id in pd.read_parquet(retrieval_run / "trials.parquet")["trial_id"]:
        done = export_ragas(retrieval_run, trial_id)
        samples = _check_export(retrieval_run, done.path, trial_id)
        assert all(s.response is None for s in samples)
        lines = done.path.read_text().splitlines()
        assert all("response" not in json.loads(line) for line in lines)
        top = pd.read_parquet(retrieval_run / "runs" / f"{trial_id}.top.parquet")
        queries = pd.read_parquet(retrieval_run / "queries.parquet")["query_id"]
        for sample, qid in zip(samples, queries, strict=True):
            rows = top[top["query_id"] == qid].sort_values("rank")
            assert sample.retrieved_context_ids == list(rows["doc_id"])
            for text, row in zip(sample.retrieved_contexts, rows.itertuples(), strict=True):
                assert text == demo.doc_index[row.doc_id].text[row.start : row.end]
                assert text.startswith(row.text)  # top.parquet holds an excerpt


def test_cli_export_ragas_and_its_errors(
    gen_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trial = _llm_ids(gen_run)[0]
    out = tmp_path / "x.jsonl"
    assert main(["export", "ragas", str(gen_run), "--trial", trial, "--out", str(out)]) == 0
    label = pd.read_parquet(gen_run / "trials.parquet").set_index("trial_id").loc[trial, "label"]
    assert capsys.readouterr().out == f"{out}: {LIMIT} samples of trial {trial} ({label})\n"
    assert len(out.read_text().splitlines()) == LIMIT
    changed = _copy(gen_run, tmp_path / "changed")
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["dataset_fingerprint"] = "0" * 64
    (changed / "manifest.json").write_text(json.dumps(manifest))
    for args, start in (
        (
            ["export", "ragas", str(gen_run), "--trial", "zz"],
            f"ragbench export ragas: {gen_run}: no finished trial 'zz'",
        ),
        (
            ["export", "ragas", str(tmp_path)],
            f"ragbench export ragas: {tmp_path}: not a ragbench run directory",
        ),
        (
            ["export", "ragas", str(changed)],
            f"ragbench export ragas: {changed / 'manifest.json'}: the dataset at",
        ),
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(start) and err.count("\n") == 1, err
