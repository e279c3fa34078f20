"""Demo data for a fresh site: ``python manage.py seed_demo``."""
