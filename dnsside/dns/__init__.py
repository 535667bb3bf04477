"""The DNS protocol as functions over bytes: wire format, zones, the name grammar and the
query path. It knows names and records, never Kubernetes or Linkerd."""
