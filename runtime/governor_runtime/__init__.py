"""vLLM Governor runtime: vLLM plugins that move the concurrency cap inside a live engine."""
