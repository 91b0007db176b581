"""Trial tables: the numbers of a run directory, arranged for people, and the Markdown
escaping every report uses for text that comes from configs and data (labels, queries)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from ragbench.evaluate.metrics import best_first, best_index

__all__ = [
    "TOTAL_P50",
    "best_per_metric",
    "latency_stages",
    "markdown_table",
    "md_code",
    "md_fence",
    "md_text",
    "short_labels",
    "spend",
    "trial_table",
    "usage_stages",
    "usd",
]

# HTML's special characters as entities; Markdown's link, code, escape and table syntax escaped.
_MD_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"} | {c: "\\" + c for c in "\\`[]|"})
_BACKTICKS = re.compile("`+")

TOTAL_P50 = "latency.total.p50_ms"
"""The trials table's column of p50 total latency per query (ms): what a pick's latency is."""


def _one_line(value: object) -> str:
    return " ".join(str(value).splitlines())


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def md_text(value: object) -> str:
    """``value`` as literal Markdown text on one line: no HTML, links, code or table cells."""
    return _one_line(value).translate(_MD_TEXT)


def md_code(value: object) -> str:
    """``value`` as a one-line code span that its own backticks cannot close."""
    text = _one_line(value)
    fence = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(text: str, info: str = "") -> str:
    """``text`` as a fenced code block that no line of it can close."""
    fence = "`" * max(3, _longest_backticks(text) + 1)
    body = text.rstrip("\n")
    return f"{fence}{info}\n{body}\n{fence}"


def latency_stages(trials: pd.DataFrame) -> list[str]:
    """Stage names that have latency columns, in the order the trials recorded them (the
    plans' stage order), total last (CPU time and the measurement's settings are no stage)."""
    found = [
        c.split(".")[1]
        for c in trials.columns
        if c.startswith("latency.") and c.endswith(".p50_ms") and c != "latency.cpu.p50_ms"
    ]
    ordered = [s for s in dict.fromkeys(found) if s != "total"]
    return ordered + (["total"] if "total" in found else [])


def usage_stages(trials: pd.DataFrame) -> list[str]:
    """Stages whose LLM tokens the trials recorded (``tokens.<stage>.prompt`` columns), in
    the order the trials recorded them; empty when no trial called an LLM."""
    found = [c.split(".")[1] for c in trials.columns if c.startswith("tokens.")]
    return list(dict.fromkeys(found))


def spend(trials: pd.DataFrame) -> pd.DataFrame:
    """LLM tokens and cost per query of each trial (same index as ``trials``): per stage
    ``tokens.<stage>.prompt``, ``tokens.<stage>.completion`` and ``cost.<stage>``, then
    ``tokens.total`` (prompt + completion over all stages) and ``cost.total`` (US dollars).
    A trial without a stage spent nothing there (0 tokens, $0); a cost is NaN where the
    config gives no price for the stage's model. No columns when no trial called an LLM."""
    out = pd.DataFrame(index=trials.index)
    stages = usage_stages(trials)
    if not stages:
        return out
    called = {s: trials[f"tokens.{s}.prompt"].notna() for s in stages}
    for stage in stages:
        for part in ("prompt", "completion"):
            out[f"tokens.{stage}.{part}"] = trials[f"tokens.{stage}.{part}"].fillna(0.0)
        out[f"cost.{stage}"] = trials[f"cost.{stage}"].where(called[stage], 0.0)
    tokens = [f"tokens.{s}.{part}" for s in stages for part in ("prompt", "completion")]
    out["tokens.total"] = out[tokens].sum(axis=1)
    out["cost.total"] = trials["cost.total"].where(pd.concat(called, axis=1).any(axis=1), 0.0)
    return out


def usd(value: float) -> str:
    """A cost in US dollars to three significant digits; "–" when unknown (no price)."""
    return "–" if value != value else f"{value:.3g}"


def trial_table(trials: pd.DataFrame, metrics: Sequence[str], stages: bool = False) -> pd.DataFrame:
    """Trials sorted by the first metric, best first: label, metrics, p50/p95 latency (ms),
    LLM tokens and US dollars per query (when a trial called an LLM), build time."""
    if trials.empty:
        return pd.DataFrame()
    ok = trials[trials["status"] == "ok"]
    ok = ok.assign(**spend(ok).filter(["tokens.total", "cost.total"]))
    columns = ["label", *metrics]
    for stage in latency_stages(ok) if stages else ["total"]:
        columns += [f"latency.{stage}.p50_ms", f"latency.{stage}.p95_ms"]
    columns += ["tokens.total", "cost.total", "index_build_s"]
    present = [c for c in columns if c in ok.columns]
    table = best_first(ok.set_index("trial_id")[present], metrics[0])
    names = {"tokens.total": "tokens/query", "cost.total": "USD/query"}
    return table.rename(
        columns=lambda c: (
            names.get(c)
            or c.replace("latency.", "").replace(".p50_ms", " p50 ms").replace(".p95_ms", " p95 ms")
        )
    )


def best_per_metric(trials: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """For each metric, the trial with the best mean (the lowest when lower is better)."""
    ok = trials[trials["status"] == "ok"]
    rows = []
    for metric in metrics:
        if metric in ok.columns and ok[metric].notna().any():
            best = ok.loc[best_index(ok[metric], metric)]
            rows.append(
                {
                    "metric": metric,
                    "value": best[metric],
                    "trial_id": best["trial_id"],
                    "label": best["label"],
                }
            )
    return pd.DataFrame(rows)


def _cell(value: object, digits: int) -> str:
    if isinstance(value, float):
        return "" if value != value else f"{value:.{digits}f}"
    return md_text(value)


def markdown_table(frame: pd.DataFrame, digits: int = 4, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (floats with ``digits`` decimals)."""
    data = frame.reset_index() if index else frame
    header = "| " + " | ".join(_cell(c, digits) for c in data.columns) + " |"
    rule = "|" + "|".join("---" for _ in data.columns) + "|"
    body = [
        "| " + " | ".join(_cell(v, digits) for v in row) + " |"
        for row in data.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def short_labels(
    labels: Sequence[str] | pd.Series, width: int | None = 48, among: Sequence[str] | None = None
) -> list[str]:
    """Trial labels without the ``" | "`` parts shared by every label of ``among`` (default:
    ``labels``), cut to ``width`` characters (``None``: whole)."""
    context = [str(label).split(" | ") for label in (labels if among is None else among)]
    common = set.intersection(*(set(p) for p in context)) if context else set()
    out = []
    for parts in (str(label).split(" | ") for label in labels):
        kept = [p for p in parts if p not in common] or parts[:1]
        text = " | ".join(kept)
        out.append(text if width is None or len(text) <= width else text[: width - 1] + "…")
    return out
