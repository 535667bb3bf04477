"""dnsside: answers *.svc-global from every Linkerd mirror of a service."""

__version__ = "0.1.0"
