"""hnnsym.odeint: torchdiffeq's fixed-grid call on the kernel (hnnsym.ode.fixed_grid).

- trajectories equal torchdiffeq's for the same explicit tableau (euler, midpoint; our rk38 is
  torchdiffeq's fixed-grid rk4, the 3/8 rule; our rk4 is the classic one and is not);
- checkpoint and the symplectic adjoint give backprop's gradient (1e-10 relative, float64) for a
  neural ODE and a time-dependent field;
- y' = cos(t) y against y0 exp(sin t), with the observed order of convergence;
- the stage times t_n + c_i h (quadrature exactness), decreasing t, shapes, the one-line errors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torchdiffeq
from torch import Tensor, nn

from hnnsym import odeint
from hnnsym.errors import IncompatibleError
from hnnsym.ode.gradients import get_gradient
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.protocols import GradientMethod, StagedIntegrator, TimeVectorField, VectorField
from hnnsym.physics.models import NODE

F64 = torch.float64


class TimeMLP(nn.Module):
    """A non-autonomous, non-Hamiltonian field f(t, y) = MLP([y, sin t, cos t]) on y (..., n)."""

    def __init__(self, n: int, hidden: int = 8, seed: int = 0, autonomous: bool = False):
        super().__init__()
        torch.manual_seed(seed)
        self.autonomous = autonomous
        self.net = nn.Sequential(nn.Linear(n + 2, hidden), nn.Tanh(), nn.Linear(hidden, n))
        self.to(F64)

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        t = torch.zeros_like(t) if self.autonomous else t
        tt = torch.stack([torch.sin(t), torch.cos(t)]).expand(*y.shape[:-1], 2)
        return self.net(torch.cat([y, tt], -1))


def y0_of(shape, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64)


# ---- torchdiffeq ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ours", "theirs"), [("euler", "euler"), ("midpoint", "midpoint"), ("rk38", "rk4")]
)
def test_trajectories_equal_torchdiffeq_for_the_same_tableau(ours, theirs):
    func, y0 = TimeMLP(3), y0_of((2, 3))
    t = torch.linspace(0.0, 1.0, 5, dtype=F64)  # spacing 1/4 = 4 steps of 1/16 (exact in binary)
    with torch.no_grad():
        mine = odeint(func, y0, t, method=ours, options={"step_size": 1 / 16})
        ref = torchdiffeq.odeint(func, y0, t, method=theirs, options={"step_size": 1 / 16})
    assert mine.shape == ref.shape == (5, 2, 3)
    assert (mine - ref).abs().max() <= 1e-12


def test_our_rk4_is_the_classic_tableau_not_torchdiffeqs():
    func, y0 = TimeMLP(3), y0_of((3,))
    t = torch.linspace(0.0, 1.0, 3, dtype=F64)
    with torch.no_grad():
        classic = odeint(func, y0, t, method="rk4")
        three_eighths = torchdiffeq.odeint(func, y0, t, method="rk4")
    assert 1e-10 < (classic - three_eighths).abs().max() < 1e-3  # both order 4, not the same


def test_symplectic_adjoint_gradient_equals_torchdiffeqs_backprop():
    func, y0 = TimeMLP(3), y0_of((3,)).requires_grad_(True)
    t = torch.linspace(0.0, 1.0, 5, dtype=F64)

    def grads(run):
        func.zero_grad()
        y0.grad = None
        run().pow(2).sum().backward()
        return [y0.grad.clone()] + [p.grad.clone() for p in func.parameters()]

    ours = grads(lambda: odeint(func, y0, t, method="rk38", options={"step_size": 0.125},
                                adjoint=True))  # fmt: skip
    ref = grads(lambda: torchdiffeq.odeint(func, y0, t, method="rk4", options={"step_size": 0.125}))
    for a, b in zip(ours, ref):
        assert (a - b).abs().max() <= 1e-10 * b.abs().max()


# ---- exact gradients --------------------------------------------------------------------------
METHODS = ("implicit_midpoint", "gauss_legendre4", "rk4", "midpoint")
STEPWISE = {
    "checkpoint": "checkpoint",
    "symplectic_adjoint": "symplectic_adjoint",
    "symplectic_adjoint/sqrt": get_gradient("symplectic_adjoint", keep_every="sqrt"),
    "symplectic_adjoint/fixed_point": get_gradient(
        "symplectic_adjoint", adjoint_solve="fixed_point"
    ),
}


def _gradients(func: nn.Module, y0: Tensor, t: Tensor, method: str, gradient) -> list[Tensor]:
    y0 = y0.detach().requires_grad_(True)
    ys = odeint(func, y0, t, method=method, options={"step_size": 0.05}, gradient=gradient)
    weights = torch.linspace(0.5, 1.5, ys.numel(), dtype=F64).reshape(ys.shape)
    loss = (weights * ys).pow(2).sum()  # every output time contributes
    return list(torch.autograd.grad(loss, [y0, *func.parameters()]))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("field", "shape"),
    [("neural_ode", (3,)), ("time_dependent", (2, 3))],
)
def test_stepwise_gradients_equal_backprop(method, field, shape):
    """A neural ODE (autonomous MLP, n = 3: the state is padded) and a time-dependent MLP field
    on a (2, 3) state; the loss uses every output time."""
    func = TimeMLP(shape[-1], autonomous=field == "neural_ode")
    y0, t = y0_of(shape), torch.tensor([0.0, 0.25, 0.4, 0.6], dtype=F64)
    ref = _gradients(func, y0, t, method, "backprop")
    for name, gradient in STEPWISE.items():
        got = _gradients(func, y0, t, method, gradient)
        for a, b in zip(got, ref):
            err = float((a - b).abs().max() / b.abs().max())
            assert err <= 1e-10, f"{name}: relative error {err:.2e}"


def test_node_model_and_adjoint_params_for_a_plain_callable():
    node = NODE(1, hidden=(8,)).to(F64)  # the project's neural ODE, as func(t, y)
    y0, t = y0_of((4, 2)), torch.linspace(0.0, 0.5, 6, dtype=F64)
    func = lambda t, y: node(y)  # noqa: E731 - a plain callable: its parameters must be named
    with pytest.raises(ValueError, match="adjoint_params") as err:
        odeint(func, y0, t, adjoint=True)
    assert "\n" not in str(err.value)
    params = list(node.parameters())
    ys = odeint(func, y0, t, method="gauss_legendre4", adjoint=True, adjoint_params=params)
    got = torch.autograd.grad(ys.sum(), params)
    ref = torch.autograd.grad(odeint(func, y0, t, method="gauss_legendre4").sum(), params)
    for a, b in zip(got, ref):
        assert (a - b).abs().max() <= 1e-10 * b.abs().max()


# ---- accuracy -----------------------------------------------------------------------------------
def _cos_error(method: str, h: float) -> float:
    """max error at t = 2 of y' = cos(t) y, y(0) = y0: y = y0 exp(sin t)."""
    y0 = torch.tensor([1.0, -0.5, 2.0], dtype=F64)
    t = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    ys = odeint(lambda t, y: torch.cos(t) * y, y0, t, method=method, options={"step_size": h})
    exact = y0 * torch.exp(torch.sin(t))[:, None]
    return float((ys - exact).abs().max())


@pytest.mark.parametrize(
    ("method", "order", "h"),
    [("implicit_midpoint", 2, 0.1), ("gauss_legendre4", 4, 0.2), ("gauss_legendre6", 6, 0.5),
     ("rk4", 4, 0.2), ("euler", 1, 0.02)],
)  # fmt: skip
def test_time_dependent_linear_ode_converges_at_the_method_order(method, order, h):
    coarse, fine = _cos_error(method, h), _cos_error(method, h / 2)
    observed = math.log2(coarse / fine)
    assert abs(observed - order) < 0.15, f"{method}: observed order {observed:.3f}"


@pytest.mark.parametrize(
    ("method", "degree"),
    [("implicit_midpoint", 1), ("gauss_legendre4", 3), ("gauss_legendre6", 5), ("rk4", 3),
     ("rk38", 3), ("midpoint", 1), ("euler", 0)],
)  # fmt: skip
def test_stage_times_integrate_polynomials_exactly(method, degree):
    """y' = (k+1) t^k: one step of size 1 from t = 0.5 is exact for k <= the quadrature degree
    of (b, c), which holds only if func sees t_n + c_i h at stage i."""
    y0, t = torch.zeros(1, dtype=F64), torch.tensor([0.5, 1.5], dtype=F64)
    exact = 1.5 ** (degree + 1) - 0.5 ** (degree + 1)
    ys = odeint(lambda t, y: (degree + 1) * t**degree * torch.ones_like(y), y0, t, method=method)
    assert abs(float(ys[-1, 0]) - exact) <= 1e-12
    above = 1.5 ** (degree + 2) - 0.5 ** (degree + 2)
    ys = odeint(lambda t, y: (degree + 2) * t ** (degree + 1) * torch.ones_like(y), y0, t,
                method=method)  # fmt: skip
    assert abs(float(ys[-1, 0]) - above) > 1e-6  # one degree more is not exact


def test_decreasing_times_integrate_backward():
    y1 = torch.tensor([0.3, -1.0], dtype=F64)
    t = torch.tensor([2.0, 1.5, 0.0], dtype=F64)
    ys = odeint(lambda t, y: torch.cos(t) * y, y1, t, method="gauss_legendre6",
                options={"step_size": 0.05})  # fmt: skip
    exact = y1 * torch.exp(torch.sin(t) - math.sin(2.0))[:, None]
    assert (ys - exact).abs().max() < 1e-12


# ---- shapes and errors ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3,), (2, 5, 3)])
def test_shapes_round_trip(shape):
    rate = torch.linspace(0.2, 1.0, math.prod(shape), dtype=F64)
    y0, t = y0_of(shape), torch.linspace(0.0, 1.0, 4, dtype=F64)
    ys = odeint(lambda t, y: -rate.reshape(y.shape) * y, y0, t, method="gauss_legendre4",
                options={"step_size": 1 / 30})  # fmt: skip
    assert ys.shape == (4, *shape) and ys.dtype == F64
    assert torch.equal(ys[0], y0)
    flat = odeint(lambda t, y: -rate * y, y0.reshape(-1), t, method="gauss_legendre4",
                  options={"step_size": 1 / 30})  # fmt: skip
    assert torch.equal(ys.reshape(4, -1), flat)  # elementwise field: the shape changes nothing
    exact = y0 * torch.exp(-rate.reshape(shape) * t.reshape(-1, *[1] * len(shape)))
    assert (ys - exact).abs().max() < 1e-8


def _one_line_error(kind, match, *args, **kwargs):
    with pytest.raises(kind, match=match) as err:
        odeint(*args, **kwargs)
    assert "\n" not in str(err.value)


def test_one_line_errors():
    f, y0 = (lambda t, y: -y), torch.ones(3, dtype=F64)
    t = torch.tensor([0.0, 0.1, 0.25], dtype=F64)
    _one_line_error(ValueError, r"t\[2\] - t\[0\] = 0.25 is not a whole multiple of step_size 0.1",
                    f, y0, t)  # fmt: skip
    _one_line_error(ValueError, "not a whole multiple", f, y0, t[:2], options={"step_size": 0.03})
    _one_line_error(ValueError, "strictly increasing or strictly decreasing", f, y0, t[[0, 2, 1]])
    _one_line_error(IncompatibleError, "partitioned", f, y0, t[:2], method="leapfrog")
    _one_line_error(IncompatibleError, "partitioned", f, y0, t[:2], method="symplectic_euler")
    _one_line_error(ValueError, "unknown method", f, y0, t[:2], method="dopri5")
    _one_line_error(ValueError, "unknown options", f, y0, t[:2], options={"perturb": True})
    _one_line_error(ValueError, "step_size must be", f, y0, t[:2], options={"step_size": -0.1})
    _one_line_error(ValueError, "y0's shape", lambda t, y: y[:2], y0, t[:2])
    _one_line_error(ValueError, "not both", f, y0, t[:2], gradient="backprop", adjoint=True)
    _one_line_error(IncompatibleError, "reversible_leapfrog", f, y0, t[:2], gradient="reversible")


def test_default_step_is_the_smallest_spacing_and_t_spacings_may_differ():
    f, y0 = (lambda t, y: -y), torch.ones(2, dtype=F64)
    t = torch.tensor([0.0, 0.1, 0.3, 0.6], dtype=F64)
    ys = odeint(f, y0, t, method="euler")
    steps = torch.tensor([0, 1, 3, 6], dtype=F64)  # h = 0.1: Euler multiplies by 0.9 per step
    assert torch.allclose(ys[:, 0], 0.9**steps, rtol=0, atol=1e-14)


def test_protocols_describe_the_kernel_objects():
    assert isinstance(get_integrator("gauss_legendre4"), StagedIntegrator)
    assert not isinstance(get_integrator("tao"), StagedIntegrator)
    for name in ("backprop", "checkpoint", "symplectic_adjoint", "adjoint"):
        assert isinstance(get_gradient(name), GradientMethod)
    assert isinstance(NODE(1), VectorField)
    assert isinstance(TimeMLP(2), TimeVectorField)
