#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Read the settings now: Django's command runner would keep their error to itself
        # and fail later with "Models aren't loaded yet", which says nothing of the cause.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as error:
        sys.exit(f"Factory Memory cannot start: {error}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
