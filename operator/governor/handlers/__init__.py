"""Kopf handlers of the governor, one module per concern. ``kopf run -m governor.handlers`` or
``governor operator`` loads them all: children (this package's spine: children, status, drift repair).
Other modules (the control loop, the Alertmanager webhook) add their import below.
"""

from governor.handlers import children

__all__ = ["children"]
from governor.handlers import loop as loop  # the control loop (one daemon per InferenceService)
from governor.handlers import webhook as webhook  # the Alertmanager receiver (GOVERNOR_WEBHOOK_ENABLED)
