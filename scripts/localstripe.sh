#!/usr/bin/env bash
# Installs localstripe (a stateful fake of Stripe's API, webhooks and Stripe.js, pinned, from
# PyPI) into a virtual environment under target/ when it is not there yet, and prints the path
# of that environment's Python, which tests take from CHECKOUT_TEST_LOCALSTRIPE_PYTHON. The
# tests start it themselves (scripts/localstripe_server.py) on a loopback port.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=1.15.10
venv="${CARGO_TARGET_DIR:-$root/target}/localstripe-venv"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('localstripe') != '$version')" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "localstripe==$version" >&2
fi
echo "$venv/bin/python"
