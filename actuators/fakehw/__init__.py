"""The fake-hardware kit: run the tuner's full loop against real memcached load on a laptop or VM.

A directory that looks like a small server's /sys and /proc (cpufreq with a userspace governor, a RAPL powercap
counter that advances with a power model, an ixgbe NIC whose coalescing is settable through a file-backed ethtool
layer), plus a `Host` factory over it::

    python -m actuators.fakehw /tmp/hw --memcached 127.0.0.1:11211   # create the tree and play the hardware
    # tuner.toml:  [host] spec = "actuators.fakehw:make_fake_host"
    #              [host.options] root = "/tmp/hw"  qps = "memcached:127.0.0.1:11211"

Latency and QPS are real (memcached, the prober); frequency, ITR and power are the kit's. See docs/fake-hardware.md.
"""

from actuators.fakehw.kit import HardwareModel, create, is_kit, make_fake_host, nic_under
from actuators.fakehw.nic import FileNic
from actuators.fakehw.power import PowerModel

__all__ = ["FileNic", "HardwareModel", "PowerModel", "create", "is_kit", "make_fake_host", "nic_under"]
