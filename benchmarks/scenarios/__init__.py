"""The kept scenarios, by name: each a module of this package with one :class:`Scenario`, and a line
in :data:`SCENARIOS`.

A scenario says what it measures, its parameters (each with a default and the smallest value that
still exercises it: ``run --smallest``, the test's setting) and a function that runs it on a
:class:`~benchmarks.harness.Bench`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Bench


@dataclass(frozen=True)
class Parameter:
    default: Any
    smallest: Any
    help: str


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    parameters: dict[str, Parameter]
    run: Callable[[Bench, dict[str, Any]], None]

    def values(self, smallest: bool = False, **given: Any) -> dict[str, Any]:
        """The parameters of a run: the defaults (or the smallest), overridden by ``given``."""
        unknown = set(given) - set(self.parameters)
        if unknown:
            raise SystemExit(f"{self.name} has no parameter {', '.join(sorted(unknown))} "
                             f"(it has {', '.join(self.parameters)})")
        chosen = {k: (p.smallest if smallest else p.default) for k, p in self.parameters.items()}
        for key, value in given.items():
            default = self.parameters[key].default
            if isinstance(default, bool) and isinstance(value, str):
                chosen[key] = value.lower() in ("1", "true", "yes", "on")
            elif isinstance(default, (int, float)) and not isinstance(default, bool):
                chosen[key] = type(default)(value)
            else:
                chosen[key] = value
        return chosen


def scenarios() -> dict[str, Scenario]:
    """Every kept scenario, by name (imported on demand: listing them loads no Spark)."""
    from benchmarks.scenarios import (
        capture,
        classes,
        compiler,
        fleet,
        freshness,
        log_cost,
        pgbench,
        phase_floor,
        read_forms,
        suite,
        sweep,
        tpcds,
        tpch_queries,
        tpch_views,
    )

    kept = (tpch_views, tpch_queries, tpcds, sweep, fleet, freshness, pgbench, phase_floor, classes, log_cost, capture,
            compiler, read_forms, suite)
    return {module.SCENARIO.name: module.SCENARIO for module in kept}
