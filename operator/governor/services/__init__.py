"""Services: the control step, reconciliation and the replica writer, composed from the core and the
adapters."""
