"""vLLM Governor: the Kopf operator, the control law and the standalone governor."""
