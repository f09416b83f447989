"""The equality bounds of tests/support/tolerance.py: spacings of the dtype at the summed terms' magnitude."""

from __future__ import annotations


import numpy as np
import pytest

from tests.support.tolerance import SPACING, assert_close, steps_apart


def test_the_failure_that_a_fixed_bound_gave_is_within_float32s_noise():
    # a PickScore logit of a batch of 6 vs a batch of 1: 1.05e-5 apart, past abs=1e-5; 9 float32
    # spacings at the value, under one at the magnitude of its terms (exp(logit_scale) = 100)
    assert 9 < assert_close([-9.56723690], [-9.56724739], what="the observed case") < 10
    assert assert_close([-9.56723690], [-9.56724739], what="the observed case", scale=100.0) < 1


def test_spacings_and_real_differences():
    assert SPACING["float32"] == np.finfo(np.float32).eps and SPACING["bfloat16"] == 2.0 ** -7
    assert steps_apart([0.25], [0.25 + 2 ** -9], dtype="bfloat16", scale=0.25) == pytest.approx(1.0, rel=1e-9)
    assert steps_apart([0.0], [0.0]) == 0.0 and steps_apart([0.0], [1e-9]) == pytest.approx(2.0 ** 23)
    with pytest.raises(AssertionError):
        assert_close([0.281], [0.2835], what="fp32 arithmetic on bf16 embeddings", dtype="bfloat16", steps=1.0,
                     scale=0.25)
    with pytest.raises(AssertionError):  # a wrong preprocessing is far past the default bound
        assert_close([0.300], [0.301], what="a real difference", scale=1.0)
