"""The shared contract in actuators/host.py: knob validation, apply_point, unknown CIs, host loading."""

import sys

import pytest

from actuators.host import KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import KnobRangeError, TunerError
from tuner.hosts import make_host

SPACE = KnobSpace.ixgbe((1.2, 1.3, 2.9))


def _measurement(ci_known=True):
    return Measurement(
        seconds=2.0,
        offered_qps=10.0,
        achieved_qps=10.0,
        requests=20,
        latency_us={99.0: 100.0},
        latency_ci_us={99.0: (90.0, 129.2)},
        energy_j=100.0,
        point=None,
        ci_known=ci_known,
    )


def test_knob_space_refuses_out_of_range_and_odd_itr():
    assert SPACE.check_itr(1022) == 1022
    for bad in (0, 1, 3, 1024, True, 2.0):
        with pytest.raises(KnobRangeError, match="ITR"):
            SPACE.check_itr(bad)
    assert SPACE.check_dvfs(1.3000001) == 1.3
    with pytest.raises(KnobRangeError, match="expected one of 1.2, 1.3, 2.9"):
        SPACE.check_dvfs(2.0)


class _Recorder:
    def __init__(self, transactional):
        self.calls = []
        if transactional:
            self.apply = lambda itr_us, dvfs_ghz: self.calls.append(("apply", itr_us, dvfs_ghz))

    def knobs(self):
        return SPACE

    def set_itr(self, itr_us):
        self.calls.append(("itr", itr_us))

    def set_dvfs(self, ghz):
        self.calls.append(("dvfs", ghz))


def test_apply_point_uses_a_transactional_apply_when_the_host_has_one():
    host = _Recorder(transactional=True)
    apply_point(host, OperatingPoint(300, 1.3))
    assert host.calls == [("apply", 300, 1.3)]
    plain = _Recorder(transactional=False)
    apply_point(plain, OperatingPoint(300, 1.3))
    assert plain.calls == [("itr", 300), ("dvfs", 1.3)]


def test_apply_point_validates_before_any_call():
    host = _Recorder(transactional=True)
    with pytest.raises(KnobRangeError):
        apply_point(host, OperatingPoint(301, 1.3))
    assert host.calls == []


def test_percentile_sem_from_ci_and_unknown_ci():
    assert _measurement().percentile_sem(99) == pytest.approx(39.2 / 3.92)
    assert _measurement(ci_known=False).percentile_sem(99) is None
    assert _measurement().power_w == 50.0


def test_module_factory_found_in_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd_host_mod.py").write_text(
        "from tests.fakes import make_fake_host\n\ndef make(**kw):\n    return make_fake_host(**kw)\n"
    )
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    host = make_host("cwd_host_mod:make")
    assert host.knobs().itr_us[0] >= 0


def test_bad_spec_is_one_line():
    with pytest.raises(TunerError, match="expected 'sim', 'real' or 'module:factory'"):
        make_host("nonsense")


def test_measurement_dict_round_trip_keeps_everything():
    from actuators.host import Measurement as M

    m = M(
        seconds=20.0,
        offered_qps=4e5,
        achieved_qps=3.99e5,
        requests=123,
        latency_us={99.0: 480.5, 99.9: 700.0},
        latency_ci_us={99.0: (470.0, 490.0), 99.9: (650.0, 760.0)},
        energy_j=1200.0,
        point=OperatingPoint(300, 1.3),
        energy_by_zone_j={"package-0": 600.0},
        ci_known=False,
    )
    assert M.from_dict(m.to_dict()) == m
    as_list = {**m.to_dict(), "point": [300, 1.3]}
    assert M.from_dict(as_list).point == OperatingPoint(300, 1.3)


def test_optimizer_reports_unknown_latency_noise_as_a_bare_mean():
    from tuner.optimize.optimizer import Optimizer
    from tuner.optimize.presets import cold_settings
    from tuner.optimize.settings import Objective

    opt = Optimizer(SPACE, Objective(reward="sla-linear"), cold_settings(trials=2, sobol_trials=2))
    m = _measurement(ci_known=False)
    data = opt.metrics(m)
    assert isinstance(data["log_latency"], float) and isinstance(data["log_reward"], float)
    assert isinstance(data["power"], tuple)
    known = opt.metrics(_measurement(ci_known=True))
    assert isinstance(known["log_latency"], tuple) and known["log_latency"][1] > 0
    index, point = opt.suggest()
    record = opt.complete(index, m, qps=10.0)
    assert record.status == "completed" and record.measurement.ci_known is False
