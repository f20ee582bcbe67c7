"""Physics: the analytic systems (systems) and the learned Hamiltonians and vector fields (models).

Importing the package registers the constrained systems of ``pendulums`` (chain_pendulum,
chain_pendulum_angles, coupled_pendulum) in ``systems.SYSTEMS``.
"""

from hnnsym.physics import pendulums as _pendulums  # noqa: F401  (registers its systems)
