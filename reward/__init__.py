"""Rewards the optimiser minimises, selected by name (`--reward`, config `policy.reward`).

See `reward.rewards` for the formulas. `DEFAULT_REWARD` was chosen by `bench/replay.py` (docs/optimizer.md, section
"replay").
"""

from reward.rewards import REGISTRY, Reward, constrained, edp, get_reward, latency, sla_linear, sla_penalty

#: Names of every reward (read by `tuner.config.known_rewards`).
REWARDS: tuple[str, ...] = tuple(sorted(REGISTRY))
#: The default reward: see docs/optimizer.md, "Rewards", for the benchmark that chose it.
DEFAULT_REWARD = "constrained"

__all__ = [
    "REGISTRY",
    "REWARDS",
    "DEFAULT_REWARD",
    "Reward",
    "constrained",
    "edp",
    "get_reward",
    "latency",
    "sla_linear",
    "sla_penalty",
]
