"""Your own Hamiltonian from Python, two ways, integrated by hnnsym's symplectic integrators.

1. An expression: ``custom("p**2/2 + q**4/4 - q**2/2")`` (``hnnsym.physics.systems``) parses it
   (never evaluates it), builds H(y) for torch, and lets sympy decide that it is separable, so
   leapfrog runs as the explicit Störmer–Verlet.
2. Any torch function H(y) of y = [q, p] (B, 2d) -> (B,): here a Hénon–Heiles-like potential
   written by hand; ∇H comes from autograd and Gauss–Legendre 4 steps it (implicit).

Both are integrated for a long time and the energy drift is printed: a symplectic integrator
keeps it bounded (small, not growing).

    python examples/custom_hamiltonian.py [--steps 1000]

Exits 1 if a drift is above 1e-2 (leapfrog, order 2) or 1e-6 (GL4) of the energy.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import Tensor

from hnnsym import integrate
from hnnsym.physics.systems import custom


def my_hamiltonian(y: Tensor) -> Tensor:
    """H = |p|²/2 + |q|²/2 + qx² qy − qy³/3 + 0.1 qx⁴ on y = [qx, qy, px, py]."""
    qx, qy, px, py = y.unbind(-1)
    return (px**2 + py**2) / 2 + (qx**2 + qy**2) / 2 + qx**2 * qy - qy**3 / 3 + 0.1 * qx**4


def drift(H, ys: Tensor) -> float:
    """max |H(y_n) − H(y_0)| / |H(y_0)| over the trajectory (steps+1, B, 2d)."""
    with torch.no_grad():
        energy = H(ys.reshape(-1, ys.shape[-1])).reshape(ys.shape[:2])
    return float(((energy - energy[0]).abs() / energy[0].abs()).max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny tensors: more threads only contend
    dtype = torch.float64

    double_well = custom("p**2/2 + q**4/4 - q**2/2", domain=(-2.0, 2.0))
    print(f"{double_well.description}: separable={double_well.separable}")
    y0 = torch.tensor([[1.5, 0.0], [0.0, 1.0]], dtype=dtype)  # H = 0.5625, 0.5
    with torch.no_grad():
        ys = integrate(double_well, y0, 0.05, args.steps, "leapfrog", "backprop")
    first = drift(double_well, ys)
    print(f"double well, leapfrog, {args.steps} steps: relative energy drift {first:.2e}")

    y0 = torch.tensor([[0.1, 0.2, 0.2, -0.1]], dtype=dtype)
    with torch.no_grad():
        ys = integrate(my_hamiltonian, y0, 0.1, args.steps // 4, "gauss_legendre4", "backprop")
    second = drift(my_hamiltonian, ys)
    print(f"hand-written H, gauss_legendre4, {args.steps // 4} steps: relative energy drift "
          f"{second:.2e}")  # fmt: skip
    ok = first < 1e-2 and second < 1e-6
    print(f"energy conserved: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
