"""Sources compared beside the tuner's own: unique names, faults remembered (a permanent one drops the source)."""

from __future__ import annotations

from actuators.power.source import EnergyReading, SourceInfo
from actuators.power.window import CompareSources
from core.errors import HostError


class Source:
    def __init__(self, name, fail=None):
        self.info = SourceInfo(name, ("platform",), 1.0, 1.0, "W")
        self.poll_interval_s = 0.5
        self.fail = fail

    def begin(self):
        pass

    def poll(self):
        pass

    def end(self):
        if self.fail:
            raise self.fail
        return EnergyReading(1.0, 100.0, {"platform": 100.0}, 2)


def test_names_are_unique_and_a_failing_source_never_fails_the_window():
    compare = CompareSources([Source("ipmi"), Source("ipmi", HostError("timeout")), Source("redfish")])
    compare.begin()
    compare.poll()
    out = compare.end()
    assert set(out) == {"ipmi", "redfish"} and out["ipmi"].energy_j == 100.0
    assert compare.problems == {"ipmi-2": "timeout"}


def test_a_permanent_fault_drops_the_source_once():
    bad = Source("ipmi", HostError("refused", permanent=True))
    compare = CompareSources([bad])
    assert compare.end() == {} and compare.problems == {"ipmi": "refused (dropped)"}
    bad.fail = None
    assert compare.end() == {}  # dropped: not read again
