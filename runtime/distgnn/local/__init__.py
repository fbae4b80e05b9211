"""Local mode: ``distgnn run`` runs a DistGNNJob or GraphServer as processes on 127.0.0.1.

A folder stands in for object storage; every server and trainer is a real process in
its own process group, supervised by :class:`~distgnn.local.supervisor.Supervisor`.
"""
