"""Prometheus metrics of the daemon, in base units (seconds, hertz, watts, joules), on its own registry."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from actuators.host import PERCENTILES, Measurement, OperatingPoint

#: Reasons a retune starts (label values of `tuner_retunes_total`).
RETUNE_REASONS = ("startup", "resume", "schedule", "load", "rpc", "policy", "config")
TRIAL_STATUSES = ("completed", "failed", "abandoned")
LOOP_STATES = ("starting", "retuning", "holding", "observing", "degraded", "stopping")
#: What the daemon does (`[host] mode`, `dry_run`).
MODES = ("tune", "observe", "dry_run")
#: Where a host warning comes from (label values of `tuner_host_warnings`).
WARNING_SOURCES = ("latency", "energy", "dvfs", "startup", "fault")
#: The `source` label of energy from a host that does not name its source (the simulator models RAPL counters).
DEFAULT_SOURCE = "rapl"


def _percentile_label(pct: float) -> str:
    return f"{pct:g}"


class OptionalGauge:
    """An unlabelled gauge that exports no sample while its value is unknown (`set(None)`): a host without
    RAPL has no power, and a dry run holds no point -- absent, never a made-up 0 or a NaN."""

    def __init__(self, name: str, documentation: str, registry: Any) -> None:
        self.name, self.documentation = name, documentation
        self.value: float | None = None
        registry.register(self)

    def set(self, value: float | None) -> None:
        self.value = None if value is None or value != value else float(value)  # NaN is unknown too

    def describe(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        return [GaugeMetricFamily(self.name, self.documentation)]

    def collect(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        fam = GaugeMetricFamily(self.name, self.documentation)
        if self.value is not None:
            fam.add_metric([], self.value)
        return [fam]


@dataclass(frozen=True)
class MetricSpec:
    """One metric of `DaemonMetrics`: its attribute, kind, name, help text, labels and kind-specific options."""

    attr: str
    kind: str  # optional (`OptionalGauge`), gauge, counter, histogram, enum
    name: str
    doc: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    states: tuple[str, ...] = ()

    def build(self, registry: Any) -> Any:
        from prometheus_client import Counter, Enum, Gauge, Histogram

        if self.kind == "optional":
            return OptionalGauge(self.name, self.doc, registry)
        if self.kind == "histogram":
            return Histogram(self.name, self.doc, buckets=self.buckets, registry=registry)
        if self.kind == "enum":
            return Enum(self.name, self.doc, states=list(self.states), registry=registry)
        kind = {"gauge": Gauge, "counter": Counter}[self.kind]
        return kind(self.name, self.doc, list(self.labels), registry=registry)


#: The daemon's metrics, in base units.
METRICS = (
    MetricSpec(
        "itr",
        "optional",
        "tuner_itr_seconds",
        "NIC interrupt throttling interval the tuner applied (absent while the OS's own policy is in charge).",
    ),
    MetricSpec(
        "freq",
        "optional",
        "tuner_cpu_frequency_hertz",
        "CPU frequency the tuner pinned (absent while the OS governor is in charge).",
    ),
    MetricSpec("offered", "gauge", "tuner_offered_requests_per_second", "Offered load measured in the last window."),
    MetricSpec("achieved", "gauge", "tuner_achieved_requests_per_second", "Load served in the last window."),
    MetricSpec(
        "latency",
        "gauge",
        "tuner_latency_seconds",
        "Request latency at each percentile (label, in %) measured in the last window.",
        ("percentile",),
    ),
    MetricSpec("sla", "gauge", "tuner_sla_seconds", "Latency SLA of the current policy (at its percentile)."),
    MetricSpec(
        "power",
        "optional",
        "tuner_power_watts",
        "Mean package power over the last window (absent when not measurable).",
    ),
    MetricSpec(
        "energy",
        "counter",
        "tuner_energy_joules",
        "Energy measured by the tuner's windows, by zone (package-0, dram, psys, platform) and source (rapl, ipmi, "
        "...; sources compared beside the tuner's own are counted too: sum over one source).",
        ("zone", "source"),
    ),
    MetricSpec(
        "source_power",
        "gauge",
        "tuner_energy_source_watts",
        "Mean power over the last window by energy source (the tuner's own and those compared beside it).",
        ("source",),
    ),
    MetricSpec("trials", "counter", "tuner_trials", "Optimisation trials by outcome.", ("status",)),
    MetricSpec("retunes", "counter", "tuner_retunes", "Retunes started, by reason.", ("reason",)),
    MetricSpec(
        "violations",
        "counter",
        "tuner_sla_violations",
        "Holding windows whose latency exceeded the SLA (trials explore and are not counted), by load: "
        "steady (inside the band the held point was tuned for) or shifted (the load had left it).",
        ("load",),
    ),
    MetricSpec(
        "reverts",
        "counter",
        "tuner_guardrail_reverts",
        "Reverts to a known-good point after the SLA plus margin was exceeded.",
    ),
    MetricSpec(
        "optimizer_seconds",
        "histogram",
        "tuner_optimizer_seconds",
        "Time spent in the optimiser (suggest, complete, best).",
        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    ),
    MetricSpec(
        "trial_seconds",
        "histogram",
        "tuner_trial_seconds",
        "Wall-clock duration of one trial (apply, settle, measure).",
        buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
    ),
    MetricSpec("state", "enum", "tuner_loop_state", "State of the control loop.", states=LOOP_STATES),
    MetricSpec("last_retune", "gauge", "tuner_last_retune_timestamp_seconds", "Unix time of the last retune decision."),
    MetricSpec(
        "mode",
        "enum",
        "tuner_mode",
        "What the daemon does: tune, observe (measure only, write nothing) or dry_run (tune, write nothing).",
        states=MODES,
    ),
    MetricSpec(
        "warnings",
        "gauge",
        "tuner_host_warnings",
        "Active warnings about what the host can measure or set, by source (see GetStatus / the log).",
        ("source",),
    ),
    MetricSpec(
        "baseline_power",
        "gauge",
        "tuner_baseline_power_watts",
        "Mean package power under the OS's own policy, by load band (requests/s, lower-upper).",
        ("band",),
    ),
    MetricSpec(
        "baseline_latency",
        "gauge",
        "tuner_baseline_latency_seconds",
        "Mean latency at each percentile under the OS's own policy, by load band.",
        ("band", "percentile"),
    ),
    MetricSpec(
        "baseline_windows",
        "gauge",
        "tuner_baseline_windows",
        "Windows measured under the OS's own policy, by load band.",
        ("band",),
    ),
    MetricSpec(
        "saved",
        "optional",
        "tuner_energy_saved_ratio",
        "Energy saved against the OS's own policy at the same loads (1 - tuned / baseline power, load "
        "bands weighted by time tuned in them); absent until both are measured.",
    ),
    MetricSpec(
        "saved_lower",
        "optional",
        "tuner_energy_saved_ratio_lower",
        "Lower bound of the 95 % CI of tuner_energy_saved_ratio.",
    ),
    MetricSpec(
        "saved_upper",
        "optional",
        "tuner_energy_saved_ratio_upper",
        "Upper bound of the 95 % CI of tuner_energy_saved_ratio.",
    ),
    MetricSpec(
        "class_drift",
        "gauge",
        "tuner_class_drift",
        "1 when this host's trials disagree with its hardware class (drift test), else 0; "
        "a drifting host warm-starts from its own trials only.",
        ("hw_class",),
    ),
    MetricSpec(
        "class_drift_t",
        "gauge",
        "tuner_class_drift_statistic",
        "Largest |t| of the drift test on the class model's residuals (NaN: too few trials to test).",
        ("hw_class",),
    ),
    MetricSpec(
        "warm_start_trials",
        "gauge",
        "tuner_warm_start_trials",
        "Trials the last retune was seeded with, by source (own, class).",
        ("source",),
    ),
    MetricSpec(
        "degraded",
        "gauge",
        "tuner_degraded",
        "1 when tuning stopped on a permanent host fault (the OS's settings are back; the reason is in "
        "GetStatus warnings and the log), else 0.",
    ),
)


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
    source_power: Any
    trials: Any
    retunes: Any
    violations: Any
    reverts: Any
    optimizer_seconds: Any
    trial_seconds: Any
    state: Any
    last_retune: Any
    mode: Any
    warnings: Any
    baseline_power: Any
    baseline_latency: Any
    baseline_windows: Any
    saved: Any
    saved_lower: Any
    saved_upper: Any
    class_drift: Any = None
    class_drift_t: Any = None
    warm_start_trials: Any = None
    degraded: Any = None

    @classmethod
    def create(cls, version: str, host: str, mode: str = "tune") -> DaemonMetrics:
        """Every metric of `METRICS` on a new registry, the label values known up front exported at 0."""
        from prometheus_client import CollectorRegistry, Info

        r = CollectorRegistry(auto_describe=True)
        info = Info("tuner_build", "Build of the tuner daemon.", registry=r)
        info.info({"version": version, "python": platform.python_version(), "host": host})
        m = cls(registry=r, **{spec.attr: spec.build(r) for spec in METRICS})
        m.mode.state(mode)
        for source in WARNING_SOURCES:
            m.warnings.labels(source=source).set(0)
        for reason in RETUNE_REASONS:
            m.retunes.labels(reason=reason)
        for status in TRIAL_STATUSES:
            m.trials.labels(status=status)
        for load in ("steady", "shifted"):
            m.violations.labels(load=load)
        return m

    def restore_counters(self, counters: dict[str, int]) -> None:
        """Continue the counters of an earlier run from the state's totals (`DaemonState.counters`)."""
        shifted = int(counters.get("sla_violations:shifted", 0))
        for name, n in counters.items():
            if name == "sla_violations":  # the total; those outside the tuned band are restored by their own key
                self.violations.labels(load="steady").inc(max(0, n - shifted))
            elif name == "sla_violations:shifted":
                self.violations.labels(load="shifted").inc(n)
            elif name == "guardrail_reverts":
                self.reverts.inc(n)
            elif name.startswith("retunes:"):
                self.retunes.labels(reason=name.split(":", 1)[1]).inc(n)
            elif name.startswith("trials:"):
                self.trials.labels(status=name.split(":", 1)[1]).inc(n)

    def set_point(self, point: OperatingPoint | None) -> None:
        self.itr.set(point.itr_us * 1e-6 if point else None)
        self.freq.set(point.dvfs_ghz * 1e9 if point else None)

    def set_warnings(self, by_source: dict[str, int]) -> None:
        for source in WARNING_SOURCES:
            self.warnings.labels(source=source).set(by_source.get(source, 0))

    def set_baseline(self, band: str, power_w: float | None, latency_us: dict[float, float], windows: int) -> None:
        """One load band of the OS-policy baseline; power only when measured."""
        if power_w is not None:  # a host without energy never gets a power sample for the band
            self.baseline_power.labels(band=band).set(power_w)
        for pct, us in latency_us.items():
            self.baseline_latency.labels(band=band, percentile=_percentile_label(pct)).set(us * 1e-6)
        self.baseline_windows.labels(band=band).set(windows)

    def set_savings(self, ratio: float | None, lower: float | None, upper: float | None) -> None:
        self.saved.set(ratio)
        self.saved_lower.set(lower)
        self.saved_upper.set(upper)

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
        self.power.set(m.power_or_none)
        self.observe_compared(m)
        if not m.energy_known:
            return  # energy unknown: the counter does not move (and is not invented)
        zones = m.energy_by_zone_j or {"package": m.energy_j}
        self._count_energy(m.energy_source or DEFAULT_SOURCE, zones, m.energy_j, m.seconds)

    def observe_compared(self, m: Measurement) -> None:
        """The sources compared beside the tuner's own (counted even when the tuner's own energy is unknown)."""
        for source, total in m.energy_compare_j.items():
            self._count_energy(source, m.energy_compare_by_zone_j.get(source, {}), total, m.seconds)

    def _count_energy(self, source: str, zones: dict[str, float], total_j: float, seconds: float) -> None:
        """Each zone's joules into the counter; the source's total (RAPL: the packages) over the window as watts."""
        for zone, joules in zones.items():
            if joules > 0:
                self.energy.labels(zone=zone, source=source).inc(joules)
        if seconds > 0:
            self.source_power.labels(source=source).set(total_j / seconds)


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
