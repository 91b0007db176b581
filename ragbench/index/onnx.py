"""The ONNX Runtime backend of the sentence-transformers embedder: export, int8, inference.

``SentenceTransformerConfig(backend="onnx", quantize="none" | "int8")`` runs the model's
transformer with ONNX Runtime on the CPU instead of torch; this module exports it, caches the
export and reproduces sentence-transformers' pipeline around it.

**Packaging.** sentence-transformers can run ONNX itself (``SentenceTransformer(...,
backend="onnx")``), but its ``[onnx]`` extra installs ``optimum-onnx``, which pins
``transformers<4.58``: ``pip install --dry-run 'sentence-transformers[onnx]'`` would downgrade
transformers 5.x to 4.57, sentence-transformers 6.x to 5.7, tokenizers and huggingface_hub (to
0.36) in the one environment the torch embedder, the cross-encoders and ragas also run in. So
ragbench does the export itself with ``torch.onnx.export`` (already installed with torch) and
needs only ``onnxruntime`` (a CPU wheel: numpy, protobuf, flatbuffers) and ``onnx`` (read by
``onnxruntime.quantization``), neither of which pins anything ragbench uses. The cost is this
module: the pipeline around the transformer is ragbench's code, tested against
``SentenceTransformer.encode`` (``tests/test_onnx_backend.py``).

**Export** (once per model, opset, quantisation and library versions; ``exported_model``): the
model is loaded with sentence-transformers and eager attention; it must be ``Transformer →
Pooling [→ Normalize]`` (MiniLM, mpnet, bge, e5, gte, ...). Its transformer (token embeddings
out) is traced with the TorchScript exporter, opset ``OPSET``, dynamic batch and sequence axes,
and checked against torch on a batch of other shapes than the traced one (so a shape the trace
froze is caught). ONNX Runtime's transformer optimiser then fuses attention, layer norms and
GELU (kept only if the fused graph still matches torch). ``int8`` quantises it dynamically
(``quantize_dynamic``: int8 weights per output channel, uint8 activations scaled per batch — the
u8s8 kernels that AVX-512 VNNI runs) of every MatMul and attention, not the embedding lookup;
per-tensor weights instead of per-channel lost 6 points of cosine to the fp32 vectors, uint8
weights all the speed. The tokenizer is saved beside the model with a ``pipeline.json`` naming
the pooling mode, whether a ``Normalize`` module follows, the default maximum length and the
model's inputs. The directory is an ``ArtifactCache`` entry under ``RAGBENCH_CACHE``
(``onnx/<key>``): built under a temporary name and renamed into place under a per-key lock, so
concurrent processes export once, and checksummed, so a damaged export is rebuilt. A failed
export is one ``OnnxBackendError`` line naming the model and the step.

**Inference** (``OnnxEncoder``) does what ``SentenceTransformer.encode`` does: the prompt is
prepended to each text, the model's own tokenizer truncates to ``max_seq_length``, the pooling
module's mode pools the token embeddings over the attention mask (prompt tokens left out when
the pooling excludes them), and vectors are L2-normalised when asked or when the model ends in
``Normalize``. Texts are tokenized once, sorted by length and cut into batches of at most
``ONNX_BATCH_TOKENS`` padded tokens (``ragbench.index.batching``; or ``batch_size ×
max_seq_length`` when smaller), which wastes little on padding and keeps a batch's activations
in cache. Sessions use every usable core
(``intra_op_num_threads``) and ONNX Runtime's full graph optimisation. A session keeps the
threads it was created with, so within ``pinned_threads(n)`` (the latency pass) an encoder runs
a session of ``n`` intra-op threads, created on first use and kept beside the default one (the
model's weights twice in memory; the vectors equal within float rounding).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbench.errors import RagbenchError
from ragbench.index.batching import ONNX_BATCH_TOKENS, budget, token_batches
from ragbench.index.cache import ArtifactCache
from ragbench.models import hub_offline, model_identity, resolve_model

__all__ = [
    "OPSET",
    "RECIPE",
    "OnnxBackendError",
    "OnnxEncoder",
    "OnnxPipeline",
    "Quantize",
    "exported_model",
    "intra_op_threads",
    "load_encoder",
    "pinned_threads",
]

log = logging.getLogger(__name__)

Quantize = Literal["none", "int8"]

OPSET = 17
"""ONNX opset of the export."""
RECIPE = 1
"""Version of the export and quantisation recipe: part of the cache key and of the embedder's
identity (vectors of a changed recipe are new vectors). Bump it when either changes."""

AREA = "onnx"
"""Area of the export cache under the cache root."""
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_MODEL_FILE = "model.onnx"
_PIPELINE_FILE = "pipeline.json"
_TOKENIZER_DIR = "tokenizer"
_OUTPUT = "token_embeddings"
_CHECK_ATOL = 1e-3  # largest |onnx - torch| of a token embedding an fp32 export may show

exports = 0
"""Exports this process has built (tests read it: a second embedder must reuse the first's)."""

_pinned: int | None = None
"""Intra-op threads of the sessions encoders run, while ``pinned_threads`` holds them."""


class OnnxBackendError(RagbenchError):
    """The ONNX backend cannot export, load or run a model (one line, naming model and step)."""


@dataclass(frozen=True)
class OnnxPipeline:
    """What sentence-transformers does around the transformer, as recorded at export."""

    pooling: tuple[str, ...]
    include_prompt: bool
    normalize: bool
    dimension: int
    max_seq_length: int
    inputs: tuple[str, ...]
    do_lower_case: bool = False
    padding_side: str = "right"

    @classmethod
    def read(cls, directory: Path) -> OnnxPipeline:
        """The pipeline recorded in an export directory."""
        data = json.loads((directory / _PIPELINE_FILE).read_text("utf-8"))
        data["pooling"] = tuple(data["pooling"])
        data["inputs"] = tuple(data["inputs"])
        return cls(**data)

    def write(self, directory: Path) -> None:
        """Record the pipeline in an export directory."""
        (directory / _PIPELINE_FILE).write_text(json.dumps(asdict(self), indent=1), "utf-8")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def export_key(name: str, revision: str | None, quantize: Quantize) -> str:
    """Cache key of an export: model files (or hub id), revision, opset, quantisation, recipe
    and the versions of the libraries that write and read the graph."""
    import hashlib

    payload = {
        "model": model_identity(name),
        "revision": revision,
        "opset": OPSET,
        "quantize": quantize,
        "recipe": RECIPE,
        "versions": {p: _version(p) for p in ("torch", "transformers", "onnxruntime", "onnx")},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def exported_model(
    name: str, revision: str | None, quantize: Quantize, root: Path | str | None = None
) -> Path:
    """The directory of the ONNX export of model ``name``, built on first use (under a lock,
    renamed into place) and reused by every later call and process."""
    cache = ArtifactCache(root)
    key = export_key(name, revision, quantize)

    def build(tmp: Path) -> dict[str, Any]:
        global exports
        _export(name, revision, quantize, tmp)
        exports += 1
        return {"model": name, "revision": revision, "quantize": quantize, "opset": OPSET}

    try:
        directory, cached = cache.get_or_build(AREA, key, build)
    except OnnxBackendError:
        raise
    except Exception as exc:  # a failure outside _export's own steps (disk full, ...)
        raise OnnxBackendError(f"cannot export {name!r} to ONNX: {_one_line(exc)}") from exc
    if not cached:
        log.info("exported %s to ONNX (%s) in %s", name, quantize, directory)
    return directory


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@contextlib.contextmanager
def _step(name: str, what: str) -> Iterator[None]:
    """Turn any failure of an export step into one ``OnnxBackendError`` line."""
    try:
        yield
    except OnnxBackendError:
        raise
    except Exception as exc:
        raise OnnxBackendError(
            f"cannot export {name!r} to ONNX ({what}): {_one_line(exc)}"
        ) from exc


def _pooling_modes(pooling: Any) -> tuple[str, ...]:
    """The pooling modes of a sentence-transformers ``Pooling`` module (v6 or earlier)."""
    mode = getattr(pooling, "pooling_mode", None)
    if isinstance(mode, str):
        modes: tuple[str, ...] = (mode,)
    elif isinstance(mode, list | tuple):
        modes = tuple(str(m) for m in mode)
    else:  # sentence-transformers < 6: one flag per mode
        flags = {
            "cls": "pooling_mode_cls_token",
            "max": "pooling_mode_max_tokens",
            "mean": "pooling_mode_mean_tokens",
            "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
            "weightedmean": "pooling_mode_weightedmean_tokens",
            "lasttoken": "pooling_mode_lasttoken",
        }
        modes = tuple(m for m, flag in flags.items() if getattr(pooling, flag, False))
    unknown = [m for m in modes if m not in POOLING_MODES]
    if not modes or unknown:
        raise OnnxBackendError(f"unsupported pooling mode(s) {unknown or modes}")
    return modes


def _load_for_export(name: str, revision: str | None) -> Any:
    hub_offline()
    from sentence_transformers import SentenceTransformer

    path = resolve_model(name)
    try:  # eager attention: the pattern ONNX Runtime's optimiser fuses into one Attention op
        return SentenceTransformer(
            path, revision=revision, device="cpu", model_kwargs={"attn_implementation": "eager"}
        )
    except (TypeError, ValueError):
        model: Any = SentenceTransformer(path, revision=revision, device="cpu")
        model[0].auto_model.config._attn_implementation = "eager"
        return model


def _pipeline_of(model: Any) -> OnnxPipeline:
    """The pipeline of a loaded ``SentenceTransformer``; raises unless it is Transformer →
    Pooling [→ Normalize] over a text tokenizer."""
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    ok = (
        len(modules) in (2, 3)
        and kinds[0] == "Transformer"
        and kinds[1] == "Pooling"
        and (len(modules) == 2 or kinds[2] == "Normalize")
    )
    if not ok:
        raise OnnxBackendError(
            "the ONNX backend runs Transformer → Pooling [→ Normalize] models; this one is "
            + " → ".join(kinds)
        )
    transformer, pooling = modules[0], modules[1]
    task = getattr(transformer, "transformer_task", "feature-extraction")
    if task != "feature-extraction" or getattr(transformer, "tokenizer", None) is None:
        raise OnnxBackendError(f"the ONNX backend runs text encoders; this one is {task!r}")
    tokenizer = transformer.tokenizer
    params = _forward_params(transformer.auto_model)
    inputs = tuple(n for n in tokenizer.model_input_names if n in params)
    if "input_ids" not in inputs or "attention_mask" not in inputs:
        raise OnnxBackendError(f"the model takes {list(params)}: no input_ids / attention_mask")
    dimension = getattr(model, "get_embedding_dimension", None) or (
        model.get_sentence_embedding_dimension
    )
    return OnnxPipeline(
        pooling=_pooling_modes(pooling),
        include_prompt=bool(getattr(pooling, "include_prompt", True)),
        normalize=len(modules) == 3,
        dimension=int(dimension()),
        max_seq_length=int(model.max_seq_length),
        inputs=inputs,
        do_lower_case=bool(getattr(transformer, "do_lower_case", False)),
        padding_side=str(getattr(tokenizer, "padding_side", "right")),
    )


def _forward_params(module: Any) -> list[str]:
    import inspect

    return list(inspect.signature(module.forward).parameters)


_PROBE = [
    "A probe sentence.",
    "The exported graph must give torch's token embeddings for other batch sizes and lengths "
    "than the ones it was traced with, padding included.",
    "Short one",
]


def _export(name: str, revision: str | None, quantize: Quantize, out: Path) -> None:
    """Export, check, optimise and (maybe) quantise model ``name`` into directory ``out``."""
    import torch

    with _step(name, "loading the model"):
        model = _load_for_export(name, revision)
    pipeline = _pipeline_of(model)
    transformer = model[0]
    tokenizer = transformer.tokenizer
    inputs = pipeline.inputs

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args, strict=True))).last_hidden_state

    wrapper = TokenEmbeddings(transformer.auto_model).eval()
    fp32 = out / "fp32.onnx"
    _trace(name, wrapper, tokenizer, inputs, fp32)
    probe = tokenizer(_PROBE, padding=True, truncation=True, max_length=pipeline.max_seq_length)
    feed = {n: np.asarray(probe[n], dtype=np.int64) for n in inputs}
    with torch.no_grad():
        expected = wrapper(*(torch.from_numpy(feed[n]) for n in inputs)).numpy()
    with _step(name, "checking the export against torch"):
        error = _max_error(fp32, feed, expected)
    if error > _CHECK_ATOL:
        raise OnnxBackendError(
            f"cannot export {name!r} to ONNX: its graph differs from torch by {error:.2g} on a "
            "batch of other shapes than the traced one"
        )
    final = _fused_if_equal(name, fp32, transformer.auto_model.config, feed, expected)
    if quantize == "int8":
        with _step(name, "int8 quantisation"):
            _quantize_int8(final, out / "int8.onnx")
        final = out / "int8.onnx"
    os.replace(final, out / _MODEL_FILE)
    for leftover in ("fp32.onnx", "fused.onnx", "int8.onnx"):
        (out / leftover).unlink(missing_ok=True)
    with _step(name, "saving the tokenizer"):
        tokenizer.save_pretrained(str(out / _TOKENIZER_DIR))
    pipeline.write(out)


def _trace(name: str, wrapper: Any, tokenizer: Any, inputs: Sequence[str], fp32: Path) -> None:
    """Trace ``wrapper`` on a small batch of ``tokenizer``'s ``inputs`` and export it to
    ``fp32``, with batch and sequence axes left dynamic."""
    import torch

    sample = tokenizer(["trace me", "a longer text to trace the graph with"], padding=True)
    traced = tuple(torch.tensor(sample[n], dtype=torch.long) for n in inputs)
    with _step(name, "torch.onnx.export"), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(
            wrapper,
            traced,
            str(fp32),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(inputs),
            output_names=[_OUTPUT],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in (*inputs, _OUTPUT)},
            do_constant_folding=True,
        )


def _fused_if_equal(
    name: str, fp32: Path, config: Any, feed: dict[str, np.ndarray], expected: np.ndarray
) -> Path:
    """ONNX Runtime's fused graph of ``fp32`` (beside it, ``fused.onnx``) when it gives
    ``expected`` on ``feed``, else ``fp32`` itself."""
    with _step(name, "optimising the graph"):
        fused = _optimise(fp32, fp32.parent / "fused.onnx", config)
        if fused is None:
            return fp32
        error = _max_error(fused, feed, expected)
        if error <= _CHECK_ATOL:
            return fused
        log.warning("ONNX Runtime's fused graph of %s differs (%.2g): unfused", name, error)
    return fp32


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Encoders run their model on sessions of ``threads`` intra-op threads (one inter-op) in
    the block, in every thread of the process, like torch's thread count."""
    global _pinned
    previous, _pinned = _pinned, threads
    try:
        yield
    finally:
        _pinned = previous


def intra_op_threads(threads: int | None = None) -> int:
    """Intra-op threads of a session created now: the pinned count (``pinned_threads``), else
    ``threads``, else every usable core."""
    return _pinned or threads or _usable_cores()


def _session(path: Path, threads: int | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = intra_op_threads(threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _max_error(path: Path, feed: dict[str, np.ndarray], expected: np.ndarray) -> float:
    output = _session(path).run([_OUTPUT], feed)[0]
    mask = feed["attention_mask"][..., None].astype(bool)  # padded positions may differ
    return float(np.max(np.abs(np.where(mask, output - expected, 0.0))))


def _optimise(source: Path, target: Path, config: Any) -> Path | None:
    """ONNX Runtime's transformer fusions (attention, skip layer norm, bias GELU, embedding
    layer norm) where they apply; None when the optimiser has nothing for this model."""
    from onnxruntime.transformers.optimizer import optimize_model

    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        optimised = optimize_model(
            str(source), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0
        )
    fused = optimised.get_fused_operator_statistics()
    if not any(fused.get(op, 0) for op in ("Attention", "SkipLayerNormalization")):
        return None
    optimised.save_model_to_file(str(target))
    return target


def _quantize_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation: per-channel int8 weights, uint8 activations."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            str(source),
            str(target),
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


_NOISY = ("onnx_model", "fusion", "onnxruntime", "shape_infer", "symbolic_shape")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the optimiser's and quantiser's progress logs (module-named loggers, and the
    root logger the quantiser writes its advice to) while they run."""
    names = [n for n in logging.root.manager.loggerDict if n.startswith(_NOISY)]
    targets = [logging.getLogger(n) for n in names] + [logging.getLogger()]
    levels = [t.level for t in targets]
    for target in targets:
        target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for target, level in zip(targets, levels, strict=True):
            target.setLevel(level)


class OnnxEncoder:
    """An exported model with its tokenizer and pipeline, ready to encode texts."""

    def __init__(self, directory: Path, threads: int | None = None) -> None:
        from transformers import AutoTokenizer

        self.directory = directory
        self.threads = threads
        self.pipeline = OnnxPipeline.read(directory)
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory / _TOKENIZER_DIR))
        self._sessions = {intra_op_threads(threads): _session(directory / _MODEL_FILE, threads)}
        self._sessions_lock = threading.Lock()
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        self._prompt_lengths: dict[tuple[str, int], int] = {}

    @property
    def session(self) -> Any:
        """The ONNX Runtime session of ``intra_op_threads(self.threads)`` threads (the pinned
        count inside ``pinned_threads``), created on first use and kept."""
        threads = intra_op_threads(self.threads)
        with self._sessions_lock:
            if threads not in self._sessions:
                self._sessions[threads] = _session(self.directory / _MODEL_FILE, threads)
            return self._sessions[threads]

    def tokenize(self, texts: Sequence[str], max_seq_length: int) -> list[list[int]]:
        """Token ids of ``texts``, truncated to ``max_seq_length`` as sentence-transformers
        truncates (``longest_first``, special tokens included)."""
        if self.pipeline.do_lower_case:
            texts = [t.lower() for t in texts]
        encoded = self.tokenizer(
            list(texts),
            truncation="longest_first",
            max_length=max_seq_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return list(encoded["input_ids"])

    def prompt_length(self, prompt: str, max_seq_length: int) -> int:
        """Tokens of ``prompt`` at the start of a text (its trailing special token left out),
        as sentence-transformers counts them for pooling that excludes the prompt."""
        key = (prompt, max_seq_length)
        if key not in self._prompt_lengths:
            ids = self.tokenize([prompt], max_seq_length)[0]
            special = set(self.tokenizer.all_special_ids)
            self._prompt_lengths[key] = len(ids) - (1 if ids and ids[-1] in special else 0)
        return self._prompt_lengths[key]

    def encode(
        self,
        texts: Sequence[str],
        prompt: str = "",
        max_seq_length: int | None = None,
        normalize: bool = True,
        batch_size: int = 32,
        advance: Callable[[int], object] | None = None,
    ) -> np.ndarray:
        """Float32 ``(n, dimension)`` vectors of ``texts`` (prompt prepended to each); batches
        hold at most ``ONNX_BATCH_TOKENS`` (or ``batch_size × max_seq_length``) padded tokens;
        ``advance`` hears the texts of each batch done."""
        p = self.pipeline
        length = max_seq_length or p.max_seq_length
        out = np.zeros((len(texts), p.dimension), dtype=np.float32)
        if not texts:
            return out
        ids = self.tokenize([prompt + t for t in texts] if prompt else texts, length)
        skip = 0 if (p.include_prompt or not prompt) else self.prompt_length(prompt, length)
        most = budget(length, batch_size, ONNX_BATCH_TOKENS)
        for rows in token_batches([len(x) for x in ids], most):
            feed, mask = self._feed([ids[i] for i in rows])
            tokens = self.session.run([_OUTPUT], feed)[0]
            out[rows] = _pool(tokens, mask, p.pooling, skip)
            if advance is not None:
                advance(len(rows))
        if normalize or p.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            np.divide(out, np.maximum(norms, 1e-12), out=out)
        return out

    def _feed(self, rows: list[list[int]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        left = self.pipeline.padding_side == "left"
        for i, row in enumerate(rows):
            span = slice(width - len(row), width) if left else slice(0, len(row))
            ids[i, span] = row
            mask[i, span] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.pipeline.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        return {n: feed[n] for n in self.pipeline.inputs}, mask


def _pool(tokens: np.ndarray, mask: np.ndarray, modes: Sequence[str], skip: int) -> np.ndarray:
    """sentence-transformers' ``Pooling`` over token embeddings ``(n, t, d)`` and an attention
    mask ``(n, t)``; ``skip`` leading tokens of each text (the prompt) are left out."""
    original = mask
    if skip:
        mask = mask.copy()
        starts = mask.argmax(axis=1)  # first real token (left padding)
        positions = np.arange(mask.shape[1])[None, :]
        mask[positions < (starts + skip)[:, None]] = 0
    weights = mask[..., None].astype(np.float32)
    vectors = []
    for mode in modes:
        if mode == "cls":
            first = mask.argmax(axis=1)
            vectors.append(tokens[np.arange(len(tokens)), first])
        elif mode == "max":
            vectors.append(np.where(weights > 0, tokens, -np.inf).max(axis=1))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (tokens * weights).sum(axis=1)
            count = np.maximum(weights.sum(axis=1), 1e-9)
            vectors.append(total / (count if mode == "mean" else np.sqrt(count)))
        elif mode == "weightedmean":
            steps = np.arange(1, tokens.shape[1] + 1, dtype=np.float32)[None, :]
            steps = steps - original.argmax(axis=1)[:, None]  # from the first real token
            w = weights * steps[..., None]
            vectors.append((tokens * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-9))
        elif mode == "lasttoken":
            last = mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
            present = np.asarray(mask.any(axis=1), dtype=np.float32)
            vectors.append(tokens[np.arange(len(tokens)), last] * present[:, None])
    return np.concatenate(vectors, axis=1).astype(np.float32, copy=False)


_ENCODERS: dict[Path, OnnxEncoder] = {}
_LOADED: dict[tuple[str, str | None, str, Path], OnnxEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def load_encoder(
    name: str, revision: str | None, quantize: Quantize, root: Path | str | None = None
) -> OnnxEncoder:
    """The encoder of model ``name``'s export (exported on first use), shared in-process: the
    export is verified when a process first loads it, not at every call (a query embedded
    alone would otherwise pay for reading the whole model file)."""
    key = (name, revision, quantize, ArtifactCache(root).root)
    with _ENCODERS_LOCK:
        if key in _LOADED:
            return _LOADED[key]
    directory = exported_model(name, revision, quantize, root)
    with _ENCODERS_LOCK:
        if directory not in _ENCODERS:
            try:
                _ENCODERS[directory] = OnnxEncoder(directory)
            except Exception as exc:
                raise OnnxBackendError(
                    f"cannot load the ONNX export of {name!r} ({directory}): {_one_line(exc)}"
                ) from exc
        _LOADED[key] = _ENCODERS[directory]
        return _LOADED[key]
