"""`repro --help`, `repro run --help` and every other command's `--help` load none of the packages that the
commands' function-local imports keep out of the CLI's startup: each costs from about 40 ms (tqdm, jsonschema) to
over a second (torch), where `repro --help` takes about 70 ms in all. Checked in a fresh interpreter."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "ray", "pandas", "seaborn", "matplotlib", "transformers", "jsonschema", "tqdm")
# argv: a JSON list of argument lists, or "all" (the top group, then every command and subcommand); the packages
# to look for (JSON); the modules to import first (standing in for a heavy import at the top of the CLI)
SCRIPT = """
import contextlib, importlib, io, json, sys
import click
for name in sys.argv[3:]:
    importlib.import_module(name)
from repro.cli import cli, main
def every_command():  # each command is imported by its own --help, run before its subcommands are listed
    yield []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        yield [name]
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from ([name, sub] for sub in command.list_commands(ctx))
loaded, helps = {}, 0
for argv in every_command() if sys.argv[1] == "all" else json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main([*argv, "--help"])
        except SystemExit as exc:
            assert exc.code in (0, None), (argv, exc.code)
    assert "Usage:" in out.getvalue(), argv
    helps += 1
    for module in json.loads(sys.argv[2]):
        if module in sys.modules:
            loaded.setdefault(module, " ".join(["repro", *argv, "--help"]))
print(json.dumps([loaded, helps]))
"""


def heavy_loaded(argvs, *first: str) -> tuple[dict[str, str], int]:
    """({package: the first `repro ... --help` after which it was imported}, how many --help ran)."""
    which = argvs if argvs == "all" else json.dumps(argvs)
    done = subprocess.run([sys.executable, "-c", SCRIPT, which, json.dumps(HEAVY), *first], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]
    loaded, helps = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded, helps


@pytest.mark.parametrize("argv", [[], ["run"]], ids=["repro", "repro run"])
def test_help_imports_no_heavy_package(argv):
    assert heavy_loaded([argv]) == ({}, 1)


def test_every_command_help_imports_no_heavy_package():
    loaded, helps = heavy_loaded("all")
    assert loaded == {} and helps > len(COMMANDS) + 1  # the top group, each command, the groups' subcommands


def test_a_heavy_import_at_startup_is_caught():
    """The check itself: tqdm imported before the CLI (as a top-level import of repro/cli.py would) is reported."""
    assert heavy_loaded([[]], "tqdm") == ({"tqdm": "repro --help"}, 1)
