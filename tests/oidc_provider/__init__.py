"""A real OpenID Connect provider for the sign-in tests: django-oauth-toolkit in a Django
project of its own, run in a second process by tests/ui/test_sso.py (``serve.py``)."""
