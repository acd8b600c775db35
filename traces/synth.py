"""Synthetic Twitter-format cache traces: a diurnal request rate with per-cluster workload statistics.

Rate: the mean rate times a 24-hour shape (two harmonics: trough near 04:00, peak near 19:00, peak/trough about
2.8) times minute-scale log-normal AR(1) noise; per-second counts are Poisson. Requests pick keys from a fixed
population with Zipf(alpha) popularity, operations from the cluster's op mix; each key has a fixed key size,
value size (log-normal around the cluster means) and TTL (from the cluster's TTL mix). Write operations carry
the TTL, others 0; deletes, and reads that miss (at the cluster's production miss ratio), carry value size 0.
Keys are anonymised tokens with a namespace prefix, as in the public trace, and a few contain commas.
Everything is deterministic for a seed. The trace starts at 00:00 (t=0).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import math
import os
import pathlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.errors import InputError
from traces.clusters import ClusterStats
from traces.format import OP_INDEX, OPS, WRITE_OPS

DAY_S = 86400
#: Diurnal shape: 1 + A1 cos(2 pi (h - P1) / 24) + A2 cos(4 pi (h - P2) / 24), h in hours since midnight.
DIURNAL = (0.42, 17.5, 0.10, 21.0)
NOISE_SIGMA = 0.06  # log-scale std-dev of the per-minute rate noise
NOISE_RHO = 0.8  # minute-to-minute correlation of the noise
KEY_SIZE_SIGMA = 0.25  # log-normal spread of per-key key sizes
VALUE_SIZE_SIGMA = 0.8  # log-normal spread of per-key value sizes
COMMA_EVERY = 397  # key ranks r with r % COMMA_EVERY == 3 contain a comma (rank 3 is a popular key)
N_CLIENTS = 24
MAX_KEYS = 10_000_000  # key strings are held in memory (about 100 B each)


@dataclass(frozen=True)
class SynthResult:
    path: str
    rows: int
    seconds: int
    mean_qps: float


def diurnal_shape(hour_of_day: np.ndarray) -> np.ndarray:
    """Relative request rate at each hour of day (mean 1 over a day)."""
    a1, p1, a2, p2 = DIURNAL
    h = np.asarray(hour_of_day, dtype=np.float64)
    return 1 + a1 * np.cos(2 * np.pi * (h - p1) / 24) + a2 * np.cos(4 * np.pi * (h - p2) / 24)


def rate_series(seconds: int, mean_qps: float, rng: np.random.Generator) -> np.ndarray:
    """Expected requests in each second: the diurnal shape times per-minute AR(1) log-normal noise."""
    t = np.arange(seconds)
    minutes = -(-seconds // 60)
    eps = rng.standard_normal(minutes)
    x = np.empty(minutes)
    x[0] = eps[0] * NOISE_SIGMA
    scale = NOISE_SIGMA * np.sqrt(1 - NOISE_RHO**2)
    for m in range(1, minutes):
        x[m] = NOISE_RHO * x[m - 1] + scale * eps[m]
    noise = np.exp(x - NOISE_SIGMA**2 / 2)[t // 60]
    return mean_qps * diurnal_shape((t % DAY_S) / 3600.0) * noise


def _sizes(n: int, mean: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Per-key sizes, log-normal with the given log-scale spread, mean about `mean`, at least 1 byte."""
    raw = rng.lognormal(-(sigma**2) / 2, sigma, n) * mean
    return np.maximum(1, np.rint(raw)).astype(np.int64)


def _keys(n: int, cluster: int, seed: int) -> list[bytes]:
    """Anonymised keys `ns:u:token` for ranks 1..n; ranks r % COMMA_EVERY == 3 contain a comma."""
    spaces = [b"c%d" % cluster, b"c%dx" % cluster, b"tw", b"u"]
    keys = []
    for rank in range(1, n + 1):
        digest = hashlib.blake2b(b"%d:%d:%d" % (seed, cluster, rank), digest_size=9).digest()
        token = base64.b64encode(digest, altchars=b"xy")
        if rank % COMMA_EVERY == 3:
            token = token[:5] + b"," + token[5:]
        keys.append(spaces[digest[0] % len(spaces)] + b":u:" + token)
    return keys


class _Writer(Protocol):
    """A compressing writer over the raw file (gzip's or zstandard's)."""

    def write(self, data: bytes, /) -> int: ...

    def close(self) -> None: ...


def _open_out(path: pathlib.Path, suffix: str, level: int) -> tuple[io.BufferedWriter, _Writer | None]:
    suffix = suffix.lower()
    if suffix in (".zst", ".zstd"):
        import zstandard

        raw = open(path, "wb")
        return raw, zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)
    if suffix == ".gz":
        raw = open(path, "wb")
        return raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="")
    raw = open(path, "wb")
    return raw, None


def _check(
    stats: ClusterStats, hours: float, mean_qps: float | None, keys: int, zstd_level: int, seed: int
) -> tuple[int, float]:
    """`synthesize`'s arguments checked: (seconds, mean QPS)."""
    if not (hours > 0 and math.isfinite(hours)):
        raise InputError(f"hours must be finite and > 0, got {hours}")
    seconds = int(round(hours * 3600))
    if seconds < 1:
        raise InputError(f"hours must give at least one second, got {hours}")
    qps = stats.rate_kqps * 1000 if mean_qps is None else float(mean_qps)
    if not (qps > 0 and math.isfinite(qps)):
        raise InputError(f"mean QPS must be finite and > 0, got {qps}")
    if not 1 <= zstd_level <= 22:
        raise InputError(f"zstd level must be in 1..22, got {zstd_level}")
    if not 1 <= keys <= MAX_KEYS:
        raise InputError(f"key population must be in 1..{MAX_KEYS}, got {keys}")
    if seed < 0:
        raise InputError(f"seed must be >= 0, got {seed}")
    return seconds, qps


class _Population:
    """The keys (Zipf popularity, sizes, TTLs) and the operation and client mixes requests are drawn from."""

    def __init__(self, stats: ClusterStats, keys: int, seed: int, rng: np.random.Generator) -> None:
        self.stats, self.keys = stats, keys
        ranks = np.arange(1, keys + 1, dtype=np.float64)
        self.cdf = np.cumsum(ranks**-stats.zipf_alpha)
        self.cdf /= self.cdf[-1]
        key_bytes = _keys(keys, stats.cluster, seed)
        key_size = _sizes(keys, stats.key_size, KEY_SIZE_SIGMA, rng)
        self.value_size = _sizes(keys, stats.value_size, VALUE_SIZE_SIGMA, rng)
        ttl_values = np.array([t for t, _ in stats.ttls])
        key_ttl = np.rint(ttl_values[rng.choice(len(ttl_values), keys, p=[s for _, s in stats.ttls])])
        self.key_ttl = key_ttl.astype(np.int64)
        self.op_ids = np.array([OP_INDEX[op] for op in stats.ops])
        self.op_p = np.array(list(stats.ops.values()))
        self.is_write = np.array([op in WRITE_OPS for op in OPS])
        self.reads = np.array([OP_INDEX["get"], OP_INDEX["gets"]])
        self.op_names = [op.encode() for op in OPS]
        self.client_p = 1 / np.arange(1, N_CLIENTS + 1)
        self.client_p /= self.client_p.sum()
        self.prefix = [b"%s,%d," % (k, s) for k, s in zip(key_bytes, key_size.tolist())]

    def rows(self, lo: int, counts: np.ndarray, rng: np.random.Generator) -> bytes:
        """The CSV rows of `counts[i]` requests in second `lo + i`."""
        n = int(counts.sum())
        ts = np.repeat(np.arange(lo, lo + counts.size), counts)
        idx = np.minimum(np.searchsorted(self.cdf, rng.random(n), side="right"), self.keys - 1)
        op = self.op_ids[rng.choice(self.op_ids.size, n, p=self.op_p)]
        client = rng.choice(N_CLIENTS, n, p=self.client_p)
        miss = np.isin(op, self.reads) & (rng.random(n) < self.stats.miss_ratio)
        vsize = np.where((op == OP_INDEX["delete"]) | miss, 0, self.value_size[idx])
        ttl = np.where(self.is_write[op], self.key_ttl[idx], 0)
        prefix, names = self.prefix, self.op_names
        return b"".join(
            [
                b"%d,%s%d,%d,%s,%d\n" % (t, prefix[k], v, c, names[o], tt)
                for t, k, v, c, o, tt in zip(
                    ts.tolist(), idx.tolist(), vsize.tolist(), client.tolist(), op.tolist(), ttl.tolist()
                )
            ]
        )


def synthesize(
    stats: ClusterStats,
    out: str | os.PathLike[str],
    *,
    hours: float = 24,
    seed: int = 0,
    mean_qps: float | None = None,
    keys: int = 100_000,
    zstd_level: int = 12,
) -> SynthResult:
    """Write a synthetic trace of `hours` for `stats` to `out` (.zst, .gz or plain by suffix), atomically."""
    seconds, qps = _check(stats, hours, mean_qps, keys, zstd_level, seed)
    ss = np.random.SeedSequence([seed, stats.cluster])
    rng_rate, rng_keys, rng_req = (np.random.default_rng(s) for s in ss.spawn(3))
    population = _Population(stats, keys, seed, rng_keys)
    expected = rate_series(seconds, qps, rng_rate)
    out = pathlib.Path(out)
    tmp = out.with_name(out.name + ".tmp")
    rows = 0
    try:
        raw, writer = _open_out(tmp, out.suffix, zstd_level)
        sink = writer if writer is not None else raw
        with raw:
            for lo in range(0, seconds, 3600):
                counts = rng_req.poisson(expected[lo : lo + 3600])
                # at least one request in the first and the last second, so the trace spans exactly `hours`
                if lo == 0:
                    counts[0] = max(counts[0], 1)
                if lo + counts.size == seconds:
                    counts[-1] = max(counts[-1], 1)
                n = int(counts.sum())
                if n == 0:
                    continue
                sink.write(population.rows(lo, counts, rng_req))
                rows += n
            if writer is not None:
                writer.close()
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{out}: cannot write trace: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return SynthResult(path=str(out), rows=rows, seconds=seconds, mean_qps=qps)
