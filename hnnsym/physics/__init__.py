"""Physics: the analytic systems (systems) and the learned Hamiltonians and vector fields (models).

Importing the package registers the constrained systems of ``constrained`` (chain_pendulum,
chain_pendulum_angles, coupled_pendulum) in ``systems.SYSTEMS``.
"""

from hnnsym.physics import constrained as _constrained  # noqa: F401  (registers its systems)
