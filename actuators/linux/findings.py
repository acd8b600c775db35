"""What `tuner doctor`'s checks return: one `Finding` per check (ok | warn | fail | info) and the `Report`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"


@dataclass(frozen=True)
class Finding:
    """One check: `status` ok | warn | fail | info, what was seen, and how to fix it."""

    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    can_tune: bool
    missing: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "can_tune": self.can_tune,
            "missing": list(self.missing),
            "findings": [asdict(f) for f in self.findings],
        }
