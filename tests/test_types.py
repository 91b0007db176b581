"""Core value types: frozen, picklable, hashing, padded rankings."""

import dataclasses
import pickle

import numpy as np
import pytest

from ragbench.types import Chunk, Document, Ranking, content_hash


def test_content_hash_is_stable_sha256() -> None:
    assert content_hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert content_hash("é") != content_hash("e")


def test_types_are_frozen_and_picklable() -> None:
    doc = Document("a.md", "hello world", {"lang": "en"}, "/x/a.md")
    chunk = Chunk("a.md:chunk-0", "a.md", 0, 0, 5, "hello", {"lang": "en"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.text = "changed"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(chunk)) == chunk
    assert doc.text[chunk.start : chunk.end] == chunk.text
    assert doc.hash == content_hash("hello world")


def test_ranking_from_rows_pads_and_rows_roundtrip() -> None:
    ranking = Ranking.from_rows([[("a", 2.0), ("b", 1.0)], [], [("c", 0.5)]])
    assert ranking.ids.shape == (3, 2)
    assert ranking.row(0) == [("a", 2.0), ("b", 1.0)]
    assert ranking.row(1) == []
    assert ranking.row(2) == [("c", 0.5)]
    assert np.isneginf(ranking.scores[2, 1])
    assert ranking.head(1).row(0) == [("a", 2.0)]
    assert Ranking.from_rows([[("a", 1.0), ("b", 0.5)]], k=1).row(0) == [("a", 1.0)]
