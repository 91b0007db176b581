"""A collection's index values on disk: snapshots of its indexes and the batches after them.

An ingest commits documents and chunks batch by batch (``retrieve/stored.py``); its indexes
(dense stores, BM25) live in memory and are written out whole now and then, as a snapshot
named by the last batch it includes (``snapshots/<batch>/<stage>/``, each stage's folder sealed
with its checksums). The values an index is extended from that are not kept in the store — a
batch's document vectors — are written as a shard (``batches/<batch>/<stage>/``) before the batch
commits, so a reader rebuilds the indexes of every committed batch from the last snapshot and
the shards after it (``LiveExecution.replay``), and no batch an ingest finished is embedded
again after a crash. Older snapshots and the shards they include are removed once a newer
snapshot is written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragbench.errors import DataError
from ragbench.index.cache import seal, seal_damage
from ragbench.retrieve.graph import Plan, Stage

__all__ = [
    "SNAPSHOTS",
    "load_shard",
    "load_snapshot",
    "prune",
    "shard_stages",
    "snapshot_stages",
    "write_shard",
    "write_snapshot",
]

SNAPSHOTS = "snapshots"
SHARDS = "batches"


def _folder(stage_name: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in stage_name)


def snapshot_stages(plan: Plan) -> list[Stage]:
    """The index-time stages whose values a snapshot holds: indexes (``extend``) and trained
    models (``fixed``)."""
    return [s for s in plan.index_stages() if s.update in ("extend", "fixed")]


def shard_stages(plan: Plan) -> list[Stage]:
    """The batch values an index is extended from that the store does not keep (document
    vectors): what a shard holds."""
    read = {i for s in plan.index_stages() if s.update == "extend" for i in s.inputs}
    return [s for s in plan.index_stages() if s.update == "batch" and s.name in read]


def _write(
    parent: Path, batch: int, stages: list[Stage], values: Mapping[str, Any], sealed: bool
) -> None:
    """Write ``parent/<batch>/``: a folder per stage of ``stages`` that has a value (sealed
    with its checksums when ``sealed``), all at once (``_written``)."""
    tmp = parent / f".tmp-{batch}-{os.getpid()}"
    with _written(tmp, parent / str(batch)):
        for stage in stages:
            if values.get(stage.name) is not None:
                folder = tmp / _folder(stage.name)
                folder.mkdir()
                stage.codec.save(values[stage.name], folder)
                if sealed:
                    seal(folder)


@contextmanager
def _written(tmp: Path, final: Path) -> Iterator[None]:
    """Fill the new folder ``tmp`` in the block, then rename it to ``final``; when the block
    fails (a full disk), ``tmp`` goes and ``final`` stays as it was."""
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def write_snapshot(root: Path, plan: Plan, values: Mapping[str, Any], batch: int) -> None:
    """Write the snapshot of ``values`` that includes every batch up to ``batch``."""
    _write(root / SNAPSHOTS, batch, snapshot_stages(plan), values, sealed=True)


def load_snapshot(
    root: Path, plan: Plan, batch: int, required: Collection[str] = ()
) -> dict[str, Any]:
    """The values of the snapshot that includes the batches up to ``batch`` (none for -1),
    each stage's files checked against their seal; the snapshot's folder, and the folders of
    the stages ``required`` (those the store holds chunks for), must be there. Damage is a
    ``DataError`` naming it."""
    if batch < 0:
        return {}
    where = root / SNAPSHOTS / str(batch)
    if not where.is_dir():
        raise DataError(
            f"{where}: missing: the collection's store says its indexes were saved there"
        )
    found: dict[str, Any] = {}
    for stage in snapshot_stages(plan):
        folder = where / _folder(stage.name)
        if not folder.is_dir():
            if stage.name in required:
                raise DataError(
                    f"{folder}: missing: the collection's index {stage.name!r} was saved there"
                )
            continue
        damage = seal_damage(folder)
        if damage is not None:
            raise DataError(f"{damage}: the collection's index changed since it was saved")
        try:
            found[stage.name] = stage.codec.load(folder)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DataError(f"{folder}: unreadable ({reason})") from None
    return found


def write_shard(root: Path, plan: Plan, batch: int, values: Mapping[str, Any]) -> None:
    """Write the values of ``batch`` an index is extended from (``shard_stages``)."""
    _write(root / SHARDS, batch, shard_stages(plan), values, sealed=False)


def load_shard(root: Path, stage: Stage, batch: int) -> Any | None:
    """The value of ``stage`` in the shard of ``batch``, or None when there is none."""
    folder = root / SHARDS / str(batch) / _folder(stage.name)
    if not folder.is_dir():
        return None
    try:
        return stage.codec.load(folder)
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None  # computed again from the batch's chunks


def prune(root: Path, snapshot: int) -> None:
    """Keep the snapshot ``snapshot`` and the one before it; remove the other snapshots (older
    ones, and any newer one a killed ingest wrote but never recorded), every shard
    ``snapshot`` includes and the temporary folders a killed writer left."""
    held = sorted(int(p.name) for p in (root / SNAPSHOTS).glob("[0-9]*") if p.name.isdigit())
    kept = {snapshot, max((n for n in held if n < snapshot), default=snapshot)}
    gone = [root / SNAPSHOTS / str(n) for n in held if n not in kept]
    shards = (root / SHARDS).glob("[0-9]*")
    gone += [p for p in shards if p.name.isdigit() and int(p.name) <= snapshot]
    gone += [*(root / SNAPSHOTS).glob(".tmp-*"), *(root / SHARDS).glob(".tmp-*")]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
