# Two commands on a fresh machine: `make run` (site with demo data) and `make test`.
# `make run` serves the site through ASGI (uvicorn), as the live event stream needs.
UV_VERSION := 0.13.8
UV := python3 -m uv
HOST ?= 127.0.0.1
PORT ?= 8000
# pytest-xdist: one process more than the machine has cores, since a quarter of the suite's
# time is spent waiting on the processes, browsers and sockets its tests start (2 cores: 3
# workers, pytest 398.6 s against about 421 s with 2; ADR 0015, "Workers"). Tests sharing
# something the machine has once run in one group on one worker (tests/conftest.py, KINDS).
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_PARALLEL ?= -n $(WORKERS) --dist loadgroup
# More pytest arguments: .ci/run's PostgreSQL run leaves out the browser tests (ADR 0015).
PYTEST_ARGS ?=
# This machine's environment sets PYTHONDONTWRITEBYTECODE=1: every process (each pytest
# worker, each server, CLI and worker a test starts) then compiled every module it imported
# from source (starting Django and the URLs: 3.1 s so, 1.25 s compiled). The venv is compiled at
# install (uv's --compile-bytecode) and our own modules' caches are written (.gitignore
# keeps __pycache__ out), so each module is compiled once (ADR 0015, "Bytecode").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run setup test test-fast lint bootstrap browser sandbox shells pooler proof

bootstrap:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet "uv==$(UV_VERSION)"
	@$(UV) sync --frozen --quiet --compile-bytecode

# The local demo site is a developer's: DEBUG=1 gives it a built-in key and the memory
# cache, which the production profile refuses to start without (docs/deploy.md).
setup: bootstrap sandbox
	DEBUG=1 $(UV) run python manage.py migrate --no-input
	DEBUG=1 $(UV) run python manage.py collectstatic --no-input -v0
	DEBUG=1 $(UV) run python manage.py seed_demo

run: setup
	@echo ""
	@echo "  Factory Memory is at http://$(HOST):$(PORT)/ — log in at http://$(HOST):$(PORT)/login/"
	@echo "  Users (password factory-demo): maria (manager), rita and ravi (reviewers),"
	@echo "  ada and alan (agents), vera (verifier), admin (superuser, /admin/)."
	@echo ""
	DEBUG=1 $(UV) run uvicorn factory_site.asgi:application --host $(HOST) --port $(PORT)

# Browser tests drive Debian's Chromium (Playwright cannot download browsers here).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "chromium is not installed: the browser tests will be skipped"

# The runner's sandbox is Debian's bubblewrap (docs/runner.md); prlimit and setpriv come
# with util-linux.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } \
	  || echo "bubblewrap is not installed: the runner will not run and its tests will be skipped"

# The completion tests source `factory completion zsh` in Debian's zsh (bash is always there).
shells:
	@command -v zsh >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zsh >/dev/null; } \
	  || echo "zsh is not installed: the zsh completion test will be skipped"

# The tests behind a pooler start Debian's PgBouncer of their own (tests/pgbouncer.py),
# never its system service; on PostgreSQL only.
pooler:
	@command -v pgbouncer >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; } \
	  || echo "pgbouncer is not installed: the tests behind a transaction-mode pooler will be skipped"

# Django's checks of the code (migrations, the OpenAPI schema) run inside the suite
# (tests/test_checks.py), beside the other tests.
test: bootstrap browser sandbox shells pooler
	$(UV) run ruff check .
	$(UV) run ruff format --check .
	$(UV) run pytest $(PYTEST_PARALLEL) --durations=15 $(PYTEST_ARGS)

# The inner loop: everything but the browser, the sandbox, real workers and the route walks.
test-fast: bootstrap
	$(UV) run pytest $(PYTEST_PARALLEL) -m "not slow and not browser and not sandbox and not workers"

# The proofs (docs/reliability.md): the production profile under load and faults.
# Needs PostgreSQL and Redis running; restarts PostgreSQL and Redis during its runs. The
# landing proof verifies in the runner's sandbox.
proof: bootstrap sandbox
	$(UV) run python -m proof all --short

lint: bootstrap
	$(UV) run ruff check --fix .
	$(UV) run ruff format .
