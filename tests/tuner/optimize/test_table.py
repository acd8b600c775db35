"""The settings table (`tuner.optimize.table`): each row's checks and texts, `TunerSettings` built from the rows,
and the presets derived from them (`tuner.optimize.presets`)."""

from __future__ import annotations

import dataclasses

import pytest

from core.errors import TunerError
from tuner.optimize.presets import TUNER_PRESETS, WARM_ABLATIONS, WARM_ADDITIONS, cold_settings, preset_settings
from tuner.optimize.settings import TunerSettings
from tuner.optimize.table import TUNER_TABLE, Setting, by_name

#: `TunerSettings()` before the learning tuner became the default: the dissertation's tuner, field by field.
COLD = dict(
    trials=30, sobol_trials=8, settle_s=1.0, window_s=20.0, seed=0, itr_resolution_us=8, itr_resolution_sla_pct=0.0,
    torch_threads=1,
    sla_check="ci", sla_margin_pct=5.0, final_margin_pct=5.0, final_margin_ci=0.0, context=False,
    context_max_qps=1e6, history_max_trials=100, drift_h=0.0, expand_ei_pct=0.0, descend_pct=0.0, min_trials=2, stop_ei_pct=0.0, safe_delta=0.0,
    safe_limit_delta=0.05, safe_radius=0.2, safe_model_error=0.0, safe_sd_scale=1.0, latency_metric="log",
    window_mode="fixed", window_ci_pct=5.0,
    window_min_s=2.0, window_guard=True, settle_guard=True, step_down=True, refit_every=1, hyper_iters=0,
    peak_step=False, hold_max_p=0.0, acquisition="ax", refine_step=False, first_proven=False, proof_reset=False,
    estimate_guard=False, peak_first=False, break_step=False,
)  # fmt: skip
#: The old `warm` preset's fields over the old defaults: what `tuner replay` and the daemon ran.
WARM = {
    **COLD,
    **dict(
        context=True, stop_ei_pct=0.5, safe_delta=0.05, window_mode="adaptive", itr_resolution_us=16,
        itr_resolution_sla_pct=4.0, safe_sd_scale=2.0, peak_step=True, acquisition="cei", first_proven=True,
        proof_reset=True, descend_pct=10.0,
    ),
}  # fmt: skip


def test_the_defaults_are_the_learning_tuner_and_cold_is_the_dissertations() -> None:
    assert dataclasses.asdict(TunerSettings()) == WARM
    assert dataclasses.asdict(preset_settings("warm")) == WARM
    assert dataclasses.asdict(cold_settings()) == COLD
    assert dataclasses.asdict(preset_settings("cold")) == COLD
    # a preset means the same on any base: warm over cold is warm, cold over warm is cold
    assert dataclasses.asdict(preset_settings("warm", cold_settings(seed=3))) == {**WARM, "seed": 3}
    assert cold_settings(trials=5, safe_delta=0.05).safe_delta == 0.05


@pytest.mark.parametrize("name", sorted(WARM_ABLATIONS))
def test_each_ablation_is_warm_less_its_own_fields(name: str) -> None:
    s = dataclasses.asdict(preset_settings(name))
    changed = {k for k in s if s[k] != WARM[k]}
    assert changed == set(WARM_ABLATIONS[name]) and TUNER_PRESETS[name].keys() >= TUNER_PRESETS["warm"].keys()


@pytest.mark.parametrize("name", sorted(WARM_ADDITIONS))
def test_each_addition_is_warm_plus_its_own_fields(name: str) -> None:
    s = dataclasses.asdict(preset_settings(name))
    assert {k: v for k, v in s.items() if v != WARM[k]} == WARM_ADDITIONS[name]


def test_the_dataclass_is_the_table() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(TunerSettings)}
    assert fields == {row.name: row.kind.__name__ for row in TUNER_TABLE}
    assert {f.name: f.default for f in dataclasses.fields(TunerSettings)} == {r.name: r.default for r in TUNER_TABLE}


def test_every_row_refuses_a_wrong_type_and_an_out_of_bounds_value_in_one_line() -> None:
    for row in TUNER_TABLE:
        wrong = "x" if row.kind is not str else 3
        with pytest.raises(TunerError, match=rf"^{row.name}: expected ") as exc:
            cold_settings(**{row.name: wrong})
        assert "\n" not in str(exc.value)
        if row.high is not None:
            with pytest.raises(TunerError, match=rf"^{row.name}: expected {row.expected[:10]}"):
                TunerSettings(**{row.name: row.kind(row.high + 1)})


def test_texts_of_bounds_choices_and_flags() -> None:
    rows = by_name(TUNER_TABLE)
    assert rows["trials"].expected == "1..1000"
    assert rows["window_s"].expected == "0.001..3600 seconds"
    assert rows["window_mode"].expected == "one of 'fixed', 'adaptive'"
    assert rows["context_max_qps"].expected == "a value > 0"
    assert rows["safe_delta"].problem(1.0) == "expected a probability in [0, 1) (0 = off)"
    assert rows["safe_delta"].problem(0) is None and rows["trials"].problem(True) == "expected an integer"
    # 0 here would not turn the limit test off (1 does): it would refuse every point the model is not certain of
    assert rows["safe_limit_delta"].problem(0) == "expected a probability in (0, 1] (1 = P(SLA broken) alone gates)"
    assert rows["safe_limit_delta"].problem(1) is None
    assert rows["settle_s"].cli_flag == "--settle" and rows["itr_resolution_us"].cli_dest == "itr_resolution"
    assert rows["safe_delta"].from_flag("0.1", "--safe-delta") == 0.1
    with pytest.raises(TunerError, match=r"^--safe-delta '2': expected a probability in \[0, 1\)"):
        rows["safe_delta"].from_flag("2", "--safe-delta")
    with pytest.raises(TunerError, match=r"^--window-mode 'slow': expected one of 'fixed', 'adaptive'$"):
        rows["window_mode"].from_flag("slow", "--window-mode")
    with pytest.raises(TunerError, match=r"^--settle 'soon': expected a number$"):
        rows["settle_s"].from_flag("soon", "--settle")


def test_a_row_whose_default_breaks_its_own_bounds_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="default 5"):
        Setting("bad", int, 5, "a doc", low=0, high=1)
