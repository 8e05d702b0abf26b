"""Every ```python example of README.md and docs/*.md runs as written (a page's examples in order, in one process,
in an empty folder), and every `repro` command of a ```bash example names a subcommand and options that exist."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(page: Path, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall(page.read_text()) if kind == lang]


PYTHON_PAGES = [p for p in PAGES if blocks(p, "python")]


def test_the_api_page_has_an_example():
    assert ROOT / "docs" / "api.md" in PYTHON_PAGES


SERVER_URL = "http://127.0.0.1:8000"  # what docs/serving.md's examples call: `repro serve --model tiny --port 8000`


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_examples_run(page, tmp_path):
    code = "\n".join(blocks(page, "python"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = None
    if SERVER_URL in code:  # a real server on the tiny folder, on a free port
        from reference_impl.model.tiny_folder import tiny_folder
        from reference_impl.server.config import ServerConfig
        from reference_impl.server.run import ServerThread

        server = ServerThread(ServerConfig(model=str(tiny_folder(tmp_path / "cache")), served_model_name="tiny"))
        code = code.replace(SERVER_URL, server.base_url)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        if server is not None:
            server.stop()
    assert done.returncode == 0, f"{page.relative_to(ROOT)}'s example failed:\n{done.stderr[-3000:]}"


def repro_commands(text: str) -> list[list[str]]:
    """The `repro ...` command lines of shell examples (continuations joined, comments and pipes cut)."""
    text = text.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.split(" #")[0].split("|")[0].split("&&")[0].split(">")[0].strip()
        if line.startswith("$ "):
            line = line[2:]
        if line.startswith("repro "):
            try:
                commands.append(shlex.split(line)[1:])
            except ValueError:
                continue
    return commands


SHELL = [(p, argv) for p in PAGES for kind in ("bash", "sh", "") for b in blocks(p, kind)
         for argv in repro_commands(b)]


def unknown_parts(argv: list[str]) -> str | None:
    """What of `repro ARGV` does not exist (a subcommand or an option), or None."""
    import click

    from repro.cli import cli
    command, words = cli, list(argv)
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(click.Context(cli), words[0])
        if sub is None:
            return f"no subcommand {words[0]!r}"
        command, words = sub, words[1:]
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for word in words:
        name = word.strip("[]").split("=")[0]
        if name.startswith("--") and name not in known:
            return f"no option {name}"
    return None


def test_the_shell_check_finds_a_wrong_option_and_subcommand():
    assert unknown_parts(["run", "--experiment", "e2e", "--quick"]) is None
    assert unknown_parts(["run", "--no-such-option"]) == "no option --no-such-option"
    assert unknown_parts(["nosuchcommand"]) == "no subcommand 'nosuchcommand'"


def test_shell_examples_name_existing_commands_and_options():
    bad = [f"{page.relative_to(ROOT)}: repro {' '.join(argv)}: {why}" for page, argv in SHELL
           if (why := unknown_parts(argv))]
    assert not bad, "\n".join(bad)
