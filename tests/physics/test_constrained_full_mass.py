"""CHNN and CLNN with ``mass=full`` (a constant SPD mass matrix over all Cartesian coordinates)
and ``friction=joint``: exact for a compound double pendulum of two uniform rods, with and without
viscous joint friction, against its angle-coordinate solution (its own Lagrangian, written here,
solved by scipy); the full form's parameterisation, defaults and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from hnnsym import solve
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.constraints import onto_manifold

F64 = torch.float64
G = 9.81
RODS = {"m1": 1.3, "m2": 0.7, "l1": 1.1, "l2": 0.8}
FRICTION = (0.15, 0.08)  # c₁ (pivot), c₂ (elbow): Rayleigh ½c₁θ̇₁² + ½c₂(θ̇₂ − θ̇₁)²


def rod_mass_matrix(m1: float, m2: float) -> torch.Tensor:
    """M (4, 4) over the end points x₁ (elbow) and x₂ (tip): a rod's kinetic energy is
    m/6 (|v_a|² + v_a·v_b + |v_b|²); rod 1 has v_a = 0 (pivot), rod 2 runs from x₁ to x₂."""
    eye = torch.eye(2, dtype=F64)
    return torch.cat([torch.cat([(m1 + m2) / 3 * eye, m2 / 6 * eye], 1),
                      torch.cat([m2 / 6 * eye, m2 / 3 * eye], 1)])  # fmt: skip


def angle_rhs(friction: tuple[float, float]):
    """θ̈ of L = ½θ̇ᵀM(θ)θ̇ − V(θ) for two uniform rods (angles from the downward vertical) with
    joint friction: M₁₁ = m₁l₁²/3 + m₂l₁², M₂₂ = m₂l₂²/3, M₁₂ = k cos(θ₁ − θ₂), k = m₂l₁l₂/2,
    V = −g((m₁/2 + m₂)l₁ cos θ₁ + m₂l₂/2 cos θ₂)."""
    m1, m2, l1, l2 = RODS["m1"], RODS["m2"], RODS["l1"], RODS["l2"]
    c1, c2 = friction
    k = m2 * l1 * l2 / 2

    def rhs(_t, s):
        t1, t2, w1, w2 = s
        d = t1 - t2
        M = np.array([[m1 * l1**2 / 3 + m2 * l1**2, k * math.cos(d)],
                      [k * math.cos(d), m2 * l2**2 / 3]])  # fmt: skip
        force = np.array([
            -k * math.sin(d) * w2**2 - G * (m1 / 2 + m2) * l1 * math.sin(t1)
            - c1 * w1 + c2 * (w2 - w1),
            k * math.sin(d) * w1**2 - G * m2 * l2 / 2 * math.sin(t2) - c2 * (w2 - w1),
        ])  # fmt: skip
        return [w1, w2, *np.linalg.solve(M, force)]

    return rhs


def points(theta: np.ndarray) -> np.ndarray:
    """End points (..., 4) = (x₁, y₁, x₂, y₂) of angles (..., 2)."""
    l1, l2 = RODS["l1"], RODS["l2"]
    x1 = l1 * np.stack([np.sin(theta[..., 0]), -np.cos(theta[..., 0])], -1)
    x2 = x1 + l2 * np.stack([np.sin(theta[..., 1]), -np.cos(theta[..., 1])], -1)
    return np.concatenate([x1, x2], -1)


def initial_states(theta0: np.ndarray, omega0: np.ndarray) -> torch.Tensor:
    """[x, p] (B, 8) with ẋ = ∂x/∂θ θ̇ and p = M ẋ (the rods' exact mass matrix)."""
    l1, l2 = RODS["l1"], RODS["l2"]
    t1, t2 = theta0[:, 0], theta0[:, 1]
    v1 = l1 * omega0[:, :1] * np.stack([np.cos(t1), np.sin(t1)], -1)
    v2 = v1 + l2 * omega0[:, 1:] * np.stack([np.cos(t2), np.sin(t2)], -1)
    x = torch.as_tensor(points(theta0))
    v = torch.as_tensor(np.concatenate([v1, v2], -1))
    return torch.cat([x, v @ rod_mass_matrix(RODS["m1"], RODS["m2"])], -1)


def exact_model(cls, friction: tuple[float, float] | None = None):
    """``cls`` (CHNN or CLNN, mass=full) with M_θ the rods' mass matrix, V_θ their gravity
    potential (linear: hidden=()) and, if given, the joint friction's C_f."""
    params = {"links": 2, "masses": [RODS["m1"], RODS["m2"]],
              "lengths": [RODS["l1"], RODS["l2"]]}  # fmt: skip
    model = cls(4, hidden=(), system_params=params, mass="full", mass_eps=1e-3,
                friction="none" if friction is None else "joint").double()  # fmt: skip
    m1, m2 = RODS["m1"], RODS["m2"]
    C = torch.linalg.cholesky(rod_mass_matrix(m1, m2))
    diagonal = torch.diagonal(C) - model.mass_eps
    raw = torch.tril(C, -1) + torch.diag(diagonal + torch.log(-torch.expm1(-diagonal)))
    with torch.no_grad():
        model.mass_factor.copy_(raw)
        # V = g((m₁ + m₂)/2 y₁ + m₂/2 y₂): the rods' centres of mass
        weight = torch.tensor([0.0, G * (m1 + m2) / 2, 0.0, G * m2 / 2], dtype=F64)
        model.potential_net[0].weight.copy_(weight[None])
        if friction is not None:
            c1, c2 = friction
            Cf = torch.tensor([[c1 + c2, -c2], [-c2, c2]], dtype=F64)
            model.friction_factor.copy_(torch.linalg.cholesky(Cf))
    assert torch.allclose(model.mass_matrix(), rod_mass_matrix(m1, m2), rtol=1e-14, atol=1e-14)
    return model


def reference(theta0, omega0, times, friction):
    """End points (T, B, 4) of the angle solution by scipy (rtol 1e-11)."""
    out = []
    for t0, w0 in zip(theta0, omega0):
        sol = solve_ivp(angle_rhs(friction), (0, times[-1]), [*t0, *w0], method="DOP853",
                        t_eval=times, rtol=1e-11, atol=1e-12)  # fmt: skip
        assert sol.success
        out.append(points(sol.y[:2].T))
    return np.stack(out, 1)


@pytest.mark.parametrize("friction", [None, FRICTION], ids=["conservative", "joint_friction"])
@pytest.mark.parametrize("cls", [CHNN, CLNN])
def test_full_mass_is_exact_for_a_compound_double_pendulum_of_rods(cls, friction):
    """The rods' exact constant 4×4 M (not diagonal) and gravity potential, and their joint
    friction as C_f: the model's field, stepped by Gauss–Legendre 6 (h = 0.005, 300 steps), gives
    the end points of the angle solution to 1e-8."""
    rng = np.random.default_rng(0)
    theta0 = rng.uniform(-2.0, 2.0, (3, 2))
    omega0 = rng.normal(0.0, 1.5, (3, 2))
    y0 = initial_states(theta0, omega0)
    model = exact_model(cls, friction)
    assert (onto_manifold(model, y0) - y0).abs().max() < 1e-13  # on its own manifold
    h, steps = 0.005, 300
    with torch.no_grad():
        ys = solve(model, y0, h, steps, get_integrator("gauss_legendre6", tol=1e-14), "backprop").ys
    truth = reference(theta0, omega0, h * np.arange(steps + 1), friction or (0.0, 0.0))
    err = np.abs(ys[..., :4].numpy() - truth).max()
    assert err < 1e-8, err
    # the motion is far from the point-mass one: an error of 1e-8 means something
    assert np.abs(truth[-1] - truth[0]).max() > 0.5


def test_rattle_steps_the_exact_full_mass_model_at_its_order():
    """RATTLE (its mass-weighted projection with the full M_θ) converges to the angle solution at
    order 4 with the triple-jump composition."""
    rng = np.random.default_rng(1)
    theta0 = rng.uniform(-1.5, 1.5, (2, 2))
    omega0 = rng.normal(0.0, 1.0, (2, 2))
    y0 = initial_states(theta0, omega0)
    model = exact_model(CHNN)
    truth = reference(theta0, omega0, np.array([0.0, 1.0]), (0.0, 0.0))[-1]
    err = {}
    for steps in (100, 200):
        integrator = get_integrator("rattle", tol=1e-14, composition="triple_jump")
        with torch.no_grad():
            ys = solve(model, y0, 1.0 / steps, steps, integrator, "backprop").ys
        err[steps] = np.abs(ys[-1, :, :4].numpy() - truth).max()
        assert model.position_constraints(ys[..., :4]).abs().max() < 1e-12
    assert err[200] < 5e-6 and 13 < err[100] / err[200] < 20, err


def test_full_mass_parameterisation_defaults_and_refusals():
    """M_θ = C Cᵀ is SPD for any parameters and starts at I (as mass=body does); mass=full declares
    no per-body masses; ``mass_matrix()`` and ``inverse_mass()`` are inverse; bad options are
    one-line errors."""
    torch.manual_seed(0)
    model = CHNN(6, hidden=(8,), mass="full").double()
    assert torch.allclose(model.mass_matrix(), torch.eye(6, dtype=F64), atol=1e-15)
    assert "masses" not in model.capabilities and "mass_matrix" in model.capabilities
    assert "masses" in CHNN(6, hidden=(8,)).capabilities
    with torch.no_grad():
        model.mass_factor.normal_(0.0, 0.3)
    M = model.mass_matrix()
    assert torch.linalg.eigvalsh(M).min() > 0 and torch.allclose(M, M.T, rtol=0, atol=1e-15)
    assert torch.allclose(M @ model.inverse_mass(), torch.eye(6, dtype=F64), atol=1e-12)
    with pytest.raises(ValueError, match="mass=full learns a mass matrix"):
        model.masses()
    for bad, match in (({"mass": "diag"}, "mass must be one of"),
                       ({"friction": "coulomb"}, "friction must be one of"),
                       ({"mass_eps": 0.0}, "mass_eps must be"),
                       ({"friction_init": -1.0}, "friction_init must be")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            CLNN(4, hidden=(8,), **bad)
