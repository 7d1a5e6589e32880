#!/usr/bin/env bash
# The generated TypeScript client works: write the OpenAPI schema (manage.py spectacular),
# install the two pinned npm packages into docs/typescript/node_modules (package-lock.json),
# generate types with openapi-typescript and type-check example.ts with tsc --noEmit.
# Run from anywhere: bash docs/typescript/check.sh   (needs Node >= 18 and npm)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"

cd "$root"
DJANGO_DEBUG=true "$python" manage.py spectacular --validate --fail-on-warn --file "$here/schema.yaml"

cd "$here"
if [ ! -x node_modules/.bin/openapi-typescript ] || [ ! -x node_modules/.bin/tsc ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
# fields with a default are optional in a request body: not "required" (the tool's default)
node_modules/.bin/openapi-typescript schema.yaml --output schema.d.ts --default-non-nullable false --silent
node_modules/.bin/tsc --noEmit -p tsconfig.json
echo "TypeScript: types generated from /api/schema/ and example.ts type-checked"
