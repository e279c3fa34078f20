"""Loopback HTTP servers that tests run in a thread of their own."""

import threading

# ``serve_forever`` looks for ``shutdown()`` once per poll interval, half a second by
# default: every test that stopped its server waited up to that long in its teardown (about
# a hundred seconds over the code host tests alone).
POLL_SECONDS = 0.02


def serve_in_thread(server) -> threading.Thread:
    """Serve ``server`` (a ``socketserver`` server) on a daemon thread, started."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
    )
    thread.start()
    return thread
