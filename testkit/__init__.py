"""What the tests (tests/) and the benchmarks (bench/) share: the `dnsside serve`
subprocess, the fake Kubernetes API servers, topology builders, raw DNS packets, the
resolvers and network namespaces the interop tests start.

It is a package at the top of the checkout, beside dnsside/, so both import it by name:
pytest puts the checkout on the path (``pythonpath`` in pyproject.toml) and the
benchmarks run as ``python -m bench.<name>`` from the checkout. It is not installed.
"""
