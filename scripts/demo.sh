#!/usr/bin/env bash
# Install dnsside into .venv and serve the demo topology (three linked clusters seen from
# "east") on 127.0.0.1:5353 (DNSSIDE_LISTEN changes it: mDNS also uses 5353), metrics on
# 127.0.0.1:9153 (DNSSIDE_HTTP_LISTEN). Ctrl-C stops it.
# Then, in another shell:  dig @127.0.0.1 -p 5353 nginx-svc.default.svc-global A
set -euo pipefail
cd "$(dirname "$0")/.."
# A venv that already runs dnsside is reused (a second start takes a second, not a reinstall).
if ! .venv/bin/dnsside --version >/dev/null 2>&1; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # setuptools tells every editable install of a flat layout (dnsside/ beside
  # pyproject.toml) to beware of same-named folders, in 9 lines that newer pips show
  # even with -q; a notice, not a problem: silenced by its text, nothing else.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q -e '.[fast]'
fi
exec .venv/bin/dnsside serve --source examples/demo-east.yaml --cluster-name east \
  --listen "${DNSSIDE_LISTEN:-127.0.0.1:5353}" --http-listen "${DNSSIDE_HTTP_LISTEN:-127.0.0.1:9153}" "$@"
