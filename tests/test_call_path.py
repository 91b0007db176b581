"""Following one trial's spec from the executor stays in each room once, in order: the call path
ARCHITECTURE.md describes ("The call path of a trial"), read off a traced ``run_trial``."""

import inspect
import sys
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import pytest

import ragbench.evaluate.answers
import ragbench.evaluate.labels
import ragbench.evaluate.metric_table
import ragbench.evaluate.metrics
import ragbench.experiment.evaluation
import ragbench.experiment.trial
import ragbench.retrieve.graph
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.trial import RunSpec, context, run_trial
from tests.paths import DEMO, require

ROOMS: dict[ModuleType, str] = {
    ragbench.experiment.trial: "trial",
    ragbench.retrieve.graph: "graph",
    ragbench.experiment.evaluation: "evaluation",
    ragbench.evaluate.labels: "labels",
    ragbench.evaluate.metrics: "metrics",
    ragbench.evaluate.answers: "answers",
}
# the latency pass times the plan's query stages again, alone: its own room, not followed inside
OPAQUE = {"_latency"}


def _accessors(module: ModuleType) -> set[CodeType]:
    """The code of the properties of ``module``'s classes: reading an attribute is no visit
    (nor is making a value: dunder methods are skipped too)."""
    found = set()
    for _, cls in inspect.getmembers(module, inspect.isclass):
        for value in vars(cls).values():
            getter = getattr(value, "fget", None) or getattr(value, "func", None)
            if getter is not None and hasattr(getter, "__code__"):
                found.add(getter.__code__)
    return found


def _visits(spec: RunSpec, trial: Any) -> tuple[list[str], list[Any]]:
    """The rooms ``run_trial`` enters, consecutive calls within one room as one visit, and
    what ``parse_metric`` was handed meanwhile."""
    files = {Path(m.__file__ or "").resolve(): name for m, name in ROOMS.items()}
    skip = set().union(*map(_accessors, ROOMS))
    parse = ragbench.evaluate.metric_table.parse_metric.__code__
    rooms: list[str] = []
    parsed: list[Any] = []
    inside: list[FrameType] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "return" and inside and frame is inside[-1]:
            inside.pop()
        if event != "call" or inside:
            return
        code = frame.f_code
        if code is parse:
            parsed.append(frame.f_locals.get("spec"))
        room = files.get(Path(code.co_filename).resolve())
        name = code.co_name
        if room is None or code in skip or name.startswith("<") or name.endswith("__"):
            return
        if name in OPAQUE:
            inside.append(frame)
        if not rooms or rooms[-1] != room:
            rooms.append(room)

    sys.setprofile(profile)
    try:
        result = run_trial(spec, trial)
    finally:
        sys.setprofile(None)
    assert result.status == "ok", result.error
    return rooms, parsed


EXTRACTIVE = {"generator": [{"kind": "extractive"}]}
RANKING = ["trial", "graph", "evaluation", "labels", "metrics"]


@pytest.mark.parametrize(
    ("answer_metrics", "sweep", "path"),
    [
        ([], {}, [*RANKING, "graph", "trial"]),
        (["token_f1"], EXTRACTIVE, [*RANKING, "answers", "graph", "trial"]),
    ],
    ids=["ranking", "answers"],
)
def test_a_trial_visits_each_room_at_most_twice_in_order(
    tmp_path: Path, answer_metrics: list[str], sweep: dict[str, Any], path: list[str]
) -> None:
    metrics = ["ndcg@10", "recall@20", "span_recall@5", *answer_metrics]
    config = load_config(
        {
            "name": "path",
            "dataset": {"path": str(require(DEMO))},
            "evaluation": {"metrics": metrics, "depth": 20},
            "sweep": {"retriever": [{"kind": "bm25"}], **sweep},
            "latency": {"queries": 3, "repeats": 1},
        }
    )
    spec = RunSpec(config, 20, str(tmp_path / "cache"))
    trial = expand(config)[0]
    context(spec)  # the process's shared context is built once, before any trial
    rooms, parsed = _visits(spec, trial)
    assert rooms == path, rooms
    assert max(rooms.count(room) for room in rooms) <= 2
    assert all(not isinstance(p, str) for p in parsed), parsed  # metrics travel parsed
