"""A stop during a corpus run is never lost, and the handlers it installs are put back."""

from __future__ import annotations

import os
import signal

import pytest

from flyviz.analysis.quiet import raise_if_interrupted, restore_term, term_as_interrupt


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_swallowed_where_it_landed_is_raised_at_the_next_check(signum):
    # Python's own Ctrl+C handler, as a command started from a terminal has it (a pytest-xdist
    # worker runs with another one).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    saved = term_as_interrupt()
    try:
        raise_if_interrupted()  # nothing arrived yet
        try:  # a library's catch-all that the KeyboardInterrupt happens to land in
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
        except BaseException:  # noqa: BLE001 - the swallowing is what is tested
            pass
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupted()
    finally:
        restore_term(saved)
        after = {s: signal.getsignal(s) for s in before}
        signal.signal(signal.SIGINT, previous)
    assert after == before
    raise_if_interrupted()  # the next run starts with no stop pending


def test_a_sigint_ignored_at_start_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        saved = term_as_interrupt()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        restore_term(saved)
    finally:
        signal.signal(signal.SIGINT, previous)
