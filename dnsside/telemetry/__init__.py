"""The Prometheus metrics the sources and the serving side update."""
