"""Exit statuses of `repro` besides 0 (docs/cli.md): 1 the machine refused (a full disk, permissions) or a guarded
number moved (`repro regression check`); 2 bad input, one line on stderr; 3 some requests of a generation or
serving run failed, after the command printed what did complete."""
from contextlib import contextmanager

import click

from reference_impl.errors import RequestsFailed

REQUESTS_FAILED = 3


class RequestsFailedExit(click.ClickException):
    """`error: N of M requests failed; request i: <reason>` on stderr, exit status 3."""
    exit_code = REQUESTS_FAILED

    def __init__(self, failed: dict[int, str], num_requests: int):
        super().__init__(str(RequestsFailed(failed, num_requests)))


@contextmanager
def exit_on_failed_requests():
    """A run in the block whose requests failed ends the command with exit status 3."""
    try:
        yield
    except RequestsFailed as err:
        raise RequestsFailedExit(err.failed, err.num_requests) from None
