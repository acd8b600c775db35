"""Reusable test doubles for the `Host` protocol.

`FakeHost` is deterministic and in-memory: an analytic latency/power surface whose energy optimum under
a p99 SLA sits inside the ITR range (slow ITR batches interrupts and lets cores sleep deeper until the
added delay breaks the SLA; low frequency saves dynamic power but queues more). It records every call so tests can check order and
restoration. `FixedLoadHost` has no `LoadControl`; `FailingHost` raises on a chosen measurement.
Factories (`make_fake_host`, ...) can be named on the command line: `--host tests.fakes:make_fake_host`.
"""

from __future__ import annotations

import math
from typing import Any

from actuators.host import PERCENTILES, KnobSpace, LoadControl, Measurement, OperatingPoint
from core.errors import HostError

DVFS_GHZ = tuple(round(1.2 + 0.1 * i, 1) for i in range(18))  # 1.2 .. 2.9 GHz, like the E5-2690


class FixedLoadHost:
    """A `Host` (no `LoadControl`) with a closed-form latency and power model.

    Model, per core, at offered load `qps` spread over `cores`:
      service  = 2 + 8 * 2.9 / f  µs per request (frequency-scaled part plus a fixed memory-bound part)
      util     = qps/cores * service * 1e-6 + 0.5 / itr      (interrupt handling work grows with 1/ITR)
      latency  = itr * p/100 + service * (1 + ln(1/(1-p/100))) / (1 - util)   (µs), 1e7 if util >= 1
      power    = 10 + cores * (util * 0.6 * f^3 + (1 - util) * idle(itr))       (W)
      idle     = 0.3 + 1.7 * exp(-itr / 150)        (deeper C-states when interrupts are rarer)
    Overloaded points (util >= 1) serve only `cores / service` requests/s.
    """

    def __init__(
        self,
        qps: float = 100_000.0,
        cores: int = 4,
        seed: int | None = None,
        knobs: KnobSpace | None = None,
        name: str = "fake",
    ) -> None:
        self.name = name
        self.cores = cores
        self.seed = seed
        self._qps = float(qps)
        self._knobs = knobs or KnobSpace.ixgbe(DVFS_GHZ)
        self._itr: int | None = None
        self._dvfs: float | None = None
        self.calls: list[tuple[str, Any]] = []
        self.restore_count = 0
        self.measure_count = 0

    # -- Host
    def knobs(self) -> KnobSpace:
        return self._knobs

    def set_itr(self, itr_us: int) -> None:
        self._itr = self._knobs.check_itr(itr_us)
        self.calls.append(("set_itr", itr_us))

    def set_dvfs(self, ghz: float) -> None:
        self._dvfs = self._knobs.check_dvfs(ghz)
        self.calls.append(("set_dvfs", ghz))

    def point(self) -> OperatingPoint | None:
        if self._itr is None or self._dvfs is None:
            return None
        return OperatingPoint(self._itr, self._dvfs)

    def restore(self) -> None:
        self._itr = None
        self._dvfs = None
        self.restore_count += 1
        self.calls.append(("restore", None))

    def offered_qps(self) -> float:
        return self._qps

    def measure(self, seconds: float) -> Measurement:
        self.measure_count += 1
        self.calls.append(("measure", seconds))
        itr = self._itr if self._itr is not None else 50  # "OS policy": a mid ITR at top frequency
        f = self._dvfs if self._dvfs is not None else self._knobs.dvfs_ghz[-1]
        lat, util, achieved = self.model(itr, f, self._qps)
        ci = {p: (v * 0.98, v * 1.02) for p, v in lat.items()}
        power = 10.0 + self.cores * (min(util, 1.0) * 0.6 * f**3 + max(1.0 - util, 0.0) * self.idle_w(itr))
        return Measurement(
            seconds=seconds,
            offered_qps=self._qps,
            achieved_qps=achieved,
            requests=int(achieved * seconds),
            latency_us=lat,
            latency_ci_us=ci,
            energy_j=power * seconds,
            point=self.point(),
        )

    # -- model (static so tests can compute expectations)
    def model(self, itr: int, f: float, qps: float) -> tuple[dict[float, float], float, float]:
        service = 2.0 + 8.0 * 2.9 / f
        util = qps / self.cores * service * 1e-6 + 0.5 / itr
        if util >= 1.0:
            return {p: 1e7 for p in PERCENTILES}, util, self.cores / (service * 1e-6)
        lat = {p: itr * p / 100 + service * (1 + math.log(1 / (1 - p / 100))) / (1 - util) for p in PERCENTILES}
        return lat, util, qps

    @staticmethod
    def idle_w(itr: int) -> float:
        return 0.3 + 1.7 * math.exp(-itr / 150)


class FakeHost(FixedLoadHost, LoadControl):
    """`FixedLoadHost` plus `LoadControl`: the offered load can be set."""

    def set_offered_qps(self, qps: float) -> None:
        self._qps = float(qps)
        self.calls.append(("set_offered_qps", qps))


class FailingHost(FakeHost):
    """A `FakeHost` whose `fail_at`-th call to `measure` (1-based) raises `exc` (a `HostError` by default)."""

    def __init__(self, fail_at: int = 3, exc: BaseException | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.fail_at = fail_at
        self.exc = exc if exc is not None else HostError("fake host: measurement failed")

    def measure(self, seconds: float) -> Measurement:
        if self.measure_count + 1 == self.fail_at:
            self.measure_count += 1
            raise self.exc
        return super().measure(seconds)


#: The last host each factory built, so in-process CLI tests can inspect it after the run.
LAST: dict[str, FixedLoadHost] = {}


def make_fake_host(seed: int | None = None, cores: int = 4, qps: float = 100_000.0) -> FakeHost:
    host = FakeHost(qps=qps, cores=cores, seed=seed)
    LAST["fake"] = host
    return host


def make_fixed_load_host(seed: int | None = None, cores: int = 4, qps: float = 100_000.0) -> FixedLoadHost:
    host = FixedLoadHost(qps=qps, cores=cores, seed=seed)
    LAST["fixed"] = host
    return host


def make_failing_host(seed: int | None = None, fail_at: int = 3) -> FailingHost:
    host = FailingHost(fail_at=fail_at, seed=seed)
    LAST["failing"] = host
    return host


def make_interrupted_host(seed: int | None = None) -> FailingHost:
    """Raises KeyboardInterrupt (as Ctrl-C would) during the 3rd measurement."""
    host = FailingHost(fail_at=3, exc=KeyboardInterrupt(), seed=seed)
    LAST["interrupted"] = host
    return host


def make_small_host(seed: int | None = None) -> FakeHost:
    """Only ITR 100..500 µs in steps of 100 and 1.2/2.0/2.9 GHz: for tests of 'value the host lacks'."""
    host = FakeHost(seed=seed, knobs=KnobSpace((100, 200, 300, 400, 500), (1.2, 2.0, 2.9)))
    LAST["small"] = host
    return host


# -- things that are not hosts, for `make_host` error tests
NOT_CALLABLE = 42


def make_not_a_host(**_: Any) -> object:
    return object()


class _NoName:
    """Has every method but not the `name` attribute."""

    def knobs(self) -> KnobSpace:
        return KnobSpace((2,), (1.2,))

    def set_itr(self, itr_us: int) -> None: ...
    def set_dvfs(self, ghz: float) -> None: ...
    def point(self) -> None:
        return None

    def restore(self) -> None: ...
    def offered_qps(self) -> float:
        return 0.0

    def measure(self, seconds: float) -> Measurement:
        raise NotImplementedError


def make_nameless_host(**_: Any) -> _NoName:
    return _NoName()


def make_bad_factory(**_: Any) -> FakeHost:
    raise ValueError("no such device")


def make_broken_host(**_: Any) -> FakeHost:
    """Fails with a two-line message (the CLI must still print one line)."""
    raise RuntimeError("cannot open device\nsecond line")


class FlakyHost(FakeHost):
    """Every knob write fails until `heal()`."""

    def __init__(self) -> None:
        super().__init__(qps=50_000.0)
        self.broken = True

    def set_itr(self, itr_us: int) -> None:
        if self.broken:
            raise HostError("NIC eth1: EBUSY (transient)")
        super().set_itr(itr_us)
