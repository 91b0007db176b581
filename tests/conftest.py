"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from pathlib import Path

import pytest


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
