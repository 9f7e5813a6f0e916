"""Aggregation of events into epoch statistics.

A statistic is addressed by (scope, interface, event, field, reducer, group).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

from maze_impala.events.api import EventInterface, EventRecord, Reducer, event_name


class StatKey(NamedTuple):
    """The address of one statistic; :meth:`column` is its stable, readable name."""

    scope: str
    interface: str
    event: str
    field: str
    reducer: str
    group: str | None = None

    @classmethod
    def of(
        cls,
        event: Callable[..., Any],
        reducer: Reducer | str = "mean",
        scope: str = "train",
        field: str = "value",
        group: str | None = None,
    ) -> StatKey:
        """The key of a statistic named by its event method, e.g. ``StatKey.of(EpisodeEvents.episode_return, mean)``.

        Name columns through this, never as retyped strings: renaming an event then renames
        (or breaks loudly) every place that reads its statistics.
        """
        interface, name = event_name(event)
        spec = getattr(event, "__event_spec__", None)
        if spec is None:
            raise TypeError(f"{interface}.{name} is not an event (declare it with @epoch_stats)")
        reducer_name = reducer if isinstance(reducer, str) else reducer.__name__
        if reducer_name not in {r.__name__ for r in spec.reducers}:
            raise ValueError(
                f"{interface}.{name} has no {reducer_name!r} statistic; it has {[r.__name__ for r in spec.reducers]}"
            )
        if field not in spec.fields:
            raise ValueError(f"{interface}.{name} has no field {field!r}; it has {list(spec.fields)}")
        return cls(scope, interface, name, field, reducer_name, group)

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
        if not spec.reducers:  # record_only
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
