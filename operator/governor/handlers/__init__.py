"""Kopf handlers of the governor, one module per concern. ``kopf run -m governor.handlers`` or
``governor operator`` loads them all: set-up (settings, login, the context in Kopf's memo), children
(children, status, drift repair), the control loop (one daemon per InferenceService) and the Alertmanager
receiver (GOVERNOR_WEBHOOK_ENABLED). Handlers are thin: the work is in governor.services.
"""

from governor.handlers import (
    children,
    loop,
    startup,  # first: its startup handlers fill the memo the others read
    webhook,
)

__all__ = ["children", "loop", "startup", "webhook"]
