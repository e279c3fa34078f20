"""The tasks app: tasks, attempts, claiming, leases, review; it listens to evidence's seam."""

from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Tasks and attempts"

    def ready(self):
        # lazy: receivers reach models, which Django loads only once the apps are ready.
        from evidence.signals import gate_run_finished
        from tasks.receivers import conclude_when_gates_finish

        gate_run_finished.connect(conclude_when_gates_finish, dispatch_uid="tasks.conclude")
