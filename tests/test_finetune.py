"""Domain adaptation: real tiny models trained on the bundled demo set. The loss falls, a run
resumed from its checkpoint ends as an uninterrupted one, training in bounded memory gives the
gradients of a plain pass, a model left at chance is not trained and its trials fail, a sweep
trains each model once (a rerun hits the cache) and deploys what it scored, the split guard
refuses training on reported queries, generated pairs hold their sentence out, and the trained
model exports to ONNX."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from ragbench import progress
from ragbench.cli import main
from ragbench.data import load_dataset
from ragbench.data.pairs import generated_pairs, split_pairs, tiles
from ragbench.data.trec import read_run
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run
from ragbench.experiment.store import RunStore
from ragbench.index import finetune
from ragbench.index.embedders import SentenceTransformerConfig, SentenceTransformerEmbedder
from ragbench.index.finetune import FinetuneConfig, mine_negatives, teacher_margins, train
from ragbench.pipeline import RAGPipeline
from ragbench.report.markdown import render_markdown
from ragbench.report.report import Report
from ragbench.text.chunk_table import document_ranking
from tests.paths import REPO

pytestmark = pytest.mark.xdist_group("finetune")

DEMO = REPO / "datasets" / "demo"
FAST = {"batch_size": 4, "max_seq_length": 32, "learning_rate": 5e-3, "warmup": 0.0}


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo set as a BEIR folder with a train split (40 queries) and a test split (20)."""
    labeled = load_dataset(str(DEMO))
    root = tmp_path_factory.mktemp("demo-beir")
    docs = [{"_id": d.id, "title": "", "text": d.text} for d in labeled.documents]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), "utf-8")
    queries = labeled.queries[:60]
    rows = [json.dumps({"_id": q.id, "text": q.text}) + "\n" for q in queries]
    (root / "queries.jsonl").write_text("".join(rows), "utf-8")
    (root / "qrels").mkdir()
    for split, part in (("train", queries[:40]), ("test", queries[40:])):
        lines = ["query-id\tcorpus-id\tscore"]
        lines += [f"{q.id}\t{d}\t{g}" for q in part for d, g in labeled.qrels[q.id].items()]
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", "utf-8")
    return root


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny, randomly initialised (seed 0) BERT bi-encoder with MiniLM's tokenizer and mean
    pooling, saved as a sentence-transformers folder: trains in a fraction of a second a step."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ragbench.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("tiny-encoder")
    BertModel(config).save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    model = SentenceTransformer(modules=[Transformer(str(root / "bert")), Pooling(32, "mean")])
    model.save(str(root / "model"))
    return root / "model"


def _pairs(beir: Path) -> Any:
    return split_pairs(load_dataset(str(beir), split="train"), 128)


def test_generated_pairs_hold_their_sentence_out_of_the_passage() -> None:
    documents = load_dataset(str(DEMO)).documents
    pairs = generated_pairs(documents, 30, 0, 600)
    assert len(pairs) >= 20 and pairs.source.startswith("generated (ict, n=30, seed=0")
    tiles_of: dict[str, list[str]] = {}
    for passage_id, text in pairs.passages.items():
        tiles_of.setdefault(pairs.owner(passage_id), []).append(text)
    for query, doc_id, passage in zip(
        pairs.queries, pairs.positive_ids, pairs.positives, strict=True
    ):
        assert query not in passage and not any(query in t for t in tiles_of[doc_id])
        assert 0 < len(passage) <= 600
        assert passage in tiles_of[doc_id]  # a positive is cut like the pool's negatives
    assert generated_pairs(documents, 30, 0, 600).key == pairs.key
    assert generated_pairs(documents, 30, 1, 600).key != pairs.key


def test_tiles_cover_a_document_in_order_at_spaces() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta " * 3
    spans = tiles(text, 12)
    assert all(0 < end - start <= 12 for start, end in spans)
    assert "".join(text[s:e] for s, e in spans).replace(" ", "") == text.replace(" ", "")
    assert all(text[e] == " " for _, e in spans[:-1])
    assert tiles("", 12) == [] and tiles("x" * 30, 12) == [(0, 12), (12, 24), (24, 30)]


def test_negatives_never_come_from_a_positive_document_s_tiles() -> None:
    documents = load_dataset(str(DEMO)).documents
    pairs = generated_pairs(documents, 30, 0, 200)
    assert len(set(pairs.passages)) > len({pairs.owner(i) for i in pairs.passages})
    for doc_id, found in zip(pairs.positive_ids, mine_negatives(pairs, "bm25", 3), strict=True):
        assert len(found) == 3 and doc_id not in {pairs.owner(i) for i in found}


def test_a_teacher_loss_without_hard_negatives_says_what_to_use(tmp_path: Path) -> None:
    document = load_dataset(str(DEMO)).documents[0]
    pairs = generated_pairs([document], 10, 0, 200)  # one document: every tile is a positive's
    config = FinetuneConfig(pairs="generated", **FAST)  # type: ignore[arg-type]
    assert config.loss_for("bi-encoder") == "margin_mse"
    with pytest.raises(finetune.FinetuneError, match="use loss: mnrl with negatives: none"):
        train("bi-encoder", "all-MiniLM-L6-v2", pairs, config, tmp_path)


def test_mined_negatives_are_ranked_passages_never_relevant(beir: Path) -> None:
    pairs = _pairs(beir)
    negatives = mine_negatives(pairs, "bm25", 2)
    relevant: dict[str, set[str]] = {}
    for query_id, doc_id in zip(pairs.query_ids, pairs.positive_ids, strict=True):
        relevant.setdefault(query_id, set()).add(doc_id)
    assert all(len(found) == 2 for found in negatives)
    for query_id, found in zip(pairs.query_ids, negatives, strict=True):
        assert not set(found) & relevant[query_id] and set(found) <= set(pairs.passages)
    assert mine_negatives(pairs, "none", 2) == [[] for _ in range(len(pairs))]


def _interrupt_at(step: int) -> Any:
    def show(activity: progress.Activity) -> None:
        if activity.unit == "steps" and activity.done == step:
            raise KeyboardInterrupt

    return show


def test_training_lowers_the_loss_and_resumes_as_if_never_stopped(
    beir: Path, tiny_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pairs = _pairs(beir)
    config = FinetuneConfig(pairs="select", epochs=4, **FAST)  # type: ignore[arg-type]
    whole = train("bi-encoder", str(tiny_encoder), pairs, config, tmp_path / "whole").record()
    losses = whole["losses"]
    assert whole["steps"] == len(losses) >= 30 and whole["n_pairs"] == len(pairs)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    monkeypatch.setattr(finetune, "CHECKPOINT_SECONDS", 0.0)
    with pytest.raises(KeyboardInterrupt), progress.listen(_interrupt_at(7)):
        train("bi-encoder", str(tiny_encoder), pairs, config, tmp_path / "cut")
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    resumed = train("bi-encoder", str(tiny_encoder), pairs, config, tmp_path / "cut").record()
    np.testing.assert_allclose(resumed["losses"], losses, rtol=1e-4)
    assert not (tmp_path / "cut" / "checkpoint.pt").exists()


def test_margin_mse_learns_the_margins_of_a_bm25_and_base_model_teacher(
    beir: Path, tiny_encoder: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from ragbench.index.sparse import BM25Index

    pairs = _pairs(beir)
    negatives = mine_negatives(pairs, "bm25", 2)
    base = SentenceTransformer(str(tiny_encoder), device="cpu")
    own = teacher_margins(base, pairs, negatives, 0.0)
    vectors = base.encode([pairs.queries[0], pairs.positives[0]], normalize_embeddings=True)
    negative = base.encode([pairs.passages[negatives[0][0]]], normalize_embeddings=True)[0]
    assert own[0][0] == pytest.approx(float(vectors[0] @ (vectors[1] - negative)), abs=1e-5)
    index = BM25Index()
    index.add(list(pairs.passages), list(pairs.passages.values()))
    lexical = teacher_margins(base, pairs, negatives, 1.0)
    for query, doc_id, found, margins in zip(
        pairs.queries, pairs.positive_ids, negatives, lexical, strict=True
    ):
        scores = index.score(query, [doc_id, *found])
        assert np.sign(margins).tolist() == np.sign(scores[0] - scores[1:]).tolist()
    config = FinetuneConfig(pairs="select", loss="margin_mse", n_negatives=2, epochs=4, **FAST)  # type: ignore[arg-type]
    record = train("bi-encoder", str(tiny_encoder), pairs, config, tmp_path / "m").record()
    assert record["loss"] == "margin_mse" and "teacher_bm25" not in record["settings"]
    assert np.mean(record["losses"][-5:]) < 0.8 * np.mean(record["losses"][:5])


def test_a_cross_encoder_trains_from_a_local_checkpoint(
    beir: Path, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    pairs = _pairs(beir)
    config = FinetuneConfig(pairs="select", epochs=4, loss="listwise", n_negatives=2, **FAST)  # type: ignore[arg-type]
    found = train("cross-encoder", str(tiny_cross_encoder), pairs, config, tmp_path).record()
    assert found["family"] == "cross-encoder" and found["loss"] == "listwise"
    assert np.mean(found["losses"][-5:]) < np.mean(found["losses"][:5])
    with pytest.raises(ConfigError, match="does not train a cross-encoder"):
        config = _config(beir, tiny_cross_encoder, "mnrl", select_on="train", report_on="test")
        load_config(config)


def _without_dropout(model: Path, out: Path) -> Path:
    """A copy of the cross-encoder folder ``model`` whose dropout is off: its training is
    deterministic, however its batches are cut into passes."""
    shutil.copytree(model, out)
    config = json.loads((out / "config.json").read_text("utf-8"))
    config |= {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    (out / "config.json").write_text(json.dumps(config), "utf-8")
    return out


@pytest.mark.parametrize("family", ["bi-encoder", "cross-encoder"])
def test_training_in_bounded_memory_takes_the_steps_of_a_plain_pass(
    family: finetune.Family,
    beir: Path,
    tiny_encoder: Path,
    tiny_cross_encoder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the bi-encoder with its dropout on (replayed when a layer is recomputed); the
    # cross-encoder's batch of 4 rows of 3 pairs is scored in 4 passes of at most 4 pairs
    pairs = _pairs(beir)
    if family == "bi-encoder":
        base = tiny_encoder
        config = FinetuneConfig(pairs="select", epochs=2, **FAST)  # type: ignore[arg-type]
    else:
        base = _without_dropout(tiny_cross_encoder, tmp_path / "base")
        config = FinetuneConfig(
            pairs="select",
            epochs=2,
            loss="listwise",
            n_negatives=2,
            **FAST,  # type: ignore[arg-type]
        )
    saving = train(family, str(base), pairs, config, tmp_path / "saving").record()
    monkeypatch.setattr(finetune, "MEMORY_SAVING", False)
    plain = train(family, str(base), pairs, config, tmp_path / "plain").record()
    assert saving["steps"] == plain["steps"] == len(saving["losses"]) >= 10
    np.testing.assert_allclose(saving["losses"], plain["losses"], rtol=1e-4)
    saved = json.loads((tmp_path / "saving" / "model" / "config.json").read_text("utf-8"))
    assert not any("checkpointing" in key for key in saved)  # the model runs as any other


def test_a_model_left_at_chance_is_not_trained_and_no_trial_scores_it(
    beir: Path, tiny_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    pairs = _pairs(beir)
    settings = {"pairs": "select", "loss": "listwise", "n_negatives": 2, "epochs": 2}
    stuck = FinetuneConfig(**settings, **{**FAST, "learning_rate": 1e-12})  # type: ignore[arg-type]
    model = train("cross-encoder", str(tiny_cross_encoder), pairs, stuck, tmp_path / "stuck")
    record = model.record()
    assert record["chance_loss"] == pytest.approx(math.log(3))  # a positive and 2 negatives
    assert record["final_loss"] > 0.95 * math.log(3)
    reason = r"not trained: its listwise loss over its last 5 steps, 1\.\d+, .* guess's, 1\.099"
    assert record["not_trained"] is not None
    with pytest.raises(finetune.FinetuneError, match=reason):
        model.usable()
    learnt = FinetuneConfig(**{**settings, "epochs": 8}, **FAST)  # type: ignore[arg-type]
    good = train("cross-encoder", str(tiny_cross_encoder), pairs, learnt, tmp_path / "good")
    assert good.record()["not_trained"] is None and good.usable() == good.path
    assert good.record()["final_loss"] < 0.95 * good.record()["chance_loss"]

    config = _config(beir, tiny_encoder, select_on="train", report_on="test")
    reranker = config["sweep"]["reranker"][1]
    reranker["model"] = str(tiny_cross_encoder)
    reranker["finetune"] = {**settings, **FAST, "learning_rate": 1e-12}
    done = run(load_config(config), tmp_path / "run")
    trials = RunStore(done.path).trials().set_index("label")
    failed = trials[trials["status"] != "ok"]
    assert list(trials["status"]) == ["ok", "failed"] and "cross_encoder" in failed.index[0]
    assert "FinetuneError" in failed["error"].iloc[0]
    assert "not trained" in failed["error"].iloc[0]
    markdown = render_markdown(Report.from_run(done.path), [])
    assert "## Failed trials" in markdown and "is not trained" in markdown


def _config(beir: Path, model: Path, reranker_loss: str | None = None, **evaluation: Any) -> dict:
    tuning = {"pairs": "select", "epochs": 2, **FAST}
    reranker = {"kind": "cross_encoder", "model": str(model), "candidates": 5, "max_length": 32}
    if reranker_loss:
        reranker["finetune"] = {**tuning, "loss": reranker_loss}
    return {
        "name": "finetune",
        "dataset": {"path": str(beir)},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10, **evaluation},
        "latency": {"queries": 0},
        "sweep": {
            "embedder": [
                {"kind": "sentence-transformers", "model": str(model), "finetune": tuning}
            ],
            "retriever": [{"kind": "dense"}],
            "reranker": [{"kind": "none"}, reranker],
        },
    }


def test_the_split_guard_refuses_training_on_reported_queries(
    beir: Path, tiny_encoder: Path
) -> None:
    with pytest.raises(ConfigError, match=r"evaluation.report_on.*split 'test'.*split 'test'"):
        load_config(_config(beir, tiny_encoder))
    with pytest.raises(ConfigError, match=r"report_on.*split 'train' \(evaluation.select_on\)"):
        load_config(_config(beir, tiny_encoder, select_on="train"))
    with pytest.raises(ConfigError, match=r"evaluation.folds: .*one model per fold"):
        load_config(_config(beir, tiny_encoder, folds=3))
    leaky = beir.parent / "leaky"
    leaky.mkdir()
    for part in ("corpus.jsonl", "queries.jsonl"):
        (leaky / part).write_bytes((beir / part).read_bytes())
    (leaky / "qrels").mkdir()
    train_qrels = (beir / "qrels" / "train.tsv").read_text("utf-8")
    test_rows = (beir / "qrels" / "test.tsv").read_text("utf-8").splitlines()[1:]
    (leaky / "qrels" / "train.tsv").write_text(train_qrels, "utf-8")
    (leaky / "qrels" / "test.tsv").write_text(
        train_qrels.splitlines()[0] + "\n" + "\n".join([train_qrels.splitlines()[1], *test_rows]),
        "utf-8",
    )
    config = _config(leaky, tiny_encoder, select_on="train", report_on="test")
    with pytest.raises(Exception, match=r"split 'train' .*evaluated on split 'test'") as caught:
        run(load_config(config), leaky.parent / "leaky-run")
    assert isinstance(caught.value, DataError) or "DataError" in str(caught.value)


def test_a_sweep_trains_each_model_once_and_deploys_what_it_scored(
    beir: Path, tiny_encoder: Path, tiny_cross_encoder: Path, tmp_path: Path
) -> None:
    config = _config(beir, tiny_encoder, select_on="train", report_on="test")
    config["sweep"]["reranker"][1]["model"] = str(tiny_cross_encoder)
    tuning = {**config["sweep"]["embedder"][0]["finetune"], "loss": "listwise", "epochs": 8}
    config["sweep"]["reranker"][1]["finetune"] = {**tuning, "n_negatives": 2}  # one that learns
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(config), "utf-8")
    first = run(load_config(tmp_path / "sweep.yaml"), tmp_path / "first")
    trials = RunStore(first.path).trials()
    assert list(trials["status"]) == ["ok", "ok"]
    again = RunStore(run(load_config(tmp_path / "sweep.yaml"), tmp_path / "again").path).trials()
    assert (again["cache_misses"] == 0).all()
    selection = json.loads((first.path / "selection.json").read_text("utf-8"))
    assert selection["chosen"]["ndcg@10"]["reported"]  # the pick, scored on the test split
    queries = load_dataset(str(beir), split="train").queries
    for trial_id in trials["trial_id"]:
        pipeline = RAGPipeline.from_trial(first.path, trial_id)
        ranking = pipeline.search([q.text for q in queries], 10).ranking
        table = pipeline._live[pipeline.plan(10).chunks].table
        documents = document_ranking(ranking, table).head(10)
        scored = read_run(first.path / "runs" / f"{trial_id}.trec")
        for row, query in enumerate(queries):
            mine = [d for d, _ in documents.row(row)]
            theirs = sorted(scored[query.id].items(), key=lambda p: -p[1])
            assert mine == [d for d, _ in theirs], (trial_id, query.id)
    embedder = pipeline.embedder
    assert embedder is not None
    trained = Path(embedder.config.model)  # type: ignore[attr-defined]
    record = json.loads((trained / "training.json").read_text("utf-8"))
    assert record["pairs"].startswith("split 'train'") and record["family"] == "bi-encoder"
    base = SentenceTransformerEmbedder(SentenceTransformerConfig(model=str(tiny_encoder)))
    texts = [q.text for q in queries[:3]]
    assert not np.allclose(embedder.embed(texts), base.embed(texts), atol=1e-3)


def test_a_tuned_model_exports_to_onnx_int8_and_finetune_builds_one_alone(
    beir: Path, tiny_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = json.dumps({"epochs": 1, **FAST})
    code = main(
        [
            "finetune",
            str(beir),
            "--out",
            str(tmp_path / "model"),
            "--model",
            str(tiny_encoder),
            "--settings",
            settings,
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["pairs"].startswith("split 'train'") and printed["family"] == "bi-encoder"
    texts = ["How do I restore a topic from a backup?", "Which port does the broker use?"]
    trained = str(tmp_path / "model")
    torch_side = SentenceTransformerEmbedder(SentenceTransformerConfig(model=trained))
    int8 = SentenceTransformerEmbedder(
        SentenceTransformerConfig(model=trained, backend="onnx", quantize="int8")
    )
    cosines = (torch_side.embed(texts) * int8.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.9
    assert main(["finetune", str(beir), "--out", str(tmp_path / "model")]) == 2
