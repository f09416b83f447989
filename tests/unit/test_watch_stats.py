"""The watch's statistics against scipy.stats. The gateway's venv has no scipy, so the expected
values below were computed once with scipy 1.17.1 on these inputs:

    rankdata(A); spearmanr(A, C); mannwhitneyu(A, B, alternative="two-sided", use_continuity=False,
    method="asymptotic") and z = norm.isf(p / 2); ks_2samp(A, B).statistic and
    kstwobign.sf(d * sqrt(n m / (n + m))); wasserstein_distance(A, B); kstwobign.sf(0.5 | 1 | 2)
"""

from __future__ import annotations

import pytest

from judge_gateway.watch import stats

A = [0.1, 0.4, 0.4, 0.9, 0.35, 0.7, 0.2, 0.4]
B = [0.3, 0.3, 0.8, 0.05, 0.6, 0.55]
C = [0.2, 0.1, 0.5, 0.5, 0.9, 0.3, 0.25, 0.6]


def test_ranks_and_spearman_equal_scipy():
    assert list(stats.average_ranks(A)) == [1.0, 5.0, 5.0, 8.0, 3.0, 7.0, 2.0, 5.0]
    assert stats.spearman(A, C) == pytest.approx(0.23316832949506255, abs=1e-12)


def test_rank_shift_is_the_mann_whitney_u_with_tie_correction():
    shift = stats.rank_shift(A, B)
    assert shift.auc == pytest.approx(25.0 / (len(A) * len(B)))
    assert shift.z == pytest.approx(0.1298146827283103, abs=1e-9)
    assert stats.rank_shift(B, A).z == pytest.approx(-0.1298146827283103, abs=1e-9)


def test_ks_and_wasserstein_equal_scipy():
    ks = stats.ks_2samp(A, B)
    assert ks.d == pytest.approx(0.25) and ks.p == pytest.approx(0.982890273573239, abs=1e-12)
    assert stats.wasserstein1(A, B) == pytest.approx(0.10625, abs=1e-12)
    assert stats.kolmogorov_sf(1.0) == pytest.approx(0.26999967167735456, abs=1e-12)
    assert stats.kolmogorov_sf(0.5) == pytest.approx(0.9639452436648751, abs=1e-12)
    assert stats.kolmogorov_sf(2.0) == pytest.approx(0.0006709252557796953, abs=1e-15)


def test_summary_quantiles_and_percentile_rank():
    s = stats.summarize(A)
    assert (s.q10, s.q50, s.q90) == pytest.approx((0.17, 0.4, 0.76))
    assert s.mean == pytest.approx(sum(A) / len(A))
    assert stats.percentile_rank(sorted(A), 0.4) == pytest.approx((3 + 0.5 * 3) / 8)
    assert stats.percentile_rank([], 0.4) is None


def test_what_has_no_value_is_none_never_a_number():
    assert stats.spearman([1, 2], [2, 1]) is None  # too few pairs
    assert stats.spearman([1, 1, 1], [1, 2, 3]) is None  # a constant side
    assert stats.rank_shift([], [1.0]) is None
    assert stats.ks_2samp([1.0], []) is None and stats.wasserstein1([], [1.0]) is None
    assert stats.summarize([]) is None
    assert stats.two_proportion_z(0, 0, 1, 10) is None
    assert stats.two_proportion_z(0, 10, 0, 10) == 0.0  # nothing varies
    assert stats.correlation_drop_z(0.5, 3, 0.1, 50) is None
    same = stats.rank_shift([0.0] * 5, [0.0] * 5)
    assert same.auc == 0.5 and same.z == 0.0  # all ties: no shift, no division by zero


def test_fisher_z_of_spearman():
    import math

    assert stats.correlation_z(0.5, 28) == pytest.approx(math.atanh(0.5) / math.sqrt(1.06 / 25))
    assert stats.correlation_drop_z(0.6, 53, 0.1, 53) == pytest.approx(
        (math.atanh(0.6) - math.atanh(0.1)) / math.sqrt(2 * 1.06 / 50))
    assert stats.two_proportion_z(10, 100, 2, 100) == pytest.approx(0.08 / math.sqrt(0.06 * 0.94 * 0.02))

