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
