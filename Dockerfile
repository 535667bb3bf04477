# syntax=docker/dockerfile:1
#
# dnsside container image.
#
#   docker build -t ghcr.io/dnsside/dnsside:0.1.0 .
#   docker build --build-arg EXTRAS= -t dnsside:plain .   # without uvloop
#
# Both stages use the same base image on purpose: the virtualenv built in the
# first stage points at /usr/local/bin/python3.11 of that image, so the final
# stage must provide the identical interpreter at the identical path.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------
# build: install the project and its dependencies into /opt/dnsside
# --------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build

# Optional extras from pyproject.toml; "fast" pulls in uvloop (manylinux
# wheels exist for amd64 and arm64, so no compiler is needed).
ARG EXTRAS=fast

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN ["python", "-m", "venv", "/opt/dnsside"]

WORKDIR /src
# README.md* / LICENSE*: pyproject.toml names README.md as the long
# description; the wildcard keeps the build working if it is absent.
COPY pyproject.toml README.md* LICENSE* ./
COPY dnsside/ ./dnsside/

# Not an editable install: the package is copied into site-packages and
# byte-compiled here, so the read-only root filesystem at run time never
# needs a __pycache__ write.
RUN ["/bin/sh", "-c", "/opt/dnsside/bin/pip install \".${EXTRAS:+[$EXTRAS]}\" && /opt/dnsside/bin/dnsside --help >/dev/null"]

# --------------------------------------------------------------------------
# runtime: the interpreter from the base image plus /opt/dnsside, nothing else
# --------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="dnsside" \
      org.opencontainers.image.description="DNS-serving discovery sidecar for Linkerd multicluster (*.svc-global)" \
      org.opencontainers.image.source="https://github.com/dnsside/dnsside" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=build /opt/dnsside /opt/dnsside

ENV PATH=/opt/dnsside/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

# Numeric user so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532

# DNS over UDP and TCP, and /metrics, /healthz, /readyz. dnsside's own defaults are
# 127.0.0.1:5353 and 127.0.0.1:9153; the standalone manifests pass --listen [::]:53
# --http-listen [::]:9153 (port 53 as non-root through the pod's
# net.ipv4.ip_unprivileged_port_start sysctl), the sidecar 127.0.0.1:5353 and [::]:9154.
EXPOSE 53/udp 53/tcp 5353/udp 5353/tcp 9153/tcp

# Exec form: no shell is involved at run time, signals reach dnsside directly.
ENTRYPOINT ["dnsside"]
CMD ["serve"]
