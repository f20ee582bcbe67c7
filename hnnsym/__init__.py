"""hnnsym: learning Hamiltonians through fully symplectic, implicit integrators."""

__version__ = "0.1.0"

from hnnsym.solve import integrate  # noqa: E402

__all__ = ["integrate", "__version__"]
