"""`load_dataset`: layout detection, explicit formats, bundled and downloaded names."""

from __future__ import annotations

from pathlib import Path

import pytest

import ragbench.data
from ragbench.data import catalog
from ragbench.data.catalog import detect_format, load_dataset
from ragbench.errors import ConfigError, DataError
from tests.paths import DEMO, require
from tests.test_data_beir import make_beir
from tests.test_data_chunking_eval import make_chunking, ref
from tests.test_data_spans import make_spans, query


def test_layouts_are_detected(tmp_path: Path) -> None:
    beir = make_beir(tmp_path / "b")
    spans = make_spans(tmp_path / "s", [query(evidence=[{"doc_id": "a.md", "text": "lazy"}])])
    chunking = make_chunking(tmp_path / "c", [["q?", [ref("Beta", 0, 4)], "beta"]])
    assert [detect_format(p) for p in (beir, spans, chunking)] == [
        "beir",
        "spans",
        "chunking_evaluation",
    ]
    assert load_dataset(beir, split="train", title="metadata").doc_index["d1"].text == "first text"
    assert load_dataset(str(spans)).name == "s"
    assert load_dataset(chunking, format="chunking_evaluation").has_spans


def test_unknown_layouts_and_formats(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no labeled queries — write .*queries.jsonl"):
        load_dataset(tmp_path)
    (tmp_path / "a.md").write_text("a file is no dataset", encoding="utf-8")
    with pytest.raises(DataError, match=r"not a recognised dataset layout \(expected beir: qrels/"):
        load_dataset(tmp_path / "a.md")
    with pytest.raises(DataError, match=r"no such dataset path or name \(bundled: demo; BEIR"):
        load_dataset(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"unknown dataset format 'csv'; known: beir"):
        load_dataset(make_beir(tmp_path / "b"), format="csv")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"qrels/test.tsv: no such file \(splits in .*: none\)"):
        load_dataset(make_spans(tmp_path / "s", []), format="beir")


def test_bundled_demo_by_name() -> None:
    require(DEMO)
    data = ragbench.data.load_dataset("demo")
    assert data.name == "demo" and len(data.queries) == 117 and data.has_spans
    assert ragbench.data.DATASETS["demo"].path == DEMO.resolve()


def test_bundled_name_without_the_repository(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(catalog, "bundled_dir", lambda: tmp_path / "site-packages" / "datasets")
    with pytest.raises(
        DataError, match=r"bundled dataset 'demo': .* installed without the repository's datasets/"
    ):
        load_dataset("demo")


def test_downloaded_beir_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGBENCH_DATA", str(tmp_path / "data"))
    with pytest.raises(
        DataError, match=r"'nfcorpus' is not downloaded .*`ragbench datasets download nfcorpus`"
    ):
        load_dataset("nfcorpus")
    make_beir(tmp_path / "data" / "nfcorpus")
    assert load_dataset("nfcorpus").name == "nfcorpus"
