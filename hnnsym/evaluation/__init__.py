"""Evaluation of a trained run: grid and rollout metrics (metrics), figures (plots), and the
evaluate stage (stage)."""
