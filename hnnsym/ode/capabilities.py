"""What an energy or field offers the kernel, declared by its class rather than probed.

A model (or system, or any object handed to the integrators) lists what it offers in a class
or instance attribute ``capabilities``: a frozenset of ``Capability`` members (and of
``hnnsym.physics.capabilities.ModelCapability`` members, for what evaluation and training read).
Code asks ``has(obj, Capability.MASS_MATRIX)``; ``check_declared(obj)``, called once where an
object is built, verifies that every declared capability's methods exist.

An object without the attribute declares ``{Capability.HAMILTONIAN}``: a plain energy
H(y) (B, 2d) -> (B,), whose field the kernel forms as J⁻¹∇H by autograd.
"""

from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    """Kernel capabilities. The value names the attribute(s) each one promises (``REQUIRES``)."""

    HAMILTONIAN = "hamiltonian"  # __call__(y) -> H (B,); the field is J⁻¹∇H unless OWN_FIELD
    ENERGY_GRADIENT = "energy_gradient"  # energy_gradient(y) -> ∇H (B, 2d), closed form
    ENERGY_LINEARIZATION = "energy_linearization"  # energy_linearization(y): closed-form ∇²H
    SEPARABLE = "separable"  # H = T(p) + V(q): kinetic(p), potential(q)
    OWN_FIELD = "own_field"  # vector_field(y) -> ẏ, not J⁻¹∇H (dissipative, NODE, constrained)
    CONSTRAINTS = "constraints"  # position_constraints(x), position_constraints_jacobian(x)
    MASS_MATRIX = "mass_matrix"  # mass_matrix() -> M (n, n), constant SPD


REQUIRES: dict[str, tuple[str, ...]] = {
    Capability.HAMILTONIAN: ("__call__",),
    Capability.ENERGY_GRADIENT: ("energy_gradient",),
    Capability.ENERGY_LINEARIZATION: ("energy_linearization",),
    Capability.SEPARABLE: ("kinetic", "potential"),
    Capability.OWN_FIELD: ("vector_field",),
    Capability.CONSTRAINTS: ("position_constraints", "position_constraints_jacobian"),
    Capability.MASS_MATRIX: ("mass_matrix",),
}

DEFAULT: frozenset[str] = frozenset({Capability.HAMILTONIAN})


def capabilities(obj: object) -> frozenset[str]:
    """The capabilities ``obj`` declares (``DEFAULT`` when it declares none)."""
    return frozenset(getattr(obj, "capabilities", DEFAULT))


def has(obj: object, capability: str) -> bool:
    """Whether ``obj`` declares ``capability``."""
    return capability in capabilities(obj)


def check_declared(obj: object, requires: dict[str, tuple[str, ...]] | None = None) -> None:
    """TypeError (a programming error, not a user's) when a declared capability's methods are
    missing. ``requires`` extends ``REQUIRES`` (the physics layer adds its own)."""
    table = {**REQUIRES, **(requires or {})}
    for capability in capabilities(obj):
        for attribute in table.get(capability, ()):
            if not callable(getattr(obj, attribute, None)):
                raise TypeError(
                    f"{type(obj).__name__} declares {capability!s} but has no {attribute}()"
                )
