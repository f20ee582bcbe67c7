"""Gradient methods against each other and against finite differences, in float64.

``backprop`` (autograd through every fixed-point iteration) is the reference. ``checkpoint`` and
``symplectic_adjoint`` must reproduce it to rounding and solver tolerance; the continuous
``adjoint`` only approaches it as h -> 0, at an order measured here. Losses touch every time
point, so the per-observation jumps of the adjoints are exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_model
from torch import Tensor, nn

from hnnsym import integrate
from hnnsym.errors import ConvergenceError, IncompatibleError
from hnnsym.ode.gradients import get_gradient
from hnnsym.ode.gradients.symplectic_adjoint import SymplecticAdjoint
from hnnsym.ode.integrators import FixedPoint, get_integrator
from hnnsym.physics.models import HNN, SeparableHNN

F64 = torch.float64
INTEGRATORS = [
    "implicit_midpoint",
    "gauss_legendre4",
    "gauss_legendre6",
    "leapfrog",
    "symplectic_euler",
    "rk4",
]
MODELS = {"hnn": HNN, "separable_hnn": SeparableHNN}
TOL = 1e-14


class QuarticH(nn.Module):
    """H_θ = p²/2 + a q⁴/4 - b q²/2 + c q p, θ = (a, b, c): a small nonseparable, nonlinear H
    with one parameter tensor (d = 1)."""

    def __init__(self, a: float = 1.0, b: float = 1.0, c: float = 0.3):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([a, b, c], dtype=F64))

    def forward(self, y: Tensor) -> Tensor:
        q, p = y[..., 0], y[..., 1]
        a, b, c = self.theta
        return 0.5 * p**2 + a * q**4 / 4 - b * q**2 / 2 + c * q * p


def _loss(traj: Tensor) -> Tensor:
    """A nonlinear loss with a different weight on every entry of every time point."""
    w = torch.linspace(0.5, 1.5, traj.numel(), dtype=traj.dtype).reshape(traj.shape)
    return (w * traj**2).sum() + torch.sin(traj).sum()


def _gradients(H: nn.Module, y0: Tensor, loss, **kwargs) -> tuple[Tensor, Tensor]:
    """(dL/dy0, dL/dθ flattened over all parameters). The output layer's bias gets no gradient
    (H is defined up to a constant): None counts as zero."""
    y0 = y0.detach().clone().requires_grad_(True)
    params = list(H.parameters())
    traj = integrate(H, y0, **kwargs)
    g = torch.autograd.grad(loss(traj), [y0, *params], allow_unused=True)
    g_theta = [torch.zeros_like(p) if gi is None else gi for gi, p in zip(g[1:], params)]
    return g[0], torch.cat([x.flatten() for x in g_theta])


def _rel(x: Tensor, ref: Tensor) -> float:
    return float((x - ref).abs().max() / ref.abs().max())


# ---- exact methods equal backprop --------------------------------------------------------------
@pytest.mark.parametrize("integrator", INTEGRATORS)
@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("model", list(MODELS))
def test_exact_gradients_equal_backprop(model, d, integrator):
    """checkpoint and symplectic_adjoint w.r.t. y0 and every parameter, loss on every time point,
    uneven batch, equal backprop to <= 1e-10 relative (max-norm)."""
    H = make_model(MODELS[model], d, seed=10 * d + len(integrator), gain=5.0)
    B = 3 if d == 1 else 5
    y0 = torch.randn(B, 2 * d, generator=torch.Generator().manual_seed(d), dtype=F64)
    run = dict(h=0.1, steps=3, integrator=get_integrator(integrator, tol=TOL))
    ref_y, ref_t = _gradients(H, y0, _loss, gradient="backprop", **run)
    assert ref_y.abs().max() > 0 and ref_t.abs().max() > 0
    for method in ("checkpoint", "symplectic_adjoint"):
        g_y, g_t = _gradients(H, y0, _loss, gradient=method, **run)
        assert _rel(g_y, ref_y) <= 1e-10, (method, _rel(g_y, ref_y))
        assert _rel(g_t, ref_t) <= 1e-10, (method, _rel(g_t, ref_t))


@pytest.mark.parametrize("activation", ["sin", "softplus", "gelu"])
@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4"])
def test_symplectic_adjoint_with_every_closed_form_activation(activation, integrator):
    """The adjoint's closed-form linearisation of f (tanh: the test above) for the other
    activations of ``mlp``, with a parameter frozen: equal to backprop <= 1e-10 relative."""
    with torch.random.fork_rng():
        torch.manual_seed(7)
        H = HNN(2, hidden=(16, 16), activation=activation).to(F64)
    with torch.no_grad():
        H.net[-1].weight.mul_(5.0)
    H.net[2].bias.requires_grad_(False)
    assert H.energy_linearization(torch.zeros(1, 4, dtype=F64)) is not None
    y0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    y0.requires_grad_(True)
    trainable = [y0, *(p for p in H.parameters() if p.requires_grad)]
    run = dict(h=0.1, steps=3, integrator=get_integrator(integrator, tol=TOL))

    def grads(method: str) -> list[Tensor]:
        loss = _loss(integrate(H, y0, gradient=method, **run))
        return torch.autograd.grad(loss, trainable, allow_unused=True)

    for g, r in zip(grads("symplectic_adjoint"), grads("backprop"), strict=True):
        if r is None:  # the output bias
            assert g is None
        else:
            assert r.abs().max() > 0 and _rel(g, r) <= 1e-10, _rel(g, r)


def test_exact_gradients_with_the_observed_predictor():
    """Seeding the stage iteration with observed states changes where the iteration starts, not
    the converged solution or its gradient."""
    H = make_model(HNN, 1, seed=3, gain=5.0)
    y0 = torch.tensor([[0.3, -0.5], [0.8, 0.1], [-0.4, 0.6]], dtype=F64)
    run = dict(h=0.1, steps=4, integrator=get_integrator("gauss_legendre4", tol=TOL))
    observed = dict(
        run, integrator=get_integrator("gauss_legendre4", tol=TOL, predictor="observed")
    )
    with torch.no_grad():
        clean = integrate(H, y0, gradient="backprop", **run)
    noisy = clean + 1e-3 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))
    ref_y, ref_t = _gradients(H, y0, _loss, gradient="backprop", **run)
    for method in ("backprop", "symplectic_adjoint"):
        g_y, g_t = _gradients(H, y0, _loss, gradient=method, guess=noisy, **observed)
        assert _rel(g_y, ref_y) <= 1e-10 and _rel(g_t, ref_t) <= 1e-10


# ---- the continuous adjoint ------------------------------------------------------------------
T_ADJ, N_OBS = 0.5, 2
ADJ_STEPS = [1 / 4, 1 / 8, 1 / 16, 1 / 32]
ADJ_Y0 = [[0.5, 0.3], [-1.0, 0.8], [1.3, -0.2]]


def _observed_loss(steps: int):
    """Loss on the observations at t = T/2 and T: the same continuous problem for every h."""
    k = steps // N_OBS

    def loss(traj: Tensor) -> Tensor:
        obs = traj[k::k]
        return (obs**2).sum() + torch.sin(obs[..., 0]).sum()

    return loss


@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4", "rk4"])
def test_continuous_adjoint_converges_to_backprop(integrator):
    """Fixed T = 1/2, h halved three times, loss on two observations.

    - dL/dθ: order 2 for every integrator. The adjoint accumulates ∫ λᵀ ∂f/∂θ dt by the trapezoidal
      rule on the step states (Choudhary et al., Alg. 3), an O(h²) quadrature whatever the integrator's
      order; measured 2.0 for implicit midpoint, GL4 and RK4 alike.
    - dL/dy0 for Gauss–Legendre: exact. A symplectic RK method applied to the augmented system
      (y, λ) is its own discrete adjoint (the partner of a Gauss method is itself), and stepping a
      symmetric method back with -h retraces the forward states, so λ_0 is the exact gradient of
      the discrete solution: it equals backprop's to solver tolerance at every h.
    - dL/dy0 for RK4: both it and backprop's are order-4 approximations of the continuous λ(0), so
      they differ by O(h⁴) at most (measured: 5.0, the leading terms cancel; we assert >= 3.7).
    """
    H = QuarticH()
    y0 = torch.tensor(ADJ_Y0, dtype=F64)
    err_t, err_y = [], []
    for h in ADJ_STEPS:
        steps = round(T_ADJ / h)
        run = dict(h=h, steps=steps, integrator=get_integrator(integrator, tol=TOL))
        loss = _observed_loss(steps)
        ref_y, ref_t = _gradients(H, y0, loss, gradient="backprop", **run)
        adj_y, adj_t = _gradients(H, y0, loss, gradient="adjoint", **run)
        err_t.append(_rel(adj_t, ref_t))
        err_y.append(_rel(adj_y, ref_y))
    log_h = np.log(ADJ_STEPS)
    order_t = float(np.polyfit(log_h, np.log(err_t), 1)[0])
    assert abs(order_t - 2.0) <= 0.3, (order_t, err_t)
    assert err_t[-1] < 1e-3  # small, not only shrinking
    if integrator != "rk4":
        assert max(err_y) <= 1e-10, err_y
    else:
        order_y = float(np.polyfit(log_h, np.log(err_y), 1)[0])
        assert order_y >= 3.7, (order_y, err_y)
        assert min(err_y) > 1e-13  # really approximate: not an accidental identity


@pytest.mark.parametrize("integrator", ["leapfrog", "symplectic_euler"])
def test_continuous_adjoint_refuses_partitioned_integrators(integrator):
    y0 = torch.tensor(ADJ_Y0, dtype=F64)
    with pytest.raises(IncompatibleError, match=f"adjoint needs a plain Runge–Kutta.*{integrator}"):
        integrate(QuarticH(), y0, 0.1, 4, integrator, "adjoint")


# ---- finite differences ----------------------------------------------------------------------
@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4", "leapfrog"])
def test_symplectic_adjoint_gradcheck(integrator):
    """The whole trajectory's Jacobian w.r.t. y0 and θ against central finite differences."""
    H = QuarticH()
    y0 = torch.tensor([[0.5, 0.3], [-1.0, 0.8]], dtype=F64, requires_grad=True)
    integ = get_integrator(integrator, tol=TOL)

    def run(y: Tensor, theta: Tensor) -> Tensor:  # theta *is* H.theta: gradcheck perturbs it
        return integrate(H, y, 0.1, 2, integ, "symplectic_adjoint")

    assert torch.autograd.gradcheck(run, (y0, H.theta))


def test_gradcheck_catches_an_approximate_gradient():
    """The same check rejects the continuous adjoint's O(h²) parameter gradient at h = 0.1."""
    H = QuarticH()
    y0 = torch.tensor([[0.5, 0.3], [-1.0, 0.8]], dtype=F64, requires_grad=True)
    integ = get_integrator("implicit_midpoint", tol=TOL)

    def run(y: Tensor, theta: Tensor) -> Tensor:
        return integrate(H, y, 0.1, 2, integ, "adjoint")

    ok = torch.autograd.gradcheck(run, (y0, H.theta), raise_exception=False, fast_mode=True)
    assert not ok


# ---- failure reporting in backward -----------------------------------------------------------
def test_symplectic_adjoint_reports_an_unconverged_adjoint_solve():
    H = QuarticH()
    y0 = torch.tensor(ADJ_Y0, dtype=F64, requires_grad=True)
    method = SymplecticAdjoint(FixedPoint(tol=1e-300, max_iter=1))
    traj = integrate(H, y0, 0.1, 3, get_integrator("implicit_midpoint", tol=TOL), method)
    with pytest.raises(ConvergenceError, match="in the adjoint of step 2: residual"):
        traj.sum().backward()


STEPWISE = {
    "checkpoint": ("checkpoint", {}),
    "symplectic_adjoint/fixed_point": ("symplectic_adjoint", {"adjoint_solve": "fixed_point"}),
    "symplectic_adjoint/direct": ("symplectic_adjoint", {"adjoint_solve": "direct", "chunk": 4}),
}


@pytest.mark.parametrize("variant", list(STEPWISE))
@pytest.mark.parametrize("keep_every", [3, "sqrt", 100])
def test_keeping_every_kth_state_gives_the_same_gradient(variant, keep_every):
    """keep_every=k recomputes the states between kept ones in backward: the same steps from the
    same state, so the gradient is the all-states one, bit for bit when the steps are taken one at
    a time, to rounding when the direct adjoint sums each chunk's dL/dθ in one VJP (the chunks then
    fall elsewhere); and backprop's to 1e-10."""
    method, options = STEPWISE[variant]
    d, steps = 2, 10
    H = make_model(HNN, d, seed=3, gain=5.0)
    y0 = torch.randn(4, 2 * d, dtype=F64, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(
        steps + 1, 4, 2 * d, dtype=F64, generator=torch.Generator().manual_seed(2)
    )
    params = list(H.parameters())

    def grads(gradient):
        y = y0.clone().requires_grad_(True)
        traj = integrate(H, y, 0.1, steps, "gauss_legendre4", gradient)
        return torch.autograd.grad((weights * traj**2).sum(), [y, *params], allow_unused=True)

    every = grads(get_gradient(method, keep_every=keep_every, **options))
    for a, b in zip(every, grads(get_gradient(method, **options)), strict=True):
        if variant.endswith("direct"):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)
        else:
            assert (a is None and b is None) or torch.equal(a, b)
    for a, b in zip(every, grads("backprop"), strict=True):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_keep_every_saves_fewer_states():
    """Saved for backward by the stepwise function: N+1 states with k = 1; with k > 1, ⌈N/k⌉
    states and, for each but the first, the stage predictor's history there (the stages of the
    three steps before it, (1, B, 2d) each for implicit midpoint) from which backward recomputes
    the block bit for bit."""
    steps, B = 64, 8
    H = make_model(HNN, 1, seed=0, gain=1.0)
    y0 = torch.randn(B, 2, dtype=F64)
    sizes = {}
    for keep in (1, 8, "sqrt"):
        saved = []

        def pack(t, saved=saved):
            if t.dim() == 3 and t.shape[1:] == (B, 2):  # states (time, batch, 2d)
                saved.append(t.shape[0])
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            integrate(
                H,
                y0,
                0.01,
                steps,
                "implicit_midpoint",
                get_gradient("symplectic_adjoint", keep_every=keep),
            )
        sizes[keep] = saved
    assert sizes[1] == [steps + 1]
    assert sizes[8] == sizes["sqrt"] == [8] + [1] * 3 * (steps // 8 - 1)


def test_bad_keep_every_is_refused():
    for bad in (0, -2, 1.5, "log"):
        with pytest.raises(ValueError, match="keep_every"):
            get_gradient("symplectic_adjoint", keep_every=bad)


def test_the_one_stage_2x2_adjoint_matrices_equal_the_general_solve():
    """``_one_stage_2x2`` (G and R entry by entry) against G = (I − h diag(a) Dᵀ)⁻¹ h diag(b) and
    R = I + Dᵀ G by ``torch.linalg.solve``, for a partitioned tableau (a_q ≠ a_p, b_q ≠ b_p)."""
    from hnnsym.ode.gradients.symplectic_adjoint import _one_stage_2x2

    D = torch.randn(3, 5, 2, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    h, a, b = 0.1, torch.tensor([1.0, 0.3], dtype=F64), torch.tensor([0.7, 1.2], dtype=F64)
    M = torch.eye(2, dtype=F64) - h * a[:, None] * D.transpose(-1, -2)
    G = torch.linalg.solve(M, torch.diag(h * b).expand_as(M))
    R = torch.eye(2, dtype=F64) + D.transpose(-1, -2) @ G
    G_2x2, R_2x2 = _one_stage_2x2(D, h, 1.0, 0.3, 0.7, 1.2)
    assert torch.allclose(G_2x2, G, rtol=1e-13, atol=1e-15)
    assert torch.allclose(R_2x2, R, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize(
    ("integrator", "dof", "tile_rows", "params"),
    [
        ("implicit_midpoint", 1, 2048, True),  # one tile, M⁻¹ by Cramer's rule
        ("implicit_midpoint", 1, 8, True),  # three tiles, the first one step short
        ("implicit_midpoint", 2, 8, True),  # s·n = 4: LU
        ("gauss_legendre4", 1, 8, True),  # two stages: LU
        ("symplectic_euler", 1, 8, False),  # a partitioned tableau, no parameter gradient
    ],
)
def test_a_traced_chunk_solves_batch_last_in_tiles_as_the_eager_chunk(
    integrator, dof, tile_rows, params, monkeypatch
):
    """What a compiled chunk traces (``_compiled_chunk``: the batch as the last axis, tiles of
    steps, the last first) against the eager ``chunk_adjoint``, in float64: λ_n and the
    parameter gradient to rounding. Dynamo traces it (``torch.compiler.is_compiling()``) and its
    graph runs eagerly, so no compiler runs here."""
    import hnnsym.ode.gradients.symplectic_adjoint as sa

    monkeypatch.setattr(sa, "TILE_ROWS", tile_rows)
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = HNN(dof).to(F64)
    integ = get_integrator(integrator)
    s, c, B, dim, h = integ.tableau.stages, 5, 8, 2 * dof, 0.05
    Y = torch.randn(s, c * B, dim, dtype=F64, generator=gen)
    jumps = torch.randn(c, B, dim, dtype=F64, generator=gen)
    lam = torch.randn(B, dim, dtype=F64, generator=gen)
    trainable = [p for p in model.parameters() if p.requires_grad] if params else []
    lam_e, grads_e = sa.chunk_adjoint(integ, model, Y, jumps, lam, h, trainable)

    def chunk(model, Y, jumps, lam):
        return sa.chunk_adjoint(integ, model, Y, jumps, lam, h, params)

    traced = torch.compile(chunk, backend="eager", fullgraph=True, dynamic=False)
    lam_t, grads_t = traced(model, Y, jumps, lam)
    assert torch.allclose(lam_t, lam_e, rtol=1e-12, atol=1e-13)
    assert len(grads_t) == len(grads_e) == (len(trainable) if params else 0)
    for g_t, g_e in zip(grads_t, grads_e):
        assert (g_t is None) == (g_e is None)  # ∇H does not depend on the output bias
        if g_e is not None:
            assert g_e.abs().max() > 0
            assert torch.allclose(g_t, g_e, rtol=1e-11, atol=1e-12)
