"""The demo: a fresh site's data, made through every app's services (``manage.py seed_demo``).

It sits at the top of the layers because it reaches into every app; nothing imports it.
"""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo data"
