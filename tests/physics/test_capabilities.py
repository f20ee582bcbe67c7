"""Declared capabilities: every model and system declares what it offers, has the methods that
promises, and the kernel acts on the declaration (not on which attributes happen to exist)."""

from __future__ import annotations

import pytest
import torch

from hnnsym import integrate
from hnnsym.ode.capabilities import Capability, capabilities, check_declared, has
from hnnsym.ode.dynamics import hamiltonian_flow, has_hamiltonian
from hnnsym.ode.problem import Problem
from hnnsym.physics.capabilities import ModelCapability, check_model
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.dissipative import DissipativeHNN
from hnnsym.physics.models import HNN, NODE, Potential, SeparableHNN
from hnnsym.physics.symbolic import SymbolicModel
from hnnsym.physics.systems import SYSTEMS, get_system

C, M = Capability, ModelCapability


@pytest.mark.parametrize(
    ("model", "expected", "absent"),
    [
        (HNN(1), {C.HAMILTONIAN, C.ENERGY_GRADIENT, C.ENERGY_LINEARIZATION}, {C.OWN_FIELD}),
        (SeparableHNN(1), {C.SEPARABLE, C.KINETIC_GRADIENT, C.POTENTIAL_GRADIENT}, {C.OWN_FIELD}),
        (NODE(1), {C.OWN_FIELD}, {C.HAMILTONIAN}),
        (Potential(1), {C.MASS_MATRIX, M.POSITION_ONLY}, {C.HAMILTONIAN}),
        (DissipativeHNN(1), {C.HAMILTONIAN, C.OWN_FIELD, M.DAMPING}, {C.SEPARABLE}),
        (CHNN(4), {C.CONSTRAINTS, C.CONSTRAINT_JACOBIAN, C.MASS_MATRIX, M.MASSES}, {C.SEPARABLE}),
        (CLNN(4), {C.CONSTRAINTS, C.OWN_FIELD, M.MASSES}, {M.DAMPING}),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, set) else "",
)
def test_models_declare_what_they_offer(model, expected, absent):
    check_model(model)
    assert expected <= capabilities(model) and not absent & capabilities(model)


def test_every_registered_system_declares_and_has_its_methods():
    for name in SYSTEMS:
        system = get_system(name)
        check_declared(system)
        assert has(system, C.HAMILTONIAN)
        assert has(system, C.SEPARABLE) == system.separable
        assert has(system, C.OWN_FIELD) == (system.vector_field is not None)
    assert has(get_system("chain_pendulum"), C.CONSTRAINTS)
    assert has(get_system("pendulum", damping=0.1), C.SEPARABLE)  # H itself is still T + V
    assert not Problem(get_system("pendulum", damping=0.1), None, 0.1, 1).separable


def test_separability_of_a_symbolic_model_is_declared_per_instance():
    split = SymbolicModel(1, "p**2/2 + k*q**2/2", learn=["k"], init={"k": 1.0})
    mixed = SymbolicModel(1, "p**2/2 + k*q*p", learn=["k"], init={"k": 0.1})
    assert has(split, C.SEPARABLE) and not has(mixed, C.SEPARABLE)
    y = torch.tensor([[0.3, -0.4]], dtype=torch.float64)
    split.double()
    assert torch.allclose(split.kinetic(y[:, 1:]) + split.potential(y[:, :1]), split(y))


def test_plain_callables_are_energies_and_other_objects_declare_nothing():
    assert capabilities(lambda y: y.sum(-1)) == {C.HAMILTONIAN}
    assert capabilities(object()) == frozenset()
    assert not has_hamiltonian(object()) and hamiltonian_flow(lambda y: y.sum(-1))


class _Undeclared(torch.nn.Module):
    """Has a field of its own but does not declare it: the kernel uses J⁻¹∇H, not the method."""

    def forward(self, y):
        return 0.5 * (y**2).sum(-1)

    def vector_field(self, y):  # pragma: no cover - must not be called
        raise AssertionError("an undeclared vector_field was used")


class _Overclaiming(_Undeclared):
    capabilities = frozenset({C.HAMILTONIAN, C.CONSTRAINTS})


def test_the_kernel_acts_on_declarations_and_refuses_a_false_one():
    y0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    ys = integrate(_Undeclared(), y0, 0.1, 3, "implicit_midpoint", "backprop")
    assert ys.shape == (4, 1, 2)
    with pytest.raises(TypeError, match="declares constraints but has no position_constraints"):
        integrate(_Overclaiming(), y0, 0.1, 3, "implicit_midpoint", "backprop")
