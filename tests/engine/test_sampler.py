"""The sampler's filter order is llama.cpp's: top-k, top-p and min-p judge the model's own
probabilities, and temperature only reshapes what they kept."""

import numpy as np

from engine.core.sampler import Sampler
from engine.types import SamplingConfig

PROBS = np.log(np.array([0.5, 0.3, 0.2, 1e-9]))
NONE_BANNED = np.zeros(PROBS.size, dtype=bool)


def draws(**config) -> set[int]:
    sampler = Sampler(SamplingConfig(**{"seed": 3, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **config}), NONE_BANNED)
    return {sampler.choose(PROBS, []) for _ in range(400)}


def test_min_p_judges_the_models_probabilities_not_the_tempered_ones():
    # 0.2 < 0.5 * 0.5: cut, however flat temperature 2 would make it (tempered, it passes min-p)
    assert draws(temperature=2.0, min_p=0.5) == {0, 1}


def test_top_p_judges_the_models_probabilities_not_the_tempered_ones():
    # 0.5 + 0.3 reaches 0.75: two tokens (tempered at 0.25, the first alone would reach it)
    assert draws(temperature=0.25, top_p=0.75) == {0, 1}


def test_top_k_then_temperature():
    assert draws(temperature=5.0, top_k=3) == {0, 1, 2}


def test_the_free_path_never_emits_a_banned_token_and_a_seed_reproduces_it():
    banned = NONE_BANNED.copy()
    banned[0] = True
    first = Sampler(SamplingConfig(temperature=1.0, seed=9), banned)
    again = Sampler(SamplingConfig(temperature=1.0, seed=9), banned, np.flatnonzero(~banned))
    runs = [[s.choose(PROBS, [1, 2]) for _ in range(50)] for s in (first, again)]
    assert runs[0] == runs[1] and 0 not in runs[0]


def test_log_sum_exp_of_nothing_known_is_minus_infinity_without_a_warning():
    import warnings

    from engine.core.sampler import log_sum_exp

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp(-inf - -inf) would be nan, with a RuntimeWarning
        assert log_sum_exp(np.full(4, -np.inf)) == -np.inf
        assert log_sum_exp(np.array([])) == -np.inf
    assert abs(log_sum_exp(np.array([0.0, 0.0])) - np.log(2)) < 1e-12
