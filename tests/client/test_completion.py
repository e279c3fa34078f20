"""Shell completion of the installed ``factory`` command: what bash's completion script and
zsh's function offer for a word, run in the real shells (ADR 0015 keeps these processes)."""

import os
import shutil
import subprocess

import pytest

from tests.client.test_cli import FACTORY, factory_alone

COMPLETIONS = [
    (["factory", "cl"], ["claim"]),
    (["factory", "--json", "re"], ["release", "review"]),
    (["factory", "--url", "http://127.0.0.1:8000", "ta"], ["tasks"]),
    (["factory", "tasks", "--json", "--"], ["--help", "--json", "--project", "--state", "--label"]),
    (["factory", "release", "7", "--bl"], ["--blocked"]),
    (["factory", "review", "FM-1", ""], ["approve", "reject"]),
    (["factory", "completion", ""], ["bash", "zsh"]),
]

BASH_COMPLETE = """
source "$COMPLETION"
complete -p factory
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
_factory
printf '%s\\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="module")
def bash_completion(tmp_path_factory):
    """What the installed ``factory completion bash`` prints, once for the module."""
    run = subprocess.run(
        [FACTORY, "completion", "bash"], capture_output=True, text=True, timeout=60, check=True
    )
    path = tmp_path_factory.mktemp("completion") / "factory.bash"
    path.write_text(run.stdout)
    return path


@pytest.mark.parametrize(("words", "expected"), COMPLETIONS)
def test_bash_completes_subcommands_options_and_choices(bash_completion, words, expected):
    env = {**os.environ, "COMPLETION": str(bash_completion)}

    run = subprocess.run(
        ["bash", "-c", BASH_COMPLETE, "bash", *words],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.splitlines() == ["complete -o default -F _factory factory", *expected]


# zsh's compadd works only inside a completion widget: here it prints the candidates that
# match the word being completed ($PREFIX), as the real one would offer them.
ZSH_COMPLETE = """
fpath=("$1" $fpath); shift
autoload -Uz _factory
compadd() {
    while (( $# )) && [[ $1 != -- ]]; do shift; done; shift
    local match; for match in "$@"; do [[ $match == ${PREFIX}* ]] && print -r -- $match; done
    return 0
}
_files() { print -r -- '(files)' }
words=("$@"); CURRENT=$#; PREFIX=${words[CURRENT]}
_factory
"""

needs_zsh = pytest.mark.skipif(
    shutil.which("zsh") is None, reason="zsh is not installed (`make shells` installs it)"
)


@needs_zsh
@pytest.mark.parametrize(
    ("words", "expected"), [*COMPLETIONS, (["factory", "evidence", "7", ""], ["(files)"])]
)
def test_zsh_completes_subcommands_options_and_choices(tmp_path, words, expected):
    (tmp_path / "_factory").write_text(factory_alone("completion", "zsh").stdout)

    run = subprocess.run(
        ["zsh", "-f", "-c", ZSH_COMPLETE, "zsh", str(tmp_path), *words],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.splitlines() == expected


@needs_zsh
def test_zsh_completion_sourced_after_compinit_registers_itself():
    script = 'autoload -Uz compinit && compinit -u -D; source <("$FACTORY" completion zsh)\n'
    script += "print -r -- $_comps[factory]"

    run = subprocess.run(
        ["zsh", "-f", "-c", script],
        env={**os.environ, "FACTORY": FACTORY},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (run.returncode, run.stdout, run.stderr) == (0, "_factory\n", "")
