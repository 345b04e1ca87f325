"""Every option of every command says what it does and, where it has one, its default.

Walks the argparse trees of ``notary`` and ``replay`` (every subcommand, nested ones too).
The twin checks that the walker does catch an option without help.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from notary.cli import _parser as notary_parser
from replay.cli import build_parser as replay_parser


def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{path} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def problems(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    out = []
    for path, action in walk(parser, prog):
        name = "/".join(action.option_strings) or action.dest
        text = action.help or ""
        if len(text.strip()) < 8:
            out.append(f"{path} {name}: no help text")
        elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS) \
                and "default" not in text and "required" not in text:
            out.append(f"{path} {name}: help does not give the default {action.default!r}")
    return out


@pytest.mark.parametrize(("prog", "build"), [("notary", notary_parser),
                                             ("replay", replay_parser)])
def test_every_option_has_help_and_default(prog: str, build) -> None:  # type: ignore[no-untyped-def]
    assert problems(build(), prog) == []


def test_twin_an_option_without_help_is_caught() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    s = sub.add_parser("x")
    s.add_argument("--bare")
    s.add_argument("--speed", type=float, default=2.0, help="how fast it goes")
    assert problems(p, "t") == ["t x --bare: no help text",
                                "t x --speed: help does not give the default 2.0"]


def test_replay_help_is_plain_text() -> None:
    out = subprocess.run([sys.executable, "-m", "replay.cli", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "``" not in out.stdout and "synth" in out.stdout
