"""The ONNX Runtime backend of the sentence-transformers embedder against torch's own
``SentenceTransformer.encode``: same vectors (fp32), close vectors (int8), one export per model
shared by processes, a damaged export rebuilt, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbench.index import onnx as onnx_backend
from ragbench.index.embedders import (
    EmbeddingError,
    SentenceTransformerConfig,
    SentenceTransformerEmbedder,
)

pytest.importorskip("onnxruntime")

# Lengths from 2 to past MiniLM's 256-token limit, so batching by length and truncation are hit.
TEXTS = [
    "Protein folding.",
    "Gene expression in yeast cells changes under heat stress, a response conserved in animals.",
    "Short",
    " ".join(["Mitochondria produce most of the energy a cell uses."] * 40),
    "Vaccines train the adaptive immune system to recognise a pathogen before infection.",
    "The ribosome translates messenger RNA into a chain of amino acids.",
]


def _pair(cache: Path, **options: object) -> tuple[np.ndarray, np.ndarray]:
    """Torch's and the ONNX backend's vectors of TEXTS for the same config options."""
    torch_side = SentenceTransformerEmbedder(SentenceTransformerConfig(**options))  # type: ignore[arg-type]
    onnx_side = SentenceTransformerEmbedder(
        SentenceTransformerConfig(backend="onnx", **options)  # type: ignore[arg-type]
    )
    return torch_side.embed(TEXTS), onnx_side.embed(TEXTS)


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One export cache for this module's tests (exports cost seconds each)."""
    root = tmp_path_factory.getbasetemp() / "onnx-cache"
    monkeypatch.setenv("RAGBENCH_CACHE", str(root))
    return root


def test_fp32_export_gives_torch_vectors(cache: Path) -> None:
    expected, found = _pair(cache)
    assert found.dtype == np.float32 and found.shape == expected.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(found, expected, atol=2e-5)


def test_prompts_and_length_limits_match_torch(cache: Path) -> None:
    expected, found = _pair(cache, document_prompt="passage: ", max_seq_length=32)
    np.testing.assert_allclose(found, expected, atol=2e-5)
    query_torch = SentenceTransformerEmbedder(SentenceTransformerConfig(query_prompt="query: "))
    query_onnx = SentenceTransformerEmbedder(
        SentenceTransformerConfig(backend="onnx", query_prompt="query: ")
    )
    np.testing.assert_allclose(
        query_onnx.embed(TEXTS[:3], role="query"),
        query_torch.embed(TEXTS[:3], role="query"),
        atol=2e-5,
    )


def test_int8_vectors_stay_close_to_torch_and_are_cached_apart(cache: Path) -> None:
    torch_side = SentenceTransformerEmbedder(SentenceTransformerConfig())
    int8 = SentenceTransformerEmbedder(SentenceTransformerConfig(backend="onnx", quantize="int8"))
    expected, found = torch_side.embed(TEXTS), int8.embed(TEXTS)
    cosines = (expected * found).sum(axis=1)
    assert cosines.min() > 0.97 and not np.allclose(found, expected, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-5)
    fp32 = SentenceTransformerEmbedder(SentenceTransformerConfig(backend="onnx"))
    identities = {torch_side.identity, int8.identity, fp32.identity}
    assert len(identities) == 3
    keys = {e.config.key() for e in (torch_side, int8, fp32)}
    assert len(keys) == 3
    directories = {
        onnx_backend.exported_model(e.config.model, None, e.config.quantize) for e in (int8, fp32)
    }
    assert len(directories) == 2


def test_defaults_keep_the_torch_config_and_identity_of_before() -> None:
    config = SentenceTransformerConfig()
    dumped = config.model_dump()
    assert "backend" not in dumped and "quantize" not in dumped
    assert SentenceTransformerConfig(backend="torch").key() == config.key()
    identity = SentenceTransformerEmbedder(config).identity
    assert "backend" not in identity and identity.startswith("st|")


def test_an_export_is_built_once_and_a_damaged_one_rebuilt(cache: Path) -> None:
    name = "all-MiniLM-L6-v2"
    first = onnx_backend.exported_model(name, None, "none")
    before = onnx_backend.exports
    assert onnx_backend.exported_model(name, None, "none") == first
    assert onnx_backend.exports == before
    model = first / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])  # truncated on disk
    again = onnx_backend.exported_model(name, None, "none")
    assert onnx_backend.exports == before + 1
    assert (again / "model.onnx").stat().st_size > 1_000_000
    vectors = onnx_backend.OnnxEncoder(again).encode(TEXTS[:2])
    assert np.isfinite(vectors).all()


def test_config_errors_name_the_option() -> None:
    with pytest.raises(ValueError, match="quantize: int8 needs backend: onnx"):
        SentenceTransformerConfig(quantize="int8")
    with pytest.raises(ValueError, match="onnx backend runs on the CPU"):
        SentenceTransformerConfig(device="cuda", backend="onnx")


def test_a_model_that_cannot_be_exported_is_one_line(cache: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    embedder = SentenceTransformerEmbedder(
        SentenceTransformerConfig(model=str(missing), backend="onnx")
    )
    with pytest.raises(EmbeddingError) as raised:
        embedder.embed(["text"])
    message = str(raised.value)
    assert "\n" not in message and str(missing) in message and "ONNX" in message
