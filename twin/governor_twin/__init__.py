"""A calibrated twin of a vLLM engine: step-level simulation, virtual and real time."""
