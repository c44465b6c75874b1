"""What ``hrl-descheduler`` loads at start beyond its configuration's schema, checked offline for ``hrl-policy
config check`` (:func:`startup_problems`): the call-graph sources (``topology.sources``, read), the planner and the
placement policy with their bundles (``planner``, ``placement``), and the state file (``stateFile``: the eviction
history, read when it exists). The cluster is not contacted."""

from __future__ import annotations

from .config import DeschedulerConfiguration, placement_from_config, planner_from_config
from .guards import EvictionHistory, HistoryError
from .snapshot import load_topology

__all__ = ["startup_problems"]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def startup_problems(config: DeschedulerConfiguration) -> list[str]:
    """Every problem ``hrl-descheduler`` would stop at with ``config`` before its first cycle (``dotted.path:
    problem`` lines; ``[]`` when none), from the same loaders it runs: registered as the start-up check of
    ``DeschedulerConfiguration`` for ``hrl-policy config check``."""
    problems: list[str] = []
    if config.topology.sources:
        try:
            load_topology(config.topology.sources)
        except (OSError, ValueError) as exc:
            problems.append(f"topology.sources: {_one_line(exc)}")
    for load in (planner_from_config, placement_from_config):
        try:
            load(config)
        except ValueError as exc:  # a bundle that is missing or does not load: the line names the field
            problems.append(_one_line(exc))
    if config.state_file:
        try:
            EvictionHistory.load(config.state_file)
        except HistoryError as exc:
            problems.append(f"stateFile: {_one_line(exc)}")
    return problems
