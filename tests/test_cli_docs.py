"""The command line's subcommands and their --help, and the docs against them: every
subcommand and flag that README.md and docs/*.md name exists in the matching --help. The
parsers are built in this process (no subprocess, no Ray)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from ablations.cli.commands import (
    COMMANDS,
    build_parser,
    parse_command,
    parser_of,
    with_own_design_flags,
)
from ablations.cli.flags import help_with_default
from tests.conftest import REPO
from tests.test_cli import assert_one_line_error, in_process

DOCS = [REPO / "README.md", REPO / "results" / "README.md",
        *sorted((REPO / "docs").glob("*.md"))]
DOC_IDS = [str(path.relative_to(REPO)) for path in DOCS]
PROGRAM = re.compile(r"(?:run_ablations\.py|run-ablations)(?=\s|$)")
# where a command line ends inside a snippet: a comment, or the next shell command
COMMAND_END = re.compile(r"\s(?:#|&&|\|\||\||;|>)")
# flags of other programs that the docs mention alone (`--temp-dir`), by program
OTHER_PROGRAMS = {
    "ray start": ("--head", "--port", "--temp-dir", "--dashboard-host", "--block"),
    "ray get-auth-token": ("--generate",),
    "ray job submit": ("--working-dir",),
    "timeout": ("--foreground",),
}
RUN_GROUPS = ("what to run", "seeds and decisions", "configuration", "resources and cluster",
              "output and tracking", "resume")


def options_of(command: str, tokens: list[str] = ()) -> set[str]:
    """The flags of ``command``; of ``run``, with those of the design of one's own that the
    command line ``tokens`` names with ``--design``."""
    parser = parser_of(command)
    if command == "run":
        with_own_design_flags(parser, tokens)
    return {option for action in parser._actions for option in action.option_strings}


def snippets(path: Path) -> list[str]:
    """The code in a Markdown file: each line of its fenced blocks (a line ending in ``\\``
    joined with the next) and each inline code span (its line breaks as spaces)."""
    text = path.read_text()
    found = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
        found += block.replace("\\\n", " ").splitlines()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
    return found


def command_lines(path: Path) -> list[list[str]]:
    """The tokens after ``run_ablations.py`` (or ``run-ablations``) in each of the file's
    snippets, up to a comment or the next shell command, split as a shell splits them (a
    quoted ``--command`` line is one token)."""
    lines = []
    for snippet in snippets(path):
        for match in PROGRAM.finditer(snippet):
            rest = snippet[match.end():]
            end = COMMAND_END.search(rest)
            lines.append(shlex.split(rest[:end.start()] if end else rest))
    return lines


def flags_in(tokens: list[str]) -> list[str]:
    """The ``--flags`` among a command line's tokens (``--set=x`` as ``--set``)."""
    return [re.match(r"--[a-z][a-z0-9-]*", token).group(0) for token in tokens
            if re.match(r"--[a-z]", token)]


def test_the_docs_hold_command_lines():  # the scan below finds what it checks
    found = [tokens for path in DOCS for tokens in command_lines(path)]
    assert len(found) > 40
    assert ["report", "ablation_results/<experiment>"] in found
    assert any(tokens[:1] == ["compare"] for tokens in found)


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_every_command_line_in_the_docs_names_a_subcommand_and_its_flags(path):
    name = path.relative_to(REPO)
    for tokens in command_lines(path):
        if tokens and tokens[0].isupper():  # a placeholder: `run_ablations.py COMMAND --help`
            continue
        command = "run"
        if tokens and not tokens[0].startswith("-") and tokens[0] != "...":
            command = tokens[0]
            assert command in COMMANDS, (f"{name}: run_ablations.py {' '.join(tokens)}: no "
                                         f"subcommand {command!r} (--help lists them)")
        unknown = set(flags_in(tokens)) - options_of(command, tokens)
        assert not unknown, (f"{name}: run_ablations.py {' '.join(tokens)}: "
                             f"`run_ablations.py {command} --help` has no {sorted(unknown)}")


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_every_flag_the_docs_mention_exists(path):
    """A code span that starts with a flag (`--seeds auto`, `--resume`) names a flag of a
    subcommand, of a script in this repository (benchmarks/, tools/, examples/) or of a
    program in OTHER_PROGRAMS."""
    ours = set().union(*(options_of(command) for command in COMMANDS))
    scripts = "\n".join(script.read_text() for folder in ("benchmarks", "tools", "examples")
                        for script in (REPO / folder).glob("*.py"))
    others = {flag for flags in OTHER_PROGRAMS.values() for flag in flags}
    for snippet in snippets(path):
        if not snippet.startswith("--"):
            continue
        flag = flags_in(snippet.split())[0]
        known = flag in ours or flag in others or f'"{flag}"' in scripts
        assert known, (f"{path.relative_to(REPO)}: `{snippet}`: no subcommand has {flag} "
                       "(run_ablations.py COMMAND --help), nor a script of the repository")


def test_the_top_level_help_lists_every_subcommand(capsys):
    code, out, _ = in_process(capsys, "--help")
    assert code == 0
    listed = re.findall(r"^    (\w+) +(\S.*)$", out, flags=re.M)
    assert [name for name, _ in listed] == ["run", "report", "compare", "list", "diagnose"]
    assert "default" in dict(listed)["run"]
    assert build_parser().format_help() == out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_subcommand_has_its_own_help(capsys, command):
    code, out, _ = in_process(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: run_ablations.py {command} [-h]")
    assert COMMANDS[command].description.split()[0] in out
    assert out == parser_of(command).format_help()


def test_run_is_the_default_subcommand():
    assert parse_command([]) == ("run", parser_of("run").parse_args([]))
    command, args = parse_command(["--space", "features", "--seeds", "2"])
    assert command == "run" and args.space == "features" and args.seeds == [0, 1]
    assert parse_command(["run", "--space", "features", "--seeds", "2"]) == (command, args)
    assert parse_command(["report", "x"])[0] == "report"


def test_a_flag_after_no_subcommand_is_run_s_and_its_help_is_run_s(capsys):
    code, out, _ = in_process(capsys, "--space", "features", "--help")
    assert code == 0 and out.startswith("usage: run_ablations.py run [-h]")


def test_an_unknown_subcommand_is_one_line(capsys):
    code, _, err = in_process(capsys, "reprot", "x")
    assert_one_line_error(code, err, "unknown command 'reprot'; choose one of run, report")


def test_a_bad_flag_names_the_subcommand_s_help(capsys):
    code, _, err = in_process(capsys, "--bogus")
    assert_one_line_error(code, err, "unrecognized arguments: --bogus")
    assert err.startswith("run_ablations.py: error:")  # as run's other errors
    assert "(see run_ablations.py run --help)" in err
    code, _, err = in_process(capsys, "compare", "a")
    assert_one_line_error(code, err, "run_ablations.py compare: error: the following "
                                     "arguments are required: EXP_B")
    assert "(see run_ablations.py compare --help)" in err


def test_run_s_flags_are_grouped():
    parser = parser_of("run")
    groups = {group.title: group for group in parser._action_groups}
    assert [title for title in groups if title in RUN_GROUPS] == list(RUN_GROUPS)
    grouped = {action.dest for title in RUN_GROUPS for action in groups[title]._group_actions}
    ungrouped = [action.option_strings for action in parser._actions
                 if action.dest not in grouped and action.dest != "help"]
    assert not ungrouped


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_that_takes_a_value_shows_its_default(command):
    for action in parser_of(command)._actions:
        if action.option_strings and action.nargs != 0:
            assert "default" in help_with_default(action), action.option_strings


def test_a_default_the_help_does_not_say_is_added():
    assert "--alpha ALPHA         family-wise error rate of the verdicts (default: 0.05)" \
        in parser_of("run").format_help()


def test_compare_s_help_says_what_a_percentage_margin_is_of():
    (margin,) = [action for action in parser_of("compare")._actions
                 if "--margin" in action.option_strings]
    assert "each variant's own mean in A" in " ".join(margin.help.split())


def test_the_run_flags_keep_their_dest_names():
    """The run's flags are read by dest (ablations/cli/requests.py, the run's options)."""
    from ablations.cli.requests import request_from

    args = parser_of("run").parse_args(["--set", "lr=0.1", "--no-dashboard"])
    assert isinstance(args, argparse.Namespace)
    assert args.overrides == [("lr", "0.1")] and args.dashboard is False
    # a field of the library's Request is in the namespace only where the command gave it
    assert not hasattr(args, "space") and request_from(args).given == {"overrides"}
    for dest in ("space", "seeds", "cross_seeds", "design", "log_to", "cpus_per_trial",
                 "retry_failed", "allow_changed", "dry_run", "resume", "storage", "name"):
        assert hasattr(args, dest), dest  # request_from filled in the rest


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"],
                                  ["--alpha", "2"], ["--seeds", "0,0"], ["list"]],
                         ids=["help", "run-help", "report-help", "bad-alpha", "bad-seeds",
                              "list"])
def test_help_a_bad_flag_and_list_load_no_torch_pandas_scipy_or_ray(argv):
    """The command line parses before it loads what a run needs (docs/benchmarks.md measures
    the time): sys.modules after ``main`` has answered."""
    import subprocess
    import sys

    code = ("import sys\nfrom ablations.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas', 'scipy', 'ray', 'matplotlib') "
            "if m in sys.modules), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         cwd=REPO)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr
