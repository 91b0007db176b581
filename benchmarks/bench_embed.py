"""Embedding throughput: ragbench's sentence-transformers embedder against
``SentenceTransformer.encode`` called directly, on the same SciFact abstracts.

``python -m benchmarks.bench_embed [--dataset DIR] [--texts N] [--model NAME] [--repeat R]``
prints texts per second for both and their ratio (>1: ragbench faster; target: about 1, the
embedder adds only bookkeeping). Texts are the first N documents (title + " " + text) of the
BEIR corpus, or of the bundled demo set when ``--dataset demo``. Both sides use the same model
files, batch size, maximum sequence length and normalisation; they run alternately after one
warm-up call each, and the fastest of ``--repeat`` passes counts. The largest absolute
difference between the two sets of vectors is printed as a correctness check. ``measure()``
returns the figures as a dict.

``backends()`` (``--backends``) compares, on the same texts, ``SentenceTransformer.encode``
(torch) with ragbench's embedder on ONNX Runtime, fp32 and int8 (``backend: onnx``); the
exports are built (or read from the cache) before timing, and every side runs alternately,
the fastest of ``--repeat`` passes counting.

``ONNX`` draws the backends' RESULTS.md section; ``library_rows`` / ``library_note`` are
the embedding's part of ``bench_retrieval.LIBRARIES``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_quality import load_config, run_config
from benchmarks.bench_retrieval import DEFAULT_DATASET, load_scifact
from benchmarks.render import REPO, Figures, Lines, met, num, part, ratio, relative, signed, table

DEFAULT_MODEL = "all-MiniLM-L6-v2"
ONNX_CONFIG = REPO / "experiments" / "scifact-onnx.yaml"
TARGET_RATIO = 0.95  # ragbench's texts/s over a direct encode


def texts_of(dataset: Path | str, n: int) -> list[str]:
    """The first ``n`` document texts of a BEIR folder (title + " " + text) or of ``demo``."""
    if str(dataset) == "demo":
        from ragbench.data import load_dataset

        return [d.text for d in load_dataset("demo").documents][:n]
    _, texts, _ = load_scifact(Path(dataset), n, 0)
    return texts


def _direct(model: str, batch_size: int, max_seq_length: int) -> Callable[[list[str]], Any]:
    """``SentenceTransformer.encode`` called directly (normalised float32 rows), warmed up."""
    from sentence_transformers import SentenceTransformer

    from ragbench.models import resolve_model

    direct = SentenceTransformer(resolve_model(model), device="cpu")
    direct.max_seq_length = max_seq_length

    def encode(texts: list[str]) -> Any:
        return direct.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    encode(["warm", "up"])
    return encode


def _fastest(
    sides: dict[str, Callable[[], np.ndarray]], repeat: int
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Each side's fastest of ``repeat`` passes (sides alternate) and its vectors."""
    best = dict.fromkeys(sides, float("inf"))
    vectors: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        for name, fn in sides.items():
            started = time.perf_counter()
            vectors[name] = fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best, vectors


def measure(
    texts: Sequence[str],
    model: str = DEFAULT_MODEL,
    repeat: int = 2,
    batch_size: int = 32,
    max_seq_length: int = 256,
) -> dict[str, Any]:
    """Seconds and texts/s for ragbench's embedder and a direct ``encode`` on ``texts``."""
    from ragbench.index.embedders import SentenceTransformerConfig, SentenceTransformerEmbedder

    texts = list(texts)
    config = SentenceTransformerConfig(
        model=model, batch_size=batch_size, max_seq_length=max_seq_length
    )
    ours = SentenceTransformerEmbedder(config)
    direct = _direct(model, batch_size, max_seq_length)
    ours.embed(texts[:2], "document")  # load the model and warm up
    best, vectors = _fastest(
        {"ours": lambda: ours.embed(texts, "document"), "direct": lambda: direct(texts)}, repeat
    )
    chars = [len(t) for t in texts]
    return {
        "model": model,
        "texts": len(texts),
        "mean_chars": float(np.mean(chars)) if chars else 0.0,
        "batch_size": batch_size,
        "max_seq_length": max_seq_length,
        "ragbench_s": best["ours"],
        "direct_s": best["direct"],
        "ragbench_per_s": len(texts) / best["ours"],
        "direct_per_s": len(texts) / best["direct"],
        "ratio": best["direct"] / best["ours"],
        "max_abs_diff": float(np.max(np.abs(vectors["ours"] - vectors["direct"]))),
    }


def backends(
    texts: Sequence[str],
    model: str = DEFAULT_MODEL,
    repeat: int = 3,
    batch_size: int = 32,
    max_seq_length: int = 256,
) -> dict[str, Any]:
    """Texts/s of torch's ``encode`` and of the ONNX backend (fp32, int8) on ``texts``, and
    each ONNX side's cosine to torch's vectors (mean and minimum over the texts)."""
    from ragbench.index.embedders import SentenceTransformerConfig, SentenceTransformerEmbedder

    texts = list(texts)
    direct = _direct(model, batch_size, max_seq_length)
    sides: dict[str, Callable[[], np.ndarray]] = {"torch": lambda: direct(texts)}
    for quantize in ("none", "int8"):
        embedder = SentenceTransformerEmbedder(
            SentenceTransformerConfig(
                model=model,
                batch_size=batch_size,
                max_seq_length=max_seq_length,
                backend="onnx",
                quantize=quantize,  # type: ignore[arg-type]
            )
        )
        embedder.embed(texts[:2])  # export (or read the export) and warm up
        name = "onnx-fp32" if quantize == "none" else "onnx-int8"
        sides[name] = lambda e=embedder: e.embed(texts, "document")
    best, vectors = _fastest(sides, repeat)
    rows = []
    for name, seconds in best.items():
        cosines = (vectors[name] * vectors["torch"]).sum(axis=1)
        rows.append(
            {
                "backend": name,
                "seconds": seconds,
                "per_s": len(texts) / seconds,
                "speedup": best["torch"] / seconds,
                "mean_cosine": float(cosines.mean()),
                "min_cosine": float(cosines.min()),
            }
        )
    chars = [len(t) for t in texts]
    return {
        "model": model,
        "texts": len(texts),
        "mean_chars": float(np.mean(chars)) if chars else 0.0,
        "batch_size": batch_size,
        "max_seq_length": max_seq_length,
        "repeat": repeat,
        "rows": rows,
    }


def _backend(row: Any) -> str:
    """A trial's embedder backend (torch, onnx or onnx-int8) from its ``param.*`` columns,
    which are empty for options left at their default."""
    backend = row.get("param.embedder.backend")
    name = backend if isinstance(backend, str) else "torch"
    return name + ("-int8" if row.get("param.embedder.quantize") == "int8" else "")


def onnx_quality(
    speed: Figures, overrides: Sequence[str], runs: Path, limit: int | None, cache_root: str
) -> Figures:
    """The backends' speed (``backends()``) with each one's SciFact quality, through
    scifact-onnx.yaml with ``overrides``."""
    config = load_config(ONNX_CONFIG, list(overrides))
    done = run_config(config, runs / "scifact-onnx", limit, cache_root)
    trials = done["result"].trials
    quality = [
        {
            "backend": _backend(row),
            "ndcg@10": float(row["ndcg@10"]),
            "recall@100": float(row["recall@100"]),
        }
        for _, row in trials[trials["status"] == "ok"].iterrows()
    ]
    return {
        "speed": speed,
        "quality": quality,
        "run": relative(done["result"].path),
        "queries": int(done["result"].manifest["queries"]["count"]),
    }


def library_rows(m: Figures) -> list[tuple[str, ...]]:
    """The row ragbench's embedder adds to RESULTS.md's comparison with the libraries it wraps
    (``bench_retrieval.LIBRARIES``)."""
    return [
        (
            f"embedding, {m['texts']} SciFact abstracts (texts/s)",
            num(m["ragbench_per_s"], 1),
            f"SentenceTransformer.encode {num(m['direct_per_s'], 1)}",
            ratio(m["ratio"]),
            "≥ 0.95x",
            met(m["ratio"], TARGET_RATIO),
        )
    ]


def library_note(m: Figures) -> str:
    """What the embedding row measured."""
    return (
        f"Embedding: model `{Path(m['model']).name}`, batch {m['batch_size']}, max_seq_length "
        f"{m['max_seq_length']}, mean {m['mean_chars']:.0f} characters per text; ragbench "
        f"{num(m['ragbench_s'], 2)} s vs direct {num(m['direct_s'], 2)} s (fastest of the "
        "passes, run alternately); largest difference between the two sets of vectors "
        f"{m['max_abs_diff']:.1e}."
    )


ONNX_HEADERS = (
    "backend",
    "texts/s",
    "vs torch",
    "cosine to torch (mean)",
    "cosine (min)",
    "nDCG@10",
    "R@100",
    "Δ nDCG@10 vs torch",
)
WHY_NOT_EXTRA = (
    "Why not sentence-transformers' `[onnx]` extra: it pulls optimum-onnx, which pins "
    "transformers < 4.58 and would downgrade sentence-transformers; ragbench exports with "
    "`torch.onnx.export` and needs only `onnxruntime` and `onnx` (both dependencies of "
    "ragbench)."
)


def _gain(quality: dict[str, Figures], backend: str) -> float | None:
    """``backend``'s nDCG@10 minus torch's (None when either is missing)."""
    torch_ndcg = quality.get("torch", {}).get("ndcg@10")
    ndcg = quality.get(backend, {}).get("ndcg@10")
    return None if torch_ndcg is None or ndcg is None else ndcg - torch_ndcg


def draw_onnx(section: Figures) -> Lines:
    """Each backend's speed and its SciFact quality against torch."""
    speed = section["speed"]
    quality = {q["backend"]: q for q in section["quality"]}
    names = {"torch": "torch", "onnx-fp32": "onnx", "onnx-int8": "onnx-int8"}
    rows = [
        (
            r["backend"],
            num(r["per_s"], 1),
            ratio(r["speedup"]),
            num(r["mean_cosine"], 4),
            num(r["min_cosine"], 4),
            num(quality.get(names[r["backend"]], {}).get("ndcg@10")),
            num(quality.get(names[r["backend"]], {}).get("recall@100")),
            signed(_gain(quality, names[r["backend"]])),
        )
        for r in speed["rows"]
    ]
    int8 = next(r for r in speed["rows"] if r["backend"] == "onnx-int8")
    gain8 = _gain(quality, "onnx-int8")
    kept = "(not measured)" if gain8 is None else met(-gain8, 0.005, lower_is_better=True)
    return [
        f"Speed: {speed['texts']} SciFact abstracts (title + text, mean {speed['mean_chars']:.0f} "
        f"characters), model `{Path(speed['model']).name}`, max_seq_length "
        f"{speed['max_seq_length']}; torch is `SentenceTransformer.encode` (batch "
        f"{speed['batch_size']}), the ONNX rows ragbench's embedder with `backend: onnx` "
        "(exported once and cached; batches of at most 1,024 padded tokens, texts sorted by "
        f"length); all three alternate, fastest of {speed['repeat']} passes. Quality: "
        f"`{section['run']}`, exact cosine over the whole corpus, {section['queries']} test "
        "queries.",
        "",
        table(ONNX_HEADERS, rows),
        "",
        f"Target: int8 ≥ 2x torch's texts/s {met(int8['speedup'], 2.0)} with at most 0.005 "
        f"nDCG@10 lost {kept}. {WHY_NOT_EXTRA}",
    ]


ONNX = part("onnx", "ONNX backend: int8 MiniLM against torch, speed and SciFact quality", draw_onnx)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET), help="BEIR folder or 'demo'")
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local directory")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backends", action="store_true", help="torch against ONNX fp32/int8")
    args = parser.parse_args(argv)
    if args.backends:
        found = backends(texts_of(args.dataset, args.texts), args.model, args.repeat)
        print(f"{found['texts']} texts (mean {found['mean_chars']:.0f} chars), model {args.model}")
        for row in found["rows"]:
            print(
                f"{row['backend']:<10}{row['per_s']:>9.1f} texts/s {row['speedup']:>6.2f}x  "
                f"cosine to torch mean {row['mean_cosine']:.4f} min {row['min_cosine']:.4f}"
            )
        return 0
    m = measure(texts_of(args.dataset, args.texts), args.model, args.repeat, args.batch_size)
    print(
        f"{m['texts']} texts (mean {m['mean_chars']:.0f} chars), model {m['model']}, batch "
        f"{m['batch_size']}, max_seq_length {m['max_seq_length']}"
    )
    print(f"{'implementation':<38}{'seconds':>9}{'texts/s':>10}")
    for label, key in [
        ("ragbench SentenceTransformerEmbedder", "ragbench"),
        ("SentenceTransformer.encode (direct)", "direct"),
    ]:
        print(f"{label:<38}{m[key + '_s']:>9.2f}{m[key + '_per_s']:>10.1f}")
    print(f"ragbench vs direct: {m['ratio']:.2f}x (target >= 0.95x)")
    print(f"max |ragbench - direct| over all vector components: {m['max_abs_diff']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
