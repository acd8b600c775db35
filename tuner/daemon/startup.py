"""Start-up checks: the whole configuration against this machine, before the daemon serves anything.

The same checks back `tuner doctor --config FILE`. `[host.options]` is checked against the host factory's
signature, then the host is built -- a real host tries every part (NIC coalescing and driver profile, DVFS
backend and cores, RAPL, the QPS source, the latency source) and names every one that cannot work -- and the
knob space must leave something inside `[knobs]`. Every problem goes into one `StartupError` (exit status
`core.errors.EXIT_CONFIG`, which the systemd unit does not restart on): nothing is retried in a loop.

Observe mode needs only the sensors (QPS, latency; energy if there is any); tuning needs every part.
"""

from __future__ import annotations

from typing import Any

from actuators.abilities import Closable
from actuators.host import Host
from core.errors import StartupError, TunerError

MODES = ("tune", "observe")
#: What observe mode builds of a host whose factory takes `parts` (the real host): sensors only, energy optional.
OBSERVE_PARTS = {"parts": ("energy", "qps", "latency"), "optional": ("energy",)}


def host_options(spec: str, options: dict[str, Any], mode: str, *, dry_run: bool = False) -> dict[str, Any]:
    """`[host.options]` plus what the mode sets: observe builds no knobs on a factory that can leave them out;
    `dry_run` forces the factory's dry run (doctor: nothing can be written)."""
    from tuner.hosts import factory_options

    names, _, var_kw = factory_options(spec)
    out = dict(options)
    if mode == "observe" and all(k in names for k in OBSERVE_PARTS):
        out.update(OBSERVE_PARTS)
    if dry_run and ("dry_run" in names or var_kw):
        out["dry_run"] = True
    return out


def is_dry_run(options: dict[str, Any]) -> bool:
    return bool(options.get("dry_run"))


def build_host(config: Any, *, dry_run: bool = False) -> Host:
    """The configured host, built after checking its options; a `StartupError` listing every problem."""
    from tuner.daemon.plain import bounded_space
    from tuner.hosts import check_options, make_host

    spec, options, mode = config.host.spec, dict(config.host.options), getattr(config.host, "mode", "tune")
    problems = check_options(spec, options)
    if problems:
        raise StartupError(problems)
    try:
        host = make_host(spec, **host_options(spec, options, mode, dry_run=dry_run))
    except TunerError as exc:
        raise StartupError(getattr(exc, "problems", None) or [str(exc)]) from None
    if mode != "observe":
        try:
            bounded_space(host.knobs(), config.knobs)
        except TunerError as exc:
            _close(host)
            raise StartupError([str(exc)]) from None
    return host


def check_config(config: Any) -> list[str]:
    """Every problem the start-up checks find (doctor's `--config`); the host is built in dry run and closed."""
    try:
        host = build_host(config, dry_run=True)
    except StartupError as exc:
        return list(exc.problems)
    _close(host)
    return []


def _close(host: Any) -> None:
    if isinstance(host, Closable):
        host.close()
