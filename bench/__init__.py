"""Benchmarks: scripts run as `python bench/NAME.py`, each printing one JSON document; nothing imports them."""
