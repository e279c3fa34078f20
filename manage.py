#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    from django.core.management import ManagementUtility

    class Utility(ManagementUtility):
        def fetch_command(self, subcommand):
            # Django keeps the settings' own error (a missing SECRET_KEY…) to itself and
            # fails later with "Models aren't loaded yet", which says nothing of the cause.
            if self.settings_exception is not None:
                sys.exit(f"Factory Memory cannot start: {self.settings_exception}")
            return super().fetch_command(subcommand)

    Utility(sys.argv).execute()


if __name__ == "__main__":
    main()
