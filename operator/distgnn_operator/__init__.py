"""DistGNN Kubernetes operator (kopf)."""
