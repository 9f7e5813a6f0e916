"""V-trace against independent reference implementations (tests/data/vtrace_reference.json)."""

import json
from pathlib import Path

import pytest
import torch

from maze_impala.impala.vtrace import vtrace

CASES = json.loads((Path(__file__).parent / "data" / "vtrace_reference.json").read_text())["cases"]


def _run(case: dict, dtype: torch.dtype = torch.float64):
    t = lambda key: torch.tensor(case[key], dtype=dtype)  # noqa: E731
    return vtrace(
        log_rhos=t("log_rhos"),
        discounts=t("discounts"),
        rewards=t("rewards"),
        values=t("values"),
        bootstrap_value=t("bootstrap_value"),
        clip_rho_threshold=case["clip_rho_threshold"],
        clip_pg_rho_threshold=case["clip_pg_rho_threshold"],
        lambda_=case["lambda"],
    )


def test_reference_file_has_all_kinds_of_cases():
    names = [c["name"] for c in CASES]
    assert len(names) == 8
    assert any(c["lambda"] != 1.0 for c in CASES)
    assert any(c["clip_rho_threshold"] is None for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_reference_float64(case):
    out = _run(case)
    torch.testing.assert_close(out.vs, torch.tensor(case["expected_vs"], dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        out.pg_advantages,
        torch.tensor(case["expected_pg_advantages"], dtype=torch.float64),
        atol=1e-5,
        rtol=0,
    )
    # Much tighter than required: float64 should agree to ~1e-12.
    assert (out.vs - torch.tensor(case["expected_vs"], dtype=torch.float64)).abs().max() < 1e-10


@pytest.mark.parametrize("case", CASES[:6], ids=[c["name"] for c in CASES[:6]])
def test_float32_close_to_reference(case):
    out = _run(case, torch.float32)
    assert out.vs.dtype == torch.float32
    expected = torch.tensor(case["expected_vs"], dtype=torch.float32)
    torch.testing.assert_close(out.vs, expected, atol=1e-4, rtol=1e-5)


def test_outputs_carry_no_gradient():
    case = CASES[1]
    values = torch.tensor(case["values"], dtype=torch.float64, requires_grad=True)
    out = vtrace(
        torch.tensor(case["log_rhos"], dtype=torch.float64),
        torch.tensor(case["discounts"], dtype=torch.float64),
        torch.tensor(case["rewards"], dtype=torch.float64),
        values,
        torch.tensor(case["bootstrap_value"], dtype=torch.float64),
    )
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad


def test_batch_columns_are_independent():
    """Each batch column equals V-trace run on that column alone (no mixing across B)."""
    case = max(CASES, key=lambda c: c["B"])
    full = _run(case)
    for b in range(case["B"]):
        single = {k: v for k, v in case.items()}
        for key in ("log_rhos", "discounts", "rewards", "values"):
            single[key] = [[row[b]] for row in case[key]]
        single["bootstrap_value"] = [case["bootstrap_value"][b]]
        out = _run(single)
        torch.testing.assert_close(out.vs[:, 0], full.vs[:, b])


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="rewards has shape"):
        vtrace(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2, 2), torch.zeros(3, 2), torch.zeros(2))


def _double_sum(case: dict, c_bar: float | None) -> torch.Tensor:
    """v_s = V(x_s) + sum_t (prod_{i=s}^{t-1} gamma_i c_i) delta_t, with c_i = lambda min(c_bar, rho_i): the paper's
    formula written out, in float64."""
    t = lambda key: torch.tensor(case[key], dtype=torch.float64)  # noqa: E731
    rhos, discounts, rewards, values = t("log_rhos").exp(), t("discounts"), t("rewards"), t("values")
    values_tp1 = torch.cat([values[1:], t("bootstrap_value")[None]])
    rho_bar = case["clip_rho_threshold"]
    deltas = (rhos if rho_bar is None else rhos.clamp(max=rho_bar)) * (rewards + discounts * values_tp1 - values)
    cs = case["lambda"] * (rhos if c_bar is None else rhos.clamp(max=c_bar))
    vs = values.clone()
    for s in range(len(rhos)):
        weight = torch.ones(rhos.shape[1], dtype=torch.float64)
        for step in range(s, len(rhos)):
            vs[s] += weight * deltas[step]
            weight = weight * discounts[step] * cs[step]
    return vs


@pytest.mark.parametrize("c_bar", [None, 0.5, 2.0])
@pytest.mark.parametrize("case", CASES[:4], ids=[c["name"] for c in CASES[:4]])
def test_the_clip_of_the_traces_c_bar_by_hand(case, c_bar):
    t = lambda key: torch.tensor(case[key], dtype=torch.float64)  # noqa: E731
    clips = case["clip_rho_threshold"], case["clip_pg_rho_threshold"], case["lambda"]
    out = vtrace(t("log_rhos"), t("discounts"), t("rewards"), t("values"), t("bootstrap_value"), *clips, c_bar)
    torch.testing.assert_close(out.vs, _double_sum(case, c_bar), atol=1e-10, rtol=0)
    if c_bar is not None and bool((t("log_rhos")[:-1].exp() > min(c_bar, 1.0)).any()):  # the last trace is unused
        assert not torch.allclose(out.vs, _run(case).vs), "c-bar changes the targets where weights exceed it"


def test_without_importance_weights_the_targets_are_n_step_returns():
    import gymnasium as gym

    from maze_impala.impala.losses import LossSettings, impala_step_loss
    from maze_impala.nn.distributions import DictActionDistribution

    distribution = DictActionDistribution(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
    g = torch.Generator().manual_seed(0)
    T, N = 4, 3
    logits, behaviour = torch.randn(T, N, 2, generator=g), -torch.rand(T, N, generator=g) * 2
    actions = {"a": torch.randint(0, 2, (T, N), generator=g)}
    values, rewards = torch.randn(T + 1, N, generator=g), torch.randn(T, N, generator=g)
    discounts = torch.full((T, N), 0.9)
    discounts[1, 0] = 0.0
    plain = impala_step_loss(
        distribution, logits, actions, behaviour, values, rewards, discounts, LossSettings(importance_weights=False)
    )
    returns, acc = torch.zeros(T, N), values[-1]
    for step in reversed(range(T)):
        acc = rewards[step] + discounts[step] * acc
        returns[step] = acc
    torch.testing.assert_close(plain.value_loss, 0.5 * (returns - values[:-1]).pow(2).mean())
    corrected = impala_step_loss(distribution, logits, actions, behaviour, values, rewards, discounts)
    assert not torch.allclose(corrected.value_loss, plain.value_loss), "V-trace corrects these off-policy data"


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 5, 8, 31, 32, 33, 100])
def test_the_scan_by_doubling_is_the_step_by_step_recursion(steps):
    """Every length, powers of two and their neighbours, with episode ends (decay 0) and padding (decay 1)."""
    from maze_impala.impala.vtrace import _discounted_sums

    g = torch.Generator().manual_seed(steps)
    decays = torch.rand(steps, 5, generator=g, dtype=torch.float64)
    decays[torch.rand(steps, 5, generator=g) < 0.1] = 0.0
    decays[torch.rand(steps, 5, generator=g) < 0.1] = 1.0
    terms = torch.randn(steps, 5, generator=g, dtype=torch.float64)
    expected, running = torch.zeros_like(terms), torch.zeros(5, dtype=torch.float64)
    for t in reversed(range(steps)):
        running = terms[t] + decays[t] * running
        expected[t] = running
    torch.testing.assert_close(_discounted_sums(decays, terms), expected, atol=1e-12, rtol=0)
