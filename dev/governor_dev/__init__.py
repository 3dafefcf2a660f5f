"""Development tools, not shipped in the operator image: the local vLLM CPU engine, the load generator, the
demo."""
