"""The scale on which the optimiser's GP models tail latency (pure math: no Ax, no torch).

A GP with a stationary kernel fits best an outcome that changes at about the same rate everywhere. Tail
latency does not: it rises slowly with ITR and load over most of the knob space and then climbs without
bound as the cores saturate. Two scales, `TunerSettings.latency_metric`:

* `"log"`: the Ax metric `log_latency` = ln(percentile µs), constrained by ln(SLA). Spans the orders of
  magnitude of an overloaded point, but a saturated window (10^2-10^4 x the SLA) must still be capped
  (`LOG_CAP_X` x SLA) or it bends the fit far around it, and the climb to the cap stays steep: next to a
  point measured safely, a GP on ln latency keeps predicting "safe" one frequency step into saturation.
* `"headroom"`: the Ax metric `latency_headroom` = SLA / percentile, constrained by >= 1. For a queue, the
  response time's tail is ~ c / (mu - lambda) (M/M/1: p99 = ln(100) / (mu - lambda); the dissertation's
  ch. 6 model has the same pole), so its reciprocal is ~ linear in the service rate (the core frequency) and
  the load, and goes to 0 -- not to infinity -- at saturation: the cliff becomes a straight line through
  the SLA and an overloaded window is an honest value near 0, no cap needed.

Both map the window's CI to a metric SEM by the delta method, and give the probability that the
percentile is over a limit from the GP's Gaussian predictive on their scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import TunerError

if TYPE_CHECKING:
    import numpy as np

KINDS = ("log", "headroom")  # imported by the config and the CLI: this module imports numpy only when used
#: "log": the percentile goes to Ax as ln(min(value, LOG_CAP_X x SLA)), SEM LOG_CAP_SEM when capped: beyond a few
#: times the SLA a point is simply infeasible, and a saturated window left as it is pulls the fit far off.
LOG_CAP_X = 4.0
LOG_CAP_SEM = 0.05
#: "headroom": a predicted (or measured) headroom at or below this is read as SLA / HEADROOM_FLOOR µs: saturated,
#: and a finite number for the tables and APIs that carry predictions.
HEADROOM_FLOOR = 1e-3
_SD_FLOOR = 1e-12


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    import numpy as np
    from scipy.special import ndtr

    return np.asarray(ndtr(z))


@dataclass(frozen=True)
class LatencyScale:
    """How the percentile (µs) of one objective with SLA `sla_us` goes to and comes back from the GP."""

    kind: str
    sla_us: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TunerError(f"latency_metric {self.kind!r}: expected one of {', '.join(KINDS)}")
        if not (isinstance(self.sla_us, int | float) and math.isfinite(self.sla_us) and self.sla_us > 0):
            raise TunerError(f"SLA must be a positive number of µs, got {self.sla_us!r}")

    @property
    def metric(self) -> str:
        """The Ax metric's name."""
        return "log_latency" if self.kind == "log" else "latency_headroom"

    def constraint(self) -> str:
        """Ax's outcome constraint for `percentile <= SLA` on this scale."""
        if self.kind == "log":
            return f"log_latency <= {math.log(self.sla_us)!r}"
        return "latency_headroom >= 1.0"

    def value(self, p_us: float, sem_us: float | None) -> float | tuple[float, float]:
        """The metric for a measured percentile `p_us` (> 0) with standard error `sem_us` (None: unknown, a
        bare mean); delta-method SEM."""
        if self.kind == "log":
            cap = LOG_CAP_X * self.sla_us
            if p_us > cap:
                return math.log(cap), LOG_CAP_SEM
            return math.log(p_us) if sem_us is None else (math.log(p_us), sem_us / p_us)
        h = self.sla_us / p_us
        return h if sem_us is None else (h, h * sem_us / p_us)

    def to_us(self, metric_value: float) -> float:
        """The percentile (µs) a metric value stands for (headroom floored at `HEADROOM_FLOOR`)."""
        if self.kind == "log":
            return math.exp(metric_value)
        return self.sla_us / max(metric_value, HEADROOM_FLOOR)

    def prob_over(
        self,
        mu: np.ndarray | Sequence[float],
        sd: np.ndarray | Sequence[float],
        limit_us: float,
        extra_log_sd: float = 0.0,
    ) -> np.ndarray:
        """P(percentile > `limit_us`) for a Gaussian predictive N(mu, sd^2) of the metric; sd 0 gives a 0/1
        step; a non-finite mean counts as over. `extra_log_sd` (an SD of ln latency, the model-error allowance
        `safe_model_error`) is added in quadrature, mapped to this scale at the mean (x metric for headroom)."""
        import numpy as np

        m = np.asarray(mu, dtype=float)
        s = np.nan_to_num(np.asarray(sd, dtype=float), nan=0.0)
        if self.kind == "log":  # percentile > limit  <=>  ln percentile > ln limit
            over = m - math.log(limit_us)
            extra = extra_log_sd
        else:  # percentile > limit  <=>  headroom < SLA / limit
            over = self.sla_us / limit_us - m
            extra = extra_log_sd * np.abs(np.nan_to_num(m))
        s = np.sqrt(s * s + extra * extra)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = over / np.maximum(s, _SD_FLOOR)
        out = np.where(s > _SD_FLOOR, _norm_cdf(z), (over >= 0).astype(float))
        return np.where(np.isfinite(m), out, 1.0)

    def latency_mean_sd(self, mu: float, sd: float) -> tuple[float, float]:
        """The percentile's point prediction and SD (µs) from the metric's Gaussian predictive (delta method)."""
        if self.kind == "log":
            lat = math.exp(mu)
            return lat, lat * sd
        h = max(mu, HEADROOM_FLOOR) if math.isfinite(mu) else HEADROOM_FLOOR
        lat = self.sla_us / h
        return lat, lat * sd / h
