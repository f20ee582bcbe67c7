"""Physics: the analytic systems (systems) and the learned Hamiltonians and vector fields (models)."""
