"""Every `netmap …` command the README and docs/running.md show exists: its `--help` works.

Commands are read from code blocks and inline code; the command path is the words up to
the first option, placeholder or argument (`netmap users create NAME --admin` checks
`netmap users create --help`). The walkthrough itself runs in
tests/e2e/test_readme_walkthrough.py.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.support.processes import PROJECT_ROOT

DOCUMENTS = ("README.md", "docs/running.md")
# A word that names a subcommand: lower-case letters and dashes.
COMMAND_WORD = re.compile(r"^[a-z][a-z-]*$")


def _command_paths() -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for name in DOCUMENTS:
        text = (PROJECT_ROOT / name).read_text(encoding="utf-8")
        snippets = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
        snippets += re.findall(r"`([^`\n]+)`", text)
        for snippet in snippets:
            for match in re.finditer(r"(?:^|[\s/(])netmap ((?:[a-z][a-z-]* ?)+)", snippet, re.M):
                words = []
                for word in match.group(1).split():
                    if not COMMAND_WORD.match(word):
                        break
                    words.append(word)
                if words:
                    paths.add(tuple(words))
    return paths


def _resolve(path: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """The words that name commands (`netmap import scan` stops at the argument) and the
    first word a command group does not know, if any."""
    import click

    context = click.Context(main)
    command: click.Command = main
    resolved: list[str] = []
    for word in path:
        if not isinstance(command, click.Group):
            break  # a leaf command: the rest are its arguments
        found = command.get_command(context, word)
        if found is None:
            return tuple(resolved), word
        command = found
        resolved.append(word)
    return tuple(resolved), None


PATHS = sorted(_command_paths())


def test_the_documents_show_commands():
    assert ("up",) in PATHS and ("agent",) in PATHS and ("scanners", "create") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_a_documented_command_exists(path):
    resolved, unknown = _resolve(path)
    assert unknown is None, f"`netmap {' '.join(path)}`: no command {unknown!r}"
    if resolved[0] == "agent":
        return  # its own parser; tests/unit/test_agent_imports_graph.py runs its --help
    result = CliRunner().invoke(main, [*resolved, "--help"])
    assert result.exit_code == 0, result.output
