"""The policy seam: what acts, as plain picklable data (:class:`PolicySpec`), and the one way to build it.

A spec names a model (the model config a run recorded) and where its weights come from: a checkpoint, read
once where the spec is made; random play; or the learner (:meth:`PolicySpec.learned`, the trained policy, whose
weights the actors read from their weight source), with how it acts there (in numpy through its numpy form, or
in torch on a device). The process that builds a run resolves every opponent, the trained policy and the rollout
CLI's policy to specs; actor and worker processes act from them through :func:`load_acting`, and never read a
checkpoint themselves.

An opponent is named in a config (``random``, a checkpoint, a run dir; ``pool`` for training against past
selves): :func:`opponent_spec` resolves a name to a spec once, where the run is built.

Checkpoints are read by :mod:`maze_impala.checkpoints`, once per file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maze_impala.checkpoints import Checkpoint, restore_modules
from maze_impala.config import ConfigError, ModelConfig
from maze_impala.config.base import from_mapping
from maze_impala.run_files import BEST_MODEL

if TYPE_CHECKING:  # torch is imported where it is used: an actor that acts in numpy imports this module, not torch
    import torch

    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.nn.acting import Acting
    from maze_impala.nn.critics import StructuredCritic
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.nn.numpy_forms import NumpyPolicyForm


RANDOM = "random"
"""The opponent (or rollout policy) that plays uniformly at random over the legal actions."""
POOL = "pool"
"""``algorithm.train_opponent=pool``: past snapshots of the trained policy (training only)."""


@dataclass(frozen=True)
class PolicySpec:
    """What acts: a model record, its weights and how it acts. Picklable; made once in the process that builds a
    run (:meth:`from_checkpoint`, :meth:`random`, :meth:`learned`), acted anywhere (:func:`load_acting`)."""

    model: dict[str, Any] | None = None
    """The model config as a run records it; None: a random policy."""
    weights: dict[str, torch.Tensor] | None = None
    """The policy's state dict; None with a model: the learner's, which the actors read from their weight source."""
    source: str = "random"
    """Where the weights came from, for messages: a checkpoint's path, or ``random``."""
    env: Any = None
    """The env config of the run that trained the policy (None for random play and the learner's policy)."""
    numpy_form: NumpyPolicyForm | None = None
    """The learner's policy as plain data, where it acts in numpy (:func:`~maze_impala.nn.torch_acting.numpy_form_of`):
    an actor process then never imports torch."""
    device: str | None = None
    """Where the learner's policy acts through torch (``runner.actor_device``); None: in numpy where it has a numpy
    form, else through torch on the CPU."""
    search: int | None = None
    """Simulations per move of OpenSpiel's MCTS bot, which plays instead of a model (``opponent=mcts:<n>``)."""

    @classmethod
    def random(cls) -> PolicySpec:
        """Uniform random play over the legal actions."""
        return cls()

    @classmethod
    def mcts(cls, simulations: int) -> PolicySpec:
        """OpenSpiel's MCTS bot with ``simulations`` simulations per move (see :mod:`maze_impala.play.search`)."""
        return cls(source=f"mcts:{simulations}", search=simulations)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint | Path | str) -> PolicySpec:
        """The policy a training checkpoint holds (a path: read here, once)."""
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = Checkpoint.read(checkpoint)
        record = checkpoint.record
        return cls(dict(record["model"]), checkpoint.weights("policy"), str(checkpoint.path), record["env"])

    @classmethod
    def learned(
        cls, model: ModelConfig, numpy_form: NumpyPolicyForm | None = None, device: str | None = None
    ) -> PolicySpec:
        """The trained policy of a run: ``model``'s, acting with the weights the learner publishes."""
        return cls(asdict(model), None, "the trained policy", None, numpy_form, device)

    @property
    def has_no_model(self) -> bool:
        """Random play or a search: no model, its games the same from the same seed."""
        return self.model is None

    @property
    def is_learned(self) -> bool:
        """The learner's policy: its weights come from the actors' weight source."""
        return self.model is not None and self.weights is None

    def in_numpy(self, form: NumpyPolicyForm | None) -> PolicySpec:
        """This spec acting in numpy through ``form``, where it names neither a form nor a device already."""
        if form is None or self.numpy_form is not None or self.device is not None:
            return self
        return replace(self, numpy_form=form)

    def state_dict(self) -> dict[str, Any]:
        """Plain data and tensors (what a checkpoint saves: a run's fixed opponents go into its checkpoints)."""
        return {
            "model": self.model,
            "weights": self.weights,
            "source": self.source,
            "env": self.env,
            "search": self.search,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PolicySpec:
        """The spec :meth:`state_dict` saved."""
        return cls(state["model"], state["weights"], state["source"], state["env"], search=state.get("search"))

    def policy(self, env: StructuredEnv, seed: int = 0) -> StructuredPolicy:
        """The policy for ``env``'s spaces, its weights loaded (the learner's: as initialised, until the actor loads
        the published ones), in eval mode (``seed``: random play's draws)."""
        from maze_impala.nn.models import make_policy, make_random_policy

        if self.search is not None:
            raise ConfigError(f"{self.source} searches; it has no policy network to load (load_acting plays it)")
        if self.model is None:
            return make_random_policy(env, seed)
        policy = make_policy(env, from_mapping(ModelConfig, self.model, "model"))
        if self.weights is not None:
            restore_modules({"policy": self.weights}, self.source, policy=policy)
        return policy.eval()


def load_acting(spec: PolicySpec, env: StructuredEnv, seed: int = 0) -> Acting:
    """The one way from a spec to an acting in ``env``. The learner's policy: in numpy through its numpy form
    (no torch imported), else through torch on its device; its weights are the actor's to load. Any other: the
    policy, refused if it plays another game, frozen, with its own weights; in numpy where it exports a numpy form,
    in torch otherwise (``seed``: random play's draws)."""
    if spec.search is not None:
        from maze_impala.play.search import MctsActing

        return MctsActing(env, spec.search, seed)
    if spec.numpy_form is not None and spec.device is None:
        from maze_impala.nn.numpy_acting import NumpyActing

        return NumpyActing(spec.numpy_form)
    from maze_impala.nn.torch_acting import TorchActing, make_acting

    policy = opponent_policy(spec, env, seed)
    return TorchActing(policy.to(spec.device or "cpu")) if spec.is_learned else make_acting(policy)


def load_policy(checkpoint: Checkpoint | str | Path) -> tuple[StructuredPolicy, StructuredEnv]:
    """The policy of a checkpoint written by training (a path: read here, once), and a fresh env of the run's
    config."""
    from maze_impala.envs.factory import make_env

    spec = PolicySpec.from_checkpoint(checkpoint)
    env = make_env(spec.env)
    try:
        return spec.policy(env), env
    except BaseException:
        env.close()
        raise


def load_critic(checkpoint: Checkpoint, env: StructuredEnv) -> StructuredCritic:
    """The critic of a checkpoint written by training (read already: its policy is read from the same state), for
    ``env`` (the run's env), frozen in eval mode."""
    from maze_impala.nn.critics import make_critic

    weights = checkpoint.weights("critic")
    model = from_mapping(ModelConfig, dict(checkpoint.record["model"]), "model")
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    restore_modules({"critic": weights}, checkpoint.path, critic=critic)
    return critic.eval().requires_grad_(False)


def opponent_spec(name: str) -> PolicySpec:
    """The fixed opponent ``name`` says: ``random``, a checkpoint of a training run, or a run's output dir (its
    ``model_best.pt``), resolved once, in the process that builds the run (actors get the spec, weights included)."""
    if name == POOL:
        raise ConfigError(
            "opponent=pool: the pool of the trained policy's snapshots is an opponent to train against "
            "(algorithm.train_opponent=pool); games are played against random, a checkpoint or a run "
            "dir"
        )
    if name == RANDOM:
        return PolicySpec.random()
    from maze_impala.play.search import search_simulations

    if (simulations := search_simulations(name)) is not None:
        return PolicySpec.mcts(simulations)
    path = Path(name)
    checkpoint = path / BEST_MODEL if path.is_dir() else path
    if not checkpoint.is_file():
        raise ConfigError(
            f"opponent={name!r}: neither 'random', 'mcts' (or mcts:<simulations>) nor a checkpoint "
            f"file or a training output dir holding {BEST_MODEL}"
        )
    return PolicySpec.from_checkpoint(checkpoint)


def opponent_policy(spec: PolicySpec, env: StructuredEnv, seed: int = 0) -> StructuredPolicy:
    """The policy ``spec`` describes (an opponent's, a rolled-out one's), for ``env`` (whose spaces it must play),
    frozen."""
    policy = spec.policy(env, seed)
    if not plays(policy, env):
        raise ConfigError(
            f"opponent={spec.source!r} was trained on an env with other spaces than this one's: an "
            "opponent (or a policy rolled out) must play the same game"
        )
    policy.requires_grad_(False)
    return policy


def plays(policy: StructuredPolicy, env: StructuredEnv) -> bool:
    """Whether ``policy`` acts in ``env``: the same step keys and actions, and observations it reads that ``env``
    gives (a policy does not read the critic-only keys)."""
    observations = env.observation_spaces_dict
    return policy.action_spaces == env.action_spaces_dict and all(
        key in observations and all(observations[key].spaces.get(name) == sub for name, sub in space.spaces.items())
        for key, space in policy.observation_spaces.items()
    )
