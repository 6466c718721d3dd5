"""YAML as every reader of the suite loads it: :func:`load_yaml`, PyYAML's safe loader made strict and bounded.

``yaml.safe_load`` runs no code, but it still accepts three inputs that hurt a config reader:

* **Duplicate keys** (``seed: 0`` … ``seed: 7``): the last one silently wins, so a run is not the one
  its file seems to describe. The YAML spec forbids them; they are refused, naming both lines.
* **Alias bombs** (``a: &a [x, x]``, ``b: &b [*a, *a]``, …): a few lines expand to billions of values
  once a reader walks them (deep copies, JSON, comparisons). At most :data:`MAX_ALIASES` aliases and
  :data:`MAX_VALUES` values once expanded are accepted; no config comes near either.
* **Deep nesting** (``[[[[…]]]]`` 100,000 levels): the composer recurses once per level and dies
  with ``RecursionError``. Nesting is refused beyond :data:`MAX_DEPTH` levels.

Every refusal is a ``yaml.MarkedYAMLError`` (a ``yaml.YAMLError``) with the line and column, so a
caller's ``except yaml.YAMLError`` turns it into its usual "not valid YAML" message.

Layering: this module imports nothing of the suite (the leaderboard reads its YAML with it too).
"""

from __future__ import annotations

from typing import IO, Any

import yaml

__all__ = ["MAX_ALIASES", "MAX_DEPTH", "MAX_VALUES", "load_yaml"]

#: Nesting levels of mappings and sequences (a benchmark config uses about 6).
MAX_DEPTH = 100
#: Aliases (``*name``) in one document.
MAX_ALIASES = 1000
#: Values (mappings, sequences, scalars) in one document with every alias expanded.
MAX_VALUES = 1_000_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys, too many aliases and too deep nesting while it composes."""

    def __init__(self, stream: str | bytes | IO) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(problem=f"more than {MAX_ALIASES} aliases (an alias bomb?); write the values out",
                               problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(problem=f"nested more than {MAX_DEPTH} levels deep",
                               problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], Any] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue
            seen = first.setdefault((key.tag, key.value), key)
            if seen is not key:
                raise _Refused("in a mapping", seen.start_mark,
                               f"duplicate key {key.value!r}: the later value would silently replace the first; "
                               "keep one", key.start_mark)
        return node


def _expanded_size(node: Any, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Values in ``node`` with aliases expanded (shared nodes are counted once per use, sized once)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise _Refused(problem="an alias refers to the value that contains it", problem_mark=node.start_mark)
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    else:
        children = []
    size = 1
    for child in children:
        size += _expanded_size(child, sizes, open_nodes)
        if size > MAX_VALUES:
            raise _Refused(problem=f"expands to more than {MAX_VALUES} values through its aliases (an alias bomb?)",
                           problem_mark=node.start_mark)
    open_nodes.discard(key)
    sizes[key] = size
    return size


def load_yaml(stream: str | bytes | IO, name: str | None = None) -> Any:
    """The single YAML document in ``stream``, as ``yaml.safe_load`` reads it, with duplicate keys,
    alias bombs and deep nesting refused (``yaml.YAMLError`` with the line; see the module docstring).
    ``name`` is what the error's position names (default: the stream's file name, if any)."""
    loader = _StrictLoader(stream)
    if name is not None:
        loader.name = name
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            _expanded_size(node, {}, set())
        except RecursionError:  # aliases of aliases, each nested within the limit
            raise _Refused(problem=f"nested more than {MAX_DEPTH} levels deep once its aliases are expanded",
                           problem_mark=node.start_mark) from None
        return loader.construct_document(node)
    finally:
        loader.dispose()
