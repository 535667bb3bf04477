"""Kubernetes' and Linkerd's objects as slim records, the events sources send, and the
rules on addresses and endpoints every layer above applies."""
