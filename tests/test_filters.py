"""The metadata table every index keeps: the same answers as a list of dicts under ``==``."""

import json
import random
from typing import Any

import numpy as np

from ragbench.index.filters import MetadataTable, matches

VALUES: list[Any] = ["a", "b", 1, 1.0, True, 2, None, [1], {"x": 1}, (1,)]
KEYS = ["path", "n", "page"]


def _dict(rng: random.Random) -> dict[str, Any]:
    return {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(0, len(KEYS)))}


def test_the_table_answers_every_filter_as_a_list_of_dicts_does() -> None:
    rng = random.Random(7)
    table, model = MetadataTable(), []
    for _ in range(300):
        op = rng.random()
        if op < 0.5 or not model:  # set rows, some new
            rows = rng.sample(range(len(model) + 3), 3)
            metas = [_dict(rng) for _ in rows]
            table.set(rows, metas)
            model += [{} for _ in range(max(rows) + 1 - len(model))]
            for row, meta in zip(rows, metas, strict=True):
                model[row] = dict(meta)
        elif op < 0.65:
            row = rng.randrange(len(model))
            table.clear([row])
            model[row] = {}
        elif op < 0.8:
            source, target = rng.randrange(len(model)), rng.randrange(len(model))
            table.move(source, target)
            model[target] = dict(model[source])
        elif op < 0.9:
            kept = np.asarray([rng.random() < 0.8 for _ in model])
            table.keep(kept)
            model = [m for m, k in zip(model, kept.tolist(), strict=True) if k]
        else:
            rows = rng.randrange(len(model) + 1)
            table.truncate(rows)
            model = model[:rows]
        assert len(table) == len(model)
        assert [table.get(i) for i in range(len(model))] == model
        for _ in range(3):
            where = _dict(rng) or {"path": "a"}
            expected = [matches(m, where) for m in model]
            assert table.rows(where).tolist() == expected, where


def test_json_round_trip_keeps_rows_and_filters() -> None:
    metas = [{"path": "a.md", "page": 1}, {"path": "b.md"}, {}, {"path": "a.md", "tags": ["x"]}]
    table = MetadataTable.from_json(json.loads(json.dumps(MetadataTable.of(metas).to_json())))
    assert [table.get(i) for i in range(4)] == metas
    assert table.rows({"path": "a.md"}).tolist() == [True, False, False, True]
    assert table.rows({"tags": ["x"]}).tolist() == [False, False, False, True]
    assert table.rows({"page": 1.0}).tolist() == [True, False, False, False]  # 1 == 1.0
