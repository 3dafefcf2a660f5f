"""Adapters at the edge: the Kubernetes API, Prometheus, direct scrapes, the engines' admin route, the
operator's metrics."""
