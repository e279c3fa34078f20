"""Shell completion for ``factory``: bash and zsh scripts written from its argparse parser.

The scripts are static text: they list the subcommands, each one's options and the
choices of its arguments as the parser has them when the script is printed, and run
no Python while completing. Arguments without choices fall back to file names.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field


@dataclass
class Command:
    """What completion needs to know of one parser: its options and its arguments."""

    name: str
    help: str = ""
    options: list[str] = field(default_factory=list)
    # Options followed by a value, and the choices of those that have some.
    takes_value: list[str] = field(default_factory=list)
    value_choices: dict[str, list[str]] = field(default_factory=dict)
    # One entry per positional argument: its choices, or [] when it takes anything.
    positionals: list[list[str]] = field(default_factory=list)


def _describe(name: str, parser: argparse.ArgumentParser, help: str = "") -> Command:
    command = Command(name, help or "")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        choices = [str(choice) for choice in action.choices or ()]
        if not action.option_strings:
            command.positionals.append(choices)
            continue
        command.options.extend(action.option_strings)
        if action.nargs != 0:
            command.takes_value.extend(action.option_strings)
            if choices:
                command.value_choices.update(dict.fromkeys(action.option_strings, choices))
    return command


def walk(parser: argparse.ArgumentParser) -> tuple[Command, list[Command]]:
    """The top-level parser and its subcommands, in the order they were added."""
    top = _describe(parser.prog, parser)
    subcommands = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                subcommands.append(_describe(name, subparser, helps.get(name) or ""))
    return top, subcommands


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    return {"bash": bash, "zsh": zsh}[shell](parser)


def _words(values) -> str:
    return " ".join(values)


def _quoted(value: str) -> str:
    return shlex.quote(value) if value else "''"


def bash(parser: argparse.ArgumentParser) -> str:
    """A script for ``source <(factory completion bash)``: ``complete -F _factory factory``."""
    top, subcommands = walk(parser)
    prog = top.name
    lines = [
        f"# bash completion for {prog}, written by `{prog} completion bash`.",
        f"# Load it with: source <({prog} completion bash)",
        f"_{prog}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" word cmd="" opts="" valopts=""',
        "    local -i i start=0 n=0 skip=0",
        "    local -a positionals=()",
        '    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    COMPREPLY=()",
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        '        word="${COMP_WORDS[i]}"',
        "        if (( skip )); then skip=0; continue; fi",
        '        case "$word" in',
    ]
    if top.takes_value:
        lines.append(f"            {'|'.join(top.takes_value)}) skip=1 ;;")
    lines += [
        "            -*) ;;",
        '            *) cmd="$word"; start=i; break ;;',
        "        esac",
        "    done",
        '    if [[ -z "$cmd" ]]; then',
    ]
    if top.takes_value:
        lines.append(f'        case "$prev" in {"|".join(top.takes_value)}) return 0 ;; esac')
    lines += [
        '        if [[ "$cur" == -* ]]; then',
        f'            COMPREPLY=( $(compgen -W "{_words(top.options)}" -- "$cur") )',
        "        else",
        f'            COMPREPLY=( $(compgen -W "{_words(c.name for c in subcommands)}" -- "$cur") )',
        "        fi",
        "        return 0",
        "    fi",
        '    case "$cmd" in',
    ]
    for command in subcommands:
        positionals = " ".join(_quoted(" ".join(p)) for p in command.positionals)
        lines += [
            f"        {command.name})",
            f'            opts="{_words(command.options)}"',
            f'            valopts="{_words(command.takes_value)}"',
            f"            positionals=({positionals})",
        ]
        for option, choices in command.value_choices.items():
            lines.append(
                f'            [[ "$prev" == {option} ]] && '
                f'{{ COMPREPLY=( $(compgen -W "{_words(choices)}" -- "$cur") ); return 0; }}'
            )
        lines.append("            ;;")
    lines += [
        "        *) return 0 ;;",
        "    esac",
        "    # The value of an option without choices: left to the shell (file names).",
        '    [[ -n "$prev" && " $valopts " == *" $prev "* ]] && return 0',
        "    skip=0",
        "    for (( i = start + 1; i < COMP_CWORD; i++ )); do",
        '        word="${COMP_WORDS[i]}"',
        "        if (( skip )); then skip=0; continue; fi",
        '        if [[ " $valopts " == *" $word "* ]]; then skip=1; continue; fi',
        '        [[ "$word" == -* ]] || n=n+1',
        "    done",
        '    if [[ "$cur" == -* ]] || (( n >= ${#positionals[@]} )); then',
        '        COMPREPLY=( $(compgen -W "$opts" -- "$cur") )',
        "    else",
        '        COMPREPLY=( $(compgen -W "${positionals[n]}" -- "$cur") )',
        "    fi",
        "}",
        f"complete -o default -F _{prog} {prog}",
        "",
    ]
    return "\n".join(lines)


def zsh(parser: argparse.ArgumentParser) -> str:
    """A script for zsh's ``fpath`` (as ``_factory``), or to source after ``compinit``."""
    top, subcommands = walk(parser)
    prog = top.name
    width = max(len(c.name) for c in subcommands)
    descriptions = " ".join(
        _quoted(f"{c.name:<{width}}  -- {c.help}" if c.help else c.name) for c in subcommands
    )
    lines = [
        f"#compdef {prog}",
        f"# zsh completion for {prog}, written by `{prog} completion zsh`.",
        f"# Install it as _{prog} in a directory of $fpath, or source it after compinit.",
        f"_{prog}() {{",
        "    local -a commands descriptions opts valopts positionals",
        '    local cmd="" word cur="${words[CURRENT]}" prev="${words[CURRENT-1]}"',
        "    integer i start=0 n=0 skip=0",
        f"    commands=({_words(c.name for c in subcommands)})",
        f"    descriptions=({descriptions})",
        "    for (( i = 2; i < CURRENT; i++ )); do",
        '        word="${words[i]}"',
        "        if (( skip )); then skip=0; continue; fi",
        '        case "$word" in',
    ]
    if top.takes_value:
        lines.append(f"            ({'|'.join(top.takes_value)}) skip=1 ;;")
    lines += [
        "            (-*) ;;",
        '            (*) cmd="$word"; start=i; break ;;',
        "        esac",
        "    done",
        '    if [[ -z "$cmd" ]]; then',
    ]
    if top.takes_value:
        lines.append(f'        case "$prev" in ({"|".join(top.takes_value)}) return 1 ;; esac')
    lines += [
        '        if [[ "$cur" == -* ]]; then',
        f"            compadd -- {_words(top.options)}",
        "        else",
        "            compadd -l -d descriptions -- $commands",
        "        fi",
        "        return",
        "    fi",
        '    case "$cmd" in',
    ]
    for command in subcommands:
        positionals = " ".join(_quoted(" ".join(p)) for p in command.positionals)
        lines += [
            f"        ({command.name})",
            f"            opts=({_words(command.options)})",
            f"            valopts=({_words(command.takes_value)})",
            f"            positionals=({positionals})",
        ]
        for option, choices in command.value_choices.items():
            lines.append(
                f'            [[ "$prev" == {option} ]] && {{ compadd -- {_words(choices)}; return; }}'
            )
        lines.append("            ;;")
    lines += [
        "        (*) return 1 ;;",
        "    esac",
        "    # The value of an option without choices: file names.",
        '    if [[ -n "$prev" ]] && (( ${valopts[(Ie)$prev]} )); then _files; return; fi',
        "    skip=0",
        "    for (( i = start + 1; i < CURRENT; i++ )); do",
        '        word="${words[i]}"',
        "        if (( skip )); then skip=0; continue; fi",
        "        if (( ${valopts[(Ie)$word]} )); then skip=1; continue; fi",
        '        [[ "$word" == -* ]] || n+=1',
        "    done",
        '    if [[ "$cur" == -* ]] || (( n >= ${#positionals} )); then',
        "        compadd -- $opts",
        '    elif [[ -n "${positionals[n+1]}" ]]; then',
        "        compadd -- ${=positionals[n+1]}",
        "    else",
        "        _files",
        "    fi",
        "}",
        f"# Autoloaded from $fpath, this file is the body of _{prog}: complete now.",
        "# Sourced, it registers the function when compinit has been run.",
        f'if [[ "${{funcstack[1]}}" == _{prog} ]]; then',
        f'    _{prog} "$@"',
        "elif (( $+functions[compdef] )); then",
        f"    compdef _{prog} {prog}",
        "fi",
        "",
    ]
    return "\n".join(lines)
