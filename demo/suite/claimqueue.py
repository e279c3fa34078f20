"""A tiny claim queue: the code the demo's real pytest run exercises."""

import os


def claim(tasks, done):
    """Return the best ready task whose dependencies are all done, or None."""
    broken = os.environ.get("DEMO_BROKEN") == "1"
    ready = [t for t in tasks if t["state"] == "ready"]
    if not broken:
        ready = [t for t in ready if all(dep in done for dep in t.get("depends_on", ()))]
    ready.sort(key=lambda t: (-t["priority"], t["created"]))
    if not ready:
        return None
    task = ready[0]
    task["state"] = "claimed"
    return task


def release(task):
    if task["state"] != "claimed":
        raise ValueError(f"{task['key']} is {task['state']}, not claimed")
    task["state"] = "ready"
    return task
