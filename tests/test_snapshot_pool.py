"""Self-play's snapshot pool: kept by the learner, published to every actor, found again by a restarted actor and
by a resumed run; and the fixed opponents a checkpoint saves."""

import io
import multiprocessing
import os
import signal

import numpy as np
import pytest
import torch
from tiny import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, train
from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.restarts import RestartPolicy
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.weights import SharedWeights
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config import OpponentPoolConfig
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub, event_name
from maze_impala.events.interfaces import GameEvents
from maze_impala.files import atomic_write_bytes
from maze_impala.nn.acting import Acting
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.play.pool import SNAPSHOT_STATE, PooledPublisher, PoolEvents, PoolOpponent, SnapshotPool
from maze_impala.testing import pool_a_new_actor_plays
from maze_impala.train.state import SNAPSHOT_POOL

TICTACTOE = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "pettingzoo.classic.tictactoe_v3",
}
FLAT = ModelConfig(image_encoder="flatten", hidden_units=[16])


def test_the_learners_pool_takes_a_snapshot_at_each_multiple_keeps_the_newest_and_round_trips():
    pool, net = SnapshotPool(OpponentPoolConfig(snapshot_every=10, size=2)), torch.nn.Linear(1, 1, bias=False)
    taken = []
    for version in range(0, 40, 3):
        net.weight.data.fill_(version)
        if pool.offer(net, version):
            taken.append(version)
    assert taken == [0, 12, 21, 30]  # the first weights at once, then the first version past each multiple
    assert list(pool.snapshots) == [3, 4] and pool.versions == [21, 30] and pool.taken == 4
    buffer = io.BytesIO()
    torch.save(pool.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # what a checkpoint reads back: no code unpickled
    again = SnapshotPool(OpponentPoolConfig(snapshot_every=10, size=2))
    again.load_state_dict(saved)
    assert list(again.snapshots) == [3, 4] and again.versions == [21, 30] and again.taken == 4
    assert [flat.tolist() for _, flat in again.snapshots.values()] == [[21.0], [30.0]]
    smaller = SnapshotPool(OpponentPoolConfig(snapshot_every=10, size=1))
    smaller.load_state_dict(saved)
    assert list(smaller.snapshots) == [4] and smaller.taken == 4  # a smaller pool keeps the newest


class Echo(Acting):
    """Acts the one value of the weights it loaded."""

    def state_shapes(self, step_key):
        return {}

    def act(self, step_key, obs, state, agent_ids, noise):
        rows = len(agent_ids)
        return {"a": np.full(rows, int(self.flat[0]))}, np.zeros(rows, np.float32), {}

    def load(self, flat):
        self.flat = flat


def _snapshots(*versions):
    return {number: (version, np.array([version], np.float32)) for number, version in versions}


def _shared(snapshots, slots=2):
    weights = SharedWeights(torch.nn.Linear(1, 1, bias=False), snapshot_slots=slots)
    weights.publish_snapshots(snapshots)
    return weights, weights.publish_snapshots


def _received(snapshots):
    from maze_impala.actors.ray_actors import ReceivedWeights

    weights = ReceivedWeights()
    weights.receive_pool(snapshots)
    return weights, weights.receive_pool


@pytest.mark.parametrize("transport", [_shared, _received], ids=["shared-memory", "ray"])
def test_an_opponent_plays_the_published_pool_one_snapshot_per_episode_and_agent(transport):
    if transport is _received:
        pytest.importorskip("ray")
    weights, publish = transport(_snapshots((1, 0), (2, 12)))
    assert weights.snapshots() == {1: 0, 2: 12} and weights.read_snapshot(2).tolist() == [12.0]
    assert weights.pool_scores() == {}  # none published yet: every snapshot counts 0.5
    (weights.publish_pool_scores if transport is _shared else weights.receive_scores)({1: 0.75, 2: 0.25})
    assert weights.pool_scores() == {1: 0.75, 2: 0.25}
    if transport is _shared:
        with pytest.raises(ValueError, match="layout"):
            publish({3: (25, np.zeros(2, np.float32))})
        assert weights.snapshots() == {1: 0, 2: 12}  # a refused pool leaves the published one readable
    opponent = PoolOpponent(Echo, weights, seed=0)
    assert opponent.state_shapes("player") == {SNAPSHOT_STATE: (1,)}

    def act(drawn):
        actions, _, state = opponent.act(
            "player", {"x": np.zeros((len(drawn), 1))}, {SNAPSHOT_STATE: drawn}, np.zeros(len(drawn), np.int64), None
        )
        return actions["a"], state[SNAPSHOT_STATE]

    playing, drawn = act(np.zeros((400, 1), np.float32))  # 400 episodes start
    assert opponent.versions == [0, 12] and 150 < (playing == 12).sum() < 250  # drawn uniformly from the pool
    again, _ = act(drawn)
    assert (again == playing).all()  # an episode keeps its snapshot
    publish(_snapshots((2, 12), (3, 25)))
    assert weights.snapshots() == {2: 12, 3: 25}
    with pytest.raises(KeyError, match="snapshot 1"):
        weights.read_snapshot(1)
    assert (act(drawn)[0] == playing).all() and opponent.versions == [0, 12]  # the pool is read when an episode starts
    moved, _ = act(np.concatenate([drawn, np.zeros((1, 1), np.float32)]))
    assert opponent.versions == [12, 25]  # snapshot 1 left: the episodes it played draw again
    assert set(moved[:400][playing == 0].tolist()) <= {12, 25} and (moved[:400][playing == 12] == 12).all()
    latest = PoolOpponent(Echo, weights, seed=0, draw="latest")
    assert (
        latest.act(
            "player",
            {"x": np.zeros((50, 1))},
            {SNAPSHOT_STATE: np.zeros((50, 1), np.float32)},
            np.zeros(50, np.int64),
            None,
        )[0]["a"].tolist()
        == [25] * 50
    )
    publish({})
    with pytest.raises(RuntimeError, match="no snapshot pool"):
        PoolOpponent(Echo, weights, seed=0).act(
            "player", {"x": np.zeros((1, 1))}, {SNAPSHOT_STATE: np.zeros((1, 1))}, np.zeros(1, np.int64), None
        )


def _pfsp_pool(*versions):
    """A learner's pool of snapshots of a one-weight net at ``versions``, numbered from 1."""
    pool, net = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=len(versions))), torch.nn.Linear(1, 1, False)
    for version in versions:
        net.weight.data.fill_(version)
        pool.offer(net, version)
    return pool


def test_pfsp_draws_the_snapshots_the_policy_beats_least_most_often():
    pool = _pfsp_pool(0, 12)
    weights, _ = _shared(pool.snapshots)
    opponent = PoolOpponent(Echo, weights, seed=0, draw="pfsp")
    start = np.zeros((1000, 1), np.float32)
    playing = opponent.act(
        "player", {"x": np.zeros((1000, 1))}, {SNAPSHOT_STATE: start}, np.zeros(1000, np.int64), None
    )[0]["a"]
    assert 400 < (playing == 12).sum() < 600  # no game played yet: equal chances
    hub, heard = EventHub(), []
    hub.listeners.append(heard.append)
    opponent.game_over("player", {SNAPSHOT_STATE: np.array([[1.0], [2.0], [0.0]])}, np.zeros(3, np.int64), "win", hub)
    assert [(r.values["snapshot"], r.values["score"]) for r in heard] == [(1, 1.0), (2, 1.0)]  # 0: did not decide
    assert {(r.interface, r.event) for r in heard} == {event_name(PoolEvents.pool_game)}
    for _ in range(30):  # the trained policy beats snapshot 1, and wins 1 in 3 against snapshot 2
        pool.record([(1, 1.0), (2, 1.0), (2, 0.0), (2, 0.0), (7, 1.0)])  # 7: a snapshot no longer in the pool
    scores = pool.scores()
    assert set(scores) == {1, 2} and scores[1] > 0.95 and 0.3 < scores[2] < 0.35
    weights.publish_pool_scores(scores)
    assert weights.pool_scores() == scores  # what every actor reads
    chances = opponent.chances()
    assert chances[0] < 0.01 and abs(chances.sum() - 1) < 1e-9  # (1 - x)**2: 0.0006 against 0.45
    playing = opponent.act(
        "player", {"x": np.zeros((1000, 1))}, {SNAPSHOT_STATE: start}, np.zeros(1000, np.int64), None
    )[0]["a"]
    assert (playing == 12).sum() > 980
    pool.offer(torch.nn.Linear(1, 1, False), 25)  # snapshot 3 joins, snapshot 1 leaves the pool of two
    assert set(pool.results) == {2} and pool.scores()[3] == 0.5  # a snapshot that left is forgotten; a new one: 0.5


def test_the_learners_pool_hears_its_games_on_the_hub_and_is_published_after_each_update():
    pool, net = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=2)), torch.nn.Linear(1, 1, False)
    pool.offer(net, 0)
    weights, _ = _shared(pool.snapshots, slots=2)
    hub = EventHub()
    hub.listeners.append(pool.hear)
    games = hub.publisher(PoolEvents)
    for score in (1.0, 1.0, 0.0):  # as a rollout's events are replayed on the learner's hub
        games.pool_game(snapshot=1, score=score)
    hub.publisher(GameEvents).win(seat="player_1", value=1.0)  # another event: not the pool's
    assert pool.scores() == {1: pytest.approx((1.99 * 0.99 + 0.5) / (1.99 * 0.99 + 1 + 1))}
    publisher = PooledPublisher(weights, pool)
    publisher.publish(net, 0)  # not due: the pool holds version 0, the next snapshot is at 1
    assert weights.snapshots() == {1: 0} and weights.pool_scores() == pool.scores()
    publisher.publish(net, 1)
    assert weights.snapshots() == {1: 0, 2: 1} and weights.version() == 1 and set(weights.pool_scores()) == {1, 2}


def test_the_pools_games_and_its_draws_survive_a_resume():
    pool = _pfsp_pool(0, 12, 30)
    pool.record([(1, 1.0)] * 40 + [(2, 0.5)] * 10 + [(3, 0.0)] * 5)
    buffer = io.BytesIO()
    torch.save(pool.state_dict(), buffer)
    buffer.seek(0)
    resumed = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=3))
    resumed.load_state_dict(torch.load(buffer, weights_only=True))  # as a checkpoint is read: no code unpickled
    assert resumed.scores() == pool.scores() and resumed.results == pool.results
    draws = []
    for source in (pool, resumed):  # the actors of the run and of its resume draw alike
        weights, _ = _shared(source.snapshots, slots=3)
        weights.publish_pool_scores(source.scores())
        opponent = PoolOpponent(Echo, weights, seed=0, draw="pfsp")
        opponent.act(
            "player",
            {"x": np.zeros((1, 1))},
            {SNAPSHOT_STATE: np.zeros((1, 1), np.float32)},
            np.zeros(1, np.int64),
            None,
        )
        draws.append(opponent.chances())
    np.testing.assert_array_equal(draws[0], draws[1])
    assert draws[0][2] > draws[0][1] > draws[0][0]  # beaten least, drawn most
    earlier = {k: v for k, v in pool.state_dict().items() if k not in ("games", "scores")}
    old = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=3))
    old.load_state_dict(earlier)  # a checkpoint of before the pool kept its games: every snapshot at 0.5
    assert old.scores() == {1: 0.5, 2: 0.5, 3: 0.5}


def test_an_actor_reports_each_game_against_the_pool_with_the_snapshot_that_played_it():
    policy = make_policy(make_env(TICTACTOE), FLAT)
    weights, pool = SharedWeights(policy, snapshot_slots=2), SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=2))
    pool.offer(policy, 0)
    torch.nn.init.normal_(next(policy.parameters()))
    pool.offer(policy, 1)
    weights.publish_snapshots(pool.snapshots)
    spec = ActorSpec(TICTACTOE, Lineup.of(FLAT, "pool", 2, "pfsp"), n_rollout_steps=16, envs_per_actor=3, seed=0)
    for index in range(2):  # the trained policy in the first seat, then in the second
        actor = spec.build(index, weights)
        try:
            rollouts = [actor.rollout() for _ in range(3)]
        finally:
            actor.close()
        events = [r for rollout in rollouts for r in rollout.events if r.interface == GameEvents.__name__]
        games = [
            (r.values["snapshot"], r.values["score"])
            for rollout in rollouts
            for r in rollout.events
            if (r.interface, r.event) == event_name(PoolEvents.pool_game)
        ]
        wins, draws, losses = (
            sum(r.values["value"] for r in events if r.event == name) for name in ("win", "draw", "loss")
        )
        assert wins + draws + losses > 5 and {number for number, _ in games} <= {1, 2}
        assert len(games) == wins + draws + losses and sum(score for _, score in games) == wins + 0.5 * draws


def test_an_actor_killed_and_restarted_plays_the_learners_pool():
    policy = make_policy(make_env(TICTACTOE), FLAT)
    learner_pool = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=2))
    for version in range(7):  # seven snapshots taken: the pool holds those of versions 5 and 6
        torch.nn.init.normal_(next(policy.parameters()))
        learner_pool.offer(policy, version)
    weights = SharedWeights(policy, version=6, snapshot_slots=2)
    weights.publish_snapshots(learner_pool.snapshots)
    spec = ActorSpec(TICTACTOE, Lineup.of(FLAT, "pool", 1), n_rollout_steps=8, envs_per_actor=4, seed=0)
    assert pool_a_new_actor_plays(spec, weights) == [5, 6]
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    process = context.Process(target=pool_a_new_actor_plays, args=(spec, weights, answer))  # as an actor process starts
    process.start()
    try:
        assert answer.get(timeout=60) == [5, 6]
    finally:
        process.join(timeout=30)
        process.kill()
    pool = SubprocessActors(spec, weights, 1, queue_size_limit=2, restarts=RestartPolicy(max_restarts=1))
    with pool:  # an actor without the pool would fail every game against it, and the run with it
        pool.collect(2)
        os.kill(pool.actors[0].process.pid, signal.SIGKILL)
        for _ in range(4):
            pool.collect(1)
        assert pool.actors[0].generation == 1 and pool.actors[0].process.is_alive()


ALGORITHM = dict(
    train_opponent="pool",
    train_opponent_share=0.5,
    opponent_pool=OpponentPoolConfig(snapshot_every=2, size=3),
    epoch_length=3,
    envs_per_actor=4,
    n_rollout_steps=8,
    num_actors=2,
)


def _train(out, n_epochs, resume=False):
    algorithm = ImpalaAlgorithmConfig(n_epochs=n_epochs, **ALGORITHM)
    algorithm.rollout_evaluator.n_episodes = 2
    return train(
        TICTACTOE,
        algorithm,
        FLAT,
        RunnerConfig("dev"),
        seed=1,
        output=QUIET,
        **({"resume_from": out} if resume else {"output_dir": out}),
    )


def test_a_resumed_run_goes_on_with_the_pool_its_checkpoint_saved(tmp_path):
    _train(tmp_path, n_epochs=2)  # 6 updates, a snapshot every 2: versions 0, 2, 4, 6; the newest 3 kept
    saved = read_checkpoint(tmp_path / "model_last.pt")[SNAPSHOT_POOL]
    assert saved["numbers"].tolist() == [2, 3, 4] and saved["versions"].tolist() == [2, 4, 6]
    _train(tmp_path, n_epochs=3, resume=True)
    resumed = read_checkpoint(tmp_path / "model_last.pt")[SNAPSHOT_POOL]
    assert resumed["numbers"].tolist() == [3, 4, 5] and resumed["versions"].tolist() == [4, 6, 8]
    assert torch.equal(resumed["weights"][:2], saved["weights"][1:])  # the snapshots it kept, exactly
    assert saved["games"].sum() > 0  # the actors' games against the pool, kept by the learner's pool
    # the games against the snapshots it kept go on from the saved ones (each new game decays an old one by 1%)
    assert (resumed["games"][:2] >= 0.9 * saved["games"][1:]).all()


def test_a_run_of_a_release_without_a_saved_pool_resumes_with_a_pool_of_its_weights(tmp_path):
    _train(tmp_path, n_epochs=1)
    checkpoint = read_checkpoint(tmp_path / "model_last.pt")
    del checkpoint[SNAPSHOT_POOL]
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    atomic_write_bytes(tmp_path / "model_last.pt", buffer.getvalue())
    _train(tmp_path, n_epochs=2, resume=True)
    resumed = read_checkpoint(tmp_path / "model_last.pt")[SNAPSHOT_POOL]
    assert resumed["numbers"].tolist() == [1, 2, 3] and resumed["versions"].tolist() == [3, 4, 6]


def test_a_resumed_run_plays_the_fixed_opponent_its_checkpoint_saved_even_if_its_file_is_gone(tmp_path):
    import shutil

    from maze_impala.checkpoints import OPPONENTS

    _train(tmp_path / "opponent", n_epochs=1)
    opponent = str(tmp_path / "opponent")
    weights = read_checkpoint(tmp_path / "opponent" / "model_best.pt")["policy"]
    algorithm = ImpalaAlgorithmConfig(n_epochs=1, **ALGORITHM | {"train_opponent": opponent})
    algorithm.rollout_evaluator.n_episodes, algorithm.rollout_evaluator.opponent = 2, opponent
    run = tmp_path / "run"
    train(TICTACTOE, algorithm, FLAT, RunnerConfig("dev"), seed=1, output=QUIET, output_dir=run)
    shutil.rmtree(tmp_path / "opponent")  # the opponent's run is gone: a resume still plays it
    algorithm.n_epochs = 2
    train(TICTACTOE, algorithm, FLAT, RunnerConfig("dev"), seed=1, output=QUIET, resume_from=run)
    saved = read_checkpoint(run / "model_last.pt")
    assert saved["epoch"] == 2 and set(saved[OPPONENTS]) == {opponent}
    assert all(torch.equal(saved[OPPONENTS][opponent]["weights"][k], v) for k, v in weights.items())
