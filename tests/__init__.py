"""dnsside's tests, a folder per layer or subject; a file is named for the behaviour it
checks. The fast tier (`scripts/test.sh --quick`) is every test marked `quick`: only the
venv, in-process. Everything else needs the peers scripts/test.sh installs.

    test_layers.py   the import contract of dnsside/ and the fast tier's own rule
    test_config.py   the flag table and its environment spelling
    dns/        the protocol over bytes: rules, EDNS, truncation, ANY, the apex, MCS names
    core/       the index, its lifecycle, flat networks and size; the encoders; explain
    model/      Linkerd's objects as records
    kubeapi/    what a Link's kubeconfig may hold
    sources/    the Kubernetes, file and flat-network sources; the gateway prober
    serving/    a running `dnsside serve`: operations, lame duck, UDP and TCP I/O
    ops/        install, install coredns per platform, check, deploy/, CI's packages
    interop/    real resolvers and peers in front: dig, unbound, BIND, knot, dnsmasq,
                PowerDNS, glibc, Go, Java, etcd (network namespaces, port 53)
    security/   hostile API servers, credentials, names and addresses
    soak/       the soak's CI form and memory under churn
    fakes/      the fake API servers themselves

The helpers shared with bench/ are the package testkit/ at the top of the checkout.
"""
