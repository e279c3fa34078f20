"""Proofs that Factory Memory keeps its promises under load, faults and hostile input.

Each scenario starts the production profile on this machine (gunicorn, a Celery worker
and beat, PostgreSQL, Redis), drives it through the real HTTP API with agent
processes, injects its faults, then checks the invariants with SQL over the whole
database. Run ``uv run python -m proof --help``; docs/reliability.md has the figures.
"""
