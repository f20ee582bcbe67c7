"""Graph passes that ``hnnsym.ode.compiled`` gives inductor. Imported only where a program is
compiled: it imports inductor.

``BiasIntoPointwise``: a matrix product with a bias, ``addmm(b, x, W, beta, alpha)``, whose users
are all elementwise ops, becomes ``alpha (x @ W) + beta b``: a plain product, with the bias added
in the elementwise kernel that reads the product anyway. Inductor does this for GPUs only. On the
CPU, ``addmm`` first copies the broadcast bias into its output and then has the library add the
product to it: 512 × 16 @ 16 × 32 took 7.3 µs as ``addmm`` against 4.6 µs as ``mm`` (one core,
float32), and an MLP layer's products are ``addmm``. The sum is the same to rounding: the library
adds the bias before the products' sum, the kernel after it. In float32 and float64 only: in half
precision the product would be rounded to it before the bias is added.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import is_pointwise_use

aten = torch.ops.aten


class BiasIntoPointwise(CustomGraphPass):
    """``addmm`` with only elementwise users as a product and an elementwise sum (module doc).
    Runs as inductor's ``post_grad_custom_post_pass`` on the forward and backward graphs: after
    inductor's own patterns, one of which makes ``mm`` + ``add`` an ``addmm`` on the CPU."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.find_nodes(op="call_function", target=aten.addmm.default)):
            value = node.meta.get("val")
            if value is None or value.dtype not in (torch.float32, torch.float64):
                continue  # a half-precision sum would round the product before the bias
            if not node.users or not all(is_pointwise_use(user) for user in node.users):
                continue  # inductor's test of its GPU rule: elementwise ops, or views of them
            bias, x, w = node.args
            alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
            with graph.inserting_before(node):
                product = _op(graph, aten.mm.default, x, w)
                if alpha != 1:
                    product = _op(graph, aten.mul.Tensor, product, alpha)
                if beta != 1:
                    bias = _op(graph, aten.mul.Tensor, bias, beta)
                total = _op(graph, aten.add.Tensor, product, bias)
            node.replace_all_uses_with(total)
            graph.erase_node(node)

    def uuid(self) -> bytes:
        """This pass's identity in inductor's cache keys: a digest of this file."""
        return hashlib.sha256(Path(__file__).read_bytes()).digest()


def _op(graph: torch.fx.Graph, target: torch._ops.OpOverload, *args: object) -> torch.fx.Node:
    """A new node ``target(*args)`` with its fake value (``meta["val"]``), which inductor's later
    passes and lowering read."""
    node = graph.call_function(target, args)
    values = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    node.meta["val"] = target(*values)
    return node
