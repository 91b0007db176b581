"""Experiment configs: schema errors with file and key path, sweep expansion, trial identity."""

from pathlib import Path

import pytest

from ragbench.errors import ConfigError
from ragbench.evaluate.metric_table import Metric, parse_metric
from ragbench.experiment.config import EvaluationSpec, expand, find_baseline, load_config

BASE = {"name": "t", "dataset": {"path": "demo"}}


def _config(sweep: dict, **extra: object) -> dict:
    return {**BASE, "sweep": sweep, **extra}


def test_design_example_expands_and_drops_unused_stages() -> None:
    config = load_config(
        _config(
            {
                "chunker": [
                    {"kind": "none"},
                    {"kind": "recursive", "size": [256, 512], "overlap": [0, 64], "unit": "chars"},
                ],
                "embedder": [{"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}],
                "retriever": [
                    {"kind": "bm25", "k1": [0.9, 1.2], "b": [0.4, 0.75]},
                    {"kind": "dense", "store": {"kind": "exact"}},
                    {"kind": "hybrid", "fusion": {"kind": "rrf", "k": [10, 60]}},
                ],
                "reranker": [{"kind": "none"}],
            },
            baseline="bm25",
        )
    )
    trials = expand(config)
    assert len(trials) == 5 * (4 + 1 + 2)
    bm25 = [t for t in trials if t["retriever"].kind == "bm25"]
    assert len(bm25) == 20 and all(t.get("embedder") is None for t in bm25)
    assert all(t.get("embedder") is not None for t in trials if t["retriever"].kind != "bm25")
    assert len({t.id for t in trials}) == len(trials)
    assert [t.id for t in trials] == [t.id for t in expand(config)]  # stable
    assert find_baseline(trials, "bm25")["retriever"].kind == "bm25"
    # prefix-sharing order: all trials of one chunker are consecutive
    chunkers = [t["chunker"].key() for t in trials]
    assert chunkers == sorted(chunkers, key=chunkers.index)


def test_metrics_are_parsed_once_when_the_config_is_validated() -> None:
    config = load_config(
        _config(
            {"retriever": [{"kind": "bm25"}]},
            evaluation={"metrics": ["NDCG@10", "p@5", "ndcg@10"]},
            search={"strategy": "tpe", "n": 1, "objective": "precision@5"},
        )
    )
    metrics = config.evaluation.metrics
    assert metrics == (parse_metric("ndcg@10"), parse_metric("precision@5"))
    assert all(isinstance(m, Metric) for m in metrics) and config.objective() is metrics[1]
    dumped = config.model_dump(mode="json")["evaluation"]["metrics"]
    assert dumped == ["ndcg@10", "precision@5"]  # written by name, as results files hold them
    assert EvaluationSpec.model_validate({"metrics": metrics}).metrics == metrics
    assert [m.name for m in EvaluationSpec().metrics] == ["ndcg@10", "recall@100", "mrr@10"]


def test_sequence_options_nested_axes_kind_lists_and_dedup() -> None:
    config = load_config(
        _config(
            {
                "retriever": [
                    {
                        "kind": "hybrid",
                        "fusion": {"kind": "convex", "weights": [[0.3, 0.7], [0.5, 0.5]]},
                    },
                    {"kind": "hybrid", "fusion": [{"kind": "rrf", "weights": [1, 2]}]},
                    {"kind": "bm25", "tokenizer": {"stemmer": ["english", None]}},
                    {"kind": "bm25"},  # duplicate of the stemmed variant above
                    {"kind": "dense", "store": {"kind": ["exact", "hnsw"]}},
                ],
                "chunker": [{"kind": "recursive", "size": 100, "separators": ["\n\n", " "]}],
            }
        )
    )
    trials = expand(config)
    labels = [t.label for t in trials]
    assert len(trials) == 2 + 1 + 2 + 2
    assert any("weights=[0.3,0.7]" in lab for lab in labels)
    assert any("rrf(weights=[1.0,2.0])" in lab for lab in labels)
    assert {t["retriever"].store.kind for t in trials if t["retriever"].kind == "dense"} == {
        "exact",
        "hnsw",
    }
    assert trials[0]["chunker"].separators == ("\n\n", " ")


def test_random_and_tpe_search() -> None:
    sweep = {"retriever": [{"kind": "bm25", "k1": [0.5, 0.9, 1.2, 1.5], "b": [0.3, 0.75]}]}
    picked = expand(load_config(_config(sweep, search={"strategy": "random", "n": 3, "seed": 7})))
    again = expand(load_config(_config(sweep, search={"strategy": "random", "n": 3, "seed": 7})))
    other = expand(load_config(_config(sweep, search={"strategy": "random", "n": 3, "seed": 8})))
    assert len(picked) == 3 and [t.id for t in picked] == [t.id for t in again]
    assert {t.id for t in other} != {t.id for t in picked}
    with pytest.raises(ConfigError, match=r"search\.n: required"):
        load_config(_config(sweep, search={"strategy": "tpe"}))
    with pytest.raises(ConfigError, match=r"search\.objective: 'map' is not one of"):
        load_config(_config(sweep, search={"strategy": "tpe", "n": 2, "objective": "map"}))


@pytest.mark.parametrize(
    ("sweep", "extra", "message"),
    [
        (
            {
                "chunker": [
                    {"kind": "none"},
                    {"kind": "recursive", "size": 512, "overlap": [0, 600]},
                ],
                "retriever": [{"kind": "bm25"}],
            },
            {},
            "sweep.chunker[1].overlap: must be < size (got 600 >= 512)",
        ),
        ({"retriever": [{"kind": "bm25", "k2": 1}]}, {}, "sweep.retriever[0].k2: unknown key"),
        ({"retriver": [{"kind": "bm25"}]}, {}, "sweep.retriver: unknown axis; allowed: chunker"),
        (
            {"retriever": [{"kind": "vector"}]},
            {},
            "sweep.retriever[0].kind: unknown retriever kind 'vector'; "
            "allowed: agentic, bm25, dense",
        ),
        (
            {"retriever": [{"kind": "bm25"}]},
            {"evaluation": {"metrics": ["ndcg@x"]}},
            "evaluation.metrics: unknown metric 'ndcg@x'",
        ),
        (
            {"retriever": [{"kind": "bm25"}]},
            {"evaluation": {"level": "page"}},
            "evaluation.level: Input should be 'document', 'chunk' or 'span'",
        ),
        (
            {"retriever": [{"kind": "bm25"}]},
            {"baseline": "dense"},
            "baseline: no trial matches 'dense'",
        ),
        (
            {"chunker": [{"kind": "none"}]},
            {},
            "sweep.retriever: at least one is needed (agentic, bm25, dense, hybrid)",
        ),
    ],
)
def test_errors_name_the_file_and_key_path(
    tmp_path: Path, sweep: dict, extra: dict, message: str
) -> None:
    import yaml

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_config(sweep, **extra)), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_yaml_is_loaded_safely_and_syntax_errors_name_the_line(tmp_path: Path) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(evil)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ndataset: {path: demo\nsweep: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken\.yaml: line \d+ invalid YAML"):
        load_config(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_dataset_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()
    (tmp_path / "data").mkdir()
    path = tmp_path / "exp" / "e.yaml"
    path.write_text(
        "name: e\ndataset: {path: ../data}\nsweep: {retriever: [{kind: bm25}]}\n", encoding="utf-8"
    )
    assert Path(load_config(path).dataset_path()) == tmp_path / "exp" / ".." / "data"
    named = load_config({**BASE, "sweep": {"retriever": [{"kind": "bm25"}]}})
    assert named.dataset_path() == "demo"


def test_overrides_set_values_by_key_path(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "e.yaml"
    path.write_text(
        yaml.safe_dump(_config({"retriever": [{"kind": "bm25"}], "reranker": [{"kind": "none"}]})),
        encoding="utf-8",
    )
    config = load_config(
        path, ["evaluation.depth=150", "sweep.retriever[0].k1=[0.5, 0.9]", "search.seed=3"]
    )
    assert config.evaluation.depth == 150 and config.search.seed == 3
    assert [t["retriever"].k1 for t in expand(config)] == [0.5, 0.9]
    with pytest.raises(ConfigError, match=r"expected KEY\.PATH=VALUE"):
        load_config(path, ["evaluation.depth"])
    with pytest.raises(ConfigError, match=r"no item \[4\] there"):
        load_config(path, ["sweep.retriever[4].k1=1"])
    depth = r"^--set evaluation\.depth=0: Input should be greater than 0"
    with pytest.raises(ConfigError, match=depth):
        load_config(path, ["evaluation.depth=0"])


def test_optional_nested_components_expand_as_choices() -> None:
    config = load_config(
        _config({"retriever": [{"kind": "hybrid", "bm25_chunker": [None, {"kind": "none"}]}]})
    )
    chunkers = [t["retriever"].bm25_chunker for t in expand(config)]
    assert chunkers[0] is None and chunkers[1].kind == "none"
