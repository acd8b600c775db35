"""`tuner replay`'s tuner settings from its flags: the defaults, then the preset, then every flag given."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from core.errors import TunerError
from tuner.optimize.latscale import KINDS as LATENCY_METRICS  # `latency_metric` values

if TYPE_CHECKING:
    from tuner.optimize.settings import TunerSettings


def parse_number(
    text: str, flag: str, *, integer: bool = False, minimum: float | None = None, strict: bool = True
) -> float:
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise TunerError(f"{flag} {text!r}: expected {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise TunerError(f"{flag} {text!r}: expected a number {'>' if strict else '>='} {minimum:g}")
    return value


#: `--window-mode` values (TunerSettings.window_mode).
WINDOW_MODES = ("fixed", "adaptive")


def tuner_settings(args: argparse.Namespace) -> TunerSettings:
    """TunerSettings from the flags: defaults, then the `--tuner` preset, then every flag given explicitly."""
    from tuner.optimize.settings import TunerSettings
    from tuner.replay.run import TUNER_PRESETS, preset_settings

    base: dict[str, Any] = {
        "sobol_trials": int(parse_number(args.sobol_trials, "--sobol-trials", integer=True, minimum=1, strict=False)),
        "settle_s": parse_number(args.settle, "--settle", minimum=0, strict=False),
        "window_s": parse_number(args.window, "--window", minimum=0),
        "seed": args.seed,
    }
    explicit: dict[str, Any] = {}
    if args.itr_resolution is not None:
        explicit["itr_resolution_us"] = int(
            parse_number(args.itr_resolution, "--itr-resolution", integer=True, minimum=1, strict=False)
        )
    if args.trials is not None:
        explicit["trials"] = int(parse_number(args.trials, "--trials", integer=True, minimum=1, strict=False))
    if args.context is not None:
        explicit["context"] = bool(args.context)
    if args.context_max_qps is not None:
        explicit["context_max_qps"] = parse_number(args.context_max_qps, "--context-max-qps", minimum=0)
    if args.history_max_trials is not None:
        explicit["history_max_trials"] = int(
            parse_number(args.history_max_trials, "--history-max-trials", integer=True, minimum=1, strict=False)
        )
    if args.min_trials is not None:
        explicit["min_trials"] = int(
            parse_number(args.min_trials, "--min-trials", integer=True, minimum=1, strict=False)
        )
    if args.stop_ei_pct is not None:
        explicit["stop_ei_pct"] = parse_number(args.stop_ei_pct, "--stop-ei-pct", minimum=0, strict=False)
    for field, flag, lo, hi, closed, what in (  # bounded safety settings: [lo, hi) or [lo, hi]
        ("safe_delta", "--safe-delta", 0.0, 1.0, False, "a probability in [0, 1) (0 = off)"),
        ("safe_radius", "--safe-radius", 0.0, 2.0, True, "a normalised knob distance in [0, 2] (0 = off)"),
        ("safe_model_error", "--safe-model-error", 0.0, 1.0, True, "an SD of ln latency in [0, 1] (0 = off)"),
        ("safe_sd_scale", "--safe-sd-scale", 1.0, 10.0, True, "a factor in [1, 10]"),
        ("hold_max_p", "--hold-max-p", 0.0, 0.5, True, "a probability in [0, 0.5] (0 = off)"),
    ):
        text = getattr(args, field)
        if text is None:
            continue
        value = parse_number(text, flag, minimum=lo, strict=False)
        if value > hi or (value == hi and not closed):
            raise TunerError(f"{flag} {text!r}: expected {what}")
        explicit[field] = value
    if args.latency_metric is not None:
        if args.latency_metric not in LATENCY_METRICS:
            raise TunerError(f"--latency-metric {args.latency_metric!r}: expected one of {', '.join(LATENCY_METRICS)}")
        explicit["latency_metric"] = args.latency_metric
    if args.window_mode is not None:
        if args.window_mode not in WINDOW_MODES:
            raise TunerError(f"--window-mode {args.window_mode!r}: expected one of {', '.join(WINDOW_MODES)}")
        explicit["window_mode"] = args.window_mode
    if args.window_guard is not None:
        explicit["window_guard"] = bool(args.window_guard)
    if args.window_ci_pct is not None:
        explicit["window_ci_pct"] = parse_number(args.window_ci_pct, "--window-ci-pct", minimum=0)
    if args.window_min_s is not None:
        explicit["window_min_s"] = parse_number(args.window_min_s, "--window-min-s", minimum=0)
    if args.preset is not None and args.preset not in TUNER_PRESETS:
        raise TunerError(f"--preset {args.preset!r}: expected one of {', '.join(TUNER_PRESETS)}")
    try:
        if args.preset is not None:  # always, from the command line (default DEFAULT_PRESET)
            return preset_settings(args.preset, TunerSettings(**base), **explicit)
        return TunerSettings(**{**base, **explicit})
    except TypeError as exc:  # a flag for a TunerSettings field this build does not have
        raise TunerError(f"tuner settings: {exc}") from None
