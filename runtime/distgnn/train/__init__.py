"""DDP training: the built-in apps, checkpoints, metrics and ``distgnn train``."""
