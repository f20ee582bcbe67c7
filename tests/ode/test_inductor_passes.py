"""``hnnsym.ode.inductor_passes.BiasIntoPointwise`` on traced graphs: an ``addmm`` whose users are
all elementwise becomes a product and an elementwise sum with the same values; one with another
user stays."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hnnsym.ode.inductor_passes import BiasIntoPointwise

aten = torch.ops.aten


def _traced(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args), make_fx(fn)(*args)


def _count(graph: torch.fx.Graph, target) -> int:
    return len(graph.find_nodes(op="call_function", target=target))


def _layer(x, w, b):
    return torch.sigmoid(torch.addmm(b, x, w.t(), beta=2, alpha=2))


def _layer_then_product(x, w, b):
    z = torch.addmm(b, x, w.t())
    return torch.tanh(z), z @ w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_bias_with_elementwise_users_moves_into_them_with_the_same_values(dtype):
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen, dtype=dtype) for s in ((64, 16), (32, 16), (32,)))
    fake, real = _traced(_layer, x, w, b)
    BiasIntoPointwise()(fake.graph)
    fake.recompile()
    assert _count(fake.graph, aten.addmm.default) == 0
    assert _count(fake.graph, aten.mm.default) == 1
    out = fake(x, w, b)
    expected = real(x, w, b)
    assert out.dtype == dtype and out.shape == expected.shape
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    # the fake values the pass gives its nodes are the shapes inductor lowers
    for node in fake.graph.find_nodes(op="call_function", target=aten.mm.default):
        assert tuple(node.meta["val"].shape) == (64, 32)


def test_a_bias_with_another_user_stays_in_the_product():
    x, w, b = torch.randn(8, 4), torch.randn(4, 4), torch.randn(4)
    fake, _ = _traced(_layer_then_product, x, w, b)
    BiasIntoPointwise()(fake.graph)
    assert _count(fake.graph, aten.addmm.default) == 1


def test_a_half_precision_product_keeps_its_bias():
    x, w, b = (torch.randn(*s).to(torch.bfloat16) for s in ((8, 4), (4, 4), (4,)))
    fake, _ = _traced(_layer, x, w, b)
    BiasIntoPointwise()(fake.graph)
    assert _count(fake.graph, aten.addmm.default) == 1


def test_a_product_without_a_fake_value_is_left_as_it_is():
    x, w, b = torch.randn(8, 4), torch.randn(4, 4), torch.randn(4)
    fake, _ = _traced(_layer, x, w, b)
    for node in fake.graph.find_nodes(op="call_function", target=aten.addmm.default):
        del node.meta["val"]
    BiasIntoPointwise()(fake.graph)
    assert _count(fake.graph, aten.addmm.default) == 1


def test_the_pass_has_a_stable_identity_for_inductors_cache():
    assert BiasIntoPointwise().uuid() == BiasIntoPointwise().uuid()
    assert len(BiasIntoPointwise().uuid()) == 32


def test_programs_for_the_cpu_are_compiled_with_the_pass(monkeypatch):
    from hnnsym.ode import compiled

    compiled.programs_on_disk()  # cached before torch.compile is replaced
    seen: dict = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.update(kwargs) or fn)
    compiled._compile(lambda x: x, "cpu")
    assert isinstance(seen["options"]["post_grad_custom_post_pass"], BiasIntoPointwise)
    seen.clear()
    compiled._compile(lambda x: x, "cuda", graphs=False)  # inductor does it there itself
    assert "post_grad_custom_post_pass" not in seen["options"]
