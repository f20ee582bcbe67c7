"""Learned Hamiltonians: nn.Modules mapping states (B, 2d) -> energies (B,).

``NODE`` is the exception: an unstructured vector field (B, 2d) -> (B, 2d) with no H, for
comparison (it declares ``OWN_FIELD`` without ``HAMILTONIAN``; ``hnnsym.ode.dynamics.vector_field``
calls its own ``vector_field``). Each class declares what it offers in ``capabilities``
(``hnnsym.ode.capabilities``, ``hnnsym.physics.capabilities``). ``Potential`` is learned from positions only: V_θ(q) (B, d) -> (B,) and a
mass matrix, stepped by the position schemes of ``hnnsym.ode.lagrangian`` (Aoshima et al.).

The MLP Hamiltonians also give ∇H in closed form (``energy_gradient``, ``mlp_gradient``): the
output weight back-propagated through the layers by hand, ∇H = W₁ᵀ(σ'(z₁) ⊙ W₂ᵀ(σ'(z₂) ⊙ … W_Lᵀ)).
With a graph it is one node whose backward (∇²H ν and ∂/∂θ ν·∇H) is written by hand
(``_MLPGradient``), so ``vector_field`` needs no ``autograd.grad`` call and the vector–Jacobian
products of f that the gradient methods take are one backward pass instead of a double backward
through autograd's graph of a gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from hnnsym.ode.capabilities import Capability, has
from hnnsym.physics.capabilities import ModelCapability


class Sin(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(x)


ACTIVATIONS = {"tanh": nn.Tanh, "softplus": nn.Softplus, "sin": Sin, "gelu": nn.GELU}


NARROW = 4  # products with at most this many output columns run transposed (_narrow_product)


def mlp(
    n_in: int,
    hidden: Sequence[int],
    activation: str = "tanh",
    n_out: int = 1,
    output_gain: float = 1.0,
) -> nn.Sequential:
    """n_in -> hidden... -> n_out, smooth activation (H must be twice differentiable).

    Every layer starts from PyTorch's default draw (U(±1/√fan_in)); ``output_gain`` then
    multiplies the last layer's weight and bias, so the net starts with outputs (and gradients)
    that many times larger. The draws are the same for every gain."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    numeric = isinstance(output_gain, (int, float)) and not isinstance(output_gain, bool)
    if not (numeric and math.isfinite(output_gain) and output_gain > 0):
        raise ValueError(f"output_gain must be finite and > 0, got {output_gain}")
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
        width = h
    last = nn.Linear(width, n_out)
    if output_gain != 1.0:
        with torch.no_grad():
            last.weight.mul_(output_gain)
            last.bias.mul_(output_gain)
    layers.append(last)
    return nn.Sequential(*layers)


def _activation_derivative(act: nn.Module) -> Callable[[Tensor, Tensor], Tensor] | None:
    """σ'(z) as a function of (z, σ(z)) for the activations of ``mlp``; None if unknown."""
    if isinstance(act, nn.Tanh):
        return lambda z, a: 1 - a * a
    if isinstance(act, Sin):
        return lambda z, a: torch.cos(z)
    if isinstance(act, nn.Softplus):
        beta, threshold = act.beta, act.threshold  # linear above the threshold, as torch's
        return lambda z, a: torch.where(z * beta > threshold, 1.0, torch.sigmoid(z * beta))
    if isinstance(act, nn.GELU) and act.approximate == "none":
        return lambda z, a: (
            0.5 * (1 + torch.erf(z / math.sqrt(2)))
            + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        )
    return None


@lru_cache(maxsize=16)
def _constant(value: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A 0-dim ``value`` (read only), such as the 1 of 1 − a², without an op per call to make it
    or to wrap a Python number."""
    with torch.inference_mode(False):
        return torch.full((), value, dtype=dtype, device=device)


def _tanh_and_slope(z: Tensor, overwrite: bool = False) -> tuple[Tensor, Tensor]:
    """(tanh z, 1 − tanh² z), with tanh z = 2σ(2z) − 1: the same function as ``torch.tanh`` to
    rounding (|Δ| <= 2 ulp of 1), and 1.5–3x faster on CPU, where torch's tanh is slow; the slope
    in one fused op (1 − a² as addcmul). With a graph, one node (``_TanhSlope``). ``overwrite``:
    z is the caller's temporary, and without a graph tanh is computed in its memory."""
    if torch.is_grad_enabled() and z.requires_grad:
        return _TanhSlope.apply(z)
    return _tanh_and_slope_values(z, overwrite)


def _tanh_and_slope_values(z: Tensor, overwrite: bool = False) -> tuple[Tensor, Tensor]:
    """``overwrite``: compute tanh in z's own memory (z is a temporary without a graph)."""
    return _tanh_of_doubled(z.mul_(2) if overwrite else 2 * z)


class _TanhSlope(torch.autograd.Function):
    """z -> (a, s) = (tanh z, 1 − tanh² z) as one graph node: backward
    ∂L/∂z = s (∂L/∂a − 2a ∂L/∂s), two ops instead of autograd's chain through σ, the scalings and
    addcmul. The backward is made of differentiable ops, so double backward works (the double
    backward of ``mlp_gradient`` runs through it)."""

    @staticmethod
    def forward(ctx, z: Tensor) -> tuple[Tensor, Tensor]:
        a, slope = _tanh_and_slope_values(z)
        ctx.save_for_backward(a, slope)
        return a, slope

    @staticmethod
    def backward(ctx, grad_a: Tensor | None, grad_slope: Tensor | None) -> Tensor:
        a, slope = ctx.saved_tensors
        if grad_slope is None:
            return grad_a * slope
        if grad_a is None:
            return -2 * a * slope * grad_slope
        return slope * torch.addcmul(grad_a, a, grad_slope, value=-2)


def _activation_and_slope(act: nn.Module) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """z -> (σ(z), σ'(z)) for an activation of ``mlp`` that ``_activation_derivative`` knows; z is
    a temporary that it may overwrite (tanh does; the others leave it intact)."""
    if isinstance(act, nn.Tanh):
        return lambda z: _tanh_and_slope(z, overwrite=True)
    slope = _activation_derivative(act)
    return lambda z: (a := act(z), slope(z, a))


def _layer_and_slope(act: nn.Module) -> Callable[[Tensor, Tensor, Tensor], tuple[Tensor, ...]]:
    """(h, W, b) -> (σ(z), σ'(z), z) with z = h Wᵀ + b, without a graph. For tanh z is not kept
    (None; its memory holds tanh z), and on a 2-D h the 2z of 2σ(2z) − 1 comes from the product
    itself (addmm with α = β = 2: exact, one scaling op fewer)."""
    if not isinstance(act, nn.Tanh):
        slope = _activation_and_slope(act)
        return lambda h, W, b: (*slope(z := F.linear(h, W, b)), z)

    def tanh_layer(h: Tensor, W: Tensor, b: Tensor) -> tuple[Tensor, ...]:
        if h.dim() == 2:
            return (*_tanh_of_doubled(torch.addmm(b, h, W.t(), beta=2, alpha=2)), None)
        return (*_tanh_and_slope_values(F.linear(h, W, b), overwrite=True), None)

    return tanh_layer


def _tanh_of_doubled(z2: Tensor) -> tuple[Tensor, Tensor]:
    """(tanh z, 1 − tanh² z) from z2 = 2z, computed in z2's memory: 2σ − 1 as one op, −1 + 2σ
    (the same rounding: 2σ is exact), 4–10 µs faster per call than two scalar ops on CPU."""
    torch.sigmoid_(z2)
    a = torch.add(_constant(-1.0, z2.dtype, z2.device), z2, alpha=2, out=z2)
    return a, torch.addcmul(_constant(1.0, a.dtype, a.device), a, a, value=-1)


def _times_minus_two(a: Tensor, b: Tensor) -> Tensor:
    """−2 a ⊙ b (tanh's σ'' terms) as one op, 0 − 2ab: scaling by 2 is exact, so it rounds as
    a ⊙ b does."""
    return torch.addcmul(_constant(0.0, a.dtype, a.device), a, b, value=-2)


def _gradient_parameters(net: nn.Sequential) -> list[Tensor]:
    """The tensors ∇H of ``net`` depends on: W_1, b_1, …, W_L, b_L, w (not the output bias)."""
    layers = list(net)
    return [t for lin in layers[0:-1:2] for t in (lin.weight, lin.bias)] + [layers[-1].weight]


def _gradient_values(net: nn.Sequential, x: Tensor) -> Tensor:
    """``mlp_gradient`` without a graph, its temporaries overwritten in place."""
    layers = list(net)
    hidden = list(zip(layers[0:-1:2], layers[1::2]))
    h, slopes = x, []
    for linear, act in hidden:
        h, slope, _ = _layer_and_slope(act)(h, linear.weight, linear.bias)
        slopes.append(slope)
    w = layers[-1].weight  # (1, width): broadcasts over the batch
    g = w if x.dim() > 1 else w[0]
    for (linear, _), slope in zip(reversed(hidden), reversed(slopes)):
        g = slope.mul_(g) @ linear.weight
    return g


def _gradient_graph(net: nn.Sequential, x: Tensor, params: Sequence[Tensor]) -> Tensor:
    """``mlp_gradient`` as ordinary differentiable ops of x and ``params``
    (``_gradient_parameters``): what the double backward of ``_MLPGradient`` differentiates (its
    hand-written backward is not itself differentiable)."""
    h, slopes = x, []
    for i, act in enumerate(list(net)[1::2]):
        h, slope = _activation_and_slope(act)(F.linear(h, params[2 * i], params[2 * i + 1]))
        slopes.append(slope)
    g = params[-1]
    for i in reversed(range(len(slopes))):
        g = (g * slopes[i]) @ params[2 * i]
    return g.view(x.shape) if x.dim() == 1 else g


def _rows(x: Tensor) -> Tensor:
    """x (..., n) as (M, n): itself when it is already 2-D (no reshape op)."""
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


class _MLPGradient(torch.autograd.Function):
    """x (..., n) -> ∇ₓH as one graph node whose backward is written by hand: for the cotangent ν
    of ∇H it is ∇²H ν for x and ∂/∂θ Σ ν·∇H for θ = ``_gradient_parameters``, the tangent pass of
    ``MLPLinearization`` (with it the headline training step runs 102 top-level aten ops per step,
    37 forward and 66 backward, in place of 122, 41 and 81, through autograd's graph of
    ``_gradient_graph``; ``benchmarks/step_ops.py``). Forward runs without a graph and saves a_{i−1}, s_i, t_i u_i and
    s_i u_i per layer; for tanh only a_i and s_i u_i, the rest recomputed in backward
    (``_tanh_completed``: 66.5 MB saved in place of 122.9 MB by the headline's 256-step backprop
    rollout). A backward that itself builds a graph (double backward) differentiates
    ``_gradient_graph`` instead: the same derivative, by autograd."""

    @staticmethod
    def forward(ctx, net: nn.Sequential, x: Tensor, *params: Tensor) -> Tensor:
        tanh = all(isinstance(act, nn.Tanh) for act in list(net)[1::2])
        lin = MLPLinearization(net, _rows(x), hessian=False, curvature=not tanh)
        ctx.net, ctx.layers, ctx.tanh = net, len(lin.weights), tanh
        if tanh:  # s_i and t_i u_i follow from a_i and s_i u_i: recomputed in backward
            ctx.save_for_backward(x, *params, *lin.outputs, *lin.chain)
        else:
            ctx.save_for_backward(
                x, *params, *lin.inputs[1:], *lin.slopes, *lin.ucurv, *lin.chain
            )  # fmt: skip
        g = torch.mm(lin.chain[0], lin.weights[0])
        return g if x.dim() == 2 else g.view(x.shape)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, *saved = ctx.saved_tensors
        L = ctx.layers
        params, saved = saved[: 2 * L + 1], saved[2 * L + 1 :]
        needs = ctx.needs_input_grad[1:]
        if torch.is_grad_enabled():  # double backward: autograd through the plain ops
            wanted = [t for t, need in zip((x, *params), needs) if need]
            with torch.enable_grad():
                got = iter(
                    torch.autograd.grad(
                        _gradient_graph(ctx.net, x, params), wanted, grad, create_graph=True,
                        allow_unused=True,
                    )
                )  # fmt: skip
            return (None, *(next(got) if need else None for need in needs))
        if ctx.tanh:
            lin = _tanh_completed(params[0:-1:2], _rows(x), saved[:L], saved[L:])
        else:
            lin = MLPLinearization.restore(
                params[0:-1:2],
                [_rows(x), *saved[: L - 1]],
                *(saved[k * L - 1 : (k + 1) * L - 1] for k in (1, 2, 3)),
            )
        z_dots, a_dots = lin._tangent(_rows(grad))
        rs = lin._back(z_dots)
        grad_x = None
        if needs[0]:
            grad_x = torch.mm(rs[0], lin.weights[0])
            grad_x = grad_x if x.dim() == 2 else grad_x.view(x.shape)
        grads = (
            lin._parameter_gradients(a_dots, rs)[:-1] if any(needs[1:]) else [None] * len(params)
        )
        return (None, grad_x, *(g if need else None for g, need in zip(grads, needs[1:])))


def _narrow_product(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for a (M, k) and b (k, n): with few columns n <= ``NARROW`` computed as (bᵀ aᵀ)ᵀ, a
    transposed view, so that the product runs along the long dimension M (on one CPU core 2–5x
    faster at n = 2 and M = 512 to 4096)."""
    return (b.t() @ a.t()).t() if b.shape[1] <= NARROW else a @ b


def _tanh_completed(
    weights: Sequence[Tensor], x: Tensor, outputs: Sequence[Tensor], chain: Sequence[Tensor]
) -> MLPLinearization:
    """The linearisation of a tanh MLP from x, a_1 … a_L and s_i u_i alone:
    s_i = 1 − a_i², t_i u_i = −2 a_i (s_i u_i)."""
    one = _constant(1.0, x.dtype, x.device)
    slopes = [torch.addcmul(one, a, a, value=-1) for a in outputs]
    ucurv = [_times_minus_two(a, c) for a, c in zip(outputs, chain)]
    return MLPLinearization.restore(weights, [x, *outputs[:-1]], slopes, ucurv, chain)


def mlp_gradient(net: nn.Sequential, x: Tensor) -> Tensor:
    """∇ₓ of a scalar MLP built by ``mlp`` (n_in -> ... -> 1) in closed form: (..., n_in).

    Equal to ``autograd.grad`` of the network to rounding. With a graph it is one node
    (``_MLPGradient``), differentiable with respect to x and the weights, twice as well. A net
    without hidden layers (``mlp(n, [])``, H = w·x + b) has ∇H = w at every x; x stays in its
    graph with a zero derivative, for callers that differentiate by x."""
    if len(net) == 1:
        return torch.add(x.mul(0), net[0].weight[0])
    if torch.compiler.is_compiling():
        return _gradient_feature_major(net, x)
    if torch.is_grad_enabled():
        params = _gradient_parameters(net)
        if x.requires_grad or any(p.requires_grad for p in params):
            return _MLPGradient.apply(net, x, *params)
    return _gradient_values(net, x)


def _gradient_feature_major(net: nn.Sequential, x: Tensor) -> Tensor:
    """``mlp_gradient`` as plain ops, for a compiled program (``hnnsym.ode.compiled``), which
    derives their backward itself. The activations are kept feature-major, (width, M) with
    z_i = W_i a_{i−1} + b_i, so that every product runs along the long batch dimension M: on one
    CPU core the products with the narrow input layer (n_in rows) are then 3–4x faster than
    row-major, and the headline training iteration about 10 % faster. tanh as 2σ(2z) − 1, as in
    the eager path (``_tanh_and_slope``)."""
    layers = list(net)
    h, slopes = _rows(x).t(), []
    for linear, act in zip(layers[0:-1:2], layers[1::2]):
        z = torch.addmm(linear.bias[:, None], linear.weight, h)
        if isinstance(act, nn.Tanh):
            h = torch.sigmoid(2 * z) * 2 - 1
            slopes.append(1 - h * h)
        else:
            h = act(z)
            slopes.append(_activation_derivative(act)(z, h))
    g = layers[-1].weight.t()  # (width, 1): broadcasts over the batch
    for i in reversed(range(len(slopes))):
        g = layers[2 * i].weight.t() @ (g * slopes[i])
    return g.t().reshape(x.shape)


def _activation_second_derivative(act: nn.Module) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """σ''(z) as a function of (z, σ(z), σ'(z)) for the activations ``_activation_derivative``
    knows (softplus: β σ'(1 − σ'), which is 0 where it is linear, as σ' = 1 there)."""
    if isinstance(act, nn.Tanh):
        return lambda z, a, s: _times_minus_two(a, s)
    if isinstance(act, Sin):
        return lambda z, a, s: -a
    if isinstance(act, nn.Softplus):
        return lambda z, a, s: act.beta * s * (1 - s)
    return lambda z, a, s: torch.exp(-0.5 * z * z) * (2 - z * z) / math.sqrt(2 * math.pi)


def _curvature_times(act: nn.Module) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
    """(z, a, s, u, s⊙u) -> σ''(z) ⊙ u for an activation ``_activation_derivative`` knows (tanh:
    −2 a ⊙ (s⊙u), one op; its z has been overwritten by a)."""
    if isinstance(act, nn.Tanh):
        return lambda z, a, s, u, chain: _times_minus_two(a, chain)
    second = _activation_second_derivative(act)
    return lambda z, a, s, u, chain: second(z, a, s) * u


class MLPLinearization:
    """The second-order terms of a scalar MLP H (built by ``mlp``) at M states x (M, n), in
    closed form, without autograd: the Hessian ∇²H (``hessian``, (M, n, n)) and, for directions
    ν (M, n), the parameter gradient of Σ_m ν_m·∇H(x_m) (``directional_gradient_vjp``).

    With z_i = W_i a_{i−1} + b_i, a_i = σ(z_i), s_i = σ'(z_i), t_i = σ''(z_i), a_0 = x, H = w·a_L:
    the gradient chain u_L = w, u_{i−1} = W_iᵀ(s_i u_i) (∇H = W_1ᵀ(s_1 u_1)). A tangent ν runs
    forward as ż_i = W_i ȧ_{i−1}, ȧ_i = s_i ż_i (ȧ_0 = ν) and back as r_L = t_L u_L ż_L,
    r_i = t_i u_i ż_i + s_i W_{i+1}ᵀ r_{i+1}: then ∇²H ν = W_1ᵀ r_1 and
    ∂/∂W_i Σ ν·∇H = (s_i u_i) ȧ_{i−1}ᵀ + r_i a_{i−1}ᵀ, ∂/∂b_i = r_i, ∂/∂w = ȧ_L (b_out: none).
    The Hessian is that product for ν = each unit vector, or, in a compiled program,
    Σ_i J_iᵀ diag(t_i u_i) J_i (``_hessian_from_tangents``), whose tangents
    ``directional_gradient_vjp`` then reuses (``hessian=False``: not computed; the backward of
    ``_MLPGradient`` uses the rest). Nothing here records a graph."""

    def __init__(self, net: nn.Sequential, x: Tensor, hessian: bool = True, curvature: bool = True):
        with torch.no_grad():  # a block, not a decorator: torch.compile traces it (compiled.chunk)
            self._build(net, x, hessian, curvature)

    def _build(self, net: nn.Sequential, x: Tensor, hessian: bool, curvature: bool) -> None:
        layers = list(net)
        linears = layers[0:-1:2]
        self.weights = [lin.weight for lin in linears]
        self._unit_tangents: list[list[Tensor]] | None = None  # ``_hessian_from_tangents``
        # kept per layer i = 1..L: a_{i−1}, s_i, t_i u_i and s_i u_i, (M, width) each
        self.inputs, self.slopes, zs = [x], [], []
        for lin, act in zip(linears, layers[1::2]):
            a, s, z = _layer_and_slope(act)(self.inputs[-1], lin.weight, lin.bias)
            zs.append(z)
            self.inputs.append(a)
            self.slopes.append(s)
        outputs = self.inputs[1:]
        self.inputs.pop()  # a_L: not needed
        L = len(linears)
        self.ucurv, self.chain = [x] * L, [x] * L  # t_i u_i, s_i u_i
        u = layers[-1].weight  # (1, width): broadcasts over the batch
        for i, act in reversed(list(enumerate(layers[1::2]))):
            self.chain[i] = self.slopes[i] * u
            if curvature:
                self.ucurv[i] = _curvature_times(act)(
                    zs[i], outputs[i], self.slopes[i], u, self.chain[i]
                )
            if i > 0:
                u = torch.mm(self.chain[i], self.weights[i])
        if not curvature:  # t_i u_i not formed: the caller completes it (``_tanh_completed``)
            self.outputs = outputs
            return
        if not hessian:
            return
        if torch.compiler.is_compiling():  # a compiled chunk: fewer products, fused elementwise
            self.hessian = self._hessian_from_tangents(x.shape[0], x.shape[-1])
            return
        columns = []  # ∇²H e_k for each unit vector e_k, one at a time (stacking them measured
        for k in range(x.shape[-1]):  # slower on CPU); ż_1 = W_1 e_k: a column of W_1, no
            z_dots, _ = self._tangent(None, self.weights[0][:, k])  # product, the same row for all
            columns.append(_narrow_product(self._back(z_dots)[0], self.weights[0]))
        self.hessian = torch.stack(columns, -1)  # symmetric: [m, k, l] = [m, l, k]

    def _hessian_from_tangents(self, M: int, n: int) -> Tensor:
        """∇²H = Σ_i J_iᵀ diag(t_i u_i) J_i (M, n, n), with J_i = ∂z_i/∂x, whose column k is the
        forward tangent ż_i of e_k: z_i is linear in a_{i−1}, so all curvature is the
        activations'. Layer 1's J_1 = W_1 is the same for every state: its term is one product,
        (t_1 u_1) (W_1[:, j] ⊙ W_1[:, k]). The other layers' ż come from one forward tangent pass
        per input (ż_1 = W_1 e_k, no product), and no backward pass: half the matrix products of
        the column-by-column Hessian, plus elementwise sums over the widths. On one CPU core, a
        compiled chunk of the symplectic adjoint (8 steps of the headline network at batch 512)
        took 0.87-0.89 of its time with this alone, 0.80-0.81 with the tangents' reuse in
        ``directional_gradient_vjp`` and R as a product and a sum
        (``symplectic_adjoint._chunk_batch_last``). Run eagerly, the three made the chunk
        1.06-1.19x slower, so eager code keeps the columns."""
        w1 = self.weights[0]
        tangents = [self._tangent(None, w1[:, k].expand(M, -1))[0][1:] for k in range(n)]
        self._unit_tangents = tangents  # J_i's columns: ``directional_gradient_vjp`` reuses them
        pairs = [(j, k) for j in range(n) for k in range(j, n)]
        outer = torch.stack([w1[:, j] * w1[:, k] for j, k in pairs], 1)  # (width_1, pairs)
        first = _narrow_product(self.ucurv[0], outer)
        entries: dict[tuple[int, int], Tensor] = {}
        for column, (j, k) in enumerate(pairs):
            entry = first[:, column]
            for curvature, zj, zk in zip(self.ucurv[1:], tangents[j], tangents[k]):
                entry = entry + (curvature * zj * zk).sum(-1)
            entries[j, k] = entries[k, j] = entry
        # symmetric: [m, j, k] = [m, k, j]; laid out batch last, as the compiled chunk reads it
        rows = [torch.stack([entries[j, k] for k in range(n)]) for j in range(n)]
        return torch.stack(rows).permute(2, 0, 1)

    @classmethod
    def restore(
        cls,
        weights: Sequence[Tensor],
        inputs: Sequence[Tensor],
        slopes: Sequence[Tensor],
        ucurv: Sequence[Tensor],
        chain: Sequence[Tensor],
    ) -> MLPLinearization:
        """One built from kept tensors (``kept`` order, without the Hessian)."""
        self = cls.__new__(cls)
        self.weights, self.inputs, self.slopes = list(weights), list(inputs), list(slopes)
        self.ucurv, self.chain = list(ucurv), list(chain)
        self._unit_tangents = None
        return self

    def kept(self) -> list[Tensor]:
        """The tensors this object holds (for memory meters)."""
        units = [z for columns in self._unit_tangents or () for z in columns]
        return [*self.inputs, *self.slopes, *self.ucurv, *self.chain, self.hessian, *units]

    def _tangent(
        self, nu: Tensor | None, z_dot: Tensor | None = None
    ) -> tuple[list[Tensor], list[Tensor | None]]:
        """(ż_i, ȧ_{i−1}) for i = 1..L, and ȧ_L, of tangents ν (M, n); ``z_dot``: ż_1 = W_1 ν
        itself, given in place of ν (then ȧ_0 is None, and so is ȧ_L, which only the parameter
        gradient of a ν uses): (M, width), or one row (width,) that every state shares."""
        z_dots, a_dots, a_dot = [], [], nu
        for i, (weight, s) in enumerate(zip(self.weights, self.slopes)):
            a_dots.append(a_dot)
            z_dots.append(z_dot if z_dot is not None and not z_dots else F.linear(a_dot, weight))
            a_dot = s * z_dots[-1] if z_dot is None or i + 1 < len(self.weights) else None
        a_dots.append(a_dot)
        return z_dots, a_dots

    def _back(self, z_dots: list[Tensor]) -> list[Tensor]:
        """r_1 … r_L of tangents whose ż_i are ``z_dots``, computed in their place (fresh
        tensors of a chunk's size cost page faults on CPU); a ż_1 given as one row for every
        state (``_tangent``'s ``z_dot``: a Hessian column's) is read, not overwritten."""
        rs: list[Tensor] = []
        for i in reversed(range(len(self.weights))):
            z = z_dots[i]
            r = z.mul_(self.ucurv[i]) if z.dim() > 1 else self.ucurv[i] * z
            if rs:
                r.addcmul_(self.slopes[i], torch.mm(rs[0], self.weights[i + 1]))
            rs.insert(0, r)
        return rs

    def _parameter_gradients(self, a_dots: list[Tensor], rs: list[Tensor]) -> list[Tensor | None]:
        """∂/∂θ Σ ν·∇H from a tangent pass (``_tangent``'s ȧ, ``_back``'s r), in the order of the
        net's ``parameters()`` (None for the output bias)."""
        grads: list[Tensor | None] = []
        for i in range(len(self.weights)):
            if self.weights[i].shape[1] <= NARROW:  # (s_i u_i) ȧ_{i−1}ᵀ + r_i a_{i−1}ᵀ, transposed
                weight = torch.addmm(torch.mm(a_dots[i].t(), self.chain[i]), self.inputs[i].t(),
                                     rs[i]).t()  # fmt: skip
            else:
                weight = torch.addmm(
                    torch.mm(self.chain[i].t(), a_dots[i]), rs[i].t(), self.inputs[i]
                )  # fmt: skip
            grads += [weight, rs[i].sum(0)]
        return [*grads, a_dots[-1].sum(0, keepdim=True), None]

    def directional_gradient_vjp(self, nu: Tensor) -> list[Tensor | None]:
        """∂/∂θ Σ_m ν_m·∇H(x_m) for each of the net's ``parameters()``, in order (None for the
        output bias, on which ∇H does not depend). After ``_hessian_from_tangents``,
        ż_i = Σ_k ν_k J_i e_k per state from its tangents, elementwise, in place of the products
        of a forward tangent pass."""
        with torch.no_grad():
            units = self._unit_tangents
            if units is None:
                z_dots, a_dots = self._tangent(nu)
            else:  # ż_i = J_i ν per state, from the Hessian's columns of J_i: no product
                z_dots = [F.linear(nu, self.weights[0])]
                for i in range(1, len(self.weights)):
                    z_dots.append(sum(nu[:, k, None] * units[k][i - 1] for k in range(len(units))))
                a_dots = [nu, *(s * z for s, z in zip(self.slopes, z_dots))]
            return self._parameter_gradients(a_dots, self._back(z_dots))


def periodic_indices(periodic: Sequence[int] | None, dim: int) -> tuple[int, ...]:
    """The position coordinates (of d = ``dim``) that are angles, sorted, as given by a model's
    ``periodic`` argument (None: none); ValueError for an index that is not a position."""
    out = tuple(sorted({int(i) for i in periodic or ()}))
    if any(not 0 <= i < dim for i in out) or any(int(i) != i for i in periodic or ()):
        raise ValueError(f"periodic {list(periodic or ())} must name positions 0..{dim - 1}")
    return out


class PeriodicInputs:
    """The inputs a network sees of x (..., n): x_i itself, or (cos x_i, sin x_i) for the
    ``periodic`` i, so the network is exactly 2π-periodic in those. The embedded e(x) (..., n + k)
    is [x_j for j not periodic, cos x_i, sin x_i for the k periodic i]. Identity for none.

    ``pull_back`` is the chain rule for gradients: ∇ₓ = (∂e/∂x)ᵀ ∇ₑ, where ∂cos x_i/∂x_i =
    −sin x_i and ∂sin x_i/∂x_i = cos x_i; ``tangent`` pushes directions forward, ∂e/∂x · ν;
    ``curvature`` is the second-order term Σ_k ∂H/∂e_k ∇²e_k, which is diagonal:
    −cos x_i ∂H/∂(cos x_i) − sin x_i ∂H/∂(sin x_i) at (i, i). All made of differentiable ops."""

    def __init__(self, width: int, periodic: Sequence[int] = ()):
        self.width, self.periodic = width, tuple(periodic)
        self.keep = tuple(i for i in range(width) if i not in self.periodic)
        order = self.keep + self.periodic  # pull_back's columns, back into x's order
        self.inverse = tuple(order.index(i) for i in range(width))

    @property
    def n_out(self) -> int:
        return self.width + len(self.periodic)

    def __call__(self, x: Tensor) -> Tensor:
        if not self.periodic:
            return x
        angles = x[..., self.periodic]
        return torch.cat([x[..., self.keep], torch.cos(angles), torch.sin(angles)], -1)

    def _split(self, g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        n, k = len(self.keep), len(self.periodic)
        return g[..., :n], g[..., n : n + k], g[..., n + k :]

    def pull_back(self, x: Tensor, g: Tensor) -> Tensor:
        """(∂e/∂x)ᵀ g for g (..., n + k) -> (..., n)."""
        if not self.periodic:
            return g
        angles = x[..., self.periodic]
        kept, g_cos, g_sin = self._split(g)
        g_angles = torch.cos(angles) * g_sin - torch.sin(angles) * g_cos
        return torch.cat([kept, g_angles], -1)[..., self.inverse]

    def tangent(self, x: Tensor, nu: Tensor) -> Tensor:
        """(∂e/∂x) ν for ν (..., n) -> (..., n + k)."""
        if not self.periodic:
            return nu
        angles, nu_angles = x[..., self.periodic], nu[..., self.periodic]
        return torch.cat(
            [nu[..., self.keep], -torch.sin(angles) * nu_angles, torch.cos(angles) * nu_angles], -1
        )

    def jacobian(self, x: Tensor) -> Tensor:
        """∂e/∂x (M, n + k, n) at x (M, n)."""
        eye = torch.eye(self.width, dtype=x.dtype, device=x.device)
        return torch.stack([self.tangent(x, e.expand_as(x)) for e in eye], -1)

    def curvature(self, x: Tensor, g: Tensor) -> Tensor:
        """Σ_k g_k ∂²e_k/∂x_i² (..., n) for g (..., n + k): the diagonal of Σ_k g_k ∇²e_k."""
        out = torch.zeros_like(x)
        if self.periodic:
            angles = x[..., self.periodic]
            _, g_cos, g_sin = self._split(g)
            out[..., self.periodic] = -torch.cos(angles) * g_cos - torch.sin(angles) * g_sin
        return out


class PeriodicLinearization:
    """``MLPLinearization`` of H(x) = net(e(x)) with e = ``PeriodicInputs``, exactly, by the chain
    rule: with g = ∇ₑnet and E = ∂e/∂x, ∇²H = Eᵀ ∇ₑ²net E + diag(Σ_k g_k ∂²e_k/∂x_i²), and
    ∂/∂θ Σ ν·∇H = ∂/∂θ Σ (Eν)·∇ₑnet (E does not depend on θ)."""

    def __init__(self, net: nn.Sequential, inputs: PeriodicInputs, x: Tensor):
        self.inputs, self.x = inputs, x
        with torch.no_grad():
            self.inner = MLPLinearization(net, inputs(x))
            grad = self.inner.chain[0] @ self.inner.weights[0]  # ∇ₑnet (M, n + k)
            E = inputs.jacobian(x)
            curvature = torch.diag_embed(inputs.curvature(x, grad))
            self.hessian = E.mT @ self.inner.hessian @ E + curvature

    def kept(self) -> list[Tensor]:
        return [*self.inner.kept(), self.x, self.hessian]

    def directional_gradient_vjp(self, nu: Tensor) -> list[Tensor | None]:
        with torch.no_grad():
            return self.inner.directional_gradient_vjp(self.inputs.tangent(self.x, nu))


def has_closed_gradient(net: nn.Sequential) -> bool:
    """Whether ``mlp_gradient`` knows every activation of ``net``."""
    return all(_activation_derivative(m) is not None for m in list(net)[1:-1:2])


class HNN(nn.Module):
    """H_θ(q, p) as one MLP over the whole state (Choudhary et al.: 2d -> 16 -> 32 -> 16 -> 1, tanh).

    ``periodic``: the positions that are angles; the MLP sees (cos q_i, sin q_i) in place of q_i
    (``PeriodicInputs``), so H is exactly 2π-periodic in them. ``output_gain``: the last layer's
    initial weights times it (``mlp``). ``energy_gradient`` and ``energy_linearization`` may
    answer None (an activation without a closed form): autograd then."""

    capabilities = frozenset({
        Capability.HAMILTONIAN, Capability.ENERGY_GRADIENT, Capability.ENERGY_LINEARIZATION,
        ModelCapability.LINEAR_HEAD,
    })  # fmt: skip

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (16, 32, 16),
        activation: str = "tanh",
        periodic: Sequence[int] | None = (),
        output_gain: float = 1.0,
    ):
        super().__init__()
        self.dim = dim
        self.periodic = periodic_indices(periodic, dim)
        self.inputs = PeriodicInputs(2 * dim, self.periodic)
        self.net = mlp(self.inputs.n_out, hidden, activation, output_gain=output_gain)

    def forward(self, y: Tensor) -> Tensor:
        return self.net(self.inputs(y)).squeeze(-1)

    def head_features(self, y: Tensor) -> Tensor:
        """ψ(y) (..., K): the last hidden layer's outputs, H = c·ψ + b with c the last layer."""
        return self.net[:-1](self.inputs(y))

    def head_coefficients(self) -> Tensor:
        return self.net[-1].weight[0]

    def set_head_coefficients(self, c: Tensor) -> None:
        with torch.no_grad():
            self.net[-1].weight[0].copy_(c)

    def energy_gradient(self, y: Tensor) -> Tensor | None:
        """∇H(y) (..., 2d) in closed form, or None for an activation without one."""
        if not has_closed_gradient(self.net):
            return None
        return self.inputs.pull_back(y, mlp_gradient(self.net, self.inputs(y)))

    def energy_linearization(self, y: Tensor) -> MLPLinearization | None:
        """∇²H at states y (M, 2d) and the parameter gradient of ν·∇H (in the order of
        ``parameters()``), in closed form (None for an activation without one): what the
        symplectic adjoint's direct solve needs. None too for a subclass with parameters of its
        own (the damping of ``DissipativeHNN``), whose list would not be the net's."""
        # read from the module's own dicts (not its generators), so that a compiled program
        # (hnnsym.ode.compiled.chunk) traces these checks
        own = any(p is not None for p in self._parameters.values())
        if own or list(self._modules) != ["net"]:
            return None
        if not has_closed_gradient(self.net) or len(self.net) == 1:  # an affine H: autograd
            return None
        if self.periodic:
            return PeriodicLinearization(self.net, self.inputs, y)
        return MLPLinearization(self.net, y)


class SeparableHNN(nn.Module):
    """H_θ(q, p) = T_θ(p) + V_θ(q).

    ``kinetic="mlp"`` learns T with its own MLP; ``kinetic="mass"`` fixes T = |p|^2 / (2m) with a
    learned mass m = exp(log_mass). Separability lets leapfrog and symplectic Euler run explicitly.
    ``periodic``: the positions that are angles; V's MLP sees (cos q_i, sin q_i) for them.
    ``output_gain``: both MLPs' last layers start that many times larger (``mlp``). With the
    default init (gain 1) a tanh V of one coordinate can stall: on the double well (V' from −10
    to 10 over the box) Adam fits the steep walls and leaves V' ≈ 0 between the wells; a gain of
    4–10 lets it fit the barrier (docs/papers/table1.md).
    """

    capabilities = frozenset({
        Capability.HAMILTONIAN, Capability.ENERGY_GRADIENT, Capability.SEPARABLE,
        Capability.KINETIC_GRADIENT, Capability.POTENTIAL_GRADIENT, ModelCapability.LINEAR_HEAD,
    })  # fmt: skip

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (16, 32, 16),
        activation: str = "tanh",
        kinetic: str = "mlp",
        periodic: Sequence[int] | None = (),
        output_gain: float = 1.0,
    ):
        super().__init__()
        if kinetic not in ("mlp", "mass"):
            raise ValueError(f"kinetic must be 'mlp' or 'mass', got {kinetic!r}")
        self.dim = dim
        self.kinetic_kind = kinetic
        self.periodic = periodic_indices(periodic, dim)
        self.inputs = PeriodicInputs(dim, self.periodic)
        self.potential_net = mlp(self.inputs.n_out, hidden, activation, output_gain=output_gain)
        if kinetic == "mlp":
            self.kinetic_net = mlp(dim, hidden, activation, output_gain=output_gain)
        else:
            self.log_mass = nn.Parameter(torch.zeros(()))

    def kinetic(self, p: Tensor) -> Tensor:
        if self.kinetic_kind == "mlp":
            return self.kinetic_net(p).squeeze(-1)
        return 0.5 * (p**2).sum(-1) * torch.exp(-self.log_mass)

    def potential(self, q: Tensor) -> Tensor:
        return self.potential_net(self.inputs(q)).squeeze(-1)

    def forward(self, y: Tensor) -> Tensor:
        return self.kinetic(y[..., self.dim :]) + self.potential(y[..., : self.dim])

    def kinetic_grad(self, p: Tensor) -> Tensor:
        """T'(p) in closed form (autograd for an activation without one)."""
        if self.kinetic_kind == "mass":
            return p * torch.exp(-self.log_mass)
        if has_closed_gradient(self.kinetic_net):
            return mlp_gradient(self.kinetic_net, p)
        return _autograd_gradient(self.kinetic, p)

    def potential_grad(self, q: Tensor) -> Tensor:
        """V'(q) in closed form (autograd for an activation without one)."""
        if has_closed_gradient(self.potential_net):
            return self.inputs.pull_back(q, mlp_gradient(self.potential_net, self.inputs(q)))
        return _autograd_gradient(self.potential, q)

    def head_features(self, y: Tensor) -> Tensor:
        """ψ(y) (..., K) with H = c·ψ + b: the last hidden layers of T's and V's networks
        (``kinetic="mass"``: |p|²/2 in T's place, with c₀ = 1/m)."""
        p = y[..., self.dim :]
        if self.kinetic_kind == "mass":
            kinetic = 0.5 * (p**2).sum(-1, keepdim=True)
        else:
            kinetic = self.kinetic_net[:-1](p)
        return torch.cat([kinetic, self.potential_net[:-1](self.inputs(y[..., : self.dim]))], -1)

    def head_coefficients(self) -> Tensor:
        if self.kinetic_kind == "mass":
            kinetic = torch.exp(-self.log_mass).reshape(1)
        else:
            kinetic = self.kinetic_net[-1].weight[0]
        return torch.cat([kinetic, self.potential_net[-1].weight[0]])

    def set_head_coefficients(self, c: Tensor) -> None:
        """Raises ValueError for a ``kinetic="mass"`` model whose c₀ = 1/m is not > 0."""
        with torch.no_grad():
            if self.kinetic_kind == "mass":
                if not (math.isfinite(float(c[0])) and float(c[0]) > 0):
                    raise ValueError(f"the fitted 1/m is {float(c[0]):.3g}, not a positive mass")
                self.log_mass.copy_(-torch.log(c[0]))
                kinetic_width = 1
            else:
                kinetic_width = self.kinetic_net[-1].weight.shape[1]
                self.kinetic_net[-1].weight[0].copy_(c[:kinetic_width])
            self.potential_net[-1].weight[0].copy_(c[kinetic_width:])

    def energy_gradient(self, y: Tensor) -> Tensor:
        """∇H(y) = [V'(q), T'(p)]."""
        return torch.cat(
            [self.potential_grad(y[..., : self.dim]), self.kinetic_grad(y[..., self.dim :])], -1
        )


def _autograd_gradient(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """∇fn(x) by autograd, with a graph when grad mode is on."""
    graph = torch.is_grad_enabled()
    with torch.enable_grad():
        if not x.requires_grad:
            x = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(x).sum(), x, create_graph=graph)
    return g


class NODE(nn.Module):
    """An unstructured vector field f_θ(y) = MLP(y), 2d -> hidden -> 2d: a neural ODE, no H.

    ``forward`` and ``vector_field`` both return f_θ(y) (B, 2d); integrators step it like any other
    field, but it conserves nothing and has no energy to compare on a grid. ``periodic``: the
    positions that are angles; the MLP sees (cos q_i, sin q_i) for them.
    """

    capabilities = frozenset({Capability.OWN_FIELD})

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (16, 32, 16),
        activation: str = "tanh",
        periodic: Sequence[int] | None = (),
        output_gain: float = 1.0,
    ):
        super().__init__()
        self.dim = dim
        self.periodic = periodic_indices(periodic, dim)
        self.inputs = PeriodicInputs(2 * dim, self.periodic)
        self.net = mlp(
            self.inputs.n_out, hidden, activation, n_out=2 * dim, output_gain=output_gain
        )

    def forward(self, y: Tensor) -> Tensor:
        return self.net(self.inputs(y))

    def vector_field(self, y: Tensor) -> Tensor:
        return self.net(self.inputs(y))


class Potential(nn.Module):
    """V_θ(q): positions (B, d) -> (B,), with a mass matrix M, for learning from positions only
    (Aoshima et al., DDLM; its baselines use the same network).

    The MLP d -> hidden -> 1 has orthogonal weights and zero biases at initialisation (Aoshima et al. /
    DGNet: hidden (200, 200), i.e. three weight layers, tanh). ``mass``: "identity" (M = I, as in
    the paper) or "learned" (M = L Lᵀ with L lower triangular, its diagonal exp(·) > 0: positive
    definite by construction, starting at I). ``discrete_gradient`` (gonzalez | avf, with
    ``avf_nodes``) is the ∇̄V that Eq. 12 uses in training and prediction
    (``hnnsym.ode.lagrangian``). ``periodic``: the positions that are angles; the MLP sees
    (cos q_i, sin q_i) for them.

    Not a Hamiltonian of states (no ``HAMILTONIAN``; ``POSITION_ONLY``): the position schemes, not
    the integrators of ``hnnsym.ode``, step it. ``ENERGY_GRADIENT`` is ∇V here. Its energy on states is
    ``energy(q, v)`` = ½ vᵀMv + V(q).
    """

    capabilities = frozenset(
        {Capability.ENERGY_GRADIENT, Capability.MASS_MATRIX, ModelCapability.POSITION_ONLY}
    )

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (200, 200),
        activation: str = "tanh",
        init: str = "orthogonal",
        mass: str = "identity",
        discrete_gradient: str = "gonzalez",
        avf_nodes: int = 4,
        periodic: Sequence[int] | None = (),
    ):
        super().__init__()
        if init not in ("orthogonal", "default"):
            raise ValueError(f"init must be 'orthogonal' or 'default', got {init!r}")
        if mass not in ("identity", "learned"):
            raise ValueError(f"mass must be 'identity' or 'learned', got {mass!r}")
        if discrete_gradient not in ("gonzalez", "avf"):
            raise ValueError(
                f"discrete_gradient must be 'gonzalez' or 'avf', got {discrete_gradient!r}"
            )
        if int(avf_nodes) != avf_nodes or avf_nodes < 1:
            raise ValueError(f"avf_nodes must be a whole number >= 1, got {avf_nodes}")
        self.dim = dim
        self.mass_kind = mass
        self.discrete_gradient = discrete_gradient
        self.avf_nodes = int(avf_nodes)
        self.periodic = periodic_indices(periodic, dim)
        self.inputs = PeriodicInputs(dim, self.periodic)
        self.net = mlp(self.inputs.n_out, hidden, activation)
        if init == "orthogonal":
            for layer in self.net.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight)
                    nn.init.zeros_(layer.bias)
        if mass == "learned":
            self.mass_factor = nn.Parameter(torch.zeros(dim, dim))

    def forward(self, q: Tensor) -> Tensor:
        return self.net(self.inputs(q)).squeeze(-1)

    def energy_gradient(self, q: Tensor) -> Tensor | None:
        """∇V(q) (..., d) in closed form, or None for an activation without one."""
        if not has_closed_gradient(self.net):
            return None
        return self.inputs.pull_back(q, mlp_gradient(self.net, self.inputs(q)))

    def mass_matrix(self) -> Tensor:
        """M (d, d), symmetric positive definite, in the parameters' dtype and device."""
        like = next(self.net.parameters())
        if self.mass_kind == "identity":
            return torch.eye(self.dim, dtype=like.dtype, device=like.device)
        strict = torch.tril(self.mass_factor, diagonal=-1)
        factor = strict + torch.diag(torch.exp(torch.diagonal(self.mass_factor)))
        return factor @ factor.T

    def energy(self, q: Tensor, v: Tensor) -> Tensor:
        """½ vᵀ M v + V(q) for positions and velocities (..., d) -> (...)."""
        M = self.mass_matrix()
        flat = q.reshape(-1, self.dim)
        return 0.5 * (v * (v @ M.T)).sum(-1) + self(flat).reshape(q.shape[:-1])


def is_position_model(model: object) -> bool:
    """Whether ``model`` is learned from positions only (V_θ(q) and M, ``Potential``)."""
    return has(model, ModelCapability.POSITION_ONLY)


# The networks by the names configs written before ``_target_`` used (model.name / model.arch);
# hnnsym.config.build maps such configs, e.g. in older checkpoints, to their class.
MODELS = {"hnn": HNN, "separable_hnn": SeparableHNN, "node": NODE}
