"""IMPALA's hyper-parameters: one dataclass, validated at construction.

Field names follow Maze-RL's ``ImpalaAlgorithmConfig`` so that its users feel at
home; ``vtrace_lambda``, ``envs_per_actor`` and ``eps`` (named as in rllte) are additions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from maze_impala.config.base import ConfigError, check, finite
from maze_impala.config.evaluation import RolloutEvaluatorConfig
from maze_impala.config.pool import OpponentPoolConfig

LR_SCHEDULES = ("constant", "linear")
TRUST_REGIONS = ("learner", "behaviour")
VALUE_TARGETS = ("step", "batch")
"""The values of ``algorithm.value_targets``."""
VALUE_NORMALIZATIONS = ("off", "returns", "shift", "popart")
"""The values of ``algorithm.value_normalization``."""
KL_STOP_FACTOR = 1.5
"""A batch's optimizer steps stop once a minibatch's KL(pi_0 || pi) exceeds this many times ``target_kl`` (SB3's)."""
OPTIMIZERS = ("adam", "rmsprop")
OPTIMIZER_EPS = {"adam": 1e-5, "rmsprop": 0.01}
"""Each optimizer's epsilon where ``eps`` is None: Adam's as in PPO's implementations (for a loss that is a mean over
the batch, as maze_impala's are); RMSProp's as in the IMPALA paper's settings and torchbeast's, for a loss summed
over the batch's steps (see :attr:`ImpalaAlgorithmConfig.optimizer_eps`)."""
COMPILE_MODES = ("off", "default", "reduce-overhead")
"""The values of ``algorithm.compile``: eager, ``torch.compile``, ``torch.compile`` replayed as CUDA graphs."""
PRECISIONS = ("float32", "bf16")
"""The values of ``algorithm.precision``."""


def _check(ok: bool, name: str, value: object, requirement: str, after: tuple[str, ...] = ()) -> None:
    check(ok, f"algorithm.{name}", value, requirement, tuple(f"algorithm.{field}" for field in after))


def _int_from(least: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and v >= least


def _finite_above(low: float, inclusive: bool = False, optional: bool = False) -> Callable[[Any], bool]:
    return lambda v: (optional and v is None) or (finite(v) and (v >= low if inclusive else v > low))


def _unit(v: Any) -> bool:
    return finite(v) and 0 < v <= 1


FIELD_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("train_opponent", lambda v: v is None or (isinstance(v, str) and bool(v)),
     "null, random, pool, or the path of a checkpoint or training output dir"),
    ("train_opponent_share", lambda v: isinstance(v, int | float) and 0 < v <= 1, "a float in (0, 1]"),
    ("compile", lambda v: v in COMPILE_MODES, f"one of {', '.join(COMPILE_MODES)}"),
    ("precision", lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    ("n_epochs epoch_length n_rollout_steps actors_batch_size num_actors envs_per_actor n_sgd_passes "
     "n_sgd_minibatches num_learners", _int_from(1), "an int >= 1"),
    ("target_score", lambda v: v is None or finite(v), "a finite number, or null to train all n_epochs"),
    ("fit_value_mean", lambda v: isinstance(v, bool), "true or false"),
    ("patience critic_burn_in_epochs", _int_from(0), "an int >= 0"),
    ("lr", _finite_above(0), "a finite float > 0"),
    ("eps", _finite_above(0, optional=True), "None or a finite float > 0"),
    ("optimizer", lambda v: v in OPTIMIZERS, f"one of {OPTIMIZERS}"),
    ("vtrace", lambda v: isinstance(v, bool), "true or false"),
    ("lr_schedule entropy_schedule", lambda v: v in LR_SCHEDULES, f"one of {LR_SCHEDULES}"),
    ("gamma", _unit, "in (0, 1]"),
    ("reward_clip", _finite_above(0, optional=True), "None (no clip) or a float > 0"),
    ("policy_loss_coef value_loss_coef entropy_coef max_grad_norm", _finite_above(0, inclusive=True),
     "a finite float >= 0"),
    ("continuous_entropy_coef", _finite_above(0, inclusive=True, optional=True),
     "None (entropy_coef) or a finite float >= 0"),
    ("device", lambda v: v in ("cpu", "cuda") or str(v).startswith("cuda:"), "'cpu' or 'cuda' (or 'cuda:N')"),
    ("queue_out_of_sync_factor", _finite_above(0), "a finite float > 0"),
    ("vtrace_clip_rho_threshold vtrace_clip_c_threshold vtrace_clip_pg_rho_threshold",
     _finite_above(0, optional=True), "None (no clip) or a float > 0"),
    ("clip_range", lambda v: v is None or (finite(v) and 0 < v < 1),
     "None (IMPALA's policy gradient) or a float in (0, 1)"),
    ("trust_region", lambda v: v in TRUST_REGIONS, f"one of {TRUST_REGIONS}"),
    ("value_targets", lambda v: v in VALUE_TARGETS, f"one of {VALUE_TARGETS}"),
    ("value_normalization", lambda v: v in VALUE_NORMALIZATIONS, f"one of {', '.join(VALUE_NORMALIZATIONS)}"),
    ("value_norm_decay", lambda v: finite(v) and 0 < v < 1, "a float in (0, 1)"),
    ("target_kl", _finite_above(0, optional=True), "None (take every step) or a finite float > 0"),
    ("max_policy_lag", lambda v: v is None or _int_from(0)(v), "None (keep every rollout) or an int >= 0"),
    ("vtrace_lambda", _unit, "in (0, 1]"),
)  # fmt: skip
"""Each field's own check, as (field names, what a good value passes, what it must be); the checks across fields are
:meth:`ImpalaAlgorithmConfig.__post_init__`'s."""


@dataclass
class ImpalaAlgorithmConfig:
    """Algorithm parameters of IMPALA (Espeholt et al. 2018)."""

    n_epochs: int = 24
    """Number of epochs to train."""
    epoch_length: int = 50
    """Number of learner updates per epoch."""
    patience: int = 0
    """Stop after this many epochs without a better evaluation; 0 never stops early."""
    target_score: float | None = None
    """Stop at the first evaluation that scores at least this: the score that selects ``model_best.pt`` (the mean
    greedy evaluation return, or in games against an opponent the mean win-plus-half-draw rate); null: never."""
    critic_burn_in_epochs: int = 0
    """Number of first epochs in which only the critics are trained."""
    n_rollout_steps: int = 32
    """Steps per rollout (per environment of an actor)."""
    lr: float = 1e-3
    """Learning rate of the optimizer."""
    lr_schedule: str = "linear"
    """constant, or linear: anneal lr to 0 over n_epochs x epoch_length updates (as in the IMPALA paper)."""
    optimizer: str = "adam"
    """adam (betas 0.9 and 0.99), or rmsprop (decay 0.99, no momentum), the optimizer of the IMPALA paper,
    torchbeast and rllte."""
    eps: float | None = None
    """The optimizer's epsilon, a floor under each parameter's gradient scale; None: the optimizer's own, 1e-5 for
    Adam (as in PPO's implementations: once a task is solved a parameter's gradient is about 1e-5, noise, and with
    a smaller floor Adam scales that noise up to steps of about lr; see docs/benchmarks.md) and for RMSProp the
    IMPALA paper's 0.01 divided by the env steps of an update (the paper's loss is a sum over them, maze_impala's
    a mean; see :attr:`optimizer_eps`). ``algorithm=impala_cartpole`` sets 1e-3, which the one-pass IMPALA loss
    needed."""
    gamma: float = 0.99
    """Discount factor."""
    reward_clip: float | None = None
    """Clip each reward to [-reward_clip, reward_clip] in the loss (Atari: 1, as in the IMPALA paper); the
    statistics, KPIs and evaluations keep the env's own rewards. None: no clip."""
    policy_loss_coef: float = 1.0
    """Weight of the policy-gradient loss."""
    value_loss_coef: float = 0.5
    """Weight of the critics' value loss."""
    entropy_coef: float = 0.005
    """Weight of the entropy bonus (its loss is minus the entropy) of every step key, unless
    ``continuous_entropy_coef`` sets one for those with continuous actions. The bonus lies outside the trust region:
    it pushes in every one of a batch's ``n_sgd_passes`` x ``n_sgd_minibatches`` optimizer steps however far the
    policy has moved, so its weight
    goes with their count: 0.005 over 64 steps a batch pushes as 0.01 did over 32, and 0.01 over 64 needed 1.9 times
    the env steps on the cooperative rows and left MPE simple_spread near random play in 2 of 3 seeds
    (docs/benchmarks.md). With raw advantages, once a task is solved they shrink and the bonus dominates the policy's
    gradient, which drifts the policy towards randomness (CartPole fell in 4 of 5 seeds at 0.01);
    ``normalize_advantages`` keeps the two in proportion. For exploration that must end sharp, pair a larger bonus
    with ``entropy_schedule=linear``."""
    continuous_entropy_coef: float | None = None
    """Weight of the entropy bonus of the step keys with a continuous (Box) action part; None (the default):
    ``entropy_coef``, the same for every action kind. A Gaussian's entropy moves with its scale, which
    ``model.init_log_std`` starts at a share of each dimension's range: with that start one weight serves both kinds
    (Walker2d-v5 4,305 against 3,824 at 0.003, Pendulum -169.7 against -173.7, the held-out Hopper and Swimmer no
    lower; docs/benchmarks.md). A weight of its own is for a Box whose bonus must differ: Pendulum scored -326 and
    -461 at 0.01 with a standard deviation of a whole half-width."""
    entropy_schedule: str = "constant"
    """constant, or linear: anneal entropy_coef to 0 over n_epochs x epoch_length updates, as lr_schedule does lr
    (explore early, settle late: a large bonus kept to the end leaves the policy soft where it must be sharp)."""
    max_grad_norm: float = 40.0
    """Clip each network's gradient to this norm; 0 disables clipping."""
    device: str = "cpu"
    """Where the learner runs: cpu or cuda (actors act on the CPU unless ``runner.actor_device`` says otherwise)."""
    compile: str = "off"
    """The update's forward pass and losses compiled with ``torch.compile``: off (eager), default (its default
    mode), or reduce-overhead (compiled and replayed as CUDA graphs, for a learner on a GPU, where launches cost
    more than the arithmetic). The first updates of each batch shape compile (seconds to a minute); a batch whose
    shapes vary (agents that come and go) compiles again for each new shape. See docs/benchmarks.md for what it
    measured; off by default."""
    precision: str = "float32"
    """float32, or bf16: the networks' matrix products and convolutions in the learner's forward pass under bfloat16
    autocast (weights, optimizer, V-trace and the losses stay float32). See docs/benchmarks.md for its speed and
    learning beside float32; float32 by default."""
    num_learners: int = 1
    """Data-parallel learners (rllte's num_learners): each takes a share of every minibatch's trajectories and
    their gradients are summed (gloo on CPUs, NCCL on GPUs), which makes the update that of one learner on the
    whole batch. Processes beside the training process (runner=local or dev), or Ray actors in a placement group
    (runner=ray). Each minibatch needs at least num_learners trajectories of every step key."""
    queue_out_of_sync_factor: float = 1.0
    """The rollout queue holds at most max(1, factor x actors_batch_size) rollouts."""
    actors_batch_size: int = 1
    """Rollouts combined into one learner update (the most, with min_actors_batch_size)."""
    min_actors_batch_size: int | None = None
    """Adaptive batches: an update waits for this many rollouts and takes every other one that is ready too, up
    to actors_batch_size, so that the learner takes what the actors made while it learnt; None: every update
    takes exactly actors_batch_size rollouts."""
    num_actors: int = 2
    """Number of actors (processes with runner=local)."""
    envs_per_actor: int = 32
    """Environments each actor steps side by side, with one batched forward pass per step (the more,
    the cheaper each env step's share of the forward pass)."""
    vtrace: bool = True
    """Correct the value targets and advantages for the actors' lag with V-trace's importance weights; false: plain
    n-step bootstrapped targets and advantages, no importance correction (schola's switch)."""
    vtrace_clip_rho_threshold: float | None = 1.0
    """rho-bar, the clip of the importance weights in the value targets; None: no clip."""
    vtrace_clip_c_threshold: float | None = 1.0
    """c-bar, the clip of the importance weights in V-trace's traces, c_t = lambda * min(c-bar, rho_t) (EvoRL's
    clip_c_threshold); None: no clip."""
    vtrace_clip_pg_rho_threshold: float | None = 1.0
    """Clip of the importance weights in the policy-gradient advantages; None: no clip."""
    vtrace_lambda: float = 0.95
    """lambda of the V-trace traces, c_t = lambda * min(c-bar, rho_t); 1.0 is plain V-trace, below it the targets
    mix shorter returns in, as GAE's lambda does."""
    n_sgd_passes: int = 8
    """Passes over each batch (sample reuse, as in IMPACT, Luo et al. 2019); V-trace's importance
    weights stay those of the policy before the batch's first step. One policy version (and one
    learning-rate step) per batch, whatever the passes."""
    n_sgd_minibatches: int = 8
    """Optimizer steps per pass: each pass cuts the batch into this many minibatches of whole trajectories (the
    batch's columns, in fixed contiguous runs) and takes one step on each; n_sgd_passes x n_sgd_minibatches steps
    per batch, each on 1/n_sgd_minibatches of it. pi_0, the trust region's anchor, stays the policy before the
    batch's first step. A batch of fewer trajectories (``envs_per_actor`` x its rollouts) takes one minibatch per
    trajectory (:attr:`sgd_minibatches`). 8 (64 steps a batch, minibatches of 128 samples) over 4: LunarLander's
    median 274 against 159 at 1M env steps, on 3 seeds; the learner's MLP update costs about 1.7 times as much, as
    an optimizer step's cost is mostly its fixed dispatch (docs/benchmarks.md)."""
    clip_range: float | None = 0.05
    """The policy loss. A float eps: PPO's clipped surrogate, over the V-trace advantages: a sample stops pushing
    an action's probability once it moved eps away from that of the policy named by ``trust_region``. None:
    IMPALA's V-trace policy gradient (the paper's, without a trust region; ``trust_region`` is then unused)."""
    trust_region: str = "learner"
    """What ``clip_range`` is measured from. learner: the learner's policy before the batch's first pass (IMPACT's
    pi/pi_0), with the actors' lag corrected by V-trace's truncated weights min(1, pi_0/mu): every batch may move
    the policy by eps, however stale. behaviour: the actors' policy (pi/mu), so the lag uses the region up (with
    a narrow clip_range a lagging learner stalls)."""
    value_targets: str = "step"
    """The critic V-trace's value targets and advantages bootstrap from, within a batch of several optimizer steps
    (``n_sgd_passes`` x ``n_sgd_minibatches``). step: the current critic's, recomputed at every step (IMPACT's
    passes). batch: the critic's before the batch's first step, held fixed while the critic fits them (PPO's
    returns), so that the critic does not chase targets it moves itself. step over batch with the shipped 64 steps a
    batch: MPE simple_spread judged -43.9 and -49.7 against -68.9 and -57.3 (seeds 1 and 2); a solved CartPole
    dipped below 400 in 2 of 12 seeds either way (docs/benchmarks.md)."""
    value_normalization: str = "popart"
    """The scale the critics learn in. off: the env's returns as they are. returns: each critic network predicts its
    value targets standardised by their running mean and standard deviation (float64, updated once a batch with
    the batch's V-trace targets; MAPPO's ValueNorm), so that its loss and its gradients have the same size whatever
    the rewards' scale. shift: the same statistics, and the network's output layer rescaled at each update so
    that each value's distance from the targets' mean stays what it was, while the mean moves every value with it.
    popart: the same statistics, and the network's output layer rescaled at each update so
    that its values in the env's units stay what they were (PopArt, van Hasselt et al. 2016; IMPALA with it:
    Hessel et al. 2019). V-trace and the advantages always read values in the env's units; the statistics are
    saved with the critic. popart by default: with every reward x100, Acrobot and Pendulum learn as they do
    unscaled (off: -500 and -906), and unscaled it held or beat off on classic control, CartPole and LunarLander.
    ``env=pettingzoo`` sets returns (with ``value_norm_decay`` 0.999): on MPE simple_spread it judged -41.2 (the
    median of 3 seeds), PopArt -58.8 and off -53.1. The other way round, returns with 0.999 on the single-agent
    rows judged Walker2d 1,855 against PopArt's 4,305. MPE needs the mean followed (shift judged -41.8 there),
    Walker2d needs it kept (shift: 1,291; docs/benchmarks.md)."""
    value_norm_decay: float = 0.99
    """With ``value_normalization`` returns, shift or popart: the weight of the statistics so far at each update (an
    exponential moving average with debiasing, once a batch): 0.99 counts about the last 100 batches, 0.999 about
    the last 1,000. ``env=pettingzoo`` sets 0.999: with returns, SISL multiwalker's statistics moved under its
    critic as falls became rare and one seed of 3 collapsed at 0.99 (docs/benchmarks.md)."""
    fit_value_mean: bool = False
    """With ``value_normalization=popart``: before a batch's optimizer steps, each critic network's output bias is
    moved so that its mean error on the batch's value targets is zero, and the critic's level follows its targets'
    at once, as returns does, while each value stays where PopArt keeps it. Not shipped: on MPE simple_spread (seed
    1) it judged -47.3 against PopArt's -58.9 and returns' -39.4, its critic still fitting late, and Walker2d 3,554
    against PopArt's 4,305 (docs/benchmarks_history.md)."""
    target_kl: float | None = None
    """Step control: a batch's optimizer steps stop, before the step, at the first minibatch whose KL(pi_0 || pi)
    on its actions exceeds 1.5 x target_kl (SB3's rule), pi_0 being the policy before the batch; None: every
    step is taken. Each update records its steps taken (``policy_sgd_steps``)."""
    normalize_advantages: bool = True
    """Scale each step key's policy-gradient advantages to mean 0 and standard deviation 1 over each minibatch (PPO's
    rule), so that the policy's step, and the entropy bonus beside it, keep their size whatever the rewards'
    scale and however small the advantages of a policy that has learnt."""
    max_policy_lag: int | None = 100
    """Drop (and count) rollouts made by a policy more than this many updates older than the learner's, e.g.
    from an actor that was stopped for a while; None keeps every rollout."""
    train_opponent: str | None = None
    """Multi-agent games: an opponent that ``train_opponent_share`` of the actors play against instead of
    self-play: ``random``, a checkpoint, a training output dir (its model_best.pt), or ``pool``: past snapshots
    of the trained policy (see ``opponent_pool``). Each such actor plays one seat with the trained policy (actor i:
    seat i mod the number of seats), the opponent plays the others, and the learner learns from the trained seat's
    decisions only: the opponent's are part of the env. None: self-play."""
    train_opponent_share: float = 1.0
    """The share of the actors that play against ``train_opponent`` (at least one); the others self-play, against
    the current policy."""
    opponent_pool: OpponentPoolConfig = field(default_factory=OpponentPoolConfig)
    """The snapshots that ``train_opponent=pool`` plays against."""
    rollout_evaluator: RolloutEvaluatorConfig = field(default_factory=RolloutEvaluatorConfig)
    """Evaluation after every epoch."""

    @property
    def opponent_actors(self) -> int:
        """How many actors play against ``train_opponent`` (the first ones)."""
        if self.train_opponent is None:
            return 0
        return max(1, round(self.train_opponent_share * self.num_actors))

    def __post_init__(self) -> None:
        if isinstance(self.rollout_evaluator, dict):
            self.rollout_evaluator = RolloutEvaluatorConfig(**self.rollout_evaluator)
        if isinstance(self.opponent_pool, dict):
            self.opponent_pool = OpponentPoolConfig(**self.opponent_pool)
        for names, ok, requirement in FIELD_CHECKS:
            for name in names.split():
                _check(ok(getattr(self, name)), name, getattr(self, name), requirement)
        if self.compile == "reduce-overhead" and not str(self.device).startswith("cuda"):
            raise ConfigError(
                f"algorithm.compile=reduce-overhead replays the compiled update as CUDA graphs, and a learner on "
                f"{self.device} has none: use algorithm.compile=default (the same compiled kernels, without graphs) "
                "or a learner on a GPU (algorithm.device=cuda)"
            )
        _check(
            not self.fit_value_mean or self.value_normalization == "popart",
            "fit_value_mean",
            self.fit_value_mean,
            "false unless value_normalization=popart (the mean is fitted to values PopArt keeps)",
            after=("value_normalization",),
        )
        _check(
            self.critic_burn_in_epochs < self.n_epochs,
            "critic_burn_in_epochs",
            self.critic_burn_in_epochs,
            f"smaller than n_epochs ({self.n_epochs}), or the policy never trains",
            after=("n_epochs", "critic_burn_in_epochs"),
        )
        low = self.min_actors_batch_size
        _check(
            low is None or (isinstance(low, int) and 1 <= low <= self.actors_batch_size),
            "min_actors_batch_size",
            self.min_actors_batch_size,
            f"None or an int in [1, actors_batch_size={self.actors_batch_size}]",
            after=("actors_batch_size",),
        )
        columns = self.envs_per_actor * self.batch_bounds[0]
        _check(
            self.num_learners * self.sgd_minibatches <= columns,
            "num_learners",
            self.num_learners,
            f"at most the envs of the smallest batch over its minibatches ({columns} // n_sgd_minibatches="
            f"{self.sgd_minibatches}): every learner takes whole trajectories of every minibatch; lower "
            "num_learners or n_sgd_minibatches, or give the actors more envs",
            after=("envs_per_actor", "actors_batch_size", "min_actors_batch_size", "n_sgd_minibatches", "num_learners"),
        )

    @property
    def optimizer_eps(self) -> float:
        """The optimizer's epsilon: ``eps``, or the optimizer's own where that is None.

        RMSProp's own is the IMPALA paper's (and torchbeast's) 0.01 in the units of a mean loss. Their loss sums over
        the T x B steps of an update; RMSProp's step does not depend on the scale of the loss except through
        epsilon, so a mean loss with epsilon 0.01 / (T x B) takes the paper's steps. With 0.01 itself the floor
        swamps a mean loss's small gradients: on cooperative pong the policy stayed uniform (docs/benchmarks.md).
        """
        if self.eps is not None:
            return self.eps
        if self.optimizer == "rmsprop":
            return OPTIMIZER_EPS["rmsprop"] / self.env_steps_per_update
        return OPTIMIZER_EPS[self.optimizer]

    def step_entropy_coef(self, continuous: bool) -> float:
        """The entropy bonus's weight (before ``entropy_schedule``) of a step key whose actions have a continuous
        part (``continuous``) or are all discrete."""
        if continuous and self.continuous_entropy_coef is not None:
            return self.continuous_entropy_coef
        return self.entropy_coef

    @property
    def sgd_minibatches(self) -> int:
        """The minibatches of each pass: ``n_sgd_minibatches``, or fewer where the smallest batch (``envs_per_actor``
        x its rollouts) holds fewer trajectories than minibatches x ``num_learners``: a minibatch holds whole
        trajectories, at least one for each learner."""
        return max(1, min(self.n_sgd_minibatches, self.envs_per_actor * self.batch_bounds[0] // self.num_learners))

    @property
    def batch_bounds(self) -> tuple[int, int]:
        """The fewest and the most rollouts one update takes."""
        low = self.actors_batch_size if self.min_actors_batch_size is None else self.min_actors_batch_size
        return low, self.actors_batch_size

    @property
    def queue_size_limit(self) -> int:
        """How many rollouts the queue holds at most."""
        return max(1, int(self.queue_out_of_sync_factor * self.actors_batch_size))

    @property
    def total_updates(self) -> int:
        """Learner updates of a full run (without early stopping)."""
        return self.n_epochs * self.epoch_length

    @property
    def env_steps_per_update(self) -> int:
        """Environment steps consumed by one learner update."""
        return self.actors_batch_size * self.envs_per_actor * self.n_rollout_steps

    @property
    def total_env_steps(self) -> int:
        """The env-step budget of a full run (without early stopping)."""
        return self.total_updates * self.env_steps_per_update
