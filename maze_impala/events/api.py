"""Typed events: an event interface is a class whose methods are the events.

Declare an interface once, with how each event aggregates::

    class MyEnvEvents(EventInterface):
        @epoch_stats(mean, max, group_by="machine")
        def utilisation(self, machine: int, value: float):
            \"\"\"Share of the time a machine was busy.\"\"\"

and publish through a hub, which checks every call against the signature::

    events = hub.publisher(MyEnvEvents)
    events.utilisation(machine=2, value=0.8)    # recorded
    events.utilisation(machin=2, value=0.8)     # TypeError at the call

Metric names therefore live in one place, the interface, never as strings.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np

Reducer = Callable[[list[float]], float]


def mean(values: list[float]) -> float:
    return float(np.mean(values))


def sum_(values: list[float]) -> float:
    return float(np.sum(values))


sum_.__name__ = "sum"


def max_(values: list[float]) -> float:
    return float(np.max(values))


max_.__name__ = "max"


def min_(values: list[float]) -> float:
    return float(np.min(values))


min_.__name__ = "min"


def std(values: list[float]) -> float:
    return float(np.std(values))


def count(values: list[float]) -> float:
    return float(len(values))


def last(values: list[float]) -> float:
    return float(values[-1])


@dataclass(frozen=True)
class EventSpec:
    """How an event aggregates: optionally per structured step, then per episode, then per epoch.

    ``step_reducer`` first reduces the events of one structured step (e.g. several
    sub-steps) to one value, ``episode_reducer`` the (step) values of one episode to
    one value; ``reducers`` turn what arrives in an epoch into its statistics. Values
    are grouped by the argument ``group_by`` at every level.
    """

    reducers: tuple[Reducer, ...]
    group_by: str | None
    fields: tuple[str, ...]
    """The numeric arguments that become statistics (all but ``self`` and ``group_by``)."""
    step_reducer: Reducer | None = None
    episode_reducer: Reducer | None = None


class EventRecord(NamedTuple):
    """One published event; small and picklable, so actors can ship it to the learner."""

    interface: str
    event: str
    values: dict[str, Any]


def _declare(method: Callable, **changes: Any) -> Callable:
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    spec = getattr(method, "__event_spec__", None) or EventSpec((mean,), None, tuple(params))
    spec = replace(spec, **changes)
    if spec.group_by is not None and spec.group_by not in params:
        raise TypeError(f"{method.__qualname__}: group_by={spec.group_by!r} is not one of its arguments {params}")
    method.__event_spec__ = replace(spec, fields=tuple(p for p in params if p != spec.group_by))
    return method


def epoch_stats(*reducers: Reducer, group_by: str | None = None) -> Callable[[Callable], Callable]:
    """Declare that an event aggregates per epoch with ``reducers`` (any ``list -> float``), grouped by one argument."""
    if not reducers:
        raise TypeError("epoch_stats needs at least one reducer, e.g. epoch_stats(mean)")
    return lambda method: _declare(method, reducers=tuple(reducers), group_by=group_by)


def record_only(method: Callable) -> Callable:
    """Declare an event that listeners hear but that makes no statistics (e.g. the games that the learner's
    snapshot pool keeps count of)."""
    return _declare(method, reducers=())


def episode_stats(reducer: Reducer) -> Callable[[Callable], Callable]:
    """Declare that an event is first reduced to one value per episode (e.g. ``sum_`` of the costs of an episode)."""
    return lambda method: _declare(method, episode_reducer=reducer)


def step_stats(reducer: Reducer) -> Callable[[Callable], Callable]:
    """Declare that an event is first reduced to one value per structured step (e.g. over its sub-steps)."""
    return lambda method: _declare(method, step_reducer=reducer)


class EventInterface:
    """Base class of event interfaces; subclasses declare events as decorated methods.

    Every subclass is registered by name, so that statistics can be computed for
    records that arrive from another process.
    """

    registry: ClassVar[dict[str, type[EventInterface]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        known = EventInterface.registry.get(cls.__name__)
        if known is not None and _origin(known) != _origin(cls):
            raise TypeError(
                f"two event interfaces are named {cls.__name__} ({_origin(known)} and {_origin(cls)}): their "
                "statistics would mix; give one of them another name"
            )
        EventInterface.registry[cls.__name__] = cls

    @classmethod
    def event_specs(cls) -> dict[str, EventSpec]:
        """The declared events by name (computed once per class: it is looked up for every episode's records)."""
        specs = cls.__dict__.get("_event_specs")
        if specs is None:
            specs = {
                name: member.__event_spec__
                for name, member in inspect.getmembers(cls, inspect.isfunction)
                if hasattr(member, "__event_spec__")
            }
            cls._event_specs = specs
        return specs


def _origin(cls: type) -> str:
    """Where a class is defined: the same class imported twice (e.g. a re-run module) has one origin."""
    return f"{cls.__module__}.{cls.__qualname__}"


def event_name(event: Callable) -> tuple[str, str]:
    """``(interface, event)`` of an event method, e.g. ``CuttingEvents.order_filled``."""
    interface, _, name = event.__qualname__.rpartition(".")
    return interface, name


InterfaceT = TypeVar("InterfaceT", bound=EventInterface)


class EventHub:
    """Records the events published through it and hands them to its listeners.

    A listener is any callable taking an :class:`EventRecord`. Without listeners a
    publish only checks the call's arguments.
    """

    def __init__(self) -> None:
        self.listeners: list[Callable[[EventRecord], None]] = []
        self.interfaces: dict[str, type[EventInterface]] = {}

    def publisher(self, interface: type[InterfaceT]) -> InterfaceT:
        """An object with the methods of ``interface`` that publish into this hub."""
        self.interfaces[interface.__name__] = interface
        proxy = interface.__new__(interface)
        for name in interface.event_specs():
            setattr(proxy, name, self._make_publish(interface, name))
        return proxy

    def _make_publish(self, interface: type[EventInterface], name: str) -> Callable[..., None]:
        signature = inspect.signature(getattr(interface, name))
        iname = interface.__name__
        params = list(signature.parameters.values())[1:]  # without self
        known = frozenset(p.name for p in params)
        required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
        defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        listeners = self.listeners

        def publish(*args: Any, **kwargs: Any) -> None:
            if not args and required <= kwargs.keys() <= known:  # the common, cheap path
                if listeners:
                    values = kwargs if len(kwargs) == len(known) else {**defaults, **kwargs}
                    self.publish(EventRecord(iname, name, values))
                return
            unknown = set(kwargs) - known
            if unknown:
                raise TypeError(
                    f"{iname}.{name}{signature}: unknown argument(s) {sorted(unknown)}; it takes {sorted(known)}"
                )
            try:
                bound = signature.bind(None, *args, **kwargs)
            except TypeError as error:
                raise TypeError(f"{iname}.{name}{signature}: {error}") from None
            bound.apply_defaults()
            values = dict(bound.arguments)
            values.pop(next(iter(signature.parameters)))  # drop self
            if listeners:
                self.publish(EventRecord(iname, name, values))

        publish.__name__ = name
        return publish

    def publish(self, record: EventRecord) -> None:
        for listener in self.listeners:
            listener(record)

    def replay(self, records: Iterable[EventRecord]) -> None:
        """Publish records recorded elsewhere (e.g. in an actor process)."""
        for record in records:
            self.publish(record)


class EventCollector:
    """A listener that keeps records in a list (e.g. an actor's events until its next rollout)."""

    def __init__(self) -> None:
        self.records: list[EventRecord] = []

    def __call__(self, record: EventRecord) -> None:
        self.records.append(record)

    def drain(self) -> list[EventRecord]:
        records, self.records = self.records, []
        return records
