#!/usr/bin/env bash
# Install dnsside into .venv and serve the demo topology (three linked clusters seen from
# "east") on 127.0.0.1:5353 (DNSSIDE_LISTEN changes it: mDNS also uses 5353), metrics on
# 127.0.0.1:9153 (DNSSIDE_HTTP_LISTEN). Ctrl-C stops it.
# Then, in another shell:  dig @127.0.0.1 -p 5353 nginx-svc.default.svc-global A
set -euo pipefail
cd "$(dirname "$0")/.."
# A venv that already holds this checkout's dnsside and its dependencies is reused: a second
# start is dnsside's own start, not a reinstall. Asked of the package metadata, not by
# running `dnsside --version`, which imports the whole server (a second under load).
venv_is_ready() {
  [ -x .venv/bin/dnsside ] && .venv/bin/python -I - "$PWD" >/dev/null 2>&1 <<'PY'
import importlib.metadata as md, importlib.util, re, sys
spec = importlib.util.find_spec("dnsside")
assert spec and spec.origin and spec.origin.startswith(sys.argv[1] + "/")
for req in md.requires("dnsside") or ():
    if "extra ==" not in req:
        md.version(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
PY
}
if ! venv_is_ready; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # setuptools tells every editable install of a flat layout (dnsside/ beside
  # pyproject.toml) to beware of same-named folders, in 9 lines that newer pips show
  # even with -q; a notice, not a problem: silenced by its text, nothing else.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q -e '.[fast]'
fi
exec .venv/bin/dnsside serve --source examples/demo-east.yaml --cluster-name east \
  --listen "${DNSSIDE_LISTEN:-127.0.0.1:5353}" --http-listen "${DNSSIDE_HTTP_LISTEN:-127.0.0.1:9153}" "$@"
