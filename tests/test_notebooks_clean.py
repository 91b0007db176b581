"""Notebooks are kept in git without outputs (``make docs`` renders executed copies to
``reports/notebooks/``), and user-facing cells hold no bare ``assert``."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs_and_no_bare_asserts(path: Path) -> None:
    cells = [c for c in json.loads(path.read_text("utf-8"))["cells"] if c["cell_type"] == "code"]
    assert cells, path
    for cell in cells:
        assert cell.get("outputs", []) == [] and cell.get("execution_count") is None, path
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        tree = ast.parse("\n".join(lines))
        asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
        assert not asserts, f"{path.name}: bare assert in a cell: {source[:80]!r}"
