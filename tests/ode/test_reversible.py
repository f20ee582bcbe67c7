"""The fixed-point reversible leapfrog and the O(1)-memory ``reversible`` gradient."""

from __future__ import annotations

import gc
import math
import weakref

import pytest
import torch
from omegaconf import OmegaConf

from hnnsym import integrate
from hnnsym.config import CONF_DIR
from hnnsym.config.build import build_integrator
from hnnsym.errors import FixedPointOverflowError, UserError
from hnnsym.ode.integrators import (
    ReversibleLeapfrog,
    Separable,
    Tableau,
    get_integrator,
)
from hnnsym.physics.models import HNN, SeparableHNN
from hnnsym.physics.systems import henon_heiles, henon_heiles_shell_states

CONF = CONF_DIR
INT64_MAX = 2**63 - 1


def hh_potential_grad(q: torch.Tensor) -> torch.Tensor:
    """∇V of Hénon–Heiles, V = (qx² + qy²)/2 + qx² qy - qy³/3, written out (fast)."""
    qx, qy = q[..., 0], q[..., 1]
    return torch.stack([qx + 2 * qx * qy, qy + qx * qx - qy * qy], -1)


def hh_initial_states(energies: list[float], seed: int = 0) -> torch.Tensor:
    return henon_heiles_shell_states(energies, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def hh_fast():
    """Hénon–Heiles as a separable H with written-out forces, checked against autograd of H."""
    system = henon_heiles()
    H = Separable(system, kinetic_grad=lambda p: p, potential_grad=hh_potential_grad)
    y = hh_initial_states([0.12, 0.14, 0.16, 0.166])
    auto_dT, auto_dV = ReversibleLeapfrog().forces(Separable(system))
    torch.testing.assert_close(hh_potential_grad(y[:, :2]), auto_dV(y[:, :2]), rtol=0, atol=1e-15)
    torch.testing.assert_close(y[:, 2:], auto_dT(y[:, 2:]), rtol=0, atol=0)
    return H


# ---- bitwise reversibility ------------------------------------------------------------------
def test_henon_heiles_round_trip_is_bitwise_exact_and_float_is_not(hh_fast):
    """10^4 steps of h = 0.01 forward then back on chaotic Hénon–Heiles orbits (t = 100)."""
    integ = ReversibleLeapfrog()
    y0 = hh_initial_states([0.12, 0.13, 0.14, 0.15, 0.155, 0.16, 0.163, 0.166])
    N, h = 10_000, 0.01
    x0 = integ.quantize(y0)
    x1 = integ.advance(hh_fast, x0, h, N)
    assert not torch.equal(x1, x0)
    y1 = integ.dequantize(x1)
    energy0, energy1 = henon_heiles()(y0), henon_heiles()(y1)
    assert (energy1 - energy0).abs().max() < 1e-3  # leapfrog: bounded energy error, still bound
    x2 = integ.advance(hh_fast, x1, -h, N)
    assert torch.equal(x2, x0)

    # the same substeps in plain float64 from the same start do not come back
    yf = integ.float_advance(hh_fast, integ.dequantize(x0), h, N)
    back = integ.float_advance(hh_fast, yf, -h, N)
    err = (back - integ.dequantize(x0)).abs().max().item()
    assert not torch.equal(back, integ.dequantize(x0))
    assert err > 1e-15  # many units in the last place (1.5e-13 here; O(1) by 10^5 steps)


@pytest.mark.parametrize("model", ["henon_heiles_autograd", "separable_hnn"])
def test_round_trip_with_autograd_forces(model):
    """The default force path (autograd of T and V, an MLP) reverses bit for bit too."""
    torch.manual_seed(0)
    if model == "separable_hnn":
        H = SeparableHNN(2, hidden=(16, 16)).double()
        y0 = 0.4 * torch.randn(6, 4, dtype=torch.float64)
    else:
        H = Separable(henon_heiles())
        y0 = hh_initial_states([0.15, 0.16, 0.166])
    integ = ReversibleLeapfrog()
    x0 = integ.quantize(y0)
    x1 = integ.advance(H, x0, 0.05, 300)
    assert not torch.equal(x1, x0)
    assert torch.equal(integ.advance(H, x1, -0.05, 300), x0)


def _half_up(x: torch.Tensor) -> torch.Tensor:
    return torch.floor(x + 0.5)


def _half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


@pytest.mark.parametrize(
    "rounding, odd",
    [
        ("half_even", True),
        ("trunc", True),
        (_half_away, True),
        (torch.floor, False),  # floor(x) + floor(-x) = -1 for non-integers
        (_half_up, False),  # not odd at ties: R(-1.5) = -1, R(1.5) = 2
    ],
)
def test_single_step_and_inverse_negative_states_subunit_increments(rounding, odd):
    """One step and its inverse with a coarse scale (2^4) so increments are fractions of a unit,
    including ties and |increment| < 1 unit, on negative states. Odd roundings undo exactly;
    floor and round-half-up do not."""
    integ = ReversibleLeapfrog(frac_bits=4, rounding=rounding)
    # T = p²/2, V = q²/2; h = 0.375: first drift h/2 · p · 16 = 3p · ... in units of 2^-4
    H = Separable(lambda y: 0.5 * (y**2).sum(-1))
    y0 = torch.tensor(
        [
            [-1.25, -0.5],  # drift increment -0.09375 = -1.5 units (a tie)
            [-0.75, -0.0625],  # drift increment -0.1875 units (sub-unit, negative)
            [-2.0, -0.8125],  # drift increment -2.4375 units
            [-0.5, 0.3125],  # mixed signs
        ],
        dtype=torch.float64,
    )
    x0 = integ.quantize(y0)
    assert torch.equal(integ.dequantize(x0), y0)  # exactly representable
    x1 = integ.advance(H, x0, 0.375, 1)
    assert not torch.equal(x1, x0)
    back = integ.advance(H, x1, -0.375, 1)
    assert torch.equal(back, x0) is odd


def test_non_odd_rounding_names_are_refused():
    with pytest.raises(ValueError, match="odd"):
        ReversibleLeapfrog(rounding="floor")
    with pytest.raises(ValueError, match="frac_bits"):
        ReversibleLeapfrog(frac_bits=63)


# ---- overflow ----------------------------------------------------------------------------
def test_overflow_is_raised_never_wrapped():
    free = Separable(
        lambda y: 0.5 * y[..., 1:] ** 2,
        kinetic_grad=lambda p: p,
        potential_grad=torch.zeros_like,
    )
    integ = ReversibleLeapfrog(frac_bits=0)  # integers: one step adds exactly p to q (h = 1)
    for sign in (1, -1):
        # reaching ±(2^63 - 1) exactly is fine ...
        x = torch.tensor([[sign * (INT64_MAX - 20), sign * 20]])
        assert integ.advance(free, x, 1.0, 1)[0, 0].item() == sign * INT64_MAX
        # ... one unit beyond raises instead of wrapping to the other end
        x = torch.tensor([[sign * (INT64_MAX - 20), sign * 22]])
        with pytest.raises(FixedPointOverflowError, match="range"):
            integ.advance(free, x, 1.0, 1)

    integ = ReversibleLeapfrog()  # range |x| < 8
    assert integ.bound == 8.0
    with pytest.raises(FixedPointOverflowError, match="initial state"):
        integ.quantize(torch.tensor([[8.0, 0.0]], dtype=torch.float64))
    with pytest.raises(FixedPointOverflowError, match="initial state"):
        integ.quantize(torch.tensor([[math.nan, 0.0]], dtype=torch.float64))
    # an escaping orbit through integrate(): the error is a one-line UserError for the CLI
    spring = Separable(lambda y: 0.5 * (y**2).sum(-1))
    y0 = torch.tensor([[7.5, 3.0]], dtype=torch.float64)  # radius 8.08 > 8: escapes the range
    with pytest.raises(UserError, match="fixed-point range"):
        integrate(spring, y0, 0.1, 20, "reversible_leapfrog", "backprop")
    # a non-finite force
    bad = Separable(lambda y: 0.5 * (y**2).sum(-1), potential_grad=lambda q: q / 0.0)
    with pytest.raises(FixedPointOverflowError, match="not finite"):
        integrate(bad, y0 * 0.1, 0.1, 2, "reversible_leapfrog", "backprop")


# ---- gradients -----------------------------------------------------------------------------
def _loss_grads(H, y0, h, steps, integrator, gradient, weights):
    y = y0.clone().requires_grad_(True)
    traj = integrate(H, y, h, steps, integrator, gradient)
    loss = (weights * traj**2).sum()  # a loss on every time point
    params = [p for p in getattr(H, "parameters", lambda: [])() if p.requires_grad]
    grads = torch.autograd.grad(loss, [y, *params], allow_unused=True)
    return traj.detach(), grads


def _max_rel(a, b) -> float:
    worst = 0.0
    for ga, gb in zip(a, b):
        assert (ga is None) == (gb is None)
        if ga is not None:
            worst = max(worst, ((ga - gb).abs().max() / ga.abs().max()).item())
    return worst


# position Verlet as a partitioned RK tableau on the stage solver: an independent float solver
POSITION_VERLET = Tableau(
    "position_verlet",
    ((0.5, 0.0), (0.5, 0.0)), (0.5, 0.5),  # Lobatto IIIB on q
    ((0.0, 0.0), (0.5, 0.5)), (0.5, 0.5),  # Lobatto IIIA on p
    2, True, True,
)  # fmt: skip


@pytest.mark.parametrize("dim, kinetic", [(1, "mlp"), (2, "mlp"), (2, "mass")])
def test_reversible_gradient_equals_backprop(dim, kinetic):
    torch.manual_seed(dim)
    H = SeparableHNN(dim, hidden=(16, 16), kinetic=kinetic).double()
    y0 = 0.5 * torch.randn(5, 2 * dim, dtype=torch.float64)
    steps, h = 40, 0.05
    w = torch.randn(steps + 1, 5, 2 * dim, dtype=torch.float64)
    traj_b, g_b = _loss_grads(H, y0, h, steps, "reversible_leapfrog", "backprop", w)
    traj_r, g_r = _loss_grads(H, y0, h, steps, "reversible_leapfrog", "reversible", w)
    assert torch.equal(traj_b, traj_r)  # the graph-building forward takes the same path
    assert all(g is not None and g.abs().max() > 0 for g in g_r[:3])
    assert _max_rel(g_b, g_r) <= 1e-10
    # the float map they differentiate is position Verlet: compare with backprop through an
    # independent implementation (the stage solver), which differs only by rounding
    traj_f, g_f = _loss_grads(H, y0, h, steps, get_integrator(POSITION_VERLET), "backprop", w)
    assert (traj_f - traj_r).abs().max() < 1e-13
    assert _max_rel(g_f, g_r) <= 1e-11


def test_reversible_gradient_analytic_henon_heiles():
    H = Separable(henon_heiles())
    y0 = hh_initial_states([0.15, 0.16, 0.166])
    w = torch.randn(31, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _, (g_b,) = _loss_grads(H, y0, 0.05, 30, "reversible_leapfrog", "backprop", w)
    _, (g_r,) = _loss_grads(H, y0, 0.05, 30, "reversible_leapfrog", "reversible", w)
    assert _max_rel([g_b], [g_r]) <= 1e-10


def test_float32_and_zero_steps_keep_shape_and_dtype():
    torch.manual_seed(0)
    H = SeparableHNN(2, hidden=(8,))
    y0 = 0.3 * torch.randn(3, 4)
    for steps in (0, 5):
        for gradient in ("backprop", "reversible"):
            traj = integrate(
                H, y0.requires_grad_(True), 0.1, steps, "reversible_leapfrog", gradient
            )
            assert traj.shape == (steps + 1, 3, 4) and traj.dtype == torch.float32
            traj.sum().backward()
            assert torch.isfinite(y0.grad).all()
            y0.grad = None


class _Box:
    __slots__ = ("t", "__weakref__")


def _retained_bytes(H, y0, steps, gradient) -> int:
    """Bytes of the tensors autograd holds for backward when the forward returns (saved tensors
    of graphs freed during the forward, e.g. inside force evaluations, are not counted)."""
    live: weakref.WeakSet = weakref.WeakSet()

    def pack(t):
        box = _Box()
        box.t = t
        live.add(box)
        return box

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.t):
        traj = integrate(H, y0, 0.05, steps, "reversible_leapfrog", gradient)
    gc.collect()
    n = sum(b.t.numel() * b.t.element_size() for b in live)
    traj.sum().backward()  # the graph is usable
    return n


def test_reversible_memory_is_flat_in_steps():
    torch.manual_seed(0)
    H = SeparableHNN(2, hidden=(16, 16)).double()
    y0 = (0.3 * torch.randn(4, 4, dtype=torch.float64)).requires_grad_(True)
    r8, r64 = (_retained_bytes(H, y0, n, "reversible") for n in (8, 64))
    b8, b64 = (_retained_bytes(H, y0, n, "backprop") for n in (8, 64))
    assert r8 == r64 > 0
    assert b64 > 4 * b8 > 4 * r8


def test_rebuild_check_catches_nondeterministic_forces():
    calls = [0]

    def drifting_force(q):  # returns different bits on every call
        calls[0] += 1
        return q * (1.0 + 1e-12 * calls[0])

    H = Separable(lambda y: 0.5 * (y**2).sum(-1), potential_grad=drifting_force)
    y0 = torch.tensor([[0.3, -0.2]], dtype=torch.float64, requires_grad=True)
    traj = integrate(H, y0, 0.1, 10, "reversible_leapfrog", "reversible")
    with pytest.raises(RuntimeError, match="bit for bit"):
        traj.sum().backward()


# ---- errors and wiring -------------------------------------------------------------------------
def test_clear_errors_for_unsupported_combinations():
    y0 = torch.zeros(2, 4, dtype=torch.float64)
    sep, hnn = SeparableHNN(2).double(), HNN(2).double()
    cases = [
        (hnn, "reversible_leapfrog", "reversible", "separable"),
        (hnn, "reversible_leapfrog", "backprop", "separable"),
        (sep, "implicit_midpoint", "reversible", "integrator=reversible_leapfrog"),
        (sep, "leapfrog", "reversible", "integrator=reversible_leapfrog"),
        (
            sep,
            "reversible_leapfrog",
            "symplectic_adjoint",
            "symplectic_adjoint needs .*stage equations.*use gradient=backprop, or "
            "gradient=reversible.*integrator=reversible_leapfrog has none",
        ),
        (henon_heiles().hamiltonian, "reversible_leapfrog", "backprop", r"Separable\(system\)"),
    ]
    for H, integrator, gradient, match in cases:
        with pytest.raises(UserError, match=match) as err:
            integrate(H, y0, 0.1, 3, integrator, gradient)
        assert isinstance(err.value, ValueError)


def test_flagged_analytic_system_runs_without_wrapper():
    """A System with separable=True (Hénon–Heiles) needs no Separable(...) wrapper, and gives
    the same trajectory as the wrapped one."""
    system = henon_heiles()
    y0 = torch.tensor([[0.1, -0.2, 0.3, 0.1]], dtype=torch.float64)
    direct = integrate(system, y0, 0.01, 50, "reversible_leapfrog", "backprop")
    wrapped = integrate(Separable(system), y0, 0.01, 50, "reversible_leapfrog", "backprop")
    assert torch.equal(direct, wrapped)


def test_registry_and_config():
    assert isinstance(get_integrator("reversible_leapfrog"), ReversibleLeapfrog)
    cfg = OmegaConf.load(CONF / "integrator" / "reversible_leapfrog.yaml")
    assert cfg.name == ReversibleLeapfrog.name
    built = build_integrator(OmegaConf.to_container(cfg, resolve=True))
    assert built == ReversibleLeapfrog()
    assert get_integrator("reversible_leapfrog", frac_bits=40).bound == 2.0**23
    with pytest.raises(ValueError, match="reversible_leapfrog only"):
        get_integrator("leapfrog", frac_bits=40)
    assert OmegaConf.load(CONF / "gradient" / "reversible.yaml").name == "reversible"
