"""Prometheus metrics of the daemon, in base units (seconds, hertz, watts, joules), on its own registry."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from actuators.host import PERCENTILES, Measurement, OperatingPoint

#: Reasons a retune starts (label values of `tuner_retunes_total`).
RETUNE_REASONS = ("startup", "resume", "schedule", "load", "rpc", "policy", "config")
TRIAL_STATUSES = ("completed", "failed", "abandoned")
LOOP_STATES = ("starting", "retuning", "holding", "stopping")


def _percentile_label(pct: float) -> str:
    return f"{pct:g}"


@dataclass
class DaemonMetrics:
    """All metric objects, registered on `registry` (never the global one)."""

    registry: Any
    itr: Any
    freq: Any
    offered: Any
    achieved: Any
    latency: Any
    sla: Any
    power: Any
    energy: Any
    trials: Any
    retunes: Any
    violations: Any
    reverts: Any
    optimizer_seconds: Any
    trial_seconds: Any
    state: Any
    last_retune: Any
    class_drift: Any = None
    class_drift_t: Any = None
    warm_start_trials: Any = None

    @classmethod
    def create(cls, version: str, host: str) -> DaemonMetrics:
        from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info

        r = CollectorRegistry(auto_describe=True)
        info = Info("tuner_build", "Build of the tuner daemon.", registry=r)
        info.info({"version": version, "python": platform.python_version(), "host": host})
        m = cls(
            registry=r,
            itr=Gauge("tuner_itr_seconds", "NIC interrupt throttling interval in force (0 = OS adaptive).", registry=r),
            freq=Gauge("tuner_cpu_frequency_hertz", "CPU frequency pinned by the tuner (0 = OS governor).", registry=r),
            offered=Gauge("tuner_offered_requests_per_second", "Offered load measured in the last window.", registry=r),
            achieved=Gauge("tuner_achieved_requests_per_second", "Load served in the last window.", registry=r),
            latency=Gauge(
                "tuner_latency_seconds",
                "Request latency at each percentile (label, in %) measured in the last window.",
                ["percentile"],
                registry=r,
            ),
            sla=Gauge("tuner_sla_seconds", "Latency SLA of the current policy (at its percentile).", registry=r),
            power=Gauge("tuner_power_watts", "Mean package power over the last window.", registry=r),
            energy=Counter(
                "tuner_energy_joules", "Energy measured by the tuner's windows, by RAPL zone.", ["zone"], registry=r
            ),
            trials=Counter("tuner_trials", "Optimisation trials by outcome.", ["status"], registry=r),
            retunes=Counter("tuner_retunes", "Retunes started, by reason.", ["reason"], registry=r),
            violations=Counter(
                "tuner_sla_violations",
                "Holding windows whose latency exceeded the SLA (trials explore and are not counted).",
                registry=r,
            ),
            reverts=Counter(
                "tuner_guardrail_reverts",
                "Reverts to a known-good point after the SLA plus margin was exceeded.",
                registry=r,
            ),
            optimizer_seconds=Histogram(
                "tuner_optimizer_seconds",
                "Time spent in the optimiser (suggest, complete, best).",
                buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
                registry=r,
            ),
            trial_seconds=Histogram(
                "tuner_trial_seconds",
                "Wall-clock duration of one trial (apply, settle, measure).",
                buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
                registry=r,
            ),
            state=Enum("tuner_loop_state", "State of the control loop.", states=list(LOOP_STATES), registry=r),
            last_retune=Gauge(
                "tuner_last_retune_timestamp_seconds", "Unix time of the last retune decision.", registry=r
            ),
            class_drift=Gauge(
                "tuner_class_drift",
                "1 when this host's trials disagree with its hardware class (drift test), else 0; "
                "a drifting host warm-starts from its own trials only.",
                ["hw_class"],
                registry=r,
            ),
            class_drift_t=Gauge(
                "tuner_class_drift_statistic",
                "Largest |t| of the drift test on the class model's residuals (NaN: too few trials to test).",
                ["hw_class"],
                registry=r,
            ),
            warm_start_trials=Gauge(
                "tuner_warm_start_trials",
                "Trials the last retune was seeded with, by source (own, class).",
                ["source"],
                registry=r,
            ),
        )
        for reason in RETUNE_REASONS:
            m.retunes.labels(reason=reason)
        for status in TRIAL_STATUSES:
            m.trials.labels(status=status)
        return m

    def set_point(self, point: OperatingPoint | None) -> None:
        self.itr.set(point.itr_us * 1e-6 if point else 0.0)
        self.freq.set(point.dvfs_ghz * 1e9 if point else 0.0)

    def set_class_drift(self, hw_class: str, drifting: bool, t: float | None, own: int, from_class: int) -> None:
        """Record the last warm start: the drift verdict for `hw_class` and the trials by source."""
        self.class_drift.labels(hw_class=hw_class).set(1.0 if drifting else 0.0)
        self.class_drift_t.labels(hw_class=hw_class).set(float("nan") if t is None else float(t))
        self.warm_start_trials.labels(source="own").set(own)
        self.warm_start_trials.labels(source="class").set(from_class)

    def set_sla(self, sla_us: float) -> None:
        self.sla.set(sla_us * 1e-6)

    def observe(self, m: Measurement) -> None:
        """Record one measurement window."""
        self.offered.set(m.offered_qps)
        self.achieved.set(m.achieved_qps)
        for pct in PERCENTILES:
            if pct in m.latency_us:
                self.latency.labels(percentile=_percentile_label(pct)).set(m.latency_us[pct] * 1e-6)
        self.power.set(m.power_w)
        zones = m.energy_by_zone_j or {"package": m.energy_j}
        for zone, joules in zones.items():
            if joules > 0:
                self.energy.labels(zone=zone).inc(joules)


def start_metrics_server(metrics: DaemonMetrics, address: str) -> tuple[Any, int]:
    """Serve `/metrics` on `HOST:PORT`; returns (server, bound port). Call `server.shutdown()` to stop."""
    from prometheus_client import start_http_server

    from core.errors import TunerError

    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=metrics.registry)
    except OSError as exc:
        raise TunerError(f"metrics.listen: cannot listen on {address!r}: {exc.strerror or exc}") from None
    return server, server.server_address[1]
