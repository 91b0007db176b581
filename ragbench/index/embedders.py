"""Embedders: sentence-transformers models, a model-free hashing embedder, and a fallback chain.

Every embedder returns float32 ``(n, d)`` arrays and exposes ``identity``: the string that keys the
embedding cache (model identity, prompts, max length, normalisation; not batch size or device,
which do not change the vectors).

The sentence-transformers embedder runs its model with torch (``backend: torch``, the default)
or with ONNX Runtime on the CPU (``backend: onnx``, optionally ``quantize: int8``: dynamic int8
quantisation, about twice torch's speed on CPUs with AVX-512 VNNI). ``ragbench.index.onnx``
exports the model (cached under ``RAGBENCH_CACHE``), explains why ragbench does not use
sentence-transformers' own ``[onnx]`` extra, and reproduces ``encode``'s pipeline (tokenizer,
truncation, pooling, normalisation, prompts) around the graph. The two backends' vectors are
cached apart (the identity names the backend and quantisation; torch's identity is the one it
had before the option existed), and so are trials: both options are left out of the config's
serialised form at their defaults, so existing trial ids and cache keys stay valid.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from ragbench import progress
from ragbench.errors import RagbenchError
from ragbench.index import onnx as onnx_backend
from ragbench.index.batching import (
    TORCH_BATCH_TOKENS,
    budget,
    keep_freed_memory,
    token_batches,
)
from ragbench.index.finetune import Family, Tunable
from ragbench.llm.client import LLMClient, LLMError, LLMOptions
from ragbench.models import DEFAULT_MODEL, hub_offline, model_identity, resolve_model
from ragbench.protocols import Embedder, Role
from ragbench.registry import ComponentConfig, component_field, components
from ragbench.text.tokenize import TokenizerConfig, WordTokenizer

__all__ = [
    "EmbedStats",
    "EmbeddingError",
    "FallbackConfig",
    "FallbackEmbedder",
    "HashingConfig",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "OpenAIEmbedderConfig",
    "SentenceTransformerConfig",
    "SentenceTransformerEmbedder",
]

log = logging.getLogger(__name__)


class EmbeddingError(RagbenchError):
    """An embedder could not produce vectors (model missing, provider down, bad input)."""


@dataclass
class EmbedStats:
    """Counters an embedder keeps so callers can report throughput."""

    texts: int = 0
    queries: int = 0
    seconds: float = 0.0

    def add(self, texts: int, role: str, seconds: float) -> None:
        """Count one call."""
        self.texts += texts
        self.queries += texts if role == "query" else 0
        self.seconds += seconds

    @property
    def per_second(self) -> float:
        """Texts embedded per second of model time."""
        return self.texts / self.seconds if self.seconds > 0 else 0.0


class SentenceTransformerConfig(Tunable, ComponentConfig):
    """A sentence-transformers bi-encoder: any local path or hub id.

    ``backend: onnx`` runs it with ONNX Runtime on the CPU (``ragbench.index.onnx``), and
    ``quantize: int8`` with int8 weights there. ``finetune`` adapts ``model`` to the corpus
    first (``ragbench.index.finetune``; the stage graph trains it, the embedder runs the
    result). ``backend``, ``quantize`` and ``finetune`` are left out of the serialised form at
    their defaults (torch, none, none), so cache keys and trial ids are those of a config from
    before the options existed.
    """

    kind: Literal["sentence-transformers"] = "sentence-transformers"
    model: str = DEFAULT_MODEL
    revision: str | None = None
    batch_size: int = Field(32, gt=0)
    max_seq_length: int | None = Field(None, gt=0)
    normalize: bool = True
    query_prompt: str = ""
    document_prompt: str = ""
    device: str = "cpu"
    backend: Literal["torch", "onnx"] = "torch"
    quantize: Literal["none", "int8"] = "none"
    family: ClassVar[Family] = "bi-encoder"

    @field_validator("backend")
    @classmethod
    def _onnx_on_cpu(cls, value: str, info: ValidationInfo) -> str:
        device = info.data.get("device", "cpu")
        if value == "onnx" and device != "cpu":
            raise ValueError(
                f"the onnx backend runs on the CPU; device must be 'cpu', not {device!r}"
            )
        return value

    @field_validator("quantize")
    @classmethod
    def _quantize_needs_onnx(cls, value: str, info: ValidationInfo) -> str:
        if value != "none" and info.data.get("backend", "torch") != "onnx":
            raise ValueError(f"quantize: {value} needs backend: onnx (torch runs the model as is)")
        return value

    @model_serializer(mode="wrap")
    def _omit_default_backend(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.backend == "torch":
            data.pop("backend", None)
        if self.quantize == "none":
            data.pop("quantize", None)
        return data


_MODELS: dict[tuple[str, str | None, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def _load_sentence_transformer(name: str, revision: str | None, device: str) -> Any:
    """Load a model once per process and share it between embedders (offline when the hub is
    unreachable, so a missing model fails at once instead of retrying)."""
    key = (resolve_model(name), revision, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            hub_offline()
            keep_freed_memory()
            from sentence_transformers import SentenceTransformer

            try:
                _MODELS[key] = SentenceTransformer(key[0], revision=revision, device=device)
            except Exception as exc:
                raise EmbeddingError(
                    f"cannot load sentence-transformers model {name!r} ({key[0]}): {exc}"
                ) from exc
        return _MODELS[key]


class SentenceTransformerEmbedder:
    """Embeds with a sentence-transformers model; prompts apply per role (bge-style prefixes).

    With ``backend: onnx`` the model runs as an ONNX export (``ragbench.index.onnx``), loaded
    without torch's copy of the model: its pipeline (pooling, normalisation, default length) was
    recorded at export.
    """

    def __init__(self, config: SentenceTransformerConfig | None = None) -> None:
        self.config = config or SentenceTransformerConfig()
        self.stats = EmbedStats()

    @property
    def model(self) -> Any:
        """The shared ``SentenceTransformer`` instance (loaded on first use; torch backend)."""
        return _load_sentence_transformer(
            self.config.model, self.config.revision, self.config.device
        )

    @property
    def encoder(self) -> onnx_backend.OnnxEncoder:
        """The shared ONNX encoder (exported on first use, then read from the cache; onnx
        backend)."""
        c = self.config
        try:
            return onnx_backend.load_encoder(c.model, c.revision, c.quantize)
        except onnx_backend.OnnxBackendError as exc:
            raise EmbeddingError(str(exc)) from exc

    @property
    def max_seq_length(self) -> int:
        """Effective maximum input length in model tokens."""
        if self.config.max_seq_length:
            return self.config.max_seq_length
        if self.config.backend == "onnx":
            return self.encoder.pipeline.max_seq_length
        return int(self.model.max_seq_length)

    @property
    def dimension(self) -> int:
        """Output vector size."""
        if self.config.backend == "onnx":
            return self.encoder.pipeline.dimension
        return int(self.model.get_embedding_dimension())

    @property
    def identity(self) -> str:
        """Cache identity: model files (or hub id + revision), length limit, normalisation;
        for the onnx backend also the quantisation, opset and export recipe (torch's identity
        is unchanged, so vectors cached before the option existed stay valid)."""
        c = self.config
        identity = (
            f"st|{model_identity(c.model)}|rev={c.revision}|len={self.max_seq_length}"
            f"|norm={c.normalize}|qp={c.query_prompt}|dp={c.document_prompt}"
        )
        if c.backend == "onnx":
            identity += (
                f"|backend=onnx|quantize={c.quantize}|opset={onnx_backend.OPSET}"
                f"|recipe={onnx_backend.RECIPE}"
            )
        return identity

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        """Encode ``texts`` (in token-budget batches, longest first) into float32 rows; the
        texts done are counted for the progress display (``ragbench.progress``)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        prompt = self.config.query_prompt if role == "query" else self.config.document_prompt
        what = f"embedding with {self.config.model}"
        with progress.counting(what, len(texts), "texts") as advance:
            if self.config.backend == "onnx":
                encoder = self.encoder
                started = time.perf_counter()
                vectors = encoder.encode(
                    texts,
                    prompt=prompt,
                    max_seq_length=self.max_seq_length,
                    normalize=self.config.normalize,
                    batch_size=self.config.batch_size,
                    advance=advance,
                )
            else:
                model = self.model
                started = time.perf_counter()
                vectors = self._encode(model, texts, prompt, advance)
        elapsed = time.perf_counter() - started
        self.stats.add(len(texts), role, elapsed)
        log.debug("embedded %d texts in %.2fs", len(texts), elapsed)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _encode(
        self, model: Any, texts: Sequence[str], prompt: str, advance: Callable[[int], None]
    ) -> np.ndarray:
        """Torch vectors of ``texts`` in batches of at most ``TORCH_BATCH_TOKENS`` padded tokens
        (``ragbench.index.batching``), longest first, each batch one ``encode`` call."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        previous = model.max_seq_length
        model.max_seq_length = length = self.max_seq_length
        try:
            lengths = _token_lengths(model, [prompt + t for t in texts] if prompt else texts)
            most = budget(length, self.config.batch_size, TORCH_BATCH_TOKENS)
            for rows in token_batches(lengths, most):
                out[rows] = model.encode(
                    [texts[i] for i in rows],
                    batch_size=len(rows),
                    normalize_embeddings=self.config.normalize,
                    prompt=prompt or None,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
                advance(len(rows))
        finally:
            model.max_seq_length = previous
        return out


def _token_lengths(model: Any, texts: Sequence[str], part: int = 1024) -> list[int]:
    """Tokens of each text as ``model`` feeds it (truncated, special tokens included), tokenized
    ``part`` texts at a time to bound the padded arrays; a model whose tokenizer gives no
    attention mask counts every text at its maximum length."""
    lengths: list[int] = []
    for start in range(0, len(texts), part):
        mask = model.tokenize(list(texts[start : start + part])).get("attention_mask")
        if mask is None:
            return [int(model.max_seq_length)] * len(texts)
        lengths += [int(n) for n in mask.sum(dim=1).tolist()]
    return lengths


@lru_cache(maxsize=1 << 16)
def _bucket(term: str, dim: int) -> tuple[int, float]:
    """The column and sign of ``term`` (the frequent terms' kept: a memo of every term seen
    would grow with the vocabulary, a million terms on a large corpus)."""
    h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")
    return h % dim, 1.0 if (h >> 63) & 1 else -1.0


class HashingConfig(ComponentConfig):
    """Feature-hashed bag of words: deterministic, no model; a test double and lexical baseline."""

    kind: Literal["hashing"] = "hashing"
    dim: int = Field(384, gt=0)
    tokenizer: TokenizerConfig = TokenizerConfig()


class HashingEmbedder:
    """Signed feature hashing of (1 + log tf)-weighted terms, L2-normalised."""

    def __init__(self, config: HashingConfig | None = None) -> None:
        self.config = config or HashingConfig()
        self._tokenizer = WordTokenizer(self.config.tokenizer)
        self.stats = EmbedStats()

    @property
    def dimension(self) -> int:
        """Output vector size."""
        return self.config.dim

    @property
    def identity(self) -> str:
        """Cache identity: the full config."""
        return f"hashing|{self.config.key()}"

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        """Vectors for ``texts``; ``role`` does not change them."""
        started = time.perf_counter()
        out = np.zeros((len(texts), self.config.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            counts: dict[str, int] = {}
            for term in self._tokenizer.tokenize(text):
                counts[term] = counts.get(term, 0) + 1
            for term, tf in counts.items():
                col, sign = _bucket(term, self.config.dim)
                out[row, col] += sign * (1.0 + np.log(tf))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        self.stats.add(len(texts), role, time.perf_counter() - started)
        return out


class OpenAIEmbedderConfig(ComponentConfig, LLMOptions):
    """An embeddings endpoint (OpenAI, vLLM, Ollama, a LiteLLM proxy, ...): ``model`` at
    ``base_url``, ``batch_size`` texts per request, the key of ``credential``."""

    kind: Literal["openai"] = "openai"
    batch_size: int = Field(64, gt=0)


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible ``/embeddings`` endpoint (``ragbench.llm``); a sweep
    caches its vectors per text like any embedder's."""

    def __init__(self, config: OpenAIEmbedderConfig) -> None:
        self.config = config
        self.client = LLMClient(config, where="embedder")
        self.stats = EmbedStats()
        self._dim: int | None = None

    @property
    def dimension(self) -> int:
        """Output vector size (asked of the endpoint once)."""
        if self._dim is None:
            self._dim = int(self.embed(["dimension"]).shape[1])
        return self._dim

    @property
    def identity(self) -> str:
        """Cache identity: the endpoint and the model."""
        return f"openai|{self.client.url}|{self.config.model}"

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        """Vectors for ``texts`` (unit length, so cosine and dot product agree)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        started = time.perf_counter()
        try:
            vectors = self.client.embed(texts, self.config.batch_size)
        except LLMError as exc:
            raise EmbeddingError(f"embedder: {exc}") from exc
        self._dim = vectors.shape[1]
        self.stats.add(len(texts), role, time.perf_counter() - started)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        return unit.astype(np.float32)


class FallbackConfig(ComponentConfig):
    """Try embedders in order; the first that succeeds answers (local model, then a service)."""

    kind: Literal["fallback"] = "fallback"
    providers: tuple[component_field("embedder"), ...] = Field(min_length=1)  # type: ignore[valid-type]


class FallbackEmbedder:
    """Delegates to the first provider that embeds without error; all must share a dimension."""

    def __init__(self, providers: Sequence[Embedder]) -> None:
        if not providers:
            raise ValueError("FallbackEmbedder needs at least one provider")
        self.providers = list(providers)
        self.active = 0
        self._dim: int | None = None

    @property
    def dimension(self) -> int:
        """Dimension of the provider currently answering."""
        return self.providers[self.active].dimension

    @property
    def identity(self) -> str:
        """Identity of the provider currently answering (vectors differ between providers)."""
        return self.providers[self.active].identity

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        """Vectors from the first provider that succeeds, starting from the one that last did.

        The chain is sticky: vectors of different providers must not mix in one index.
        """
        errors: list[str] = []
        for i in range(self.active, len(self.providers)):
            try:
                vectors = self.providers[i].embed(texts, role)
            except Exception as exc:
                log.warning("embedder %d failed (%s); trying the next", i, exc)
                errors.append(f"provider {i}: {exc}")
                continue
            if self._dim is not None and vectors.shape[1] != self._dim:
                raise EmbeddingError(
                    f"fallback provider {i} has dimension {vectors.shape[1]}, expected {self._dim}"
                )
            self.active, self._dim = i, vectors.shape[1]
            return vectors
        raise EmbeddingError("every embedder failed: " + "; ".join(errors))


_EMBEDDERS = components("embedder")
_EMBEDDERS.register(SentenceTransformerConfig)(SentenceTransformerEmbedder)
_EMBEDDERS.register(HashingConfig)(HashingEmbedder)
_EMBEDDERS.register(OpenAIEmbedderConfig)(OpenAIEmbedder)


@_EMBEDDERS.register(FallbackConfig)
def _fallback(config: FallbackConfig) -> FallbackEmbedder:
    return FallbackEmbedder([_EMBEDDERS.build(p) for p in config.providers])
