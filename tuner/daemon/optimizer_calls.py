"""Calls on an optimiser the daemon holds -- in process, or a worker proxy (`tuner.daemon.worker`) -- that
may lack the optional methods (`tuner.daemon.worker.OPTIONAL_METHODS`) or a `close`."""

from __future__ import annotations

from typing import Any

from actuators.abilities import Closable


def supports(opt: Any, name: str) -> bool:
    """Whether optimiser `opt` has the optional method `name` (a worker proxy says; in process: it has it or not)."""
    check = getattr(opt, "supports", None)
    return bool(check(name)) if callable(check) else callable(getattr(opt, name, None))


def close(opt: Any) -> None:
    """Close `opt` if it can be closed (a worker proxy ends its process)."""
    if isinstance(opt, Closable):
        opt.close()


def retune_trials(opt: Any) -> list[Any]:
    """The current retune's trials (history attached by warm start excluded)."""
    return opt.retune_trials() if supports(opt, "retune_trials") else opt.trials()
