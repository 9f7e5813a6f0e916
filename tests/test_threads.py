"""The learner's threads: the rule (cores, actors, pins), the tuner that follows the load, and a CNN run beside a
busy program."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from columns import ENV_STEPS_PER_SECOND

import maze_impala
from maze_impala.core import Learner
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey, StatsAggregator, by_column
from maze_impala.impala.threads import ThreadPlan, ThreadTuner, TunedLearner, plan_threads
from maze_impala.machine import LoadMeter, LoadSample, usable_cores
from maze_impala.train.pace import PaceWatch


@pytest.fixture(autouse=True)
def no_pin(monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_the_rule_ranges_from_one_thread_to_the_cores_the_actors_leave_or_all():
    assert plan_threads("leftover", actor_cores=6, cores=8) == ThreadPlan(
        (1, 2), 2, plan_threads("leftover", 6, cores=8).why
    )
    every = plan_threads("all", actor_cores=6, cores=8)
    assert every.choices == (1, 2, 8) and every.start == 8
    assert plan_threads("leftover", actor_cores=2, cores=2).choices == (1,)  # nothing to choose: one thread
    assert plan_threads("leftover", actor_cores=0, cores=4).choices == (1, 4)  # a Ray cluster: no actors here
    assert plan_threads("all", actor_cores=1.5, cores=4).choices == (1, 2, 4)  # Ray's fractions of a core
    several = plan_threads("all", actor_cores=2, num_learners=3, cores=8)  # each its share, in step
    assert several.choices == (2,) and not several.adaptive
    dev = plan_threads("all", actor_cores=0, cores=8, deterministic=True)  # runner=dev repeats itself exactly
    assert dev.choices == (1,) and "runner=dev" in dev.describe()
    assert plan_threads("4", actor_cores=0, cores=8, deterministic=True).choices == (4,), "a pin is kept"


def test_a_users_pin_is_kept_and_said(monkeypatch):
    pinned = plan_threads("3", actor_cores=6, cores=8)
    assert pinned.choices == (3,) and "runner.learner_cores=3" in pinned.describe()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from_env = plan_threads("all", actor_cores=0, cores=8)
    assert from_env.choices == (1,) and "OMP_NUM_THREADS=1" in from_env.describe()


def test_usable_cores_follow_the_affinity_and_a_cgroup_quota(tmp_path):
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))  # no quota files: the affinity
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a core: one
    assert usable_cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == len(os.sched_getaffinity(0))
    if len(os.sched_getaffinity(0)) > 1:
        child = "import os; from maze_impala.machine import usable_cores; print(usable_cores())"
        out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", child], capture_output=True, text=True)
        assert out.stdout.strip() == "1", out.stderr


def test_the_idle_meter_counts_the_idle_ticks_of_this_process_s_cores_and_steps_aside_under_a_quota(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    stat = tmp_path / "stat"
    lines = [f"cpu{n} 10 0 5 {100 * (i + 1)} 3 0 0 0 0 0" for i, n in enumerate(cpus)]
    stat.write_text("cpu  1 2 3 4 5 6 7 8 9 10\n" + "\n".join(lines) + f"\ncpu{max(cpus) + 1} 0 0 0 999 0 0 0 0 0\n")
    meter = LoadMeter(stat, cgroup=tmp_path)
    ticks = sum(100 * (i + 1) + 3 for i in range(len(cpus)))  # idle and I/O wait, this process's cores only
    assert meter.available and meter.read() == pytest.approx(ticks / os.sysconf("SC_CLK_TCK"))
    (tmp_path / "cpu.max").write_text(f"{50000 * len(cpus)} 100000\n")  # a quota of half the cores
    assert not LoadMeter(stat, cgroup=tmp_path).available, "shared cores: their idle time is not this run's"
    assert not LoadMeter(tmp_path / "missing", cgroup=tmp_path / "none").available


def test_the_cores_busy_elsewhere_since_a_mark_show_a_program_the_load_average_has_not_counted_yet(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    stat = tmp_path / "stat"
    stat.write_text("\n".join(f"cpu{n} 10 0 5 1000 0 0 0 0 0 0" for n in cpus) + "\n")
    meter = LoadMeter(stat, cgroup=tmp_path)
    now = meter.read()
    ago = lambda seconds, idle: LoadSample(time.perf_counter() - seconds, None, None, idle)  # noqa: E731
    assert meter.busy_since(ago(2.0, now)) == pytest.approx(len(cpus) - 1, abs=0.01)
    spare = ago(2.0, now - 2.0 * (len(cpus) - 1))  # all idle but this process's
    assert meter.busy_since(spare) == pytest.approx(0.0, abs=0.01)
    assert meter.busy_since(ago(0.0, now)) is None, "too short a span to tell"
    busy = ago(2.0, now)
    assert meter.load(since=busy) >= len(cpus) - 1.01, "the larger of the load average and the busy cores"
    assert LoadMeter(tmp_path / "missing", cgroup=tmp_path).sample().idle is None


class Machine:
    """Update times of a learner by its threads: quiet, a second thread halves them; loaded, it makes them 8x."""

    def __init__(self):
        self.loaded = False
        self.threads = 0
        self.spent = {"chosen": 0.0, "probes": 0.0}

    def set(self, threads: int) -> None:
        self.threads = threads

    def seconds(self) -> float:
        if self.loaded:
            return {1: 1.0, 2: 8.0}[self.threads]
        return {1: 1.0, 2: 0.5}[self.threads]


def run(tuner: ThreadTuner, machine: Machine, updates: int) -> list[int]:
    used = []
    for _ in range(updates):
        threads = tuner.threads()
        assert threads == machine.threads, "the tuner sets the threads it reports"
        seconds = machine.seconds()
        probe = threads != tuner.chosen
        machine.spent["probes" if probe else "chosen"] += seconds
        tuner.record(seconds, samples=1000)
        used.append(threads)
    return used


def test_the_tuner_keeps_the_fastest_count_while_the_load_comes_and_goes():
    machine = Machine()
    tuner = ThreadTuner(ThreadPlan((1, 2), 2, "test"), machine.set)
    quiet = run(tuner, machine, 100)
    assert tuner.chosen == 2 and quiet.count(1) <= 8, "quiet: two threads, with few probes of one"
    machine.loaded = True
    run(tuner, machine, 20)
    assert tuner.chosen == 1, "a busy program beside the run: within 20 updates, one thread"
    machine.spent = {"chosen": 0.0, "probes": 0.0}
    run(tuner, machine, 2000)
    assert tuner.chosen == 1
    assert machine.spent["probes"] < 0.1 * machine.spent["chosen"], "probes of the slow count cost little"
    machine.loaded = False
    run(tuner, machine, 2000)
    assert tuner.chosen == 2, "the load gone: two threads again"


def test_a_count_known_to_be_far_slower_is_not_probed_again_soon():
    """Two threads beside two busy programs made an LSTM's update up to 80x slower: once the tuner has left them,
    a probe of them waits until 20x what it would cost has passed (one probe must not cost an epoch)."""
    machine = Machine()
    machine.seconds = lambda: {1: 1.0, 2: 80.0 if machine.loaded else 0.5}[machine.threads]
    tuner = ThreadTuner(ThreadPlan((1, 2), 2, "test"), machine.set)
    run(tuner, machine, 30)
    machine.loaded = True
    used = run(tuner, machine, 200)
    assert tuner.chosen == 1 and used.count(2) <= 3, used  # the updates that met the load, and no probe since
    machine.spent = {"chosen": 0.0, "probes": 0.0}
    run(tuner, machine, 5000)
    assert machine.spent["probes"] < 0.1 * machine.spent["chosen"]


def test_a_fixed_plan_sets_its_threads_once_and_never_probes():
    machine = Machine()
    calls = []
    tuner = ThreadTuner(ThreadPlan((1,), 1, "pinned"), lambda n: calls.append(n) or machine.set(n))
    assert set(run(tuner, machine, 50)) == {1} and calls == [1]


def test_the_console_says_once_when_training_starves():
    watch = PaceWatch(actor_cores=1, cores=2)
    hub = EventHub()
    hub.listeners.append(watch)  # it hears the tuned learner's threads
    threads = hub.publisher(RunEvents).learner_threads
    threads(value=2)
    assert watch.epoch(1, 100.0, load=9.0) is None, "the first epoch holds the start-up"
    assert watch.epoch(2, 800.0, load=2.5) is None
    threads(value=1)
    slow = watch.epoch(3, 300.0, load=2.8)
    assert slow is not None and "under half its best (800)" in slow and "now 1" in slow
    assert watch.own == 3, "its own cores: the actors' and the learner's first threads"
    assert watch.epoch(4, 100.0, load=9.0) is None, "said once"
    crowded = PaceWatch(actor_cores=2, cores=2).epoch(2, 800.0, load=4.2)
    assert crowded is not None and "ran 4.2 threads at a time on 2 cores" in crowded and "num_actors" in crowded
    assert "The learner's threads" not in crowded, "no tuned learner heard: nothing said of its threads"
    sampled = PaceWatch(actor_cores=0, cores=2)
    sampled.sample()  # this process's own thread at least: a count of the machine's runnable threads
    assert sampled._runnable and sampled._runnable[0] >= 1


@pytest.mark.slow
@pytest.mark.serial  # a speed ratio, with a busy program of its own
def test_a_cnn_run_beside_a_busy_program_keeps_most_of_its_quiet_speed(tmp_path):
    """The thread rule on the shipped MinAtar settings (a CNN, whose learner may take both cores): beside a
    program that spins on one core, training keeps at least 0.35x its quiet speed (before the tuner: 0.3-0.5x with
    one busy program, 0.1-0.3x with two; benchmarks/load.py measures every family)."""
    from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, train
    from maze_impala.config.workloads import shipped_env, shipped_model

    env, algorithm = shipped_env("minatar")
    settings = {**algorithm, "n_epochs": 3, "epoch_length": 4, "rollout_evaluator": {"n_episodes": 1}}
    quiet_output = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)

    def rate(name: str) -> float:
        result = train(
            env,
            ImpalaAlgorithmConfig(**settings),
            ModelConfig(**shipped_model("minatar")),
            RunnerConfig("local"),
            output=quiet_output,
            output_dir=tmp_path / name,
            seed=1,
        )
        return statistics.median(result.column(ENV_STEPS_PER_SECOND)[1:])

    quiet = rate("quiet")
    spin = f"import os\nwhile os.getppid() == {os.getpid()}:\n    for _ in range(100000): pass\n"
    busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", spin])
    try:
        loaded = rate("loaded")
    finally:
        busy.kill()
        busy.wait()
    assert loaded >= 0.35 * quiet, f"{loaded:.0f} env steps/s beside a busy program, {quiet:.0f} quiet"


def test_a_learner_that_may_take_every_core_starts_on_fewer_where_the_machine_is_busy_at_its_start():
    quiet = plan_threads("all", actor_cores=1, cores=2, load=0.1)
    busy = plan_threads("all", actor_cores=1, cores=2, load=1.3)
    assert quiet.choices == busy.choices == (1, 2)
    assert quiet.start == 2 and busy.start == 1 and "the machine's load 1.30 at the start" in busy.why
    assert plan_threads("leftover", actor_cores=1, cores=2, load=3.0).start == 1  # one count only: nothing to choose


def test_slow_updates_probe_the_other_count_within_seconds_not_updates():
    """Beside a busy program the first updates of two threads took 10-40 s each: the first probe of one thread comes
    once 5 s of updates have passed (here the first measured update), not after the window and first probes."""
    machine = Machine()
    machine.loaded = True
    machine.seconds = lambda: {1: 2.0, 2: 20.0}[machine.threads]
    tuner = ThreadTuner(ThreadPlan((1, 2), 2, "test"), machine.set)
    used = run(tuner, machine, 4)
    assert used == [2, 2, 1, 1] and tuner.chosen == 1, used  # warm-up, one timed update, the probe: chosen


def test_the_load_gone_brings_the_faster_count_back_at_once():
    """A run that chose one thread under load: when the busy program stops its own updates get faster, which makes
    the slow estimate of two threads stale; two threads are probed at once and chosen again."""
    machine = Machine()
    machine.seconds = lambda: ({1: 1.0, 2: 8.0} if machine.loaded else {1: 0.6, 2: 0.3})[machine.threads]
    tuner = ThreadTuner(ThreadPlan((1, 2), 2, "test"), machine.set)
    machine.loaded = True
    run(tuner, machine, 40)
    assert tuner.chosen == 1
    machine.loaded = False
    used = run(tuner, machine, 8)
    assert tuner.chosen == 2 and used.index(2) <= 5, used


def run_with_idle(tuner: ThreadTuner, machine: Machine, updates: int, idle) -> list[int]:
    """As :func:`run`, with the machine's idle cores during each update given by ``idle(threads)``."""
    used = []
    for _ in range(updates):
        threads = tuner.threads()
        seconds = machine.seconds()
        tuner.record(seconds, samples=1000, idle=idle(threads) * seconds)
        used.append(threads)
    return used


def test_idle_cores_bring_a_larger_count_back_when_the_chosen_one_never_felt_the_load():
    """MinAtar on 2 cores beside a busy program: its one learner thread had a core of its own, so its updates took
    as long before the program stopped as after, and the tuner's own times never said that the load had gone. The
    core the program left shows as idle during the updates: two threads are probed within seconds and kept."""
    machine = Machine()
    machine.seconds = lambda: ({1: 0.6, 2: 1.8} if machine.loaded else {1: 0.6, 2: 0.4})[machine.threads]
    idle = lambda threads: 0.0 if machine.loaded or threads == 2 else 0.9  # noqa: E731
    tuner = ThreadTuner(ThreadPlan((1, 2), 2, "test"), machine.set)
    machine.loaded = True
    run_with_idle(tuner, machine, 200, idle)
    assert tuner.chosen == 1
    machine.loaded = False
    used = run_with_idle(tuner, machine, 40, idle)
    assert tuner.chosen == 2, used
    assert sum(0.6 for threads in used[: used.index(2)]) <= 10.0, "two threads again within 10 s of updates"


def test_idle_cores_that_two_threads_cannot_use_do_not_make_probes_frequent():
    """Cores idle beside one thread that two threads would not make faster (a small network): the idle reading
    stays where it was when two threads were timed, so their probes stay within the budget."""
    machine = Machine()
    machine.seconds = lambda: {1: 0.1, 2: 0.3}[machine.threads]
    tuner = ThreadTuner(ThreadPlan((1, 2), 1, "test"), machine.set)
    used = run_with_idle(tuner, machine, 3000, lambda threads: 0.9 if threads == 1 else 0.2)
    assert tuner.chosen == 1 and used.count(2) * 0.2 < 0.06 * used.count(1) * 0.1, used.count(2)


def test_a_probe_that_came_out_faster_within_the_margin_is_repeated_soon():
    """A probe timed a larger count 5% faster (a single update, beside actors): it costs nothing, so it is not
    backed off; the next probes find it 40% faster and take it."""
    machine = Machine()
    timings = iter([0.57] + [0.35] * 1000)
    machine.seconds = lambda: 0.6 if machine.threads == 1 else next(timings)
    tuner = ThreadTuner(ThreadPlan((1, 2), 1, "test"), machine.set)
    used = run(tuner, machine, 20)
    first = used.index(2)
    assert tuner.chosen == 2 and used[first + 1] == 1 and used.index(2, first + 1) - first <= 4, used


def test_probes_are_counted_in_seconds_too():
    """Slow updates of a count whose probes were slower back off in updates, but never beyond ``max_wait``
    seconds of updates (within the budget): a second count is timed again within a minute however long an update."""
    machine = Machine()
    machine.seconds = lambda: {1: 10.0, 2: 10.5}[machine.threads]
    tuner = ThreadTuner(ThreadPlan((1, 2), 1, "test"), machine.set)
    used = run(tuner, machine, 100)
    gaps = [
        b - a
        for a, b in zip([i for i, t in enumerate(used) if t == 2][:-1], [i for i, t in enumerate(used) if t == 2][1:])
    ]
    assert gaps and max(gaps) <= 5, gaps


class _CountingLearner(Learner):
    """A learner that records torch's thread count at each update."""

    def __init__(self):
        self.policy, self.version, self.seen, self.closed = torch.nn.Linear(1, 1), 0, [], False

    def step(self, rollouts, train_policy=True):
        self.seen.append(torch.get_num_threads())
        self.version += 1

    def state_dict(self):
        return {"version": self.version}

    def load_state_dict(self, state):
        self.version = state["version"]

    def close(self):
        self.closed = True


def test_a_tuned_learner_sets_its_threads_around_the_learner_and_gives_the_process_its_count_back():
    """The tuner lives in the learner it wraps: each update runs on the plan's count and says so as an event; the
    training loop sees a learner like any other, and closing it restores the process's thread count."""
    before = torch.get_num_threads()
    hub, stats = EventHub(), StatsAggregator("train")
    hub.listeners.append(stats)
    inner = _CountingLearner()
    other = 2 if before == 1 else 1
    tuned = TunedLearner(inner, ThreadPlan((other,), other, "test"), hub.publisher(RunEvents))
    rollout = types.SimpleNamespace(env_steps=8)
    for _ in range(3):
        tuned.step([rollout])
    assert inner.seen == [other] * 3 and tuned.version == 3 and tuned.tuner.chosen == other
    assert by_column(stats.reduce())[StatKey.of(RunEvents.learner_threads, "mean", "train").column()] == other
    tuned.load_state_dict({"version": 7})
    assert tuned.state_dict() == {"version": 7}
    tuned.close()
    assert inner.closed and torch.get_num_threads() == before


def test_torch_threads_are_set_in_one_module_of_the_package():
    """torch's thread count is set at the door (maze_impala.startup): no other module sets it."""
    package = Path(maze_impala.__file__).parent
    setting = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "set_num_threads" in path.read_text() and path.name != "startup.py"
    )
    assert setting == [], setting
