"""The trial ``--trial best`` names (``ingest --from-run``, ``export ragas``): the one the run's
report recommends, after the report's own checks of the evidence, so that no command deploys
or exports a pick the report would withhold.

``chosen_trial(run, wanted)`` is a finished trial of a run directory by id, or for ``best``
the report's recommendation (``Report.recommendation``). ``best`` is refused in one line that
says what to do instead — wait, resume, or name a trial with ``--trial ID`` — while the run is
still running, when some of its planned trials never ran (the best of the sweep is unknown),
when it scored too few queries for a report, and when the report recommends no trial
(``Evidence.withheld``: its queries cannot separate the trials).
"""

from __future__ import annotations

from pathlib import Path

from ragbench.errors import DataError
from ragbench.experiment.config import Trial
from ragbench.experiment.runner import find_trial
from ragbench.experiment.store import RunStore
from ragbench.report.evidence import counted
from ragbench.report.report import Report

__all__ = ["BEST", "chosen_trial", "recommended"]

BEST = "best"
"""The name ``--trial`` takes for the trial the run's report recommends."""

_ANYWAY = "pass --trial ID to use one of its finished trials anyway"


def chosen_trial(run: str | Path | RunStore, wanted: str) -> Trial:
    """The finished trial ``wanted`` of the run directory ``run``: an id, or ``best``, the
    trial its report recommends (``recommended``)."""
    store = run if isinstance(run, RunStore) else RunStore(run)
    return find_trial(store, recommended(store) if wanted == BEST else wanted)


def recommended(store: RunStore) -> str:
    """The id of the trial the report of ``store``'s run recommends; ``DataError`` saying why
    there is none and what to do (see the module docstring)."""
    manifest, where = store.manifest(), f"--trial {BEST}: {store.path}"
    if store.running():
        raise DataError(
            f"{where}: the run is still running, and its report recommends a trial once it has "
            f"finished; wait for it, or {_ANYWAY}"
        )
    planned, finished, failed = counted(manifest, store.trials())
    never = planned - finished - failed
    if never > 0:
        raise DataError(
            f"{where}: {finished} of {planned} planned trials finished and {never} never ran, "
            "so the best of the sweep is not known; `ragbench run --resume` finishes the run, "
            f"or {_ANYWAY}"
        )
    queries = int(manifest["queries"]["count"])
    if queries < 2:
        raise DataError(
            f"{where}: the run scored {queries} quer{'y' if queries == 1 else 'ies'}, and its "
            "report needs 2 or more to compare trials and recommend one; run it on more "
            f"queries, or {_ANYWAY}"
        )
    report = Report.from_run(store.path)
    if report.evidence.withheld is not None:
        raise DataError(
            f"{where}: its report recommends no trial: these queries cannot separate the trials "
            f"on {report.metric} (`ragbench report` says why); {_ANYWAY}"
        )
    return report.recommendation().best
