"""Per-cluster workload statistics of the Twitter cache trace (2020 Mar), parsed from its markdown table.

Source: <https://github.com/twitter/cache-trace> `stat/2020Mar.md` (Yang, Yue, Rashmi, OSDI 2020), CC-BY 4.0;
a copy ships as `traces/data/twitter-cache-trace-2020Mar-cluster-stats.md`. Every field is a per-cluster mean.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
from dataclasses import dataclass
from importlib import resources

from core.errors import InputError
from traces.format import OPS

STATS_FILE = "twitter-cache-trace-2020Mar-cluster-stats.md"
_MISSING = {"n/a", "na", ""}
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TTL_ITEM = re.compile(r"^([0-9]*\.?[0-9]+)([smhd]):([0-9]*\.?[0-9]+)$")
#: Table columns this module uses, by their header text.
COLUMNS = {
    "production miss ratio": "miss_ratio",
    "key size": "key_size",
    "value size": "value_size",
    "request rate (kqps)": "rate_kqps",
    "operation": "ops",
    "zipf alpha": "zipf_alpha",
    "common ttl": "ttls",
}


@dataclass(frozen=True)
class ClusterStats:
    cluster: int
    key_size: float  # mean key size, bytes
    value_size: float  # mean value size, bytes
    rate_kqps: float  # mean request rate, thousand requests/s
    ops: dict[str, float]  # operation -> share (normalised to sum 1)
    zipf_alpha: float  # key popularity skew (0 = uniform)
    ttls: tuple[tuple[float, float], ...]  # (TTL seconds, share) normalised to sum 1
    miss_ratio: float = 0.0  # production miss ratio: share of reads that miss (value size 0 in the trace)


def stats_path() -> pathlib.Path:
    return pathlib.Path(str(resources.files("traces") / "data" / STATS_FILE))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: expected a finite non-negative number, got {text!r}")
    return value


def _ratio(text: str, where: str) -> float:
    value = _number(text, where)
    if value > 1:
        raise InputError(f"{where}: expected a ratio in 0..1, got {text!r}")
    return value


def _ops(text: str, where: str) -> dict[str, float]:
    shares: dict[str, float] = {}
    for item in text.split():
        op, _, share = item.partition(":")
        if op not in OPS:
            raise InputError(f"{where}: unknown operation {op!r}; expected one of {', '.join(OPS)}")
        shares[op] = shares.get(op, 0.0) + _number(share, where)
    total = sum(shares.values())
    if not shares or total <= 0:
        raise InputError(f"{where}: expected 'op:share' items, got {text!r}")
    return {op: s / total for op, s in shares.items()}


def _ttls(text: str, where: str) -> tuple[tuple[float, float], ...]:
    items = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        m = _TTL_ITEM.match(item)
        if m is None:
            raise InputError(f"{where}: expected TTL items like '12h:0.5', got {item!r}")
        items.append((float(m.group(1)) * _UNIT_S[m.group(2)], float(m.group(3))))
    total = sum(s for _, s in items)
    if not items or total <= 0:
        raise InputError(f"{where}: expected TTL items like '12h:0.5', got {text!r}")
    return tuple((ttl, s / total) for ttl, s in items)


def load_table(path: str | os.PathLike[str] | None = None) -> dict[int, dict[str, str]]:
    """The raw cells of the columns in `COLUMNS`, by cluster number."""
    path = stats_path() if path is None else pathlib.Path(path)
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip().startswith("|")]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read cluster statistics: {exc}") from None
    if len(lines) < 3:
        raise InputError(f"{path}: expected a markdown table with a header, a separator and cluster rows")
    header = [h.lower() for h in _cells(lines[0])]
    cols = {}
    for name in ("cluster", *COLUMNS):
        found = [i for i, h in enumerate(header) if h == name or h.startswith(name)]
        if not found:
            raise InputError(f"{path}:1: expected a column {name!r} in the table header")
        cols[name] = found[0]
    table: dict[int, dict[str, str]] = {}
    for lineno, line in enumerate(lines[2:], start=3):
        cells = _cells(line)
        m = re.fullmatch(r"cluster\s*(\d+)", cells[cols["cluster"]] if cols["cluster"] < len(cells) else "")
        if m is None or len(cells) < len(header):
            raise InputError(f"{path}:{lineno}: expected a row 'clusterN | ...' with {len(header)} cells")
        table[int(m.group(1))] = {name: cells[i] for name, i in cols.items()}
    return table


def cluster_stats(cluster: int, path: str | os.PathLike[str] | None = None) -> ClusterStats:
    """The statistics of one cluster; `InputError` naming the cluster if it is absent or has N/A fields."""
    source = stats_path() if path is None else pathlib.Path(path)
    table = load_table(source)
    if cluster not in table:
        raise InputError(f"{source}: no cluster{cluster}; expected one of {min(table)}..{max(table)}")
    row = table[cluster]
    missing = [name for name in COLUMNS if row[name].lower() in _MISSING]
    reads = row["operation"].lower() not in _MISSING and any(
        item.partition(":")[0] in ("get", "gets") for item in row["operation"].split()
    )
    if "production miss ratio" in missing and not reads:
        missing.remove("production miss ratio")  # only reads can miss
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise InputError(
            f"cluster{cluster}: {', '.join(missing)} {verb} N/A in {source.name}; "
            "expected a cluster with complete statistics (e.g. 52, 18 or 25)"
        )
    where = f"{source.name}: cluster{cluster}"
    return ClusterStats(
        cluster=cluster,
        key_size=_number(row["key size"], f"{where}: key size"),
        value_size=_number(row["value size"], f"{where}: value size"),
        rate_kqps=_number(row["request rate (kqps)"], f"{where}: request rate"),
        ops=_ops(row["operation"], f"{where}: operation"),
        zipf_alpha=_number(row["zipf alpha"], f"{where}: Zipf alpha"),
        ttls=_ttls(row["common ttl"], f"{where}: common TTL"),
        miss_ratio=_ratio(row["production miss ratio"], f"{where}: production miss ratio") if reads else 0.0,
    )
