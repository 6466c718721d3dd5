"""A policy trained across ranks: its model sharded with FSDP2 for the update, and on every rank a full
copy that plays the rollouts and evaluations (the transformers backend; a vLLM engine instead:
:mod:`ptgpo_algos.distributed.engine`).

Training runs every computation of the sharded model in lockstep (each forward and backward is a
collective); rollouts do not: a rank's episodes take their own number of steps and tokens. So the
ranks play with a full, unsharded copy of the weights, as verl's rollout engines do, refreshed after
each update from the shards one gathered tensor at a time (:func:`copy_weights`) and checked by the
trainer's weight-sync verification. The copy holds the weights at the compute dtype (bfloat16 on
GPUs), so a rank holds its shards of the float32 masters, gradients and optimiser state plus one
bfloat16 model. :func:`gathered_state` gathers the weights onto one rank (the final model).

:class:`RootRouted` is the root FSDP unit around the model: the policy's scoring
(:meth:`~ptgpo_algos.policy.hf.CausalLMPolicy.score`) calls the decoder and the output layer directly,
so it runs as the root's forward (``policy.root``), which gathers the root unit's parameters
(embeddings, final norm, output layer) for it and reduces their gradients after its backward.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable

import torch
from torch import nn

from ptgpo_algos.records import Decision
from ptgpo_algos.distributed.collectives import all_reduce
from ptgpo_algos.distributed.fsdp import shard_model
from ptgpo_algos.distributed.fsdp_config import FsdpConfig
from ptgpo_algos.distributed.gather import gathered_weights, tied_aliases

__all__ = ["ROOT_PREFIX", "RootRouted", "copy_weights", "gathered_state", "idle_pass", "rollout_copy",
           "shard_policy"]

# FSDP warns that an in-place change of a returned view would skip its backward hook; the scores the
# root returns are read and combined, never changed in place.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(FSDPRootRouted\) returned a view tensor")


#: The prefix of the model's names under its :class:`RootRouted` root, which gathered weights drop.
ROOT_PREFIX = "model."


class RootRouted(nn.Module):
    """The root FSDP unit around ``model``: its forward runs the computation it is given."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, compute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``compute(*args, **kwargs)``, with the root unit's parameters gathered."""
        return compute(*args, **kwargs)


def rollout_copy(policy: Any) -> Any:
    """A full copy of ``policy`` (before it is sharded) that plays on this rank: the same acting
    settings, its own model at the compute dtype, no gradients."""
    clone = copy.copy(policy)
    clone.model = copy.deepcopy(policy.model)
    if policy.autocast_dtype is not None:
        clone.model.to(policy.autocast_dtype)
    for parameter in clone.model.parameters():
        parameter.requires_grad_(False)
    clone.root = None
    clone.agree_passes = None
    return clone


def shard_policy(policy: Any, config: FsdpConfig, device: str) -> RootRouted:
    """Shard ``policy.model`` in place across all ranks (one unit per decoder layer, the rest in a
    :class:`RootRouted` root) and route the policy's scoring through the root; returns the root."""
    root = RootRouted(policy.model)
    shard_model(root, config, device)
    policy.root = root
    policy.agree_passes = _most_passes
    return root


def _most_passes(mine: int) -> int:
    """The most forward passes any rank runs in the scoring call all ranks are in."""
    most, = all_reduce([mine], op="max")
    return int(most)


def copy_weights(target: nn.Module, root: RootRouted) -> dict[str, float]:
    """Copy the sharded model's full weights into ``target`` (a rank's rollout copy of the model),
    one gathered tensor at a time; every rank calls it. Returns the bytes copied."""
    state = target.state_dict()
    copied: set[str] = set()
    with torch.no_grad():
        for name, tensor in gathered_weights(root, prefix=ROOT_PREFIX):
            if name not in state:
                raise KeyError(f"the sharded model's {name!r} has no counterpart in the rollout copy")
            state[name].copy_(tensor)
            copied.add(name)
    missing = set(state) - copied - set(tied_aliases(target))
    if missing:
        raise KeyError(f"the rollout copy's {sorted(missing)[:3]} were not among the sharded model's weights")
    return {"bytes": float(sum(state[name].numel() * state[name].element_size() for name in copied))}


def gathered_state(policy: Any, root: RootRouted, keep: bool) -> dict[str, torch.Tensor]:
    """The sharded ``policy``'s weights by the model's own names, each gathered from the shards (every
    rank takes part), kept on the CPU where ``keep`` (elsewhere: empty, so that one rank alone holds
    them). A LoRA policy's are its adapters; a tied weight is there once, under its first name."""
    adapters = getattr(policy, "has_adapters", False)
    state: dict[str, torch.Tensor] = {}
    for name, tensor in gathered_weights(root, prefix=ROOT_PREFIX, adapters_only=adapters):
        if keep:
            state[name] = tensor.cpu()
    return state


def idle_pass(policy: Any, backward: bool, critic: Any = None) -> None:
    """A forward (and ``backward``) of the sharded policy on one padding token that adds nothing to any
    gradient: a rank with fewer micro-batches than another takes part in FSDP's collectives with it.
    With a ``critic``, its reads of the trunk too (:meth:`~ptgpo_algos.critic.component.Critic.idle_loss`:
    PPO's one, HiPER's two), as each micro-batch of its update makes."""
    pad = policy.pad_id
    decision = Decision(text="", action=None, prompt_ids=[pad], response_ids=[pad], logprobs=[0.0], entropy=0.0,
                        candidate_ids=[[pad]], choice=0, choice_logprob=0.0)
    with torch.set_grad_enabled(backward):
        nothing = policy.score([decision], entropy_grad=False).logprobs.sum() * 0.0
        if critic is not None:
            nothing = nothing + critic.idle_loss(policy)
        if backward:
            nothing.backward()
