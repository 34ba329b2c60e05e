"""Engine doors: TLS, the gateway's certificate and a replica key in front of each engine (door.py)."""

from agentd.door.door import CONTROL_PLANE_CN_PREFIX, DoorRecord, Doors, door_context, is_loopback

__all__ = ["CONTROL_PLANE_CN_PREFIX", "DoorRecord", "Doors", "door_context", "is_loopback"]
