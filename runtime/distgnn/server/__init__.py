"""The graph server: one partition in shared memory, N worker processes, NumPy only."""
