"""The interop app: a team's specs, tasks and decisions in (spec-kit, OpenSpec, MADR, beads),
and back out (MADR, beads, spec-kit)."""

from django.apps import AppConfig


class InteropConfig(AppConfig):
    name = "interop"
    verbose_name = "Interop: imports and exports"
