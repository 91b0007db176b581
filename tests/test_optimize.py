"""`ragbench optimize DOCS`: labels generated (and reused), the default sweep, the report, the
recommendation with its confidence, and a deploy command that works as printed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.data.generate import IctMethod, corpus_documents
from ragbench.optimize import DEFAULT_SWEEP, default_config
from ragbench.pipeline import RAGPipeline

TOPICS = {
    "storage": "segments on disk, compaction of old logs and the retention of records",
    "network": "listeners, ports, TLS certificates and the connections of clients",
    "security": "users, access control lists, tokens and the rotation of signing keys",
    "upgrades": "rolling restarts, protocol versions and the order of broker upgrades",
    "metrics": "lag gauges, request latency histograms and the alerts built on them",
    "quotas": "produce and fetch rates, the throttling of clients and quota overrides",
}


def _docs(root: Path) -> Path:
    """Six Markdown guides of three sections each; every sentence differs (none repeats)."""
    root.mkdir()
    for name, about in TOPICS.items():
        first, *_, last = about.split(", ")
        sections = [
            f"## The {part} part\n\nThe {part} part of the {name} guide covers {about}. "
            f"Operators read the {part} {name} notes before they change {first}. Each {name} "
            f"setting in the {part} part is explained with its reason and its cost. Mistakes "
            f"with {last} cause most {part} {name} incidents in production clusters.\n"
            for part in ("first", "second", "third")
        ]
        (root / f"{name}.md").write_text(f"# The {name} guide\n\n" + "\n".join(sections))
    return root


def test_the_default_sweep_covers_the_families() -> None:
    config = default_config("labels", "optimize-docs")
    kinds = [r["kind"] for r in DEFAULT_SWEEP["retriever"]]
    assert kinds == ["bm25", "dense", "hybrid", "hybrid"]
    assert len(DEFAULT_SWEEP["chunker"]) == 2
    assert config["evaluation"]["metrics"][0] == "ndcg@10"
    assert config["sweep"]["embedder"][0]["model"] == "all-MiniLM-L6-v2"


@pytest.mark.slow
def test_optimize_recommends_with_confidence_and_the_deploy_command_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    docs = _docs(tmp_path / "docs")
    (docs / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # no loader reads it
    argv = ["optimize", str(docs), "--out", "out", "--n", "24"]
    assert main(argv) == 0
    printed, said = capsys.readouterr()
    assert f"skipped {docs / 'diagram.png'}: unsupported extension" in said
    # the document-level sweep scores every one of the 24 queries generated
    assert "(24 queries, generated from 6 documents)\n" in printed
    assert "Recommendation: best overall" in printed
    assert "Confidence in the pick (ndcg@10): " in printed
    assert "resamples of the 24 queries" in printed
    assert "Labels: generated (ict), 24 queries" in printed
    assert (tmp_path / "out" / "run" / "report.html").is_file()
    # the run and its report name the folder the user gave, not the labels folder
    manifest = json.loads((tmp_path / "out" / "run" / "manifest.json").read_text("utf-8"))
    assert manifest["dataset"]["source"] == str(docs.resolve())
    assert f"`{docs.resolve()}`" in (tmp_path / "out" / "run" / "report.md").read_text("utf-8")
    deploy = printed.rsplit("deploy:", 1)[1].strip()
    assert deploy.startswith(f"ragbench ingest --source={docs.resolve()}")

    # the printed command builds a collection that answers searches
    assert main([*shlex.split(deploy)[1:], "--db", str(tmp_path / "db")]) == 0
    assert main(["search", "rotation of signing keys", "--db", str(tmp_path / "db")]) == 0
    assert "security.md" in capsys.readouterr().out

    # a second call reuses the labels (same documents, same settings)
    assert main(argv) == 0
    assert "24 queries, reused" in capsys.readouterr().out
    assert len(list((tmp_path / "out").glob("labels-*"))) == 1


QUICK = ["--set", "sweep.embedder=[{kind: hashing, dim: 64}]", "--set", "latency.queries=0"]


def test_n_is_the_number_of_queries_the_sweep_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guides repeat their words from sentence to sentence, so a sentence's neighbours
    often give its document away: such a query is judged at the span levels only. Generation
    draws on until ``--n`` queries are judged at the level the sweep evaluates; a corpus that
    has fewer says so in one line."""
    docs = _docs(tmp_path / "docs")
    documents, _ = corpus_documents(docs)
    drawn = IctMethod().run(documents, 12, 0)  # the first 12 sentences drawn
    assert sum(d.judged_at("document") for d in drawn.drafts) < 12

    def optimized(name: str, n: int, *options: str) -> tuple[str, dict[str, Any]]:
        out = tmp_path / name
        argv = ["optimize", str(docs), "--out", str(out), "--n", str(n), *QUICK, *options]
        assert main(argv) == 0
        manifest = json.loads((out / "run" / "manifest.json").read_text(encoding="utf-8"))
        return capsys.readouterr().out, manifest["queries"]

    printed, queries = optimized("document", 12)
    assert "(12 queries, generated from 6 documents)\n" in printed
    assert (queries["count"], queries["left_out"]) == (12, {})
    # n follows the level the sweep evaluates (--set), and so does the labels' cache key (below)
    printed, queries = optimized("chunk", 12, "--set", "evaluation.level=chunk")
    assert "(12 queries, generated from 6 documents)\n" in printed
    assert (queries["count"], queries["left_out"]) == (12, {})
    printed, queries = optimized("short", 500)
    count = queries["count"]
    assert 12 < count < 500 and queries["left_out"] == {}
    assert (
        f"({count} queries, generated from 6 documents)\n--n 500: the documents give only "
        f"{count} queries judged at the document level (every one of the " in printed
    )
    printed, _ = optimized("short", 500)  # reused labels: the line still says it
    assert (
        f"({count} queries, reused)\n--n 500: the documents give only {count} queries judged "
        "at the document level (every candidate was drawn when these labels were generated)\n"
    ) in printed
    keys = {next((tmp_path / name).glob("labels-*")).name for name in ("document", "chunk")}
    assert len(keys) == 2


def test_the_deploy_command_indexes_the_folder_as_it_is_after_an_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated labels hold a copy of the documents: the printed deploy command indexes the
    folder (with optimize's globs), so a file edited after optimize is served as edited."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    docs = _docs(tmp_path / "docs")
    (docs / "notes.txt").write_text("not selected: the globs keep to the guides")
    argv = ["optimize", str(docs), "--out", str(tmp_path / "out"), "--n", "12", *QUICK]
    assert main([*argv, "--include", "*.md"]) == 0
    deploy = shlex.split(capsys.readouterr().out.rsplit("deploy:", 1)[1].strip())
    assert deploy[:4] == ["ragbench", "ingest", f"--source={docs.resolve()}", "--include=*.md"]
    with (docs / "quotas.md").open("a") as guide:
        guide.write("\nThe zebrafish override was added after the labels were generated.\n")

    db = tmp_path / "db"
    assert main([*deploy[1:], "--db", str(db)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["search", "zebrafish override", "--db", str(db), "-k", "1"]) == 0
    assert "quotas.md" in capsys.readouterr().out
    deployed = RAGPipeline.open(db / "default")
    assert sorted(deployed.document_ids) == sorted(f"{name}.md" for name in TOPICS)
    assert any("zebrafish override" in c.text for c in deployed.chunks.values())


def test_bad_arguments_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["optimize", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such file or folder" in capsys.readouterr().err
    assert main(["optimize", str(tmp_path), "--n", "0"]) == 2
    assert "--n: expected an integer >= 1, got 0" in capsys.readouterr().err
