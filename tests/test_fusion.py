from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbench.errors import ConfigError
from ragbench.registry import components
from ragbench.retrieve.fusion import (
    ConvexConfig,
    RRFConfig,
    RRFFusion,
    WeightedConfig,
    WeightedFusion,
    normalize_scores,
)
from ragbench.types import Ranking


def ranking(*rows: list[tuple[str, float]], k: int | None = None) -> Ranking:
    return Ranking.from_rows(list(rows), k=k)


def ids(r: Ranking, q: int = 0) -> list[str]:
    return [c for c, _ in r.row(q)]


DENSE = ranking([("a", 0.9), ("b", 0.8), ("c", 0.1)])
SPARSE = ranking([("c", 12.0), ("d", 7.0), ("a", 3.0)])


# --- rrf -------------------------------------------------------------------------------------


def test_rrf_scores_follow_the_formula() -> None:
    fused = RRFFusion(RRFConfig(k=60)).fuse([DENSE, SPARSE], k=10)
    expected = {
        "a": 1 / 61 + 1 / 63,
        "c": 1 / 63 + 1 / 61,
        "b": 1 / 62,
        "d": 1 / 62,
    }
    assert dict(fused.row(0)) == pytest.approx(expected)
    assert ids(fused) == ["a", "c", "b", "d"]  # a/c tie → both best rank 1 → id; b/d likewise


def test_rrf_weights_scale_each_list() -> None:
    fused = RRFFusion(RRFConfig(k=0, weights=(1.0, 3.0))).fuse([DENSE, SPARSE], k=10)
    scores = dict(fused.row(0))
    assert scores["a"] == pytest.approx(1 / 1 + 3 / 3)
    assert scores["d"] == pytest.approx(3 / 2)
    assert scores["b"] == pytest.approx(1 / 2)
    assert ids(fused) == ["c", "a", "d", "b"]  # c = 1/3 + 3/1


def test_rrf_ties_break_by_best_rank_then_id() -> None:
    # With k=0: z = 1/1, a = 1/2 + 1/2, b = 1/1 — all 1.0; a never ranked first.
    first = ranking([("z", 5.0), ("a", 4.0)])
    second = ranking([("b", 5.0), ("a", 4.0)])
    fused = RRFFusion(RRFConfig(k=0)).fuse([first, second], k=3)
    assert fused.scores[0].tolist() == [1.0, 1.0, 1.0]
    assert ids(fused) == ["b", "z", "a"]


def test_rrf_is_independent_of_input_order_when_unweighted() -> None:
    one = RRFFusion().fuse([DENSE, SPARSE], k=4)
    two = RRFFusion().fuse([SPARSE, DENSE], k=4)
    assert one.ids.tolist() == two.ids.tolist()
    np.testing.assert_allclose(one.scores, two.scores)


def test_fusion_truncates_and_pads_to_k() -> None:
    fused = RRFFusion().fuse([DENSE, SPARSE], k=2)
    assert fused.ids.shape == (1, 2)
    wide = RRFFusion().fuse([DENSE, SPARSE], k=6)
    assert wide.ids.shape == (1, 6)
    assert wide.ids[0, 4:].tolist() == ["", ""]
    assert np.isneginf(wide.scores[0, 4:]).all()


def test_fusion_handles_several_queries_and_empty_rows() -> None:
    first = ranking([("a", 1.0), ("b", 0.5)], [], [("x", 2.0)])
    second = ranking([("b", 3.0)], [], [("y", 1.0), ("x", 0.5)], k=2)
    for fusion in (RRFFusion(), WeightedFusion()):
        fused = fusion.fuse([first, second], k=3)
        assert fused.ids.shape == (3, 3)
        assert set(ids(fused, 0)) == {"a", "b"}
        assert ids(fused, 1) == []
        assert ids(fused, 2)[0] == "x"


def test_duplicate_ids_within_a_list_count_once_at_their_first_rank() -> None:
    dup = ranking([("a", 3.0), ("b", 2.0), ("a", 1.0)])
    fused = RRFFusion(RRFConfig(k=0)).fuse([dup], k=5)
    assert fused.row(0) == [("a", 1.0), ("b", 0.5)]


def test_fusion_validates_inputs() -> None:
    with pytest.raises(ValueError, match="2 rankings"):
        RRFFusion(RRFConfig(weights=(1.0,))).fuse([DENSE, SPARSE], k=3)
    with pytest.raises(ValueError, match="3 fusion weights for 2 rankings"):
        WeightedFusion(WeightedConfig(weights=(1.0, 1.0, 1.0))).fuse([DENSE, SPARSE], k=3)
    with pytest.raises(ValueError, match="different numbers of queries"):
        RRFFusion().fuse([DENSE, ranking([("a", 1.0)], [("b", 1.0)])], k=3)
    with pytest.raises(ValueError, match="at least one ranking"):
        RRFFusion().fuse([], k=3)
    with pytest.raises(ValueError, match="k must be at least 1"):
        RRFFusion().fuse([DENSE], k=0)


@given(
    st.lists(
        st.lists(st.sampled_from("abcdefgh"), max_size=8, unique=True).map(
            lambda row: [(c, float(len(row) - i)) for i, c in enumerate(row)]
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 10),
    st.sampled_from(["rrf", "weighted"]),
)
def test_fused_rows_are_unique_sorted_and_complete(
    lists: list[list[tuple[str, float]]], k: int, kind: str
) -> None:
    fusion = components("fusion").build({"kind": kind})
    fused = fusion.fuse([ranking(row) for row in lists], k=k)
    row = fused.row(0)
    union = {c for lst in lists for c, _ in lst}
    assert len(row) == min(k, len(union))
    assert len({c for c, _ in row}) == len(row)
    assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)


@given(
    st.lists(
        st.lists(
            st.lists(
                st.tuples(st.sampled_from("abcdef"), st.sampled_from([0.0, 0.5, 1.0, 2.0])),
                max_size=6,
            ),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 8),
    st.sampled_from(["rrf", "weighted", "convex"]),
    st.sampled_from(["minmax", "zscore", "rank"]),
)
def test_a_batch_fuses_each_query_as_if_alone(
    lists: list[list[list[tuple[str, float]]]], k: int, kind: str, normalization: str
) -> None:
    """Queries fused together (padding, repeated ids, ties) get the rows each gets alone."""
    queries = len(lists[0])
    rows = [[lst[q] if q < len(lst) else [] for lst in lists] for q in range(queries)]
    spec = {"kind": kind} if kind == "rrf" else {"kind": kind, "normalization": normalization}
    fusion = components("fusion").build(spec)
    together = [Ranking.from_rows([r[i] for r in rows], k=6) for i in range(len(lists))]
    batch = fusion.fuse(together, k)
    for q, parts in enumerate(rows):
        alone = fusion.fuse([ranking(part, k=6) for part in parts], k)
        assert batch.ids[q].tolist() == alone.ids[0].tolist()
        assert batch.scores[q].tolist() == alone.scores[0].tolist()


# --- normalisation ---------------------------------------------------------------------------


def test_normalize_minmax_zscore_rank() -> None:
    scores = np.array([10.0, 6.0, 2.0])
    normed, floor = normalize_scores(scores, "minmax")
    assert normed.tolist() == [1.0, 0.5, 0.0] and floor == 0.0
    normed, floor = normalize_scores(scores, "zscore")
    std = np.std(scores)
    np.testing.assert_allclose(normed, [4 / std, 0.0, -4 / std])
    assert floor == pytest.approx(-4 / std)
    normed, floor = normalize_scores(scores, "rank")
    np.testing.assert_allclose(normed, [1.0, 2 / 3, 1 / 3])
    assert floor == pytest.approx(1 / 3)


def test_normalize_degenerate_lists() -> None:
    same = np.array([0.7, 0.7])
    assert normalize_scores(same, "minmax") == (pytest.approx([1.0, 1.0]), 0.0)
    normed, floor = normalize_scores(same, "zscore")
    assert normed.tolist() == [0.0, 0.0] and floor == 0.0
    normed, _ = normalize_scores(np.array([5.0]), "minmax")
    assert normed.tolist() == [1.0]


# --- weighted / convex -----------------------------------------------------------------------


def test_weighted_minmax_sums_normalised_scores_absent_gets_zero() -> None:
    fused = WeightedFusion(WeightedConfig(weights=(1.0, 2.0))).fuse([DENSE, SPARSE], k=10)
    # dense minmax: a=1, b=0.875, c=0; sparse minmax: c=1, d=4/9, a=0
    expected = {"a": 1.0, "b": 0.875, "c": 2.0, "d": 2 * 4 / 9}
    assert dict(fused.row(0)) == pytest.approx(expected)
    assert ids(fused) == ["c", "a", "d", "b"]


def test_weighted_zscore_absent_gets_list_minimum() -> None:
    fused = WeightedFusion(WeightedConfig(normalization="zscore")).fuse([DENSE, SPARSE], k=10)
    dense, dense_floor = normalize_scores(np.array([0.9, 0.8, 0.1]), "zscore")
    sparse, sparse_floor = normalize_scores(np.array([12.0, 7.0, 3.0]), "zscore")
    scores = dict(fused.row(0))
    assert scores["b"] == pytest.approx(dense[1] + sparse_floor)
    assert scores["d"] == pytest.approx(dense_floor + sparse[1])
    assert scores["a"] == pytest.approx(dense[0] + sparse[2])


def test_weighted_rank_ignores_score_scale() -> None:
    scaled = ranking([("c", 1e9), ("d", 1e8), ("a", -5.0)])
    config = WeightedConfig(normalization="rank")
    one = WeightedFusion(config).fuse([DENSE, SPARSE], k=4)
    two = WeightedFusion(config).fuse([DENSE, scaled], k=4)
    assert one.ids.tolist() == two.ids.tolist()
    assert dict(one.row(0))["b"] == pytest.approx(2 / 3 + 1 / 3)


def test_degenerate_minmax_list_still_prefers_its_own_documents() -> None:
    flat = ranking([("x", 1.0), ("y", 1.0)])
    other = ranking([("z", 1.0), ("y", 0.0)])
    fused = WeightedFusion().fuse([flat, other], k=3)
    assert dict(fused.row(0)) == pytest.approx({"x": 1.0, "y": 1.0, "z": 1.0})
    assert ids(fused) == ["x", "z", "y"]  # tie → best rank (x, z first) → id


def test_convex_defaults_to_equal_weights_and_validates_sum() -> None:
    convex = components("fusion").build({"kind": "convex"})
    weighted = components("fusion").build({"kind": "weighted"})
    a = convex.fuse([DENSE, SPARSE], k=4)
    b = weighted.fuse([DENSE, SPARSE], k=4)
    assert a.ids.tolist() == b.ids.tolist()
    np.testing.assert_allclose(a.scores, b.scores / 2)
    assert ConvexConfig(weights=(0.25, 0.75)).weights == (0.25, 0.75)
    with pytest.raises(ConfigError, match="sum to 1"):
        components("fusion").parse({"kind": "convex", "weights": [0.5, 0.6]})


def test_fusion_configs_reject_bad_values() -> None:
    fusions = components("fusion")
    assert {"rrf", "weighted", "convex"} <= set(fusions.kinds())
    with pytest.raises(ConfigError, match="normalization"):
        fusions.parse({"kind": "weighted", "normalization": "softmax"})
    with pytest.raises(ConfigError, match=r"weights\[1\]"):
        fusions.parse({"kind": "rrf", "weights": [1.0, -1.0]})
    with pytest.raises(ConfigError, match="k"):
        fusions.parse({"kind": "rrf", "k": -1})
    assert fusions.parse({"kind": "rrf", "k": 10}).label() == "rrf(k=10.0)"
    assert math.isclose(fusions.parse("rrf").k, 60.0)
