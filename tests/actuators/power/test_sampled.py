"""`SampledEnergyMeter`: a slowly updating power reader integrated into window joules (pure: a fake reader and
clock), its update count, and its faults (back-off, then permanent)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actuators.power.sampled import SampledEnergyMeter, count_updates, integrate_watts
from actuators.power.source import EnergySource, PowerSample, SourceInfo
from core.errors import HostError


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


class Reader:
    """Answers `values` in turn (watts, or joules with `counter`); an Exception in the list is raised."""

    def __init__(self, clock: Clock, values: list, counter: bool = False, period_s: float = 1.0) -> None:
        self.clock, self.values, self.counter, self.period_s = clock, list(values), counter, period_s
        self.reads = 0

    @property
    def info(self) -> SourceInfo:
        return SourceInfo("ipmi", ("platform",), self.period_s, 1.0, "J" if self.counter else "W")

    def read(self) -> PowerSample:
        self.reads += 1
        v = self.values.pop(0) if len(self.values) > 1 else self.values[0]
        if isinstance(v, Exception):
            raise v
        if self.counter:
            return PowerSample(self.clock(), joules=v)
        return PowerSample(self.clock(), watts=v)

    def close(self) -> None:
        pass


def run(meter: SampledEnergyMeter, clock: Clock, steps: int, dt: float = 0.5):
    meter.begin()
    for _ in range(steps):
        clock.t += dt
        meter.poll()
    clock.t += dt
    return meter.end()


def test_trapezoid_and_hold_of_a_step():
    samples = [(0.0, 100.0), (1.0, 100.0), (2.0, 200.0), (3.0, 200.0)]
    assert integrate_watts(samples, "hold") == pytest.approx(400.0)
    assert integrate_watts(samples, "trapezoid") == pytest.approx(450.0)  # the step spread over the second between
    with pytest.raises(ValueError):
        integrate_watts(samples, "simpson")


def test_updates_count_changes_and_a_repeat_after_a_whole_period():
    samples = [(0.0, 100.0), (0.5, 100.0), (1.0, 120.0), (1.5, 120.0), (2.5, 120.0), (2.6, 90.0)]
    assert count_updates(samples, period_s=1.0) == 3  # 120 at 1.0, the repeat at 2.5 (1.5 s later), 90
    assert count_updates(samples[:2], period_s=1.0) == 0


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 1000.0), st.integers(2, 40))
def test_a_constant_power_integrates_exactly(watts, steps):
    clock = Clock()
    reading = run(SampledEnergyMeter(Reader(clock, [watts]), clock=clock), clock, steps)
    assert reading.energy_j == pytest.approx(watts * 0.5 * (steps + 1))
    assert reading.by_zone_j == {"platform": pytest.approx(reading.energy_j)}
    assert reading.seconds == pytest.approx(0.5 * (steps + 1))


def test_a_joules_counter_is_differenced_and_counts_its_updates():
    clock = Clock()
    meter = SampledEnergyMeter(Reader(clock, [1000.0, 1000.0, 1100.0, 1100.0, 1250.0], counter=True), clock=clock)
    assert isinstance(meter, EnergySource)
    reading = run(meter, clock, 3)
    assert reading.energy_j == pytest.approx(250.0) and reading.updates == 2


def test_a_counter_that_goes_backwards_is_not_integrated():
    clock = Clock()
    meter = SampledEnergyMeter(Reader(clock, [1000.0, 10.0, 20.0], counter=True), clock=clock)
    reading = run(meter, clock, 3)
    # 10 J over the 1.5 s since the reset, the window's first 0.5 s at that rate: never a negative window
    assert reading.energy_j == pytest.approx(10.0 / 1.5 * 2.0)


def test_a_failing_read_backs_off_and_the_window_goes_on():
    clock = Clock()
    reader = Reader(clock, [100.0, HostError("no answer"), HostError("no answer"), 100.0])
    meter = SampledEnergyMeter(reader, clock=clock)
    meter.begin()
    for _ in range(8):  # 4 s of polls every 0.5 s
        clock.t += 0.5
        meter.poll()
    reading = meter.end()
    assert reading.energy_j == pytest.approx(400.0)  # the gap is bridged
    assert reader.reads < 10  # backed off: 1 s, then 2 s between retries, not a read per poll
    assert meter.last_error == "no answer"


def test_a_window_without_two_readings_is_a_transient_fault():
    clock = Clock()
    meter = SampledEnergyMeter(Reader(clock, [HostError("no answer")]), clock=clock)
    with pytest.raises(HostError, match="no reading to integrate") as exc:
        run(meter, clock, 2)
    assert not exc.value.permanent


def test_failing_for_give_up_s_is_permanent_and_a_permanent_fault_at_once():
    clock = Clock()
    meter = SampledEnergyMeter(Reader(clock, [HostError("no answer")]), clock=clock, give_up_s=5.0)
    with pytest.raises(HostError, match="failed for") as exc:
        run(meter, clock, 30)
    assert exc.value.permanent
    meter = SampledEnergyMeter(Reader(clock, [HostError("bad password", permanent=True)]), clock=clock)
    with pytest.raises(HostError, match="bad password") as exc:
        meter.begin()
    assert exc.value.permanent


def test_poll_interval_is_half_the_update_period():
    clock = Clock()
    assert SampledEnergyMeter(Reader(clock, [1.0], period_s=2.0)).poll_interval_s == pytest.approx(1.0)
    with pytest.raises(HostError, match="method"):
        SampledEnergyMeter(Reader(clock, [1.0]), method="simpson")
