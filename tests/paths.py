"""Locations of the shared real datasets (tests skip cleanly when they are absent)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
SCIFACT = SHARED / "beir" / "scifact"
CHUNKING_EVAL = SHARED / "chunking_evaluation"
DEMO = REPO / "datasets" / "demo"


def require(path: Path) -> Path:
    """Skip the calling test when ``path`` does not exist."""
    if not path.exists():
        pytest.skip(f"dataset not available: {path}")
    return path
