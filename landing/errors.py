"""The lander's one error of its own."""


class LandingError(RuntimeError):
    """Nothing can be decided about the changes (the machine's or the target's trouble):
    they stay queued, and the batch says why."""
