"""Wire protocol (codec, message types) and client connections; torch-free."""

from distgnn.rpc.client import Connection, ServerPool
from distgnn.rpc.protocol import Frame, Limits, MsgType

__all__ = ["Connection", "Frame", "Limits", "MsgType", "ServerPool"]
