"""Settings for the floor site: the real settings, with bench/floor_urls.py as URLconf."""

from factory_site.settings import *  # noqa: F403

ROOT_URLCONF = "floor_urls"
