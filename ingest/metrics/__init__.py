"""Prometheus metrics of the long-running processes: the endpoint, and the series of broker, registry and mirror."""
