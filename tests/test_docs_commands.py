"""The docs cannot drift from the CLI: every `smartio …` command line in a ```sh block of README.md and docs/ parses
with the real argument parser, in the current grammar (no old spelling that is only an alias now); every inline
`smartio COMMAND …` names a command that exists; every bench script named in a ```sh block exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from smartio import registry
from smartio.cli import aliases, build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SH_BLOCK = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`((?:sudo )?smartio [a-z][a-z-]*(?: [a-z][a-z-]*)?)[^`]*`")


def _sh_lines() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for block in SH_BLOCK.findall(doc.read_text()):
            joined = re.sub(r"\\\n\s*", " ", block)          # continuation lines
            for line in joined.splitlines():
                line = line.strip().removeprefix("$ ").split(" #")[0].strip()
                if line:
                    out.append((str(doc.relative_to(ROOT)), line))
    return out


def _argv(line: str) -> list[str] | None:
    """The arguments after `smartio` of a command line, or None if it is not one."""
    words = shlex.split(line)
    while words and (words[0] == "sudo" or "=" in words[0]):     # sudo, VAR=value
        words = words[1:]
    if not words or Path(words[0]).name != "smartio":
        return None
    return words[1:]


SMARTIO_LINES = [(doc, line) for doc, line in _sh_lines() if _argv(line) is not None]


def test_the_docs_show_commands():
    assert len(SMARTIO_LINES) >= 10, "the docs quote hardly any command in ```sh blocks"


@pytest.mark.parametrize("doc, line", SMARTIO_LINES, ids=[f"{d}: {x[:60]}" for d, x in SMARTIO_LINES])
def test_quoted_command_parses_in_the_current_grammar(doc, line, capsys):
    argv = _argv(line)
    assert argv is not None
    assert aliases.rewrite(list(argv), registry.COMPARE) == argv, f"{doc}: `{line}` uses an old spelling"
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code != 0:          # --help, --version
            pytest.fail(f"{doc}: `{line}` does not parse: {capsys.readouterr().err.strip()}")


def test_inline_commands_name_existing_commands(capsys):
    parser = build_parser()
    bad = []
    for doc in DOCS:
        for m in INLINE.finditer(doc.read_text()):
            words = m.group(1).removeprefix("sudo ").split()[1:]
            if aliases.rewrite(list(words), registry.COMPARE) != words:
                continue        # an old spelling, named as such (it still works, with a notice)
            try:
                parser.parse_known_args([*words, "--help"])
            except SystemExit as e:
                if e.code != 0:
                    bad.append(f"{doc.relative_to(ROOT)}: `{m.group(0)}`")
    assert bad == []


def test_bench_scripts_named_in_the_docs_exist():
    named = {w for _, line in _sh_lines() for w in shlex.split(line) if w.startswith("bench/")}
    assert [b for b in sorted(named) if not (ROOT / b).is_file()] == []
