"""Benchmark: how long one IPMI power read takes against the fake BMC (ipmi_sim on loopback); prints JSON.

    python bench/ipmi_read.py           # 20 reads, then one against the stopped BMC

`first_read_s` includes discovering the sensor (a DCMI attempt, which ipmi_sim refuses, then the SDR listing);
`read_median_s` / `read_max_s` are the steady reads (one ipmitool RMCP+ session each); `dead_bmc_read_s` is how
long a read waits on a BMC that stopped answering before it fails (ipmitool's `-N 1 -R 1`).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actuators.fakehw.bmc import start_bmc
from actuators.power.ipmi import make_reader
from core.errors import HostError


def main(reads: int = 20) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        bmc = start_bmc(Path(tmp) / "bmc", watts=150, poll_ms=1000)
        opts = bmc.reader_options()
        opts.pop("kind")
        reader = make_reader(**opts)
        t = time.monotonic()
        reader.read()
        first = time.monotonic() - t
        times = []
        for _ in range(reads):
            t = time.monotonic()
            reader.read()
            times.append(time.monotonic() - t)
        bmc.stop()
        t = time.monotonic()
        error = ""
        try:
            reader.read()
        except HostError as exc:
            error = str(exc)
        dead = time.monotonic() - t
    return {
        "reads": reads,
        "first_read_s": round(first, 3),
        "read_median_s": round(statistics.median(times), 3),
        "read_max_s": round(max(times), 3),
        "dead_bmc_read_s": round(dead, 2),
        "dead_bmc_error": error,
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
