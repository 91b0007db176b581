"""Run one AutoRAG evaluation; executed by AutoRAG's own interpreter, never imported by ragbench.

``python driver.py QA CORPUS CONFIG PROJECT TIMINGS``: offline (no hub, no telemetry), it
times every ``SentenceTransformer.encode`` call (the corpus at ingest and the queries at search
both go through it), splits Chroma additions into batches Chroma accepts (at most
``get_max_batch_size()`` vectors per call; AutoRAG adds a whole corpus in one call) and runs
``Evaluator.start_trial`` with AutoRAG's validation skipped (it would run the pipeline on five
sampled queries first). The timings go to TIMINGS as JSON.

This file imports only the standard library and AutoRAG's environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
STARTED = time.perf_counter()
for _key, _value in OFFLINE.items():
    os.environ.setdefault(_key, _value)


class Timer:
    """Seconds and texts inside the wrapped encode calls."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.texts = 0
        self.calls = 0

    def wrap(self, cls: Any, name: str) -> None:
        """Time ``cls.name``."""
        original = getattr(cls, name)
        timer = self

        def timed(self: Any, sentences: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, sentences, *args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - started
                timer.texts += 1 if isinstance(sentences, str) else len(sentences)
                timer.calls += 1

        setattr(cls, name, timed)


def _batched_chroma() -> None:
    """Chroma refuses more than its maximum batch in one add; AutoRAG sends the whole corpus."""
    from autorag.vectordb.chroma import Chroma

    def add_embedding(self: Any, ids: list[str], embeddings: Any) -> None:
        step = self.client.get_max_batch_size()
        for start in range(0, len(ids), step):
            end = start + step
            self.collection.add(ids=ids[start:end], embeddings=embeddings[start:end])

    Chroma.add_embedding = add_embedding


def main(argv: list[str]) -> int:
    qa, corpus, config, project, timings = argv
    import sentence_transformers

    timer = Timer()
    timer.wrap(sentence_transformers.SentenceTransformer, "encode")
    from autorag.evaluator import Evaluator

    _batched_chroma()
    imported = time.perf_counter() - STARTED
    evaluator = Evaluator(qa_data_path=qa, corpus_data_path=corpus, project_dir=project)
    evaluator.start_trial(config, skip_validation=True)
    found = {
        "embed_s": timer.seconds,
        "embedded_texts": timer.texts,
        "encode_calls": timer.calls,
        "import_s": imported,
        "inside_s": time.perf_counter() - STARTED,
    }
    with open(timings, "w", encoding="utf-8") as f:
        json.dump(found, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
