"""The Dask worker plugin of flyviz's local clusters (imported only where Dask is installed).

Ctrl+C in a terminal sends SIGINT to the whole process group, and a service
manager's SIGTERM may do the same: the worker processes of a LocalCluster
would each print their own traceback. With this plugin they ignore both; the
flyviz process, which handles the signal, closes them through their nannies.
"""

from __future__ import annotations

import signal
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class QuietWorkerSignals(WorkerPlugin):
    """Worker processes ignore SIGINT and SIGTERM (their nanny stops them)."""

    idempotent = True

    def setup(self, worker: Any) -> None:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:  # not the main thread of the worker process
            pass
