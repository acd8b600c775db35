"""The orderings that hold across plants, as pure functions: a point measured within the limit vouches for its
ITR at higher frequencies and lower loads; one measured over the SLA condemns its ITR at lower frequencies and
higher loads; neither reaches across ITRs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.optimize.monotone import known_safe, known_unsafe, step_path

EV = np.array([[0.5, 0.4]])  # one measured point: ITR 0.5, frequency 0.4 (normalised), load 0.5


def test_a_point_within_the_limit_vouches_for_its_itr_at_higher_frequencies_up_to_its_load() -> None:
    cand = np.array([[0.5, 0.4], [0.5, 0.9], [0.5, 0.3], [0.52, 0.9], [0.48, 0.4]])
    assert known_safe(cand, EV, [0.5], [True], 0.5).tolist() == [True, True, False, False, False]
    assert known_safe(cand, EV, [0.5], [True], 0.4).tolist() == [True, True, False, False, False]  # lower load
    assert not known_safe(cand, EV, [0.5], [True], 0.6).any()  # a higher load: nothing is proven
    assert not known_safe(cand, EV, [0.5], [False], 0.5).any()  # a point over the limit vouches for nothing
    assert known_safe(cand, EV, [0.5], [True], 0.51, load_tol=0.05)[1]  # within the load tolerance


def test_a_point_over_the_sla_condemns_its_itr_at_lower_frequencies_from_its_load_up() -> None:
    cand = np.array([[0.5, 0.4], [0.5, 0.1], [0.5, 0.5], [0.52, 0.1]])
    assert known_unsafe(cand, EV, [0.5], [True], 0.5).tolist() == [True, True, False, False]
    assert known_unsafe(cand, EV, [0.5], [True], 0.7).tolist() == [True, True, False, False]  # busier
    assert not known_unsafe(cand, EV, [0.5], [True], 0.4).any()  # a lower load may be within it
    assert not known_unsafe(cand, EV, [0.5], [False], 0.5).any()


def test_no_evidence_proves_nothing() -> None:
    cand = np.array([[0.1, 0.1], [0.9, 0.9]])
    empty = np.zeros((0, 2))
    assert not known_safe(cand, empty, [], [], 0.5).any()
    assert not known_unsafe(cand, empty, [], [], None).any()


def test_the_step_after_a_trial_over_the_sla_is_one_frequency_up_at_its_itr() -> None:
    assert step_path((7, 2), 6) == [(7, 3), (7, 4), (7, 5)]
    assert step_path((7, 2), 6, skip={(7, 3)}) == [(7, 4), (7, 5)]  # measured already: on up
    assert step_path((7, 5), 6) == []  # the highest frequency broke it: no step up


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0, 1),
    st.floats(0.05, 1),
    st.floats(0, 1),
    st.floats(0.05, 1),
    st.floats(0.01, 1),
    st.floats(0.01, 1),
)
def test_safe_and_unsafe_never_overlap_for_consistent_evidence(i, f_met, f_cand, df, load_met, load) -> None:
    # a point met the limit at (i, f_met, load_met) and another broke it at a lower frequency, same ITR, lower load:
    # consistent with the orderings, so no candidate can be proven both
    ev = np.array([[i, f_met], [i, f_met * (1 - df)]])
    cand = np.array([[i, f_cand]])
    safe = known_safe(cand, ev, [load_met, load_met * 0.5], [True, False], load)
    unsafe = known_unsafe(cand, ev, [load_met, load_met * 0.5], [False, True], load)
    assert not (safe & unsafe).any()
    if f_cand >= f_met and load <= load_met:
        assert safe[0]


FREQS = (1.2, 1.6, 2.0, 2.4, 2.9)


def test_step_down_walks_from_the_cheapest_base_one_frequency_step_at_a_time() -> None:
    from tuner.optimize.monotone import step_down

    met = [((3, 4), 90.0, 0.5), ((5, 4), 80.0, 0.6)]  # (cell, power, latency / limit)
    assert step_down(met, {(3, 4), (5, 4)}, FREQS, 1.0) == (5, 3)  # the cheaper base first
    # its lower neighbour measured within the limit is a base itself: the walk goes on from there
    met.append(((5, 3), 70.0, 0.6))
    assert step_down(met, {(3, 4), (5, 4), (5, 3)}, FREQS, 1.0) == (5, 2)
    # over the limit there: that ITR's walk ends, the next base's begins
    assert step_down(met, {(3, 4), (5, 4), (5, 3), (5, 2)}, FREQS, 1.0) == (3, 3)


def test_step_down_takes_no_step_the_frequency_ratio_says_would_cross_the_limit() -> None:
    from tuner.optimize.monotone import step_down

    # 0.8 x (2.9 / 2.4)^2 = 1.17 > 1: too close to the limit for a step; 0.6 x 1.46 = 0.88 is not
    assert step_down([((3, 4), 90.0, 0.8)], {(3, 4)}, FREQS, 1.0) is None
    assert step_down([((3, 4), 90.0, 0.8), ((7, 4), 95.0, 0.6)], {(3, 4), (7, 4)}, FREQS, 1.0) == (7, 3)
    assert step_down([((3, 0), 50.0, 0.1)], {(3, 0)}, FREQS, 1.0) is None  # already at the lowest frequency
    assert step_down([], set(), FREQS, 1.0) is None
