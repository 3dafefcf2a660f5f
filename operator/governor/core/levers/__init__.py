"""Online models of the two levers: what the running batch (and prefill work) does to per-token latency
(`fit`), what a cap costs in queueing (`queueing`), and the cap that serves the user's objective (`plan`).
Pure: floats and frozen models in, frozen models out; plain Python (the operator image has no numpy)."""
