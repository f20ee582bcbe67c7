"""Round trip of the fixed-point reversible leapfrog on chaotic Hénon–Heiles orbits.

N steps of size h forward, then N steps of -h back, from states on energy shells near the escape
energy 1/6. Reports whether the int64 state came back bit for bit, the wall times, the energy
error along the way, and the same round trip in plain float64 (identical substeps and forces) for
comparison. Writes a small JSON atomically.

    .venv/bin/python benchmarks/reversible_roundtrip.py                      # 10^6 steps
    .venv/bin/python benchmarks/reversible_roundtrip.py --steps 100000 --forces autograd

``--forces explicit`` (default) uses ∇V written out (checked against autograd of the system's H at
the start); ``autograd`` differentiates H itself each substep (the path models take; ~4x slower).
Runs single-threaded with deterministic algorithms on (see hnnsym/ode/integrators/reversible.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

from hnnsym.artifacts import now_utc, versions, write_text
from hnnsym.ode.integrators import ReversibleLeapfrog, Separable
from hnnsym.physics.systems import henon_heiles, henon_heiles_shell_states

ENERGIES = [0.12, 0.13, 0.14, 0.15, 0.155, 0.16, 0.163, 0.166]


def hh_potential_grad(q: torch.Tensor) -> torch.Tensor:
    """∇V of Hénon–Heiles, V = (qx² + qy²)/2 + qx² qy - qy³/3."""
    qx, qy = q[..., 0], q[..., 1]
    return torch.stack([qx + 2 * qx * qy, qy + qx * qx - qy * qy], -1)


def chunked(fn, x, h: float, steps: int, desc: str, chunks: int = 100):
    """fn(x, h, n) applied in chunks (for a progress bar); returns (x, seconds)."""
    start = time.perf_counter()
    done = 0
    with tqdm(total=steps, desc=desc, unit="step", mininterval=5.0) as bar:
        while done < steps:
            n = min(max(steps // chunks, 1), steps - done)
            x = fn(x, h, n)
            done += n
            bar.update(n)
    return x, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--h", type=float, default=0.01)
    ap.add_argument("--frac-bits", type=int, default=60)
    ap.add_argument("--forces", choices=["explicit", "autograd"], default="explicit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/benchmarks/reversible_roundtrip.json")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    system = henon_heiles()
    if args.forces == "explicit":
        H = Separable(system, kinetic_grad=lambda p: p, potential_grad=hh_potential_grad)
    else:
        H = Separable(system)
    integ = ReversibleLeapfrog(frac_bits=args.frac_bits)
    y0 = henon_heiles_shell_states(ENERGIES, torch.Generator().manual_seed(args.seed))
    auto_dV = integ.forces(Separable(system))[1]
    force_check = (hh_potential_grad(y0[:, :2]) - auto_dV(y0[:, :2])).abs().max().item()
    if force_check > 1e-15:
        raise SystemExit(f"explicit ∇V disagrees with autograd of H by {force_check:.3g}")

    x0 = integ.quantize(y0)
    x1, t_fwd = chunked(lambda x, h, n: integ.advance(H, x, h, n), x0, args.h, args.steps, "fwd")
    x2, t_bwd = chunked(lambda x, h, n: integ.advance(H, x, h, n), x1, -args.h, args.steps, "back")
    identical = torch.equal(x2, x0)
    y1 = integ.dequantize(x1)
    energy_error = (system(y1) - system(y0)).abs().max().item()

    yq = integ.dequantize(x0)
    step = lambda y, h, n: integ.float_advance(H, y, h, n)  # noqa: E731
    yf1, t_ffwd = chunked(step, yq, args.h, args.steps, "float fwd")
    yf2, t_fbwd = chunked(step, yf1, -args.h, args.steps, "float back")
    float_error = (yf2 - yq).abs().max().item()
    float_identical = torch.equal(yf2, yq)

    result = {
        "benchmark": "reversible_roundtrip",
        "system": "henon_heiles",
        "energies": ENERGIES,
        "steps": args.steps,
        "h": args.h,
        "t_final": args.steps * args.h,
        "batch": len(ENERGIES),
        "frac_bits": args.frac_bits,
        "rounding": integ.rounding,
        "forces": args.forces,
        "bitwise_identical": identical,
        "mismatched_entries": int((x2 != x0).sum()),
        "forward_seconds": round(t_fwd, 3),
        "backward_seconds": round(t_bwd, 3),
        "microseconds_per_step": round(1e6 * (t_fwd + t_bwd) / (2 * max(args.steps, 1)), 2),
        "energy_error_at_t_final": energy_error,
        "max_abs_state_at_t_final": y1.abs().max().item(),
        "float64_bitwise_identical": float_identical,
        "float64_roundtrip_max_abs_error": float_error,
        "float64_seconds": round(t_ffwd + t_fbwd, 3),
        "threads": torch.get_num_threads(),
        "created": now_utc(),
        "versions": versions(),
    }
    text = json.dumps(result, indent=2)
    write_text(Path(args.out), text + "\n")
    print(text)


if __name__ == "__main__":
    main()
