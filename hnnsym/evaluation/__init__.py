"""Evaluation of a trained run: the evaluate stage (stage: one pipeline), the problem and its parts
(problem, registry, extras; hamiltonian, constrained, positions, measured), metrics, rollouts and
figures (metrics, rollout, initial_states, damping, horizons, plots)."""
