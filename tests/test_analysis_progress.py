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


def test_in_a_log_a_line_is_written_only_when_the_count_changes():
    """A screen wrote '20.0%  1/5 runs' twice (a batch's forced update, then the next); in a
    log every line stays, so a repeat is noise. A terminal's one line may be redrawn."""
    log = io.StringIO()
    bar = ProgressBar(5, label="runs", stream=log, log_every=0.0)
    bar.update(0, force=True)
    bar.update(1, force=True)
    bar.update(1, force=True)
    bar.update(1)
    bar.total = 6                                   # a new total is news
    bar.update(1, force=True)
    bar.update(6)
    bar.close()
    counts = [line.split()[2] for line in log.getvalue().splitlines()]
    assert counts == ["0/5", "1/5", "1/6", "6/6"]
    term = Terminal()
    bar = ProgressBar(5, stream=term, log_every=0.0)
    bar.update(1, force=True)
    bar.update(1, force=True)
    assert term.getvalue().count("\r") == 2


def test_a_rate_below_one_a_second_is_shown_as_seconds_each():
    """7 positions in 15 s read '0 positions/s'."""
    log = io.StringIO()
    bar = ProgressBar(7, label="positions", stream=log, log_every=0.0)
    bar.update(0, force=True)
    assert "? positions/s" in log.getvalue()   # no rate yet, not a rate of 0
    bar.started -= 15.0                         # as if 15 s had passed
    bar.update(7, force=True)
    last = log.getvalue().splitlines()[-1]
    assert "2.1 s/position" in last and "0 positions/s" not in last, last
    fast = ProgressBar(100, stream=io.StringIO())
    fast.started -= 2.0
    fast.initial = 0                            # counted from 0
    assert "2.5 tokens/s" in fast.line(5) and "50 tokens/s" in fast.line(100)


def test_a_note_beside_the_bar_is_news_in_a_log():
    """A slow item's work (a null's products) writes a line now and then, though the count
    of items has not moved."""
    log = io.StringIO()
    bar = ProgressBar(7, label="positions", stream=log, log_every=0.0)
    for products in (100, 100, 250):
        bar.note = f"{products:,} J.v products"
        bar.update(0)
    lines = log.getvalue().splitlines()
    assert [line.split("  ")[-1] for line in lines] == ["100 J.v products", "250 J.v products"]
