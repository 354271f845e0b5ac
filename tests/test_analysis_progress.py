"""A status line beside a terminal progress bar gets a line of its own, and the bar comes back."""

from __future__ import annotations

import io

from flyviz.analysis.cluster import ProgressBar, command_log, say


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_status_line_ends_the_bars_open_line_and_the_bar_is_drawn_again_below():
    term = Terminal()
    bar = ProgressBar(100, stream=term)
    bar.update(10, force=True)
    assert "\n" not in term.getvalue()            # the bar's line is open
    say("flyviz atlas: 2 local Dask worker(s) ready", stream=term)
    lines = term.getvalue().split("\n")
    assert lines[0].lstrip("\r").startswith("[##")  # the bar, ended
    assert lines[1] == "flyviz atlas: 2 local Dask worker(s) ready"
    assert lines[2].lstrip("\r").startswith("[##")  # and drawn again below
    bar.close()
    say("done", stream=term)                        # no open line: nothing added before it
    assert term.getvalue().endswith("\n" + "done\n") and "\n\ndone" not in term.getvalue()


def test_in_a_log_lines_are_whole_and_commands_name_themselves(capsys):
    log = io.StringIO()
    bar = ProgressBar(100, stream=log)
    bar.update(50, force=True)
    say("note", stream=log)
    assert log.getvalue().splitlines()[1] == "note" and len(log.getvalue().splitlines()) == 2
    command_log("sweep")("ready")
    assert capsys.readouterr().err == "flyviz sweep: ready\n"
