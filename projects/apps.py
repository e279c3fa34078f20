"""The kernel app: projects, members and roles, the audit trail."""

from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"
    verbose_name = "Projects, members and the audit trail"

    def ready(self):
        # lazy: <key:…> and <id:…> for every app's URLs, registered before a URLconf loads.
        from projects import converters  # noqa: F401

        # lazy: fsm imports the models, which are loaded only once ready() runs.
        from projects.fsm import historical_models_collect_no_transitions

        historical_models_collect_no_transitions()
