"""What the server tests read of a running server's engine."""
import time


def wait_idle(server, timeout_s=10.0):
    """The engine's stats once no request is live (or the last seen after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = server.server.loop.stats()
        if (stats.num_live == 0 and stats.num_running == 0 and stats.num_waiting == 0) or time.monotonic() > deadline:
            return stats
        time.sleep(0.02)


def assert_nothing_held(stats):
    assert (stats.num_live, stats.num_running, stats.num_waiting) == (0, 0, 0)
    assert (stats.rblocks_used, stats.rblocks_reserved, stats.num_tables, stats.num_moves) == (0, 0, 0, 0)
    assert stats.held_by_req == {}
