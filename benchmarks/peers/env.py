"""AutoRAG's own virtual environment, created on first use under ``~/.cache/ragbench-peers``.

The environment is never the project's: ragbench's package and tests never import it, and the
benchmark only runs its interpreter in a subprocess. CPU torch is installed first with pip
(pip finds the local CPU wheel; uv does not), then AutoRAG and the llama-index HuggingFace
embedding it needs for a local model, with uv when it is on the PATH, else with pip. A marker
file records what was installed, so a later run reuses the environment as it is.

``python -m benchmarks.peers.env`` creates it and prints where it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

AUTORAG = "autorag==0.3.27"
TORCH = "torch==2.13.0"
EXTRAS = ("llama-index-embeddings-huggingface",)
HOME_VAR = "RAGBENCH_PEERS_HOME"


def home() -> Path:
    """Where peer environments and their work files live."""
    found = os.environ.get(HOME_VAR)
    return Path(found) if found else Path.home() / ".cache" / "ragbench-peers"


@dataclass(frozen=True)
class PeerEnv:
    """A created AutoRAG environment."""

    root: Path
    install_s: float | None  # seconds this call spent installing (None: it existed)

    @property
    def python(self) -> Path:
        """The environment's interpreter."""
        return self.root / "bin" / "python"

    def version(self) -> str:
        """AutoRAG's installed version, as its own metadata says."""
        code = "import importlib.metadata as m; print(m.version('AutoRAG'))"
        out = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"


def _marker(root: Path) -> Path:
    return root / ".ragbench-peer.json"


def _wanted() -> dict[str, object]:
    return {"autorag": AUTORAG, "torch": TORCH, "extras": list(EXTRAS)}


def _run(cmd: list[str]) -> None:
    print("[peers] " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def _install(root: Path) -> None:
    """Create the venv at ``root`` and install AutoRAG into it."""
    uv = shutil.which("uv")
    if uv:
        _run([uv, "venv", "--seed", "--python", sys.executable, str(root)])
    else:
        _run([sys.executable, "-m", "venv", str(root)])
    python = str(root / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    _run([python, "-m", "pip", "install", "--quiet", TORCH])
    if uv:
        _run([uv, "pip", "install", "--python", python, AUTORAG, *EXTRAS])
    else:
        _run([python, "-m", "pip", "install", "--quiet", AUTORAG, *EXTRAS])


def ensure(root: Path | None = None) -> PeerEnv:
    """AutoRAG's environment, created (minutes) unless a complete one is already there."""
    root = root or home() / "autorag-venv"
    marker = _marker(root)
    if marker.is_file() and json.loads(marker.read_text()) == _wanted():
        return PeerEnv(root, None)
    if root.exists():
        shutil.rmtree(root)  # an interrupted or outdated install
    started = time.perf_counter()
    _install(root)
    marker.write_text(json.dumps(_wanted()))
    return PeerEnv(root, time.perf_counter() - started)


def size_bytes(root: Path) -> int:
    """Bytes the environment takes on disk."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


if __name__ == "__main__":
    env = ensure()
    print(env.python, env.version(), env.install_s)
