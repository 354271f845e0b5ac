"""Running ``flyviz`` in-process and checking that a refusal is one error line (the hostile-input
tests' two helpers, shared by tests/test_hostile_input*.py)."""

from __future__ import annotations

from flyviz import cli


def cli_run(capsys, *argv: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``flyviz ARGV`` run in this process."""
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(code: int, err: str, *expected: str) -> None:
    """Assert exit 2 and one ``flyviz: error:`` line (no traceback) holding every ``expected``."""
    assert code == 2, err
    assert err.startswith("flyviz: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
