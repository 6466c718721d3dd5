"""Where a group's rows meet in verl's default trainer: a named Ray actor holding each tree until it is credited.

verl's ``RayPPOTrainer`` runs one agent loop per sample and calls a registered advantage estimator with
the batch's token rewards, response mask and ``uid`` only: neither a loop nor the estimator sees the
other rows of its group. :class:`GroupHub`, one named actor per Ray job (:func:`hub`), is the place
they share. Each sample of a group (``rollout.n=1``: every sample its own ``uid``; the group named by
``extra_info["group"]``) joins the group's open tree (:meth:`GroupHub.join`, a slot per leaf); the
first to join grows the tree and posts one leaf per slot (:meth:`GroupHub.post`), each slot's sample
takes its leaf (:meth:`GroupHub.leaf`), and the estimator takes the trees of its batch's ``uid``\\ s
(:meth:`GroupHub.take`): every node of each tree and, per ``uid``, the nodes its row holds and where.
So the estimator knows each row by its ``uid`` whatever order verl's balancing left the rows in.

The actor is asynchronous (``async def`` methods): a sample waiting for its leaf does not hold the
actor up. Nothing here imports verl.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Sequence
from uuid import uuid4

__all__ = ["HUB_NAME", "GroupHub", "hub", "taken_trees"]

#: The hub's name among the Ray job's named actors.
HUB_NAME = "ptgpo_group_hub"


@dataclass
class _Tree:
    """One tree being grown: its group's key and spec, the ``uid`` of each slot's sample, its leaves."""

    group: str
    spec: str
    size: int
    uids: list[str] = field(default_factory=list)
    posted: asyncio.Event = field(default_factory=asyncio.Event)
    leaves: list[dict[str, Any]] | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class GroupHub:
    """The trees of the groups being played and credited (a Ray actor: see the module docstring)."""

    def __init__(self) -> None:
        self.trees: dict[str, _Tree] = {}
        self.open: dict[str, str] = {}  # group key -> the tree whose slots are being handed out
        self.by_uid: dict[str, tuple[str, int]] = {}  # a sample's uid -> (tree, slot)

    async def join(self, group: str, uid: str, spec: str, size: int) -> tuple[str, int]:
        """A slot in ``group``'s open tree for the sample ``uid`` (a new tree when none is open or its
        ``size`` slots are taken): ``(tree id, slot)``; slot 0 grows the tree. ``spec`` (the episode
        and the tree's settings, as text) must be the open tree's."""
        if uid in self.by_uid:
            raise ValueError(f"uid {uid}: this sample already joined a tree; verl gives every sample its own uid "
                             "with actor_rollout_ref.rollout.n=1")
        tree_id = self.open.get(group)
        if tree_id is not None and self.trees[tree_id].spec != spec:
            raise ValueError(f"extra_info: the rows of group {group!r} name different episodes or trees; every row "
                             f"of a group names the same env_id, seed, env_kwargs and tree ({self.trees[tree_id].spec} "
                             f"vs {spec})")
        if tree_id is None:
            tree_id = uuid4().hex
            self.trees[tree_id] = _Tree(group, spec, size)
            self.open[group] = tree_id
        tree = self.trees[tree_id]
        tree.uids.append(uid)
        if len(tree.uids) == tree.size:
            del self.open[group]
        self.by_uid[uid] = (tree_id, len(tree.uids) - 1)
        return tree_id, len(tree.uids) - 1

    async def post(self, tree_id: str, leaves: list[dict[str, Any]] | None, nodes: list[dict[str, Any]],
                   error: str | None = None) -> None:
        """The grown tree: one leaf row per slot (fewer when the budget stopped leaves unfinished), every
        node's fields; or the ``error`` that stopped the grower, for the waiting samples to raise."""
        tree = self.trees[tree_id]
        tree.leaves, tree.nodes, tree.error = leaves, nodes, error
        tree.posted.set()

    async def leaf(self, tree_id: str, slot: int, timeout_s: float) -> dict[str, Any] | None:
        """Slot ``slot``'s leaf row once the tree is posted (None: the tree has fewer finished leaves)."""
        tree = self.trees[tree_id]
        try:
            await asyncio.wait_for(tree.posted.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"group {tree.group!r}: its tree was not grown within {timeout_s:.0f} s") from None
        if tree.error is not None:
            raise RuntimeError(f"group {tree.group!r}: growing its tree failed: {tree.error}")
        assert tree.leaves is not None
        return tree.leaves[slot] if slot < len(tree.leaves) else None

    async def take(self, uids: Sequence[str]) -> dict[str, Any]:
        """The trees of the samples ``uids`` (verl's batch), removed from the hub: ``{"trees": {tree id:
        every node's fields}, "rows": {uid: the decisions of its leaf row (``steps``: spans and nodes)},
        "incomplete": [group keys whose tree has a sample outside uids or is not grown]}``. A ``uid``
        the hub does not know is left out of ``rows``."""
        places = {uid: self.by_uid[uid] for uid in uids if uid in self.by_uid}
        wanted = set(uids)
        trees, incomplete, rows = {}, [], {}
        for uid, (tree_id, slot) in places.items():
            leaves = self.trees[tree_id].leaves or []
            rows[uid] = leaves[slot]["steps"] if slot < len(leaves) else []
        for tree_id in {tree_id for tree_id, _ in places.values()}:
            tree = self.trees[tree_id]
            if not tree.posted.is_set() or tree.error is not None or not set(tree.uids) <= wanted \
                    or len(tree.uids) < tree.size:
                incomplete.append(tree.group)
            trees[tree_id] = tree.nodes
        for tree_id in trees:
            tree = self.trees.pop(tree_id)
            for uid in tree.uids:
                self.by_uid.pop(uid, None)
            if self.open.get(tree.group) == tree_id:
                del self.open[tree.group]
        return {"trees": trees, "rows": rows, "incomplete": sorted(incomplete)}

    async def pending(self) -> int:
        """How many trees the hub holds (grown and not yet credited, or being grown)."""
        return len(self.trees)


def hub(create: bool = True) -> Any:
    """The Ray job's :class:`GroupHub` (created on first use when ``create``), or None when Ray is not
    running or, with ``create`` false, no sample has joined a group yet."""
    import ray

    if not ray.is_initialized():
        return None
    if not create:
        try:
            return ray.get_actor(HUB_NAME)
        except ValueError:
            return None
    global _held
    if _held is None or _held[0] != ray.get_runtime_context().get_job_id():
        # No CPU of its own: it only holds small records, and verl's placement counts every CPU.
        actor = ray.remote(num_cpus=0)(GroupHub).options(name=HUB_NAME, get_if_exists=True).remote()
        _held = (ray.get_runtime_context().get_job_id(), actor)
    return _held[1]


#: This process's handle on the hub, with the Ray job it belongs to: Ray ends a named actor once no
#: handle on it is left, so the process that creates the hub keeps one for the job's life.
_held: tuple[str, Any] | None = None


def taken_trees(uids: Sequence[str]) -> dict[str, Any] | None:
    """:meth:`GroupHub.take` for ``uids`` from the job's hub, or None when no hub holds any of them."""
    import ray

    actor = hub(create=False)
    if actor is None:
        return None
    taken = ray.get(actor.take.remote([str(uid) for uid in uids]))
    return taken if taken["rows"] else None
