"""WSGI entry point (gunicorn factory_site.wsgi); /mcp is served by the ASGI one."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
application = get_wsgi_application()
