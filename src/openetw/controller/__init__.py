"""Controllers: start, steer and stop trace sessions through the trace service, and consume them live."""

from openetw.controller.client import ServiceClient, spawn_service
from openetw.controller.realtime import RealtimeConsumer
from openetw.controller.session import (
           Session,
           list_sessions,
           parse_mode,
           provider_security,
           registered_providers,
           secure_provider,
)

__all__ = ["RealtimeConsumer", "ServiceClient", "Session", "list_sessions", "parse_mode", "provider_security", "registered_providers",
           "secure_provider", "spawn_service"]
