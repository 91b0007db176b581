"""``report.md``: the trial table, the best trial per metric, and the config of a run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ragbench.experiment.store import RunStore
from ragbench.report.tables import best_per_metric, markdown_table, trial_table

__all__ = ["write_markdown"]


def write_markdown(run_dir: Path | str) -> Path:
    """Write ``<run_dir>/report.md`` and return its path."""
    store = RunStore(run_dir)
    manifest = store.manifest()
    trials = store.trials()
    metrics = list(manifest["config"]["evaluation"]["metrics"])
    lines = [
        f"# {manifest['config']['name']}",
        "",
        f"Dataset `{manifest['dataset']['name']}` ({manifest['dataset']['split']}), "
        f"{manifest['queries']['count']} queries, "
        f"fingerprint `{manifest['dataset_fingerprint'][:16]}`.",
        "",
        "## Trials",
        "",
        markdown_table(trial_table(trials, metrics, stages=True))
        if not trials.empty
        else "No finished trial.",
        "",
        "## Best trial per metric",
        "",
        markdown_table(best_per_metric(trials, metrics), index=False) if not trials.empty else "-",
    ]
    failed = trials[trials["status"] != "ok"] if not trials.empty else trials
    if not failed.empty:
        lines += ["", "## Failed trials", ""]
        lines += [f"- `{r.trial_id}` {r.label}: {r.error}" for r in failed.itertuples()]
    config = json.loads(json.dumps(manifest["config"]))
    lines += [
        "",
        "## Config",
        "",
        "```yaml",
        yaml.safe_dump(config, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    path = Path(run_dir) / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
