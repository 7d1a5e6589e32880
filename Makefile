# Cardloop developer entry points. `make run` starts the service, `make test` runs the tests.
# Only Python >= 3.11 is needed; everything else goes into .venv.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
REQ_HASH := $(shell cat requirements.txt requirements-dev.txt | (sha256sum 2>/dev/null || shasum -a 256) | cut -c1-12)

.PHONY: run test lint check check-ts venv clean messages

$(BIN)/python:
	@test -n "$(PYTHON)" || (echo "Cardloop needs Python >= 3.11 (python3.11, python3.12 or python3.13 on PATH)." >&2; exit 1)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.deps-$(REQ_HASH): $(BIN)/python requirements.txt requirements-dev.txt
	@echo "Installing dependencies into $(VENV) ..."
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@rm -f $(VENV)/.deps-* && touch $@

venv: $(VENV)/.deps-$(REQ_HASH)

## Set up (virtualenv, install, migrate, demo data) and serve on http://$(HOST):$(PORT)/
# the address `seed_demo` prints and alert cards link to, unless CARDLOOP_PUBLIC_URL is set
run: export CARDLOOP_PUBLIC_URL ?= http://$(HOST):$(PORT)
run: venv
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py migrate --noinput
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py seed_demo
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py serve --host $(HOST) --port $(PORT)

## Set up and run the whole test suite (SQLite by default; DATABASE_URL / REDIS_URL switch backends)
test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .

## The checks CI runs besides the tests
check: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	DJANGO_DEBUG=true $(BIN)/python manage.py makemigrations --check --dry-run
	DJANGO_DEBUG=true $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	DJANGO_DEBUG=false DJANGO_SECRET_KEY=ci-$$($(BIN)/python -c 'import secrets;print(secrets.token_urlsafe(50))') \
	  DJANGO_ALLOWED_HOSTS=cardloop.example.com DJANGO_HSTS_SECONDS=31536000 DJANGO_SECURE_SSL_REDIRECT=true \
	  $(BIN)/python manage.py check --deploy --fail-level WARNING

## Types generated from /api/schema/ (openapi-typescript) type-check docs/typescript/example.ts (needs Node and npm)
check-ts: venv
	PYTHON=$(BIN)/python bash docs/typescript/check.sh

## Refresh every zh-hans catalogue from the code (each app's own, and locale/ for templates/,
## cardloop/ and plumbing/), keep translations of texts that moved between catalogues, compile.
CATALOGUES := botadmin interactions feedback analytics
messages: venv
	@tmp=$$(mktemp -d) && \
	msgcat --use-first -o $$tmp/compendium.po $$(for a in $(CATALOGUES) .; do echo $$a/locale/zh_Hans/LC_MESSAGES/django.po; done) && \
	for app in $(CATALOGUES); do \
	  (cd $$app && ../$(BIN)/python ../manage.py makemessages -l zh_Hans --ignore 'migrations/*' --ignore 'tests/*' >/dev/null) || exit 1; \
	done && \
	$(BIN)/python manage.py makemessages -l zh_Hans --ignore '.venv/*' --ignore 'tests/*' --ignore 'bench/*' \
	  $(foreach a,$(CATALOGUES),--ignore '$(a)/*') >/dev/null && \
	for a in $(CATALOGUES) .; do \
	  po=$$a/locale/zh_Hans/LC_MESSAGES/django.po; \
	  msgattrib --clear-fuzzy --empty -o $$po $$po && \
	  msgmerge -q -N --previous -C $$tmp/compendium.po -o $$po $$po $$po && \
	  msgattrib --no-obsolete -o $$po $$po && \
	  echo "$$po: $$(msgattrib --untranslated $$po | grep -c '^msgid ' || true) untranslated"; \
	done; rm -rf $$tmp
	$(BIN)/python manage.py compilemessages --ignore '.venv/*' >/dev/null

clean:
	rm -rf $(VENV) var staticfiles
