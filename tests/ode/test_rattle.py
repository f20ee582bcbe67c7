"""RATTLE (``integrator=rattle``), measured in float64 on two constrained systems in Cartesian
coordinates: the planar pendulum (q ∈ R², one length constraint) and the double pendulum (q ∈ R⁴,
two). Order 2 against an independent angle-coordinate scipy solution, constraints at solver
tolerance along a long run, bounded energy error, symplecticity of the step map on the tangent
space of the manifold, exact gradients (finite differences, autograd through Newton, and every
gradient method that accepts it), one-line refusals.

The 10⁵-step run is ``benchmarks/rattle_long_run.py`` (part of ``make bench``); the
suite runs 10³ steps of the same check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from torch import nn
from torch.autograd.functional import jacobian

from hnnsym import integrate, solve
from hnnsym.config.build import build_integrator
from hnnsym.errors import ConvergenceError, IncompatibleError, UserError
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.integrators import Rattle, get_integrator
from hnnsym.ode.problem import Problem
from hnnsym.physics.models import HNN, NODE

F64 = torch.float64
GRAVITY = 9.81


class PlanarPendulum(nn.Module):
    """H = |p|²/2m + m g q_y (+ an optional MLP potential V(q)), g(q) = |q|² − l², with log m
    and log l as parameters."""

    capabilities = frozenset({Capability.HAMILTONIAN, Capability.CONSTRAINTS})

    def __init__(self, mass: float = 1.3, length: float = 0.9, mlp: bool = False):
        super().__init__()
        self.log_m = nn.Parameter(torch.tensor(math.log(mass), dtype=F64))
        self.log_l = nn.Parameter(torch.tensor(math.log(length), dtype=F64))
        self.V = None
        if mlp:
            with torch.random.fork_rng():
                torch.manual_seed(0)
                self.V = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)).double()

    def forward(self, z):
        q, p = z[..., :2], z[..., 2:]
        m = self.log_m.exp()
        H = (p**2).sum(-1) / (2 * m) + m * GRAVITY * q[..., 1]
        return H if self.V is None else H + self.V(q).squeeze(-1)

    def position_constraints(self, q):
        return (q**2).sum(-1, keepdim=True) - self.log_l.exp() ** 2


class DoublePendulum(nn.Module):
    """q = (x1, y1, x2, y2), H = Σ |p_i|²/2m_i + g Σ m_i y_i, g(q) = (|q1|² − l1², |q2 − q1|² − l2²)."""

    capabilities = frozenset({Capability.HAMILTONIAN, Capability.CONSTRAINTS})

    def __init__(self, m=(1.0, 0.7), lengths=(1.0, 0.8)):
        super().__init__()
        self.log_m = nn.Parameter(torch.tensor(m, dtype=F64).log())
        self.lengths = lengths

    def forward(self, z):
        m = self.log_m.exp()
        p1, p2 = z[..., 4:6], z[..., 6:8]
        kinetic = (p1**2).sum(-1) / (2 * m[0]) + (p2**2).sum(-1) / (2 * m[1])
        return kinetic + GRAVITY * (m[0] * z[..., 1] + m[1] * z[..., 3])

    def position_constraints(self, q):
        l1, l2 = self.lengths
        return torch.stack(
            [(q[..., :2] ** 2).sum(-1) - l1**2, ((q[..., 2:] - q[..., :2]) ** 2).sum(-1) - l2**2],
            -1,
        )


# ---- angles <-> Cartesian, and the independent reference ---------------------------------------
def planar_state(H: PlanarPendulum, theta, omega) -> torch.Tensor:
    """(θ, ω) (angle from the downward vertical) -> y = [q, p] on the manifold: (B, 4)."""
    theta, omega = torch.as_tensor(theta, dtype=F64), torch.as_tensor(omega, dtype=F64)
    m, length = float(H.log_m.detach().exp()), float(H.log_l.detach().exp())
    c, s = torch.cos(theta), torch.sin(theta)
    return torch.stack(
        [length * s, -length * c, m * length * omega * c, m * length * omega * s], -1
    )


def double_state(H: DoublePendulum, angles) -> torch.Tensor:
    """rows (θ1, θ2, ω1, ω2) -> y = [x1, y1, x2, y2, p1, p2] on the manifold: (B, 8)."""
    a = torch.as_tensor(angles, dtype=F64)
    t1, t2, w1, w2 = a.unbind(-1)
    (l1, l2), m = H.lengths, H.log_m.exp().detach()
    x1, y1 = l1 * torch.sin(t1), -l1 * torch.cos(t1)
    x2, y2 = x1 + l2 * torch.sin(t2), y1 - l2 * torch.cos(t2)
    v1 = torch.stack([l1 * w1 * torch.cos(t1), l1 * w1 * torch.sin(t1)], -1)
    v2 = v1 + torch.stack([l2 * w2 * torch.cos(t2), l2 * w2 * torch.sin(t2)], -1)
    return torch.cat([torch.stack([x1, y1, x2, y2], -1), m[0] * v1, m[1] * v2], -1)


def _planar_rhs(length):
    return lambda t, y: [y[1], -GRAVITY / length * math.sin(y[0])]


def _double_rhs(m1, m2, l1, l2):
    def rhs(t, y):  # the standard double-pendulum equations in angles (from the Lagrangian)
        t1, t2, w1, w2 = y
        d = t1 - t2
        den = 2 * m1 + m2 - m2 * math.cos(2 * d)
        a1 = (
            -GRAVITY * (2 * m1 + m2) * math.sin(t1)
            - m2 * GRAVITY * math.sin(t1 - 2 * t2)
            - 2 * math.sin(d) * m2 * (w2**2 * l2 + w1**2 * l1 * math.cos(d))
        ) / (l1 * den)
        a2 = (
            2
            * math.sin(d)
            * (
                w1**2 * l1 * (m1 + m2)
                + GRAVITY * (m1 + m2) * math.cos(t1)
                + w2**2 * l2 * m2 * math.cos(d)
            )
        ) / (l2 * den)
        return [w1, w2, a1, a2]

    return rhs


def reference(H, angles: np.ndarray, T: float) -> torch.Tensor:
    """The exact state at time T in Cartesian coordinates, from scipy DOP853 (rtol 1e-12) in
    angle coordinates."""
    out = []
    for row in angles:
        if isinstance(H, PlanarPendulum):
            rhs, y0 = _planar_rhs(float(H.log_l.detach().exp())), row
        else:
            (m1, m2), (l1, l2) = H.log_m.exp().tolist(), H.lengths
            rhs, y0 = _double_rhs(m1, m2, l1, l2), row
        sol = solve_ivp(rhs, (0, T), y0, method="DOP853", rtol=1e-12, atol=1e-12)
        out.append(sol.y[:, -1])
    end = np.array(out)
    if isinstance(H, PlanarPendulum):
        return planar_state(H, end[:, 0], end[:, 1])
    return double_state(H, end)


CASES = {
    "planar": (PlanarPendulum, np.array([[1.0, 0.5], [-2.0, 1.0]])),
    "double": (DoublePendulum, np.array([[0.8, -0.4, 0.3, 1.0], [-0.3, 0.6, -1.0, 0.5]])),
}


def case(name: str):
    cls, angles = CASES[name]
    H = cls()
    y0 = planar_state(H, *angles.T) if name == "planar" else double_state(H, angles)
    return H, y0.detach(), angles


# ---- order ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize(
    "composition, steps, order",
    [("none", (16, 32, 64), 2), ("triple_jump", (32, 64, 128), 4), ("suzuki", (16, 32, 64), 4)],
)
def test_order_against_an_angle_coordinate_reference(name, composition, steps, order):
    """RATTLE is of order 2; its symmetric compositions (``composition``) of order 4."""
    H, y0, angles = case(name)
    T = 0.8
    exact = reference(H, angles, T)
    integ = get_integrator("rattle", composition=composition)
    assert integ.order == order
    errors = []
    with torch.no_grad():
        for n in steps:
            ys = integrate(H, y0, T / n, n, integ, "backprop")
            errors.append(float((ys[-1] - exact).abs().max()))
    slopes = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert errors[-1] > 1e-8  # well above the reference's error: a real measurement
    assert np.all(np.abs(slopes - order) <= 0.1), (errors, slopes)


# ---- on the manifold over a long run, energy bounded ----------------------------------------
def constraint_residuals(H, ys: torch.Tensor) -> tuple[float, float]:
    """max |g(q_n)| and max |G(q_n) ∇_p H(q_n, p_n)| over a trajectory (steps+1, B, 2n)."""
    n = ys.shape[-1] // 2
    flat = ys.reshape(-1, 2 * n).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(H(flat).sum(), flat)
    q = flat[:, :n].detach().requires_grad_(True)
    g = H.position_constraints(q)
    velocity = torch.zeros_like(g)
    for i in range(g.shape[-1]):
        (Gi,) = torch.autograd.grad(g[:, i].sum(), q, retain_graph=True)
        velocity[:, i] = (Gi * grad[:, n:]).sum(-1)
    return float(g.detach().abs().max()), float(velocity.abs().max())


@pytest.mark.parametrize("composition, floor", [("none", 1e-3), ("suzuki", 1e-5)])
def test_constraints_at_solver_tolerance_and_bounded_energy_over_a_long_run(composition, floor):
    """200 steps of h = 0.1 (≈ 8 periods, amplitudes 1 and 2 rad): both constraints at the
    Newton tolerance at every step, and an O(h²) (composed: O(h⁴)) energy error that oscillates
    without drift (its maximum over the last 40 steps equals that over the first 40 within 20%;
    40 steps exceed one period). The 10⁵-step version is benchmarks/rattle_long_run.py."""
    H, y0, _ = case("planar")
    steps, window = 200, 40
    with torch.no_grad():
        sol = solve(
            H, y0, 0.1, steps, get_integrator("rattle", composition=composition), "backprop"
        )
    g_max, v_max = constraint_residuals(H, sol.ys)
    assert g_max <= 1e-12 and v_max <= 1e-12, (g_max, v_max)
    with torch.no_grad():
        E = H(sol.ys)
    err = (E - E[0]).abs()
    first, last = err[1 : window + 1].max(0).values, err[-window:].max(0).values
    assert torch.all(first > floor * E[0].abs()) and torch.all(first < 200 * floor * E[0].abs())
    assert torch.all((last / first - 1).abs() <= 0.2), (first, last)
    assert sol.stats.unconverged == 0 and sol.stats.max_iterations <= 8


# ---- symplecticity on the manifold -------------------------------------------------------------
def manifold_constraints(H, y: torch.Tensor) -> torch.Tensor:
    """c(y) = (g(q), G(q) ∇_p H(q, p)) for one state y (2n,): (2m,)."""
    n = y.shape[-1] // 2
    q = y[:n]
    with torch.enable_grad():
        G = jacobian(H.position_constraints, q, create_graph=True)
        yy = y if y.requires_grad else y.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(H(yy[None]).sum(), yy, create_graph=True)
    return torch.cat([H.position_constraints(q), G @ grad[n:]])


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("composition", ["none", "suzuki"])
def test_step_map_is_symplectic_on_the_tangent_space_of_the_manifold(name, composition):
    """HLW VII.1.3: with Z a basis of the tangent space of {g = 0, G ∇_p H = 0} at y_n and
    M = ∂y_{n+1}/∂y_n, (MZ)ᵀ J (MZ) = Zᵀ J Z, and MZ is tangent at y_{n+1}; on the full space the
    map is not symplectic (it collapses the directions off the manifold)."""
    H, y0, _ = case(name)
    n = y0.shape[-1] // 2
    problem = Problem(H, get_integrator("rattle", composition=composition), 0.2, 1)
    y = y0[0]
    M = jacobian(lambda x: problem.integrator.step_of(problem, x[None], 0)[0], y)
    with torch.no_grad():
        y1 = problem.integrator.step_of(problem, y[None], 0)[0]
    C0, C1 = (jacobian(lambda x: manifold_constraints(H, x), s) for s in (y, y1))
    _, sv, Vh = torch.linalg.svd(C0)
    assert float(sv.min()) > 1e-3  # the constraints are independent: tangent space of dim 2n-2m
    Z = Vh[C0.shape[0] :].T
    J = torch.zeros(2 * n, 2 * n, dtype=F64)
    J[:n, n:], J[n:, :n] = torch.eye(n, dtype=F64), -torch.eye(n, dtype=F64)
    defect = (Z.T @ M.T @ J @ M @ Z - Z.T @ J @ Z).abs().max()
    assert float((M - torch.eye(2 * n, dtype=F64)).abs().max()) > 0.05  # a real step
    assert float(defect) <= 1e-10, float(defect)
    assert float((C1 @ M @ Z).abs().max()) <= 1e-10
    assert float((M.T @ J @ M - J).abs().max()) > 1e-2


# ---- exact gradients -------------------------------------------------------------------------
def _loss(ys: torch.Tensor) -> torch.Tensor:
    w = torch.linspace(0.5, 1.5, ys.shape[0], dtype=F64)[:, None, None]
    return (w * ys**2).sum() + ys[-1, :, 0].sum()


@pytest.mark.parametrize(
    "name, composition", [("planar", "none"), ("double", "none"), ("planar", "suzuki")]
)
def test_gradient_equals_finite_differences_and_autograd_through_newton(name, composition):
    """20 steps; dL/dy0 along a random direction and dL/dθ for every parameter of H (the mass,
    the constraint's length, an MLP potential's weights for the planar case) by the implicit
    adjoint equal central differences (tol 1e-13, ε = 1e-4) and backprop through the Newton
    iterations themselves."""
    H, y0, _ = case(name)
    if name == "planar":
        H = PlanarPendulum(mlp=True)
        y0 = planar_state(H, torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.0])).detach()
    h, steps = 0.05, 20
    exact = get_integrator("rattle", tol=1e-13, manifold_tol=1e-3, composition=composition)

    def run(integ, y, gradient="backprop"):
        return _loss(integrate(H, y, h, steps, integ, gradient))

    params = [p for p in H.parameters()]
    y = y0.clone().requires_grad_(True)

    def gradients(integ):  # the MLP's output bias does not enter ∇H: None, i.e. zero
        out = torch.autograd.grad(run(integ, y), [y, *params], allow_unused=True)
        return [torch.zeros_like(x) if g is None else g for g, x in zip(out, [y, *params])]

    grads = gradients(exact)
    newton = get_integrator("rattle", implicit_gradient=False, composition=composition)
    for a, b in zip(grads, gradients(newton)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)

    gen = torch.Generator().manual_seed(0)
    eps = 1e-4
    direction = torch.randn(y0.shape, generator=gen, dtype=F64)
    with torch.no_grad():
        fd = (run(exact, y0 + eps * direction) - run(exact, y0 - eps * direction)) / (2 * eps)
    assert float((grads[0] * direction).sum()) == pytest.approx(float(fd), rel=1e-6)
    checked = 0
    names = [name for name, _ in H.named_parameters()]
    for name, p, g in zip(names, params, grads[1:]):
        if name.endswith("bias"):
            continue  # the weights suffice (runtime)
        for idx in list(np.ndindex(tuple(p.shape)))[: 2 if p.dim() <= 1 else 1]:
            with torch.no_grad():
                old = p[idx].item()
                p[idx] = old + eps
                up = run(exact, y0)
                p[idx] = old - eps
                down = run(exact, y0)
                p[idx] = old
            fd = float((up - down) / (2 * eps))
            assert float(g[idx]) == pytest.approx(fd, rel=1e-6, abs=1e-8), (p.shape, idx)
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("composition", ["none", "triple_jump"])
def test_every_gradient_method_that_accepts_rattle_gives_the_same_gradient(composition):
    """backprop (the per-step implicit adjoint), checkpoint (each step recomputed), and
    symplectic_adjoint (forward without a graph, stepwise backward re-solving each step from
    y_n, and a composition's inner states), also with keep_every=sqrt; continuous adjoint
    refuses."""
    H, y0, _ = case("double")
    params = list(H.parameters())
    integ = get_integrator("rattle", composition=composition)

    def grads(gradient):
        y = y0.clone().requires_grad_(True)
        return torch.autograd.grad(_loss(integrate(H, y, 0.05, 12, integ, gradient)), [y, *params])

    from hnnsym.ode.gradients import get_gradient

    reference_grads = grads("backprop")
    for method in (
        "checkpoint",
        "symplectic_adjoint",
        get_gradient("symplectic_adjoint", keep_every="sqrt"),
    ):
        for a, b in zip(grads(method), reference_grads):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    with pytest.raises(IncompatibleError, match="gradient=adjoint needs .*stage equations"):
        integrate(H, y0, 0.05, 3, "rattle", "adjoint")


# ---- refusals and wiring ---------------------------------------------------------------------
def test_one_line_refusals():
    H, y0, _ = case("planar")
    cases = [
        (HNN(2).double(), y0, IncompatibleError, "needs a constrained H with position_constraints"),
        (NODE(2).double(), y0, IncompatibleError, "defines only a vector field"),
        (H, y0 * 1.01, UserError, r"off the constraint manifold \(max \|g\(q\)\| = 0\.0"),
        (
            H,
            y0 + torch.tensor([0, 0, 0.1, 0.1], dtype=F64),
            UserError,
            r"max \|G ∇_p H\| = 0\.0[1-9]",
        ),
    ]
    for model, y, error, match in cases:
        with pytest.raises(error, match=match) as err:
            integrate(model, y, 0.1, 3, "rattle", "backprop")
        assert "\n" not in str(err.value)
    # a looser manifold_tol accepts the perturbed state, and the first step projects it
    with torch.no_grad():
        ys = integrate(H, y0 * 1.01, 0.1, 3, get_integrator("rattle", manifold_tol=0.1), "backprop")
    assert constraint_residuals(H, ys[1:])[0] <= 1e-12
    with pytest.raises(ConvergenceError, match="did not converge at step 0"):
        integrate(H, y0, 0.1, 3, get_integrator("rattle", max_iter=1), "backprop")
    with pytest.raises(ValueError, match="apply to tao only"):
        get_integrator("rattle", omega=3.0)
    with pytest.raises(ValueError, match="manifold_tol must be > 0"):
        get_integrator("rattle", manifold_tol=0)
    with pytest.raises(ValueError, match="composition must be one of .*'suzuki'.*, got 'yoshida'"):
        get_integrator("rattle", composition="yoshida")
    with pytest.raises(IncompatibleError, match="needs an integrator with a one-step map"):
        integrate(HNN(2).double(), torch.zeros(2, 4, dtype=F64), 0.1, 3, "tao", "checkpoint")


def test_registry_and_config():
    from omegaconf import OmegaConf

    from hnnsym.config import CONF_DIR

    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "integrator" / "rattle.yaml"))
    integ = build_integrator(node)
    assert isinstance(integ, Rattle) and (integ.order, integ.symplectic) == (2, True)
    assert integ.has_stages is False and integ.reversible is False
    assert get_integrator("rattle", on_fail="warn").strict().on_fail == "raise"
