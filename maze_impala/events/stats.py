"""Aggregation of events into epoch statistics.

A statistic is addressed by (scope, interface, event, field, reducer, group).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from maze_impala.events.api import EventInterface, EventRecord


class StatKey(NamedTuple):
    """The address of one statistic; :meth:`column` is its stable, readable name."""

    scope: str
    interface: str
    event: str
    field: str
    reducer: str
    group: str | None = None

    def column(self) -> str:
        """E.g. ``train/ImpalaEvents/policy_grad_norm/mean/step_key=0``.

        The field name is left out for the common single-field ``value`` events.
        """
        parts = [self.scope, self.interface, self.event]
        if self.field != "value":
            parts.append(self.field)
        parts.append(self.reducer)
        if self.group is not None:
            parts.append(self.group)
        return "/".join(parts)


class StatsAggregator:
    """Listens to a hub and reduces each epoch's events with the reducers they declare."""

    def __init__(self, scope: str, interfaces: list[type[EventInterface]] | None = None):
        """Follows ``interfaces``, or every registered interface (env events included) if ``None``."""
        self.scope = scope
        self.follow_all = interfaces is None
        self.specs = {(i.__name__, name): spec for i in interfaces or [] for name, spec in i.event_specs().items()}
        self._values: dict[tuple[str, str, str, str | None], list[float]] = defaultdict(list)

    def __call__(self, record: EventRecord) -> None:
        spec = self.specs.get((record.interface, record.event))
        if spec is None:
            interface = EventInterface.registry.get(record.interface) if self.follow_all else None
            if interface is None:
                return  # an interface this aggregator was not asked to follow
            self.specs.update({(record.interface, n): s for n, s in interface.event_specs().items()})
            spec = self.specs.get((record.interface, record.event))
            if spec is None:
                return
        group = None if spec.group_by is None else f"{spec.group_by}={record.values[spec.group_by]}"
        for field in spec.fields:
            value = record.values[field]
            if value is not None:
                self._values[(record.interface, record.event, field, group)].append(float(value))

    def reduce(self) -> dict[StatKey, float]:
        """This epoch's statistics; clears the collected values."""
        stats: dict[StatKey, float] = {}
        for (interface, event, field, group), values in self._values.items():
            for reducer in self.specs[(interface, event)].reducers:
                stats[StatKey(self.scope, interface, event, field, reducer.__name__, group)] = reducer(values)
        self._values.clear()
        return stats


def by_column(stats: dict[StatKey, float]) -> dict[str, Any]:
    return {key.column(): value for key, value in stats.items()}
