"""The one Kubernetes API client, shared by the sources and the operations wing, and what
may reach a linked cluster from a Link's Secret."""
