"""The machine a benchmark run measured on: CPU, cores, RAM, Python and library versions, and
the git commit and date its sections are stamped with."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.render import REPO, Lines, table


def _proc_field(path: str, prefix: str) -> str | None:
    """The value after ``prefix:`` on the first such line of a /proc file (None when absent)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), None)


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, Python, library versions, platform, git commit and the date."""
    cpu = _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    memory = _proc_field("/proc/meminfo", "MemTotal:")
    versions = {}
    for name in ("torch", "sentence-transformers", "transformers", "numpy", "bm25s", "hnswlib"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gb": int(memory.split()[0]) / 1024**2 if memory else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "commit": _git(["rev-parse", "--short", "HEAD"]),
        "dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"])),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _git(args: list[str]) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


# ---------------------------------------------------------------- formatting


def draw(m: dict[str, Any], cache: str) -> Lines:
    """The machine section of RESULTS.md; ``cache`` says where the stage cache was."""
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    rows = [
        ("CPU", m["cpu"]),
        ("cores", f"{m['cores']} (usable: {m['usable_cores']})"),
        ("RAM", f"{m['ram_gb']:.1f} GB" if m["ram_gb"] else "–"),
        ("Python", m["python"]),
        ("torch", m["versions"].get("torch", "–")),
        ("platform", m["platform"]),
        ("libraries", versions),
        ("stage cache", cache),
    ]
    return ["## Machine", "", table(["", ""], rows)]
