"""The operations wing: what ``dnsside install`` prints and what ``dnsside check`` checks.

Nothing that serves DNS imports this package: the CLI loads it only for ``install``
and ``check`` (tests/test_layers.py holds every module to that).
"""
