"""Every subcommand's --help renders (a stray % in a help string once crashed `smartio bench --help`)."""

from __future__ import annotations

import argparse

import pytest

from smartio.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


@pytest.mark.parametrize("path", [p for p, _ in _parsers(build_parser())], ids=lambda p: " ".join(p) or "smartio")
def test_help_renders(path, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*path, "--help"])
    assert e.value.code == 0
    assert "usage: smartio" in capsys.readouterr().out


def test_ctrl_c_while_the_commands_load_is_a_message_not_a_traceback(monkeypatch, capsys):
    import importlib

    import smartio.cli as cli

    def interrupted(name):
        raise KeyboardInterrupt
    monkeypatch.setattr(importlib, "import_module", interrupted)
    try:
        rc = cli.main(["--version"])
    except KeyboardInterrupt:           # escaping here would stop pytest itself
        pytest.fail("the KeyboardInterrupt escaped main()")
    assert rc == 130
    assert capsys.readouterr().err == "smartio: interrupted\n"
