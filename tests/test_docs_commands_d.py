"""The commands of the documentation pages of group ``d`` run on the demo brain.

The pages whose commands take longest are shared out over files of their own so that the
suite's workers run them side by side; what is checked is said in ``test_docs_commands.py``.
"""

from __future__ import annotations

import pytest

from test_docs_commands import pages_of_group, run_the_pages_commands


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_of_group("d"))
def test_the_pages_commands_run_on_the_demo(page, tmp_path, monkeypatch):
    run_the_pages_commands(page, tmp_path, monkeypatch)
