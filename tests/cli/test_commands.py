"""Every command module is wired into the one `specdec` entry point."""

import pytest

from specdec.cli import build_parser


def test_all_commands_registered():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"generate", "bench", "plan", "review", "train", "check", "audit"}


def test_unknown_command_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["speculate-harder"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
