"""Offline evaluation: trace replay against a host with its policies and oracle (`run`), static sweeps
(`static_sweep`), the report (`report`) and its plots (`plots`)."""
