#!/usr/bin/env bash
# Validates schemas/openapi.json as an OpenAPI 3.1 document (openapi-spec-validator) and every
# schemas/*.schema.json against the JSON Schema 2020-12 meta-schema (python jsonschema).
# The tools live in a virtual environment under target/, created on first use.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/openapi-venv"
schemas="${1:-$root/schemas}"

if [[ ! -x "$venv/bin/openapi-spec-validator" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'openapi-spec-validator>=0.7,<0.8' 'jsonschema>=4.18,<5'
fi

"$venv/bin/openapi-spec-validator" --schema 3.1.0 "$schemas/openapi.json"

"$venv/bin/python" - "$schemas" <<'PY'
import json
import pathlib
import sys

from jsonschema import Draft202012Validator

failed = False
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.schema.json")):
    schema = json.loads(path.read_text())
    try:
        Draft202012Validator.check_schema(schema)
        print(f"{path.name}: OK")
    except Exception as error:  # report every file, then fail
        failed = True
        print(f"{path.name}: {error}", file=sys.stderr)
sys.exit(1 if failed else 0)
PY
