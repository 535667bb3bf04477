#!/usr/bin/env bash
# Install dnsside into .venv and serve the demo topology (three linked clusters seen from
# "east") on 127.0.0.1:5353, metrics on 127.0.0.1:9153. Ctrl-C stops it.
# Then, in another shell:  dig @127.0.0.1 -p 5353 nginx-svc.default.svc-global A
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[fast]'
exec .venv/bin/dnsside serve --source examples/demo-east.yaml --cluster-name east \
  --listen "${DNSSIDE_LISTEN:-127.0.0.1:5353}" --http-listen "${DNSSIDE_HTTP_LISTEN:-127.0.0.1:9153}" "$@"
