"""Training: losses, the epoch loop (trainer), checkpoints, and the train stage (stage)."""
