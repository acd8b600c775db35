"""Latency measurement: distributions and their CIs (`dist`), the memcached protocol client (`memcached`),
the open-loop prober (`prober`), the hook format (`hook`) and the latency sources a real host reads (`sources`)."""
