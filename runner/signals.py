"""What the runner tells the apps above it, without importing them."""

from django.dispatch import Signal

# Tests of the project that failed and then passed at one submitted commit (not tests the
# submission itself adds or edits): sent with ``project``, ``tests`` (their ids) and
# ``tree`` (the commit's tree). The landing app records them beside the merge queue's
# (landing.flaky.record).
flaked = Signal()
