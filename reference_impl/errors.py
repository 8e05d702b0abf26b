class InputError(ValueError):
    """A user mistake: the message is one line saying what is wrong and how to fix it."""


class RequestsFailed(RuntimeError):
    """Requests of a run that could not finish (an instance died and they no longer fit): req_id -> reason."""

    def __init__(self, failed: dict[int, str], num_requests: int):
        self.failed, self.num_requests = dict(failed), num_requests
        first = min(failed)
        super().__init__(f"{len(failed)} of {num_requests} requests failed; request {first}: {failed[first]}")
