"""One episode's events: step and episode reduction, KPIs, and raw event rows.

Whoever runs episodes (an actor, an evaluator, a rollout) attaches an
:class:`EpisodeEventLog` to each env's event hub. At the end of an episode,
:meth:`EpisodeEventLog.finish` returns what the episode contributes:

* the records for the epoch statistics, with every event declared with
  ``@step_stats``/``@episode_stats`` already reduced per structured step and per
  episode (the others pass through unchanged);
* the env's KPIs (:class:`KpiCalculator`), computed from the episode's raw events;
* optionally, the raw events themselves, one row per event with the step it
  happened in, for the event logs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from maze_impala.events.api import EventInterface, EventRecord, epoch_stats, event_name, max_, mean, min_, std


class KpiEvents(EventInterface):
    """Key performance indicators: the domain's own numbers, one value per episode and KPI."""

    @epoch_stats(mean, std, min_, max_, group_by="name")
    def kpi(self, name: str, value: float):
        """The value of KPI ``name`` in one episode."""


class KpiCalculator(ABC):
    """Computes an env's episode-level KPIs from the events of one episode."""

    @abstractmethod
    def compute(self, episode: EpisodeEventLog) -> dict[str, float]:
        """``{kpi name: value}`` for the episode whose events ``episode`` holds."""


@dataclass
class EpisodeEventLog:
    """A listener that keeps the events of the current episode, each with its structured step."""

    keep_raw: bool = False
    step: int = 0
    """The structured step the next events belong to (set by whoever steps the env)."""
    records: list[tuple[int, EventRecord]] = field(default_factory=list)

    def __call__(self, record: EventRecord) -> None:
        self.records.append((self.step, record))

    def values(self, event: Callable, argument: str = "value") -> list[Any]:
        """The values of one argument of one event, in order, e.g. ``log.values(MyEvents.cost, "value")``."""
        interface, name = event_name(event)
        return [r.values[argument] for _, r in self.records if r.interface == interface and r.event == name]

    def count(self, event: Callable) -> int:
        interface, name = event_name(event)
        return sum(1 for _, r in self.records if r.interface == interface and r.event == name)

    def finish(self, kpis: KpiCalculator | None) -> EpisodeSummary:
        """Reduce, compute KPIs, and start a new episode."""
        summary = EpisodeSummary(
            records=reduce_episode(self.records),
            kpis=kpis.compute(self) if kpis is not None else {},
            raw=list(self.records) if self.keep_raw else [],
        )
        self.records, self.step = [], 0
        return summary


@dataclass
class EpisodeSummary:
    records: list[EventRecord]
    kpis: dict[str, float]
    raw: list[tuple[int, EventRecord]]


def reduce_episode(records: list[tuple[int, EventRecord]]) -> list[EventRecord]:
    """Apply the step and episode reducers that the events declare; other events pass through."""
    out: list[EventRecord] = []
    steps: dict[tuple, list[EventRecord]] = {}
    for step, record in records:
        spec = _spec(record)
        if spec is None or (spec.step_reducer is None and spec.episode_reducer is None):
            out.append(record)
            continue
        group = record.values.get(spec.group_by) if spec.group_by else None
        step_key = step if spec.step_reducer is not None else id(record)
        steps.setdefault((record.interface, record.event, group, step_key), []).append(record)
    episodes: dict[tuple, list[EventRecord]] = {}
    for (interface, event, group, _), members in steps.items():
        spec = _spec(members[0])
        reduced = _reduce(members, spec.step_reducer) if spec.step_reducer is not None else members[0]
        if spec.episode_reducer is None:
            out.append(reduced)
        else:
            episodes.setdefault((interface, event, group), []).append(reduced)
    for members in episodes.values():
        out.append(_reduce(members, _spec(members[0]).episode_reducer))
    return out


def _spec(record: EventRecord) -> Any:
    interface = EventInterface.registry.get(record.interface)
    return None if interface is None else interface.event_specs().get(record.event)


def _reduce(members: list[EventRecord], reducer: Any) -> EventRecord:
    spec = _spec(members[0])
    values = dict(members[0].values)
    for name in spec.fields:
        numbers = [m.values[name] for m in members if m.values[name] is not None]
        values[name] = reducer(numbers) if numbers else None
    return EventRecord(members[0].interface, members[0].event, values)
