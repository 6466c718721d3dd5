"""Token sequences that share prefixes, packed so that each shared prefix is computed once.

The rows an update scores share much of their text: a prefix tree's siblings have the same context,
a context's candidate actions the same prompt, and every prompt of a group the system text, the task
and often the history. :func:`pack_prefix_tree` puts a batch's sequences into a token trie, laid out
in pre-order in packed rows: every distinct prefix is one run of tokens, and a sequence is the path
from a root to one of the trie's nodes. Each token attends to its ancestors in the trie and to
itself (:attr:`PackedRow.parents` gives the tree; :func:`attention_mask` the mask), and sits at the
position it has in its sequences, so the causal model computes at each node exactly the hidden state
that every sequence through it would get alone. Gradients flow back through a shared node once, with
the sum of what its sequences send, which is what computing the sequences separately adds up to.

A packed row attends over all of its tokens with a dense mask, so its cost grows with its length
squared; sequences are sorted (which puts those with long common prefixes side by side) and cut into
rows of at most ``max_tokens`` distinct tokens. A prefix shared across two rows is computed in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

__all__ = ["PackedPrefixes", "PackedRow", "attention_mask", "pack_prefix_tree"]


@dataclass
class PackedRow:
    """One packed row: its distinct tokens in pre-order, each one's parent column (-1: a root) and its
    position (depth in the trie)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    #: ``(parent column, token) -> column``: the trie's edges.
    children: dict[tuple[int, int], int] = field(default_factory=dict)

    def insert(self, sequence: Sequence[int]) -> list[int]:
        """Add ``sequence``'s path (the nodes it lacks) and return the column of each of its tokens."""
        columns, parent = [], -1
        for depth, token in enumerate(sequence):
            column = self.children.get((parent, token))
            if column is None:
                column = self.children[(parent, token)] = len(self.tokens)
                self.tokens.append(int(token))
                self.parents.append(parent)
                self.positions.append(depth)
            columns.append(column)
            parent = column
        return columns


@dataclass
class PackedPrefixes:
    """Sequences packed into rows (:func:`pack_prefix_tree`): sequence ``i``'s tokens sit in row
    ``rows[i]`` at columns ``columns[i]``."""

    packed: list[PackedRow]
    rows: list[int]
    columns: list[list[int]]

    @property
    def computed_tokens(self) -> int:
        """The tokens a forward pass over the packed rows computes (padding aside)."""
        return sum(len(row.tokens) for row in self.packed)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def pack_prefix_tree(sequences: Sequence[Sequence[int]], max_tokens: int) -> PackedPrefixes:
    """``sequences`` in a token trie, cut into rows of at most ``max_tokens`` distinct tokens (a
    sequence longer than that gets a row of its own). Identical sequences share every node."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    packed: list[PackedRow] = []
    rows = [0] * len(sequences)
    columns: list[list[int]] = [[] for _ in sequences]
    previous: Sequence[int] = ()
    for i in order:
        sequence = sequences[i]
        # Sorted order: the nodes this sequence adds are those past its common prefix with the last one.
        new = len(sequence) - _common_prefix(previous, sequence)
        if not packed or (packed[-1].tokens and len(packed[-1].tokens) + new > max_tokens):
            packed.append(PackedRow())
        rows[i] = len(packed) - 1
        columns[i] = packed[-1].insert(sequence)
        previous = sequence
    return PackedPrefixes(packed, rows, columns)


def attention_mask(packed: Sequence[PackedRow], width: int) -> torch.Tensor:
    """``(rows, 1, width, width)`` booleans: a token sees its ancestors and itself; a padding column
    sees itself only (a query with nothing to attend to would give NaNs).

    Sequences enter a row in sorted order, so its columns are the trie in pre-order: a node's subtree
    is the columns from it up to ``end``, and ``b`` is an ancestor of ``a`` (or ``a`` itself) exactly
    when ``b <= a < end[b]``."""
    end = torch.arange(1, width + 1).repeat(len(packed), 1)
    for r, row in enumerate(packed):
        size = [1] * len(row.tokens)
        for column in range(len(row.tokens) - 1, 0, -1):
            if row.parents[column] >= 0:
                size[row.parents[column]] += size[column]
        end[r, : len(size)] = torch.arange(len(size)) + torch.tensor(size, dtype=torch.long)
    index = torch.arange(width)
    return ((index[None, None, :] <= index[None, :, None]) & (index[None, :, None] < end[:, None, :]))[:, None]
