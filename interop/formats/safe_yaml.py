"""The one way an import reads YAML (front matter, metadata files).

What ``load`` guarantees:

- An alias (``*name``) is refused, whoever wrote it: aliases are how a few hundred bytes of
  YAML expand to gigabytes (each level of ``[*a, *a, …]`` multiplies the one below), and no
  front matter a team writes by hand needs one. So is nesting deeper than ``MAX_DEPTH``,
  which would otherwise exhaust the parser's recursion. Both raise ``Refusal`` naming the
  file and the line, and the import is refused whole (400).
- What is read is plain JSON data: mappings, lists, strings, numbers, booleans and null.
  Dates and times stay the text the file wrote (``2024-01-02``), as do ``!!binary`` values;
  a ``!!set`` is a mapping to nulls. So anything read can be stored and exported again.
- Anything else the YAML library cannot build (a malformed document, an integer of more
  digits than Python converts) raises ``yaml.YAMLError``: the caller's "not readable".
"""

from __future__ import annotations

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

from interop.documents import Refusal, Source

MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, without aliases and without deep nesting."""

    path = ""
    first_line = 1

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        where = Source(self.path, self.first_line + event.start_mark.line)
        if isinstance(event, AliasEvent):
            raise Refusal(
                "yaml_alias", where, f"a YAML alias (*{event.anchor}): aliases are not read"
            )
        nests = isinstance(event, MappingStartEvent | SequenceStartEvent)
        if nests:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise Refusal("yaml_too_deep", where, f"YAML nested over {MAX_DEPTH} levels deep")
        try:
            return Composer.compose_node(self, parent, index)
        finally:
            if nests:
                self.depth -= 1

    def construct_as_written(self, node):
        return self.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_as_written)
_Loader.add_constructor("tag:yaml.org,2002:binary", _Loader.construct_as_written)
_Loader.add_constructor("tag:yaml.org,2002:set", yaml.SafeLoader.construct_yaml_map)


def load(text: str, *, path: str, first_line: int = 1) -> object:
    """The one YAML document in ``text``, read from ``path`` where ``text`` starts at
    ``first_line`` (1-based), as JSON data; ``Refusal`` or ``yaml.YAMLError`` otherwise."""
    loader = _Loader(text)
    loader.path, loader.first_line = path, first_line
    try:
        return loader.get_single_data()
    except (ValueError, TypeError, OverflowError, RecursionError) as error:
        # What the constructors let escape on values they cannot build (int("1" * 5000)).
        raise yaml.YAMLError(str(error)) from error
    finally:
        loader.dispose()
