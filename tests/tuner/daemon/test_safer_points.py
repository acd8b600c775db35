"""The safety partial order of operating points, guardrail reverts and the idle point."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actuators.host import KnobSpace, OperatingPoint
from tuner.daemon.safer_points import at_least_as_safe, idle_point, safe_corner, safe_revert

SPACE = KnobSpace.ixgbe((1.2, 2.0, 2.9))
points = st.builds(OperatingPoint, st.sampled_from(SPACE.itr_us), st.sampled_from(SPACE.dvfs_ghz))


@given(points, points, points)
def test_partial_order_axioms(a, b, c):
    assert at_least_as_safe(a, a)  # reflexive
    if at_least_as_safe(a, b) and at_least_as_safe(b, a):
        assert a == b  # antisymmetric
    if at_least_as_safe(a, b) and at_least_as_safe(b, c):
        assert at_least_as_safe(a, c)  # transitive
    assert at_least_as_safe(safe_corner(SPACE), a)  # the corner is the top


def test_incomparable_points():
    lower_itr_slower = OperatingPoint(2, 2.0)
    higher_itr_faster = OperatingPoint(514, 2.9)
    assert not at_least_as_safe(lower_itr_slower, higher_itr_faster)
    assert not at_least_as_safe(higher_itr_faster, lower_itr_slower)


@given(points, st.lists(points, max_size=6))
def test_revert_never_goes_less_safe(current, candidates):
    chosen = safe_revert(current, candidates, SPACE)
    assert at_least_as_safe(chosen, current)


def test_revert_from_the_safe_corner_stays_there():
    corner = safe_corner(SPACE)
    assert safe_revert(corner, [OperatingPoint(514, 2.0), OperatingPoint(2, 2.0)], SPACE) == corner


def test_idle_point_is_low_power_with_low_itr():
    assert idle_point(SPACE) == OperatingPoint(2, 1.2)
    assert idle_point(SPACE, 10) == OperatingPoint(10, 1.2)
