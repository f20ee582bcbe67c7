"""What an energy or field offers the kernel, declared by its class rather than probed.

A model (or system, or any object handed to the integrators) lists what it offers in a class
or instance attribute ``capabilities``: a frozenset of ``Capability`` members (and of
``hnnsym.physics.capabilities.ModelCapability`` members, for what evaluation and training read).
Code asks ``has(obj, Capability.MASS_MATRIX)``; ``check_declared(obj)``, called once where an
object is built, verifies that every declared capability's methods exist.

A callable without the attribute declares ``{Capability.HAMILTONIAN}`` (``DEFAULT``): a plain
energy H(y) (B, 2d) -> (B,), whose field the kernel forms as J⁻¹∇H by autograd; any other object
without it declares nothing.
"""

from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    """Kernel capabilities. The value names the attribute(s) each one promises (``REQUIRES``)."""

    HAMILTONIAN = "hamiltonian"  # __call__(y) -> H (B,); the field is J⁻¹∇H unless OWN_FIELD
    ENERGY_GRADIENT = "energy_gradient"  # energy_gradient(y) -> ∇H (B, 2d), closed form
    ENERGY_LINEARIZATION = "energy_linearization"  # energy_linearization(y): closed-form ∇²H
    SEPARABLE = "separable"  # H = T(p) + V(q): kinetic(p), potential(q)
    KINETIC_GRADIENT = "kinetic_gradient"  # kinetic_grad(p) -> T'(p) (B, d), closed form
    POTENTIAL_GRADIENT = "potential_gradient"  # potential_grad(q) -> V'(q) (B, d), closed form
    OWN_FIELD = "own_field"  # vector_field(y) -> ẏ, not J⁻¹∇H (dissipative, NODE, constrained)
    CONSTRAINTS = "constraints"  # position_constraints(x) -> Φ(x) (B, m), holonomic Φ = 0
    CONSTRAINT_JACOBIAN = "constraint_jacobian"  # position_constraints_jacobian(x) -> DΦ (B, m, n)
    MASS_MATRIX = "mass_matrix"  # mass_matrix() -> M (n, n), constant SPD
    # friction_matrix(q) -> R_pp(q) (B, n, n), PSD, with G(q) M⁻¹ R_pp = 0: the field is ṗ −=
    # R_pp ∂H/∂p besides H's (a constrained model's friction in the tangent space; RATTLE splits it)
    FRICTION = "friction"


REQUIRES: dict[str, tuple[str, ...]] = {
    Capability.HAMILTONIAN: ("__call__",),
    Capability.ENERGY_GRADIENT: ("energy_gradient",),
    Capability.ENERGY_LINEARIZATION: ("energy_linearization",),
    Capability.SEPARABLE: ("kinetic", "potential"),
    Capability.KINETIC_GRADIENT: ("kinetic_grad",),
    Capability.POTENTIAL_GRADIENT: ("potential_grad",),
    Capability.OWN_FIELD: ("vector_field",),
    Capability.CONSTRAINTS: ("position_constraints",),
    Capability.CONSTRAINT_JACOBIAN: ("position_constraints_jacobian",),
    Capability.MASS_MATRIX: ("mass_matrix",),
    Capability.FRICTION: ("friction_matrix", "mass_matrix"),
}

DEFAULT: frozenset[str] = frozenset({Capability.HAMILTONIAN})


def capabilities(obj: object) -> frozenset[str]:
    """The capabilities ``obj`` declares (``DEFAULT`` for a callable that declares none)."""
    declared = getattr(obj, "capabilities", None)
    if declared is None:
        return DEFAULT if callable(obj) else frozenset()
    return frozenset(declared)


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
