"""Dissipative dynamics ż = (J⁻¹ − R)∇H: the damped built-in systems against scipy and
their energy budget, the learned model DissipativeHNN (R PSD, its field, exact gradients through
the symplectic adjoint, refusals), the evaluation of its damping, and a short fit that recovers
a damping rate. Convention: R = γ diag(0, I), so ṗ = −∂H/∂q − γ ∂H/∂p, dH/dt = −γ|∂H/∂p|².
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from torch import Tensor

from hnnsym import integrate, solve
from hnnsym.data.simulate import energy_report, simulate
from hnnsym.errors import IncompatibleError
from hnnsym.evaluation.damping import damping_metrics
from hnnsym.ode.dynamics import symplectic_gradient, vector_field
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.problem import Problem
from hnnsym.physics.dissipative import DissipativeHNN, is_dissipative_model
from hnnsym.physics.models import HNN
from hnnsym.physics.systems import get_system

F64 = torch.float64
GAMMA = 0.05
CONFIGS = [(kind, on) for kind in ("constant", "state") for on in ("p", "all")]


def _pendulum_rhs(gamma: float, g: float = 1.0, length: float = 1.0, mass: float = 1.0):
    """scipy's right-hand side of the damped pendulum, plus the dissipated energy D:
    q̇ = p/(m l²), ṗ = −m g l sin q − γ p/(m l²), Ḋ = γ (p/(m l²))²."""
    ml2 = mass * length**2

    def rhs(t, z):
        q, p, _ = z
        v = p / ml2
        return [v, -mass * g * length * math.sin(q) - gamma * v, gamma * v * v]

    return rhs


def _initial(n: int, seed: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return get_system("pendulum").sample(n, gen)


def _ground_truth(system, y0: Tensor, steps: int, every: int = 2, dt: float = 0.05) -> Tensor:
    """generate's ground truth: Gauss–Legendre 6 at dt, every ``every``-th state: (steps+1, B, 2)."""
    integ = get_integrator("gauss_legendre6", tol=1e-14, max_iter=50)
    return simulate(system, y0, dt, every, steps, integ)


# ---- the damped built-in systems ------------------------------------------------------------


def test_damped_pendulum_matches_scipy():
    """Ground truth of the damped pendulum (g = 1.3, l = 0.8, m = 1.1) equals scipy's DOP853
    (rtol 1e-12) to 1e-10 over t = 2, and the damping acts (γ = 0 differs by far more)."""
    params = {"g": 1.3, "length": 0.8, "mass": 1.1}
    system = get_system("pendulum", **params, damping=GAMMA)
    y0 = _initial(3)
    ys = _ground_truth(system, y0, steps=20)  # t = 0 .. 2 every 0.1
    t_eval = 0.1 * np.arange(21)
    for b in range(y0.shape[0]):
        sol = solve_ivp(_pendulum_rhs(GAMMA, **params), (0, 2), [*y0[b].tolist(), 0.0],
                        method="DOP853", rtol=1e-12, atol=1e-14, t_eval=t_eval)  # fmt: skip
        np.testing.assert_allclose(ys[:, b].numpy(), sol.y[:2].T, rtol=0, atol=1e-10)
    undamped = _ground_truth(get_system("pendulum", **params), y0, steps=20)
    assert float((undamped[-1] - ys[-1]).abs().max()) > 1e-3


def test_damped_mass_spring_matches_matrix_exponential():
    """The damped mass–spring is linear, ż = A z with A = [[0, 1/m], [−k, −γ/m]]: the ground
    truth equals exp(A t) z0 to 1e-11, in d = 1 with m = 2, k = 3."""
    system = get_system("mass_spring", mass=2.0, k=3.0, damping=0.3)
    y0 = _initial(4, seed=1)
    ys = _ground_truth(system, y0, steps=20)
    A = torch.tensor([[0.0, 1 / 2.0], [-3.0, -0.3 / 2.0]], dtype=F64)
    for n in range(21):
        exact = y0 @ torch.linalg.matrix_exp(A * 0.1 * n).T
        torch.testing.assert_close(ys[n], exact, rtol=0, atol=1e-11)


def test_energy_loss_equals_the_analytic_dissipation():
    """H(0) − H(t) of the ground truth equals ∫ γ |∂H/∂p|² dt (scipy, augmented with the
    dissipation, rtol 1e-12) to 1e-10, and generate's log reports that energy lost (not an error);
    a conservative system's log line is unchanged."""
    system = get_system("pendulum", damping=GAMMA)
    y0 = _initial(4, seed=2)
    ys = _ground_truth(system, y0, steps=20)  # t = 2
    lost = system(ys[0]) - system(ys)  # (T+1, B)
    t_eval = 0.1 * np.arange(21)
    for b in range(y0.shape[0]):
        sol = solve_ivp(_pendulum_rhs(GAMMA), (0, 2), [*y0[b].tolist(), 0.0], method="DOP853",
                        rtol=1e-12, atol=1e-14, t_eval=t_eval)  # fmt: skip
        np.testing.assert_allclose(lost[:, b].numpy(), sol.y[2], rtol=0, atol=1e-10)
    assert float(lost[-1].min()) > 1e-3  # it does dissipate, and H only decreases
    assert float((lost[1:] - lost[:-1]).min()) >= 0
    line = energy_report(system, ys.transpose(0, 1))
    assert line.startswith("energy lost H(0) - H(T)") and f"{float(lost[-1].mean()):.3e}" in line
    assert "max |H(t) - H(0)|" in energy_report(get_system("pendulum"), ys.transpose(0, 1))


def test_damping_zero_is_the_conservative_pendulum_bit_for_bit():
    """damping=0 builds no field and no damping parameter: the ground truth equals, bit for bit,
    the one of the plain Hamiltonian function (J⁻¹∇H by autograd); the damped system's field
    differs from J⁻¹∇H only in ṗ, by −γ ∂H/∂p."""
    plain, zero = get_system("pendulum"), get_system("pendulum", damping=0.0)
    assert zero.vector_field is None and zero.params == plain.params == {
        "g": 1.0, "length": 1.0, "mass": 1.0}  # fmt: skip
    y0 = _initial(5, seed=3)
    a = _ground_truth(zero, y0, steps=4)
    b = _ground_truth(lambda y: plain.hamiltonian(y), y0, steps=4)  # no attributes at all
    assert torch.equal(a, b)

    damped = get_system("pendulum", damping=GAMMA)
    assert damped.params["damping"] == GAMMA and damped.separable  # H itself is still T + V
    y = _initial(7, seed=4)
    diff = vector_field(damped, y, create_graph=False) - vector_field(plain, y, create_graph=False)
    assert torch.equal(diff[:, 0], torch.zeros(7, dtype=F64))
    torch.testing.assert_close(diff[:, 1], -GAMMA * y[:, 1], rtol=1e-15, atol=1e-16)
    with pytest.raises(ValueError, match="damping must be finite and >= 0"):
        get_system("pendulum", damping=-0.1)


def test_leapfrog_steps_a_damped_field_implicitly_at_order_2():
    """A separable H with damping is not a separable field (ṗ depends on p): the explicit
    kick-drift-kick must not be taken. Leapfrog then runs as implicit Lobatto IIIA–IIIB, a
    partitioned RK method for any ODE, and converges at order 2 to the Gauss–Legendre 6 truth."""
    system = get_system("pendulum", damping=0.3)
    assert not Problem(system, None, 0.1, 1).separable
    y0 = _initial(3, seed=5)
    truth = _ground_truth(system, y0, steps=1, every=20, dt=0.05)[-1]  # t = 1
    leapfrog = get_integrator("leapfrog", tol=1e-14, max_iter=100)
    with torch.no_grad():
        ends = [solve(system, y0, 1 / n, n, leapfrog, "backprop").ys[-1] for n in (8, 16, 32)]
    errs = [float((end - truth).abs().max()) for end in ends]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    np.testing.assert_allclose(orders, 2.0, atol=0.1)


# ---- the model ------------------------------------------------------------------------------


def _model(kind: str, on: str, dim: int = 1, seed: int = 0) -> DissipativeHNN:
    """A DissipativeHNN in float64 with random (not initial) damping weights."""
    torch.manual_seed(seed)
    model = DissipativeHNN(dim, hidden=(8, 8), damping=kind, damping_on=on).double()
    with torch.no_grad():
        if kind == "constant":
            model.damping_factor.normal_()
        else:
            model.damping_net[-1].weight.normal_(std=0.5)
    return model


@pytest.mark.parametrize("kind,on", CONFIGS)
def test_model_damping_is_positive_semidefinite(kind, on):
    """R is symmetric PSD (eigenvalues >= −1e-12 relative) for random weights at random states,
    d = 2; with damping_on=p it is zero outside the p block; dH/dt = ∇Hᵀ f = −∇Hᵀ R ∇H <= 0."""
    for seed in range(3):
        model = _model(kind, on, dim=2, seed=seed)
        y = torch.randn(64, 4, dtype=F64, generator=torch.Generator().manual_seed(seed))
        R = model.damping_matrix(y).expand(64, 4, 4)
        torch.testing.assert_close(R, R.mT, rtol=0, atol=1e-15)
        eig = torch.linalg.eigvalsh(R)
        eig = eig.detach()
        assert float(eig.min()) >= -1e-12 * float(eig.abs().max())
        assert float(eig.max()) > 0
        if on == "p":
            assert torch.equal(R[:, :2, :], torch.zeros_like(R[:, :2, :]))
            assert torch.equal(R[:, :, :2], torch.zeros_like(R[:, :, :2]))
        f = vector_field(model, y, create_graph=False)
        y_ = y.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(y_).sum(), y_)
        assert float((g * f).sum(-1).max()) <= 1e-14


@pytest.mark.parametrize("kind,on", CONFIGS)
def test_model_vector_field_is_the_damped_hamiltonian_field(kind, on):
    """vector_field(model, y) = (J⁻¹ − R(y)) ∇H_θ(y), with ∇H_θ by autograd of forward and J⁻¹
    as a matrix, to 1e-13; the model's H is its HNN (has_hamiltonian) and it is recognized."""
    model = _model(kind, on, dim=2, seed=1)
    y = torch.randn(16, 4, dtype=F64, generator=torch.Generator().manual_seed(7))
    y_ = y.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model(y_).sum(), y_)
    J_inv = torch.zeros(4, 4, dtype=F64)
    J_inv[:2, 2:] = torch.eye(2, dtype=F64)
    J_inv[2:, :2] = -torch.eye(2, dtype=F64)
    R = model.damping_matrix(y).expand(16, 4, 4)
    expected = torch.einsum("bij,bj->bi", J_inv - R, g)
    torch.testing.assert_close(vector_field(model, y, create_graph=False), expected,
                               rtol=0, atol=1e-13)  # fmt: skip
    torch.testing.assert_close(symplectic_gradient(g), g @ J_inv.T, rtol=0, atol=0)
    hessians = torch.randn(16, 4, 4, dtype=F64, generator=torch.Generator().manual_seed(8))
    torch.testing.assert_close(symplectic_gradient(hessians, dim=-2), J_inv @ hessians,
                               rtol=0, atol=0)  # fmt: skip
    assert is_dissipative_model(model) and not is_dissipative_model(HNN(2))


def _gradients(model, y0: Tensor, integrator, gradient: str) -> Tensor:
    """(dL/dy0, dL/dθ) flattened, L a nonlinear loss on every time point of 6 steps of 0.1."""
    y0 = y0.detach().clone().requires_grad_(True)
    params = list(model.parameters())
    traj = integrate(model, y0, 0.1, 6, integrator, gradient)
    w = torch.linspace(0.5, 1.5, traj.numel(), dtype=F64).reshape(traj.shape)
    loss = (w * traj**2).sum() + torch.sin(traj).sum()
    grads = torch.autograd.grad(loss, [y0, *params], allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten()
                      for g, p in zip(grads, [y0, *params])])  # fmt: skip


@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4", "rk4"])
@pytest.mark.parametrize("kind", ["constant", "state"])
def test_gradients_equal_backprop(integrator, kind):
    """Through the damped field, checkpoint and the symplectic adjoint (exact for any ODE, seed
    001) equal backprop to 1e-10 relative in float64; the continuous adjoint agrees to 1e-2."""
    model = _model(kind, "p", dim=1, seed=2)
    y0 = _initial(3, seed=6)
    integ = get_integrator(integrator, tol=1e-14, max_iter=100)
    ref = _gradients(model, y0, integ, "backprop")
    scale = float(ref.abs().max())
    for method in ("checkpoint", "symplectic_adjoint"):
        got = _gradients(model, y0, integ, method)
        assert float((got - ref).abs().max()) <= 1e-10 * scale, method
    adjoint = _gradients(model, y0, integ, "adjoint")
    assert float((adjoint - ref).abs().max()) <= 1e-2 * scale


@pytest.mark.parametrize("integrator", ["tao", "reversible_leapfrog"])
def test_hamiltonian_splittings_refuse_a_dissipative_field(integrator):
    """tao and reversible_leapfrog step the split Hamiltonian flow: they refuse the learned
    dissipative model and a damped system with one line each."""
    y0 = _initial(2)
    for H in (_model("constant", "p"), get_system("pendulum", damping=GAMMA)):
        with pytest.raises(IncompatibleError) as err:
            integrate(H, y0, 0.1, 2, integrator, "backprop")
        message = str(err.value)
        assert "\n" not in message and "dissipative" in message and "implicit_midpoint" in message
    with pytest.raises(IncompatibleError, match="dissipative"):  # gradient=reversible likewise
        integrate(get_system("pendulum", damping=GAMMA), y0, 0.1, 2, "reversible_leapfrog",
                  "reversible")  # fmt: skip


def test_model_options_are_checked():
    with pytest.raises(ValueError, match="damping must be one of"):
        DissipativeHNN(1, damping="linear")
    with pytest.raises(ValueError, match="damping_on must be one of"):
        DissipativeHNN(1, damping_on="q")
    with pytest.raises(ValueError, match="damping_init must be finite and > 0"):
        DissipativeHNN(1, damping_init=0.0)
    for kind, on in CONFIGS:  # R starts at damping_init on its block
        R = DissipativeHNN(1, damping=kind, damping_on=on, damping_init=0.04).double()
        R = R.damping_matrix(torch.zeros(3, 2, dtype=F64)).expand(3, 2, 2)
        expected = torch.diag(torch.tensor([0.0 if on == "p" else 0.04, 0.04], dtype=F64))
        torch.testing.assert_close(R, expected.expand(3, 2, 2), rtol=1e-7, atol=1e-17)  # f32 init


# ---- evaluation -----------------------------------------------------------------------------


def test_damping_metrics_report_the_learned_rate():
    """A model whose R_pp is 0.05 I reports 0.05 (relative error 0 against 0.05, 0.2 against
    0.0625); state-dependent R is averaged over the states; a plain HNN reports None."""
    model = DissipativeHNN(2, damping="constant", damping_on="p").double()
    with torch.no_grad():
        model.damping_factor.copy_(math.sqrt(GAMMA) * torch.eye(2, dtype=F64))
    y = torch.randn(10, 4, dtype=F64)
    m = damping_metrics(model, y, GAMMA)
    assert m["damping_learned"] == pytest.approx(GAMMA, rel=1e-14)
    assert m["damping_eigenvalues"] == pytest.approx([GAMMA, GAMMA], rel=1e-14)
    assert m["damping_rel_err"] == pytest.approx(0.0, abs=1e-13) and m["damping_off_p"] == 0.0
    assert damping_metrics(model, y, 0.0625)["damping_rel_err"] == pytest.approx(0.2, rel=1e-12)

    state = _model("state", "all", dim=1, seed=3)
    states = torch.randn(5, 7, 2, dtype=F64)
    m = damping_metrics(state, states, None, chunk=4)
    mean_R = state.damping_matrix(states.reshape(-1, 2)).detach().mean(0)
    assert m["damping_learned"] == pytest.approx(float(mean_R[1, 1]), rel=1e-12)
    assert m["damping_off_p"] > 0 and m["damping_rel_err"] is None
    plain = damping_metrics(HNN(1), states, GAMMA)
    assert plain["damping_true"] == GAMMA and plain["damping_learned"] is None


# ---- learning -------------------------------------------------------------------------------


def test_training_recovers_a_constant_damping():
    """On clean damped-pendulum trajectories (γ = 0.05), fitting H_θ and a constant R_pp on
    rollouts of 4 steps of 0.25 through implicit midpoint and the symplectic adjoint moves R_pp
    from its initial 0.01 (80 % off) to within 15 % of 0.05 (measured: 4.5 %) in 100 Adam steps."""
    system = get_system("pendulum", damping=GAMMA)
    y0 = system.sample(64, torch.Generator().manual_seed(8))
    data = _ground_truth(system, y0, steps=4, every=2, dt=0.125)
    torch.manual_seed(0)
    model = DissipativeHNN(1, hidden=(16, 16), damping_init=0.01).double()
    integ = get_integrator("implicit_midpoint", tol=1e-10, max_iter=30)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(100):
        opt.zero_grad()
        pred = integrate(model, data[0], 0.25, 4, integ, "symplectic_adjoint")
        loss = ((pred - data) ** 2).mean()
        loss.backward()
        opt.step()
    learned = float(model.damping_block().detach()[0, 0])
    assert abs(learned - GAMMA) / GAMMA < 0.15, learned
