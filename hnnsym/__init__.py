"""hnnsym: learning Hamiltonians through fully symplectic, implicit integrators."""

__version__ = "0.1.0"

from hnnsym.ode.solve import Solution, integrate, solve  # noqa: E402

__all__ = ["Solution", "__version__", "integrate", "solve"]
