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
    """The length of the longest common prefix of ``a`` and ``b`` (lists: compared by slices, in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # a[:low] == b[:low] holds; find the largest such low
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def pack_prefix_tree(sequences: Sequence[Sequence[int]], max_tokens: int) -> PackedPrefixes:
    """``sequences`` in a token trie, cut into rows of at most ``max_tokens`` distinct tokens (a
    sequence longer than that gets a row of its own). Identical sequences share every node."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    lists = [list(map(int, sequence)) for sequence in sequences]
    order = sorted(range(len(lists)), key=lists.__getitem__)
    packed: list[PackedRow] = []
    rows = [0] * len(lists)
    columns: list[list[int]] = [[] for _ in lists]
    previous: list[int] = []
    path: list[int] = []  # the previous sequence's columns
    for i in order:
        sequence = lists[i]
        # In sorted order a sequence shares with the trie exactly its common prefix with the last one
        # (an earlier sequence through the same parent holds a smaller token there), so its remaining
        # tokens are new nodes, each the child of the one before.
        shared = _common_prefix(previous, sequence)
        if not packed or (packed[-1].tokens and len(packed[-1].tokens) + len(sequence) - shared > max_tokens):
            packed.append(PackedRow())
            shared, path = 0, []
        row = packed[-1]
        first = len(row.tokens)
        new = len(sequence) - shared
        row.tokens += sequence[shared:]
        row.parents += [path[shared - 1] if shared else -1] + list(range(first, first + new - 1)) if new else []
        row.positions += range(shared, len(sequence))
        path = path[:shared] + list(range(first, first + new))
        rows[i] = len(packed) - 1
        columns[i] = path
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
