"""Evidence is checked before it is reported: a report and the answer a sweep prints say when
the run is incomplete (or still running), when the corpus is too small to separate the trials
(then there is no pick), when a model trained on the evaluated queries (or was fine-tuned from
one that did), when selection and reporting share queries, when judged queries no ranking can
answer were left out, and when only the first queries were scored; ``--trial best`` is the
report's pick and is refused where the report makes none; a resume of another sweep, and a run
whose dataset changed since, are refused; ``eval`` says how many queries it scored; the dry
run counts the fine-tuning steps training takes, and refuses what the run refuses."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from ragbench.cli import main
from ragbench.data import load_dataset
from ragbench.data.pairs import generated_pairs, split_pairs
from ragbench.errors import DataError
from ragbench.experiment.runner import dry_run, run
from ragbench.experiment.store import RunStore, TrialResult
from ragbench.index.embedders import SentenceTransformerConfig, SentenceTransformerEmbedder
from ragbench.index.finetune import FinetuneConfig, planned_steps, train
from ragbench.report.compare import compare_runs
from ragbench.report.markdown import answer_lines
from ragbench.report.pick import chosen_trial
from ragbench.report.report import Report
from tests import test_finetune
from tests.adversarial import HASHING
from tests.paths import DEMO
from tests.test_data_beir import jsonl, make_beir
from tests.test_finetune import FAST

pytestmark = pytest.mark.xdist_group("finetune")

tiny_encoder = test_finetune.tiny_encoder  # the tiny bi-encoder the fine-tuning tests train

BM25 = {"kind": "bm25", "k1": [0.9, 1.5, 2.0], "b": [0.4, 0.75]}  # six trials


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))


def _config(dataset: Path | str, *retrievers: Any, **evaluation: Any) -> dict[str, Any]:
    return {
        "name": "evidence",
        "dataset": {"path": str(dataset)},
        "evaluation": {"metrics": ["ndcg@10", "recall@5"], "depth": 10, **evaluation},
        "latency": {"queries": 0},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 400}],
            "embedder": [HASHING],
            "retriever": list(retrievers or [BM25]),
        },
    }


def _yaml(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config), "utf-8")
    return str(path)


class _Stop(Exception):
    """Stands for an interruption (Ctrl-C, a killed process) between two trials."""


def _stop_after(trials: int) -> Callable[[TrialResult], None]:
    done: list[TrialResult] = []

    def record(result: TrialResult) -> None:
        done.append(result)
        if len(done) == trials:
            raise _Stop

    return record


def _interrupted(config: dict[str, Any], out: Path, trials: int, resume: bool = False) -> Path:
    with pytest.raises(_Stop):
        run(
            config,
            out,
            resume=resume,
            limit_queries=10,
            progress=False,
            on_trial=_stop_after(trials),
        )
    return out


def _said(report: Report, out: Path) -> tuple[str, str, str]:
    """What the terminal shows, report.md and report.html."""
    files = report.write(("html", "md"), out=out)
    answer = "\n".join(answer_lines(report))
    return answer, files["md"].read_text("utf-8"), files["html"].read_text("utf-8")


# ---------------------------------------------------------------- an incomplete run


def test_a_report_on_an_interrupted_run_says_which_trials_never_ran(tmp_path: Path) -> None:
    config = _config(DEMO)
    out = _interrupted(config, tmp_path / "run", trials=1)
    answer, md, page = _said(Report.from_run(out), tmp_path / "one")
    lost = "1 of 6 planned trials finished; the other 5 never ran"
    assert lost in answer and lost in md and lost in page
    assert "the pick is among the finished ones only" in answer
    assert "Recommendation (among the 1 of 6 planned trials that finished)" in answer
    assert "best in" not in answer and "best in" not in md  # no confidence from one trial
    assert "only 1 of the 6 planned trials finished" in answer
    assert "ragbench run --resume" in md and "1 of 6 planned trials finished" in page
    _, warnings = compare_runs([out])
    assert f"{out} is incomplete: {lost}" in warnings[0]

    _interrupted(config, out, trials=2, resume=True)  # three of six now
    answer, md, _ = _said(Report.from_run(out), tmp_path / "three")
    assert "3 of 6 planned trials finished; the other 3 never ran" in answer
    assert "among the 3 of 6 planned trials that finished." in answer  # the confidence line
    assert "## Failed trials" not in md
    # a manifest from before runs counted their plan: its trials tell the count
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    del manifest["planned"]
    (out / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    assert main(["report", str(out), "--out", str(tmp_path / "cli")]) == 0
    assert "3 of 6 planned trials finished" in (tmp_path / "cli" / "report.md").read_text()

    run(config, out, resume=True, limit_queries=10, progress=False)
    answer, md, _ = _said(Report.from_run(out), tmp_path / "all")
    assert "planned trials" not in answer + md and "Incomplete run" not in md
    # a failed trial: said, and the pick is among the others
    trials = pd.read_parquet(out / "trials.parquet")
    trials.loc[2, ["status", "error"]] = ["failed", "RuntimeError: out of memory"]
    trials.to_parquet(out / "trials.parquet")
    answer, md, page = _said(Report.from_run(out), tmp_path / "failed")
    said = "5 of 6 planned trials finished; 1 failed (see Failed trials)"
    assert said in answer and said in md and said in page and "never ran" not in answer


def test_a_tpe_search_plans_its_n_trials_not_the_grid(tmp_path: Path) -> None:
    config = {**_config(DEMO), "search": {"strategy": "tpe", "n": 3}}
    out = _interrupted(config, tmp_path / "run", trials=2)
    answer = "\n".join(answer_lines(Report.from_run(out)))
    assert "2 of 3 planned trials finished; the other 1 never ran" in answer


# ---------------------------------------------------------------- a corpus too small


SEGMENTS = (
    "Kestrel stores partitions as segment files on disk. Retention deletes closed segments "
    "after seven days. Compaction keeps the last value of every key. The broker rolls a new "
    "segment every hour."
)
OTHERS = {
    "b.md": "Listeners bind the broker to ports. TLS certificates secure client connections.",
    "c.md": "Quotas throttle clients that produce too fast. Overrides set quotas per user.",
}
ON_SEGMENTS = [
    ("how are old segments deleted", "a.md", "Retention deletes closed segments after seven days."),
    ("what does compaction keep", "a.md", "Compaction keeps the last value of every key."),
    ("how often is a segment rolled", "a.md", "The broker rolls a new segment every hour."),
    ("where are partitions stored", "a.md", "Kestrel stores partitions as segment files on disk."),
]
UNMATCHED = [  # no word of it is in a.md: BM25 finds nothing
    ("what happens to stale data", "a.md", "Retention deletes closed segments after seven days.")
]
ON_OTHERS = [
    ("which ports do listeners bind", "b.md", "Listeners bind the broker to ports."),
    ("how are client connections secured", "b.md", "TLS certificates secure client connections."),
    ("who gets throttled", "c.md", "Quotas throttle clients that produce too fast."),
]


def _tiny_set(root: Path, others: dict[str, str], queries: list[tuple[str, str, str]]) -> Path:
    """A folder set of ``a.md`` and ``others``, labeled by ``queries`` (text, document,
    evidence)."""
    (root / "corpus").mkdir(parents=True)
    for name, text in {"a.md": SEGMENTS, **others}.items():
        (root / "corpus" / name).write_text(text, "utf-8")
    rows = [
        {"id": f"q{i}", "text": text, "evidence": [{"doc_id": doc_id, "text": evidence}]}
        for i, (text, doc_id, evidence) in enumerate(queries)
    ]
    (root / "queries.jsonl").write_text(jsonl(rows), "utf-8")
    return root


def _tiny_run(
    tmp_path: Path, others: dict[str, str], queries: list[tuple[str, str, str]]
) -> tuple[int, Path]:
    dataset = _tiny_set(tmp_path / "set", others, queries)
    config = _config(dataset, {"kind": "bm25", "k1": [0.9, 1.5]}, {"kind": "dense"})
    out = tmp_path / "run"
    return main(["run", _yaml(tmp_path / "tiny.yaml", config), "--out", str(out)]), out


BLIND = "as much as any ranking can on these labels; the set has"


@pytest.mark.parametrize(
    ("others", "queries", "why"),
    [
        ({}, ON_SEGMENTS, "no query tells the trials apart: on each of the 4 queries every trial"),
        ({}, ON_SEGMENTS + UNMATCHED, f"{BLIND} 1 document(s)"),
        (OTHERS, ON_SEGMENTS + UNMATCHED, f"{BLIND} 3 document(s)"),
    ],
    ids=[
        "one document, every trial alike",
        "one document, a query BM25 misses",
        "every query judged on one of three documents",
    ],
)
def test_a_corpus_too_small_to_separate_the_trials_gets_no_pick(
    others: dict[str, str],
    queries: list[tuple[str, str, str]],
    why: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _tiny_run(tmp_path, others, queries)
    printed = capsys.readouterr().out
    assert code == 0 and "Recommendation: none" in printed and "No pick: " in printed
    assert why in printed and "deploy:        none (no trial is recommended)" in printed
    assert "ragbench ingest" not in printed and "best in" not in printed
    md = (out / "report.md").read_text("utf-8")
    page = (out / "report.html").read_text("utf-8")
    assert "**No pick**" in md and "best overall" not in md and "best in" not in md
    assert "<li class='caveat'><b>No pick</b>" in page and "best overall" not in page


def test_a_small_corpus_that_separates_the_trials_keeps_its_pick_with_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _tiny_run(tmp_path, OTHERS, ON_SEGMENTS + UNMATCHED + ON_OTHERS)
    printed = capsys.readouterr().out
    assert code == 0 and "Recommendation: best overall" in printed and "No pick" not in printed
    assert "Small corpus: the set has 3 document(s), no more than the cutoff of ndcg@10" in printed
    assert "deploy:        ragbench ingest --from-run" in printed


def test_a_set_that_separates_the_trials_keeps_its_pick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _yaml(tmp_path / "demo.yaml", _config(DEMO))
    assert main(["run", config, "--out", str(tmp_path / "run"), "--limit-queries", "20"]) == 0
    printed = capsys.readouterr().out
    assert "Recommendation: best overall" in printed and "No pick" not in printed
    assert "deploy:        ragbench ingest --from-run" in printed
    assert "ignoring the query" not in printed and "planned trials" not in printed


# ---------------------------------------------------------------- trained on evaluated queries


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo set as a BEIR folder: 40 queries on split train, 20 on test, and 20 on dev of
    which 7 are test's (5 by id, 2 by their text under another id)."""
    labeled = load_dataset(str(DEMO))
    queries = labeled.queries[:60]
    rows = [{"_id": q.id, "text": q.text} for q in queries]
    rows += [{"_id": f"{q.id}-again", "text": f"  {q.text.upper()} "} for q in queries[45:47]]
    qrels = {q.id: labeled.qrels[q.id] for q in queries}
    qrels |= {f"{q.id}-again": labeled.qrels[q.id] for q in queries[45:47]}
    parts = {
        "train": [q.id for q in queries[:40]],
        "test": [q.id for q in queries[40:]],
        "dev": [q.id for q in queries[27:40]]
        + [q.id for q in queries[40:45]]
        + [f"{q.id}-again" for q in queries[45:47]],
    }
    return make_beir(
        tmp_path_factory.mktemp("beir"),
        corpus=jsonl([{"_id": d.id, "title": "", "text": d.text} for d in labeled.documents]),
        queries=jsonl(rows),
        qrels={
            split: "query-id\tcorpus-id\tscore\n"
            + "".join(f"{q}\t{d}\t{g}\n" for q in ids for d, g in qrels[q].items())
            for split, ids in parts.items()
        },
    )


def _dense(beir: Path, model: Path, **evaluation: Any) -> dict[str, Any]:
    config = _config(beir, {"kind": "dense"}, **evaluation)
    config["sweep"]["embedder"] = [{"kind": "sentence-transformers", "model": str(model)}]
    return config


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_model_trained_on_the_queries_a_run_reports_on_is_refused(
    beir: Path, tiny_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    settings = json.dumps({"epochs": 1, **FAST})
    argv = ["finetune", str(beir), "--split", "test", "--out", str(model)]
    assert main([*argv, "--model", str(tiny_encoder), "--settings", settings]) == 0
    record = json.loads((model / "training.json").read_text("utf-8"))
    assert len(record["query_digests"]) == 20
    config = _yaml(tmp_path / "on-test.yaml", _dense(beir, model))
    said = (
        f"sweep.embedder[0].model: model '{model}' was fine-tuned on 20 of the 20 queries "
        "this run reports on (split 'test' of"
    )
    out = tmp_path / "run"
    for command in (["--dry-run"], ["--out", str(out)]):
        err = _refused(["run", config, *command], capsys)
        assert said in err and "report on a split it did not train on" in err, err
    assert not out.exists()

    # selecting on the split it trained on and reporting on another: the report says so
    honest = _dense(beir, model, select_on="test", report_on="train")
    assert main(["run", _yaml(tmp_path / "honest.yaml", honest), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    md = (out / "report.md").read_text("utf-8")
    trained = "was fine-tuned on 20 of the 20 queries of split `test` this table scores"
    assert "Trained on evaluated queries" in printed and trained in md
    assert "the Honest selection section scores the pick on split `train`" in md

    # a training.json from before the digests were kept: its pairs' source names the split
    del record["query_digests"]
    (model / "training.json").write_text(json.dumps(record), "utf-8")
    assert said in _refused(["run", config, "--dry-run"], capsys)
    (model / "training.json").write_text("{not json", "utf-8")
    err = _refused(["run", config, "--dry-run"], capsys)
    assert f"{model / 'training.json'}: not a readable training record" in err, err


def test_trials_fine_tuned_on_the_selection_split_are_said_to_be(
    beir: Path, tiny_encoder: Path, tmp_path: Path
) -> None:
    tuning = {"pairs": "select", "epochs": 6, **FAST}
    config = _dense(beir, tiny_encoder, select_on="train", report_on="test")
    config["sweep"]["embedder"][0]["finetune"] = tuning
    config["name"] = "tuned"
    report = Report.from_run(run(config, tmp_path / "run", limit_queries=8, progress=False).path)
    answer = "\n".join(answer_lines(report))
    assert "Trained on evaluated queries: trials fine-tuned on pairs: select trained on 8" in answer


# ---------------------------------------------------------------- shared queries


def test_selection_and_report_splits_sharing_queries_are_said_to(
    beir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bm25 = {"kind": "bm25", "k1": [0.9, 1.5]}
    config = _config(beir, bm25, select_on="dev", report_on="test")
    dry_run(config)
    assert "7 of the 20 queries of split 'test' (reported on) are on split 'dev'" in caplog.text
    out = run(config, tmp_path / "run", progress=False).path
    answer, md, page = _said(Report.from_run(out), tmp_path / "report")
    shared = "7 of the 20 queries of split `test` (reported on) are on split `dev` (selected on)"
    assert f"Selection and report share queries: {shared.replace('`', '')}" in answer
    section = md.split("## Honest selection", 1)[1].split("##", 1)[0]
    assert "7 of the 20 queries of split 'test' (reported on) are on split 'dev'" in section
    assert "7 of the 20 queries of split &#x27;test&#x27; (reported on)" in page


# ---------------------------------------------------------------- the dry run's plan


@pytest.mark.parametrize(
    "settings",
    [
        {"pairs": "generated", "queries": 12, "n_negatives": 2},  # margin_mse: a row a negative
        {"pairs": "generated", "queries": 12, "loss": "mnrl", "negatives": "none", "epochs": 2},
        {"pairs": "select", "loss": "triplet", "negatives": "model", "n_negatives": 2},
    ],
    ids=["generated margin_mse", "in-batch negatives only", "negatives mined by the model"],
)
def test_the_steps_planned_are_the_steps_trained(
    settings: dict[str, Any], beir: Path, tiny_encoder: Path, tmp_path: Path
) -> None:
    config = FinetuneConfig.model_validate({**FAST, **settings})
    labeled = load_dataset(str(beir), split="train")
    if config.pairs == "generated":
        pairs = generated_pairs(labeled.documents, config.queries, config.seed, config.width)
    else:
        pairs = split_pairs(labeled, config.width)
    base = SentenceTransformerEmbedder(SentenceTransformerConfig(model=str(tiny_encoder)))
    embed = base.embed if config.negatives == "model" else None
    planned = planned_steps("bi-encoder", pairs, config)
    trained = train("bi-encoder", str(tiny_encoder), pairs, config, tmp_path, embed).record()
    assert planned == trained["steps"] > 0


def test_the_dry_run_plans_the_fine_tuning_steps_the_run_takes(
    tiny_encoder: Path, tmp_path: Path
) -> None:
    tuning = {"pairs": "generated", "queries": 12, "n_negatives": 2, **FAST}
    config = _config(DEMO, {"kind": "dense"})
    config["sweep"]["embedder"] = [
        {"kind": "sentence-transformers", "model": str(tiny_encoder), "finetune": tuning}
    ]
    planned = dry_run(config, limit_queries=5, cache_root=tmp_path / "cache")
    found = re.search(r"fine-tune \S+ \((\d+) steps\)", planned.iloc[0]["work"])
    assert found is not None, planned.iloc[0]["work"]
    run(config, tmp_path / "run", limit_queries=5, cache_root=tmp_path / "cache", progress=False)
    records = list((tmp_path / "cache").rglob("training.json"))
    assert records and {json.loads(r.read_text("utf-8"))["steps"] for r in records} == {
        int(found[1])
    }


# ---------------------------------------------------------------- the dry run's checks


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"evaluation": {"report_on": "nosuch"}}, "no judged queries of split 'nosuch'"),
        ({"telemetry": {"exporter": "otlp"}}, "needs opentelemetry-exporter-otlp"),
    ],
    ids=["a report split the set lacks", "an exporter not installed"],
)
def test_the_dry_run_refuses_what_the_run_refuses(
    change: dict[str, Any], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "telemetry" in change:
        pytest.importorskip("opentelemetry.sdk")
        try:
            import opentelemetry.exporter.otlp  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("the otlp exporter is installed")
    config = _config(DEMO)
    for key, value in change.items():
        config[key] = {**config.get(key, {}), **value}
    path = _yaml(tmp_path / "bad.yaml", config)
    out = tmp_path / "run"
    dry = _refused(["run", path, "--dry-run"], capsys)
    real = _refused(["run", path, "--out", str(out)], capsys)
    assert said in dry and dry == real and not out.exists()


# ---------------------------------------------------------------- --trial best: the report's pick


def _best_refused(run_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    """``export ragas`` and ``ingest --from-run`` with ``--trial best`` refuse ``run_dir`` in
    the same one line (exit 2) and write nothing; the line."""
    out = tmp_path / "export.jsonl"
    said = _refused(["export", "ragas", str(run_dir), "--trial", "best", "--out", str(out)], capsys)
    db = tmp_path / "db"
    argv = ["ingest", "--from-run", str(run_dir), "--trial", "best", "--db", str(db)]
    deployed = _refused([*argv, "--collection", "c"], capsys)
    assert said.split(": ", 1)[1] == deployed.split(": ", 1)[1]
    assert not out.exists() and not (db / "c").exists()
    assert f"--trial best: {run_dir}: " in said and "pass --trial ID" in said
    return said


def test_trial_best_is_refused_where_the_report_recommends_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _tiny_run(tmp_path, {}, ON_SEGMENTS)
    assert code == 0 and "Recommendation: none" in capsys.readouterr().out
    said = _best_refused(out, capsys, tmp_path)
    assert "its report recommends no trial: these queries cannot separate the trials" in said
    trial = pd.read_parquet(out / "trials.parquet")["trial_id"].iloc[0]  # named: deployed
    exported = tmp_path / "named.jsonl"
    assert main(["export", "ragas", str(out), "--trial", trial, "--out", str(exported)]) == 0


def test_trial_best_is_refused_on_a_run_some_trials_never_ran_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _interrupted(_config(DEMO), tmp_path / "run", trials=1)
    said = _best_refused(out, capsys, tmp_path)
    assert "1 of 6 planned trials finished and 5 never ran" in said
    assert "`ragbench run --resume` finishes the run" in said


def test_trial_best_is_refused_on_a_run_of_one_query(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _yaml(tmp_path / "one.yaml", _config(DEMO, {"kind": "bm25"}, {"kind": "dense"}))
    out = tmp_path / "run"
    assert main(["run", config, "--out", str(out), "--limit-queries", "1"]) == 0
    assert "the run scored 1 query, and its report needs 2" in _best_refused(out, capsys, tmp_path)


def test_trial_best_is_the_trial_the_report_recommends(tmp_path: Path) -> None:
    out = run(_config(DEMO), tmp_path / "run", limit_queries=10, progress=False).path
    report = Report.from_run(out)
    assert report.evidence.withheld is None
    assert chosen_trial(out, "best").id == report.recommendation().best


# ---------------------------------------------------------------- a run still running


def test_a_run_still_running_is_said_to_be_and_not_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _interrupted(_config(DEMO), tmp_path / "run", trials=2)
    with RunStore(out).hold():  # another process's run, as far as any reader can tell
        answer, md, page = _said(Report.from_run(out), tmp_path / "live")
        said = "2 of 6 planned trials finished; the other 4 have not run yet (the run is still"
        assert said in answer and said in md and said in page
        assert "--resume" not in answer + md and "Run still running" in answer
        _, warnings = compare_runs([out])
        assert said in warnings[0] and "--resume" not in warnings[0]
        assert "the run is still running" in _best_refused(out, capsys, tmp_path)
    answer = "\n".join(answer_lines(Report.from_run(out)))  # stopped: resume it
    assert "the other 4 never ran (the run stopped before them: ragbench run --resume" in answer


# ---------------------------------------------------------------- resuming another sweep


def test_resuming_a_run_with_another_sweep_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _config(DEMO, {"kind": "bm25"}, {"kind": "dense"})
    other = _config(DEMO, {"kind": "bm25"}, {"kind": "dense"})
    other["sweep"]["chunker"] = [{"kind": "recursive", "size": 800}]
    a, b = _yaml(tmp_path / "a.yaml", first), _yaml(tmp_path / "b.yaml", other)
    out = tmp_path / "run"
    assert main(["run", a, "--out", str(out), "--limit-queries", "5", "--no-report"]) == 0
    before = (out / "trials.parquet").read_bytes()
    argv = ["run", b, "--out", str(out), "--limit-queries", "5", "--resume"]
    err = _refused(argv, capsys)
    assert f"{out}: cannot resume, the sweep changed since the run started (2 of its 2" in err
    assert (out / "trials.parquet").read_bytes() == before
    # agreement reuses its two runs: another config's are refused, not mixed in
    agreement = ["datasets", "agreement", str(DEMO), str(DEMO), "--limit-queries", "5"]
    assert main([*agreement, "--config", a, "--out", str(tmp_path / "agr")]) == 0
    err = _refused([*agreement, "--config", b, "--out", str(tmp_path / "agr")], capsys)
    assert "cannot resume, the sweep changed since the run started" in err
    assert "--overwrite" in err


# ---------------------------------------------------------------- queries no trial can answer


def _lab(root: Path, judged: list[tuple[str, str]]) -> Path:
    """A folder of the demo's concept documents labeled by ``judged`` (text, document)."""
    root.mkdir()
    for doc in (DEMO / "corpus" / "concepts").glob("*.md"):
        (root / doc.name).write_text(doc.read_text("utf-8"), "utf-8")
    rows = [{"id": f"q{i}", "text": t, "qrels": {d: 1}} for i, (t, d) in enumerate(judged)]
    (root / "queries.jsonl").write_text(jsonl(rows), "utf-8")
    return root


ANSWERABLE = [
    ("how does compaction keep the latest value of a key", "compaction.md"),
    ("what is a segment file", "segments.md"),
    ("how are replicas kept in sync", "replication.md"),
    ("what does tiered storage move to object storage", "tiered-storage.md"),
]
GONE = [("where did this page go", "removed-doc.md"), ("a page in a gone folder", "gone/x.md")]


def test_queries_judging_only_missing_documents_are_left_out_and_said_to_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = _lab(tmp_path / "lab", ANSWERABLE + GONE)
    config = _config(lab, {"kind": "bm25"}, {"kind": "dense"})
    out = run(config, tmp_path / "run", progress=False).path
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest["queries"]["count"] == 4
    assert manifest["queries"]["left_out"] == {"missing_documents": 2}
    assert set(pd.read_parquet(out / "queries.parquet")["query_id"]) == {"q0", "q1", "q2", "q3"}
    answer, md, page = _said(Report.from_run(out), tmp_path / "report")
    said = "2 of the 6 judged queries judge only documents the corpus does not hold"
    assert said in answer and said in md and said in page
    # every query unanswerable: refused before any trial, by the dry run too
    lost = _yaml(tmp_path / "lost.yaml", _config(_lab(tmp_path / "lost", GONE)))
    for command in (["--dry-run"], ["--out", str(tmp_path / "none")]):
        err = _refused(["run", lost, *command], capsys)
        assert "every judged query judges only documents its corpus does not hold" in err
    assert not (tmp_path / "none").exists()


def test_a_run_of_the_first_queries_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _yaml(tmp_path / "few.yaml", _config(DEMO, {"kind": "bm25"}, {"kind": "dense"}))
    assert main(["run", config, "--out", str(tmp_path / "run"), "--limit-queries", "3"]) == 0
    printed = capsys.readouterr().out
    said = "the run scored the first 3 of the 117 queries it could evaluate (--limit-queries 3)"
    assert f"Limited queries: {said}" in printed
    assert said.replace("(--", "(`--").replace("3)", "3`)") in (
        tmp_path / "run" / "report.md"
    ).read_text("utf-8")


# ---------------------------------------------------------------- a dataset changed since the run


def test_a_run_whose_dataset_changed_is_neither_deployed_nor_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = _lab(tmp_path / "lab", ANSWERABLE)
    out = run(_config(lab, {"kind": "bm25"}), tmp_path / "run", progress=False).path
    trial = pd.read_parquet(out / "trials.parquet")["trial_id"].iloc[0]
    (lab / "segments.md").write_text("Every document was edited since.", "utf-8")
    said = f"{out / 'manifest.json'}: the dataset at {lab} changed since the run"
    with pytest.raises(DataError, match="changed since the run"):
        RunStore(out).dataset()
    export = ["export", "ragas", str(out), "--trial", trial, "--out", str(tmp_path / "x.jsonl")]
    assert said in _refused(export, capsys)
    ingest = ["ingest", "--from-run", str(out), "--trial", trial, "--db", str(tmp_path / "db")]
    assert said in _refused([*ingest, "--collection", "c"], capsys)
    assert not (tmp_path / "db" / "c").exists()


# ---------------------------------------------------------------- trained through a base model


def test_a_model_fine_tuned_from_one_trained_on_the_reported_queries_is_refused(
    beir: Path, tiny_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    settings = json.dumps({"epochs": 1, **FAST})
    argv = ["finetune", str(beir), "--split", "test", "--out", str(first)]
    assert main([*argv, "--model", str(tiny_encoder), "--settings", settings]) == 0
    generated = json.dumps({"queries": 8, **FAST})
    argv = ["finetune", str(beir), "--pairs", "generated", "--out", str(second)]
    assert main([*argv, "--model", str(first), "--settings", generated]) == 0
    record = json.loads((second / "training.json").read_text("utf-8"))
    assert record["base"] == str(first) and record["pairs"] != "split 'test' of beir"
    config = _yaml(tmp_path / "second.yaml", _dense(beir, second))
    err = _refused(["run", config, "--dry-run"], capsys)
    assert f"model '{second}' was fine-tuned on 20 of the 20 queries this run reports on" in err
    assert f"see {first / 'training.json'}, through the model it was fine-tuned from" in err
    # a chain of records that comes back to a model is one line naming it
    (second / "training.json").write_text(json.dumps({**record, "base": str(second)}), "utf-8")
    err = _refused(["run", config, "--dry-run"], capsys)
    assert f"{second / 'training.json'}: the models fine-tuned from one another" in err


# ---------------------------------------------------------------- eval on part of the judged set


def test_eval_says_how_many_queries_it_scored_and_which_the_run_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels, part = tmp_path / "qrels.txt", tmp_path / "part.trec"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\n", "utf-8")
    part.write_text("q1 Q0 d1 1 1.0 t\n", "utf-8")
    assert main(["eval", "--qrels", str(qrels), "--run", str(part), "--metrics", "ndcg@10"]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [f"{'num_q':<22}\tall\t1", f"{'ndcg@10':<22}\tall\t1.0000"]
    assert printed.err.strip() == (
        f"{part}: 1 of the 2 queries judged in {qrels} is not in the run and left out of the "
        "means (-c scores them 0)"
    )
    argv = ["eval", "--qrels", str(qrels), "--run", str(part), "--metrics", "ndcg@10", "-c"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert f"{'num_q':<22}\tall\t2" in printed.out and f"\tall\t{0.5:.4f}" in printed.out
    assert not printed.err
