"""Run-directory integrity: any id a loader produces round-trips through the run's files,
validate agrees with run, resume verifies and repairs the run directory, a full disk is a clear
error, and bad flags or grids fail fast."""

from __future__ import annotations

import errno
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
import yaml

from ragbench.cli import main
from ragbench.data.trec import read_qrels, read_run, write_qrels, write_run
from ragbench.data.validate import validate_dataset
from ragbench.errors import DataError
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.evaluation import Evaluation
from ragbench.experiment.runner import RunResult, run
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import chunk_depth
from ragbench.pipeline import RAGPipeline
from ragbench.report.report import Report
from ragbench.text.chunk_table import document_ranking
from tests.paths import DEMO, require
from tests.test_data_beir import make_beir

HASHING = {"kind": "hashing", "dim": 256}
SPACED = "operations/retention policy.md"  # was operations/retention.md
PERCENT = "concepts/segments%20v2.md"  # was concepts/segments.md: a literal %20, not a space


def _config(dataset: Path) -> dict:
    return {
        "name": "integrity",
        "dataset": {"path": str(dataset)},
        "evaluation": {"metrics": ["ndcg@10", "map", "recall@20"], "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 800, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}],
        },
    }


def _renamed_demo(root: Path) -> Path:
    """The demo set with two documents renamed: one with a space, one with a literal %20."""
    shutil.copytree(require(DEMO), root)
    queries = (root / "queries.jsonl").read_text(encoding="utf-8")
    for old, new in (("operations/retention.md", SPACED), ("concepts/segments.md", PERCENT)):
        (root / "corpus" / old).rename(root / "corpus" / new)
        queries = queries.replace(f'"{old}"', f'"{new}"')
    (root / "queries.jsonl").write_text(queries, encoding="utf-8")
    return root


# ---------------------------------------------------------------- 1. ids with spaces


def test_ids_with_whitespace_percent_and_hash_round_trip_through_trec_files(
    tmp_path: Path,
) -> None:
    ids = ["a b", "tab\there", "50%", "x%20y", "#lead", "nbsp\u00a0ideo\u3000", "plain"]
    run_in = {f"q {i}": {d: float(n) for n, d in enumerate(ids)} for i in range(2)}
    write_run(tmp_path / "r.trec", run_in)
    lines = (tmp_path / "r.trec").read_text(encoding="utf-8").splitlines()
    assert all(len(line.split()) == 6 for line in lines)
    assert read_run(tmp_path / "r.trec") == run_in
    qrels = {"#q": {d: 1 for d in ids}}
    write_qrels(tmp_path / "q.txt", qrels)
    assert read_qrels(tmp_path / "q.txt") == qrels
    # a file ragbench did not write keeps every % that is not one of its escapes
    (tmp_path / "foreign").write_text("q Q0 a%41b%2 1 1.0 t\n", encoding="utf-8")
    assert read_run(tmp_path / "foreign") == {"q": {"a%41b%2": 1.0}}


def test_a_sweep_over_file_names_with_spaces_writes_every_file_and_deploys(
    tmp_path: Path,
) -> None:
    dataset = _renamed_demo(tmp_path / "demo")
    assert validate_dataset(dataset).ok
    config = _config(dataset)
    result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    trials, per_query = result.trials, result.per_query
    assert set(trials["status"]) == {"ok"} and len(trials) == 2
    queries = pd.read_parquet(result.path / "queries.parquet")
    qrels = {q: json.loads(r) for q, r in zip(queries["query_id"], queries["qrels"], strict=True)}
    assert any(SPACED in judged for judged in qrels.values())
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "map"})
    for trial_id in trials["trial_id"]:
        scored = read_run(result.path / "runs" / f"{trial_id}.trec")
        assert any(SPACED in docs for docs in scored.values())
        assert any(PERCENT in docs for docs in scored.values())
        reference = evaluator.evaluate(scored)
        mine = per_query[per_query["trial_id"] == trial_id]
        for metric, name in (("ndcg@10", "ndcg_cut_10"), ("map", "map")):
            values = mine[mine["metric"] == metric].set_index("query_id")["value"]
            expected = [reference.get(q, {}).get(name, 0.0) for q in values.index]
            np.testing.assert_allclose(values.to_numpy(), expected, atol=1e-9)
        top = pd.read_parquet(result.path / "runs" / f"{trial_id}.top.parquet")
        assert SPACED in set(top["doc_id"])
    # `ragbench eval` on the run's own files agrees too
    write_qrels(tmp_path / "qrels.txt", qrels)
    first = trials["trial_id"].iloc[0]
    trec = str(result.path / "runs" / f"{first}.trec")
    assert main(["eval", "--qrels", str(tmp_path / "qrels.txt"), "--run", trec]) == 0
    # every trial is deployable: the pipeline ranks exactly as the run scored
    cfg = load_config(config)
    depth = chunk_depth(cfg, expand(cfg)[0])
    for trial_id in trials["trial_id"]:
        pipeline = RAGPipeline.from_trial(result.path, trial_id)
        ranking = pipeline.search(list(queries["text"]), depth).ranking
        table = pipeline._live[pipeline.plan(depth).chunks].table
        documents = document_ranking(ranking, table).head(20)
        scored = read_run(result.path / "runs" / f"{trial_id}.trec")
        for row, query_id in enumerate(queries["query_id"]):
            mine_ids = {d for d, _ in documents.row(row)}
            assert mine_ids == set(scored.get(query_id, {})), (trial_id, query_id)


def test_an_id_no_file_can_hold_fails_validate_and_run_with_the_same_message(
    tmp_path: Path,
) -> None:
    dataset = _renamed_demo(tmp_path / "demo")
    odd = dataset / "corpus" / b"caf\xe9.md".decode("utf-8", "surrogateescape")
    odd.write_text("# Café\n\nNot UTF-8 in its name.\n", encoding="utf-8")
    report = validate_dataset(dataset)
    assert [p.severity for p in report.problems] == ["error"]
    message = str(report.problems[0])
    assert "'caf\\udce9.md'" in message and "UTF-8" in message
    with pytest.raises(DataError) as info:
        run(_config(dataset), tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    assert str(info.value) == message
    assert not (tmp_path / "run" / "trials.parquet").exists()


# ---------------------------------------------------------------- 5. small CLI and config items


def _run_yaml(tmp_path: Path, dataset: Path, **sweep: object) -> Path:
    config = _config(dataset)
    config["sweep"] = {"chunker": [{"kind": "none"}], "retriever": [{"kind": "bm25"}], **sweep}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("broken", ["all grades 0", "empty corpus"])
def test_a_set_run_cannot_evaluate_fails_validate_as_it_fails_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: str
) -> None:
    corpus = "" if broken == "empty corpus" else None
    grade = 0 if broken == "all grades 0" else 1
    test = f"query-id\tcorpus-id\tscore\nq1\td1\t{grade}\nq2\td2\t{grade}\n"
    dataset = make_beir(tmp_path / "set", corpus, None, {"test": test})
    if corpus is not None:
        (dataset / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    assert main(["datasets", "validate", str(dataset)]) == 1
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    message = errors[0].removeprefix("error: ")
    assert main(["run", str(_run_yaml(tmp_path, dataset)), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"ragbench run: {message}"


def test_resume_and_overwrite_together_and_a_bad_query_limit_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_yaml(tmp_path, require(DEMO))
    out = ["--out", str(tmp_path / "r")]
    assert main(["run", str(path), *out, "--resume", "--overwrite"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ragbench run: --resume and --overwrite exclude each other: --resume continues the "
        "run, --overwrite starts it again"
    )
    for limit in ("-5", "0"):
        for dry in ([], ["--dry-run"]):
            assert main(["run", str(path), *out, "--limit-queries", limit, *dry]) == 2
            assert capsys.readouterr().err.strip() == (
                f"ragbench run: --limit-queries: expected a positive number of queries, got {limit}"
            )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (  # one spec alone: 1,000 x 1,000 values
            {"retriever": [{"kind": "bm25", "k1": list(range(1, 1001)), "b": [0.5] * 1000}]},
            "sweep.retriever[0]: expands to 1,000,000 combinations",
        ),
        (  # 1,000 chunkers x 1,000 retrievers x 1,000 rerankers
            {
                "chunker": [{"kind": "recursive", "size": list(range(100, 1100)), "overlap": 0}],
                "retriever": [{"kind": "bm25", "k1": [k / 100 for k in range(1, 1001)]}],
                "reranker": [{"kind": "dense", "candidates": list(range(1, 1001))}],
            },
            "sweep: expands to 1,000,000,000 trials",
        ),
    ],
)
def test_a_grid_over_the_cap_fails_fast_with_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: dict, message: str
) -> None:
    path = _run_yaml(tmp_path, require(DEMO), **sweep)
    started = time.perf_counter()
    assert main(["run", str(path), "--dry-run"]) == 2
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err.strip()
    assert message in err and "more than the cap of 100,000 trials" in err
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------- 3. failed trials and resume


def test_when_every_trial_fails_the_run_says_so_skips_the_report_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object) -> None:
        raise RuntimeError("no scores today")

    monkeypatch.setattr(Evaluation, "evaluate", fail)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    path = _run_yaml(tmp_path, require(DEMO), retriever=[{"kind": "bm25", "k1": [0.9, 1.2]}])
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--limit-queries", "5"]) == 1
    captured = capsys.readouterr()
    assert f"run directory: {out}" in captured.out
    assert "no trial finished: no table and no report" in captured.err
    assert f"2 trial(s) failed; see {out / 'trials.parquet'}" in captured.err
    assert not (out / "report.html").exists()
    assert set(RunResult(out).table()["status"]) == {"failed"}  # a notebook's table too


def _four_trials() -> dict:
    config = _config(require(DEMO))
    config["sweep"]["retriever"] = [{"kind": "bm25", "k1": [0.9, 1.2]}, {"kind": "dense"}]
    config["sweep"]["retriever"].append({"kind": "hybrid"})
    return config


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys).reset_index(drop=True)


def test_resume_runs_again_the_trials_that_lost_a_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, out, cache = _four_trials(), tmp_path / "run", tmp_path / "cache"
    first = run(config, out, cache_root=cache, limit_queries=10, progress=False)
    clean = _sorted(first.per_query, ["trial_id", "metric", "query_id"])
    ids = sorted(first.trials["trial_id"])
    assert len(ids) == 4

    def resume() -> list[str]:
        redone: list[str] = []
        run(
            config,
            out,
            resume=True,
            cache_root=cache,
            limit_queries=10,
            progress=False,
            on_trial=lambda result: redone.append(result.trial_id),
        )
        return sorted(redone)

    (out / "per_query.parquet").unlink()
    with caplog.at_level("WARNING", logger="ragbench.experiment.runner"):
        assert resume() == ids
    assert caplog.text.count("lacks 30 per-query value(s), e.g. map of") == 4
    assert _sorted(RunResult(out).per_query, ["trial_id", "metric", "query_id"]).equals(clean)

    a, b, c, d = ids
    (out / "runs" / f"{a}.trec").unlink()
    (out / "runs" / f"{b}.top.parquet").write_bytes(b"not parquet")
    curves = pd.read_parquet(out / "curves.parquet")
    dropped = (curves["trial_id"] == c) & (curves["metric"] == "recall")
    curves[~dropped].to_parquet(out / "curves.parquet")
    caplog.clear()
    with caplog.at_level("WARNING", logger="ragbench.experiment.runner"):
        assert resume() == [a, b, c]
    assert f"lacks runs/{a}.trec" in caplog.text
    assert f"lacks a readable runs/{b}.top.parquet" in caplog.text
    assert "lacks the recall curve" in caplog.text
    assert _sorted(RunResult(out).per_query, ["trial_id", "metric", "query_id"]).equals(clean)
    assert len(RunResult(out).trials) == 4 and d in set(RunResult(out).trials["trial_id"])
    assert Report.from_run(out).write(("md",))["md"].is_file()


@pytest.mark.parametrize("name", ["trials.parquet", "per_query.parquet", "curves.parquet"])
def test_resume_over_an_unreadable_table_runs_every_trial_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    config, out, cache = _four_trials(), tmp_path / "run", tmp_path / "cache"
    first = run(config, out, cache_root=cache, limit_queries=10, progress=False)
    (out / name).write_bytes(b"PAR1 truncated")
    with caplog.at_level("WARNING", logger="ragbench.experiment.runner"):
        again = run(config, out, resume=True, cache_root=cache, limit_queries=10, progress=False)
    assert f"{out / name}: not a readable parquet table" in caplog.text
    assert "every trial runs again" in caplog.text
    metrics = ["ndcg@10", "map", "recall@20"]
    pd.testing.assert_frame_equal(
        again.trials.set_index("trial_id")[metrics].sort_index(),
        first.trials.set_index("trial_id")[metrics].sort_index(),
    )


def test_resume_over_an_unreadable_manifest_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    path, out = _run_yaml(tmp_path, require(DEMO)), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--limit-queries", "5", "--no-report"]) == 0
    (out / "manifest.json").write_text('{"config": ', encoding="utf-8")
    capsys.readouterr()
    args = ["run", str(path), "--out", str(out), "--limit-queries", "5", "--resume"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ragbench run: {out / 'manifest.json'}: not a readable manifest")
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------- 4. a full disk


def _full_disk(monkeypatch: pytest.MonkeyPatch, cls: type, method: str, hit: object) -> None:
    """Make ``cls.method`` write part of its file, then fail with ENOSPC, when ``hit(file)``
    (the file is ``self`` for a ``Path`` method, else the first argument)."""
    real = getattr(cls, method)

    def write(self: object, *args: object, **kwargs: object) -> object:
        target = self if isinstance(self, Path) else Path(str(args[0]))
        if hit(target):  # type: ignore[operator]
            with open(target, "wb") as partial:
                partial.write(b"PAR1 partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, write)


def test_a_full_disk_mid_sweep_is_one_line_and_the_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    path = _run_yaml(tmp_path, require(DEMO), retriever=[{"kind": "bm25", "k1": [0.5, 0.9, 1.3]}])
    out = tmp_path / "run"
    args = ["run", str(path), "--out", str(out), "--limit-queries", "5", "--no-report"]
    writes: list[Path] = []

    def second_per_query(target: Path) -> bool:
        writes.append(target)
        return sum("per_query" in p.name for p in writes) == 2 and "per_query" in target.name

    with monkeypatch.context() as patch:
        _full_disk(patch, pd.DataFrame, "to_parquet", second_per_query)
        assert main(args) == 1
    err = capsys.readouterr().err
    assert f"ragbench run: {out}: no space left on device (writing per_query.parquet; " in err
    assert "Traceback" not in err
    assert not list(out.rglob(".tmp-*"))
    assert len(pd.read_parquet(out / "trials.parquet")) == 1  # the first trial is kept
    assert main([*args, "--resume"]) == 0
    result = RunResult(out)
    assert len(result.trials) == 3 and len(result.per_query) == 3 * 3 * 5


def test_a_full_disk_during_ingest_is_one_line_and_keeps_what_it_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.md").write_text(f"# {name}\n\nThe {name} note.\n")
    db = tmp_path / "db"
    spec = json.dumps({"chunker": {"kind": "none"}, "retriever": {"kind": "bm25"}})
    ingest = ["ingest", "--db", str(db), "--collection", "c", "--config", spec, "--source"]
    assert main([*ingest, str(tmp_path / "one")]) == 0
    with monkeypatch.context() as patch:
        _full_disk(patch, Path, "write_text", lambda target: db in target.parents)
        assert main([*ingest, str(tmp_path / "two")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    why = (
        "no space left on device (writing the indexes of collection 'c'; its documents are "
        "committed and opening it rebuilds the indexes from them)"
    )
    assert err == f"ragbench ingest: {db}: {why}"
    assert not list(db.rglob(".tmp-*"))
    reopened = RAGPipeline.open(db / "c")
    assert reopened.document_ids == ["one.md", "two.md"]
    assert reopened.retrieve("The two note", 1)[0].chunk.doc_id == "two.md"


def test_unreadable_run_files_are_data_errors_naming_them(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    for name in ("manifest.json", "selection.json", "trials.parquet", "curves.parquet"):
        (tmp_path / name).write_text("{not", encoding="utf-8")
    for read in (store.manifest, store.selection, store.trials, store.curves):
        with pytest.raises(DataError, match=f"^{tmp_path}/[a-z_]+\\.(json|parquet): not a read"):
            read()
