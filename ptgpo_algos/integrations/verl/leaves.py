"""PTGPO's prefix tree in verl's default trainer (``RayPPOTrainer``): one sample per leaf, ``ptgpo_tree_leaf``.

verl's default trainer plays one agent loop per sample and trains the one row it returns. Here the
rows of a group are the leaves of one tree, grown once and shared through the job's
:class:`~ptgpo_algos.integrations.verl.hub.GroupHub`: with ``actor_rollout_ref.rollout.n=1`` each
sample is its own ``uid``; the dataset gives a group's ``group_size`` samples one after another, each
with the same ``extra_info`` (the episode as for ``ptgpo_env``, the tree as for ``ptgpo_tree``) and
the group's key in ``extra_info["group"]``. The first sample of a group to start grows the tree with
our own tree rollouts (:class:`~ptgpo_algos.integrations.verl.tree.TreeAgentLoop`'s, each decision a
request to verl's LLM server) and posts one row per leaf; every sample of the group returns its
slot's leaf. A leaf's row is its whole episode as one conversation, as ``ptgpo_env`` makes it (the
model's tokens ``response_mask`` 1, the environment's 0, ``reward_score`` its return): every
decision of the tree is generated from the very tokens that precede it in the row of each leaf
through it, so a prefix that leaves share is the same tokens in each of their rows. A tree of
``initial_rollouts = group_size`` leaves is a linear group of independent episodes.

The registered estimators (:func:`ptgpo_algos.integrations.verl.register_estimators`, ``algorithm.adv_estimator=ptgpo``
and the others) take the batch's trees from the hub by ``uid`` and give each decision in a row the
advantage our trainer gives its step: a node that several leaves share gets the mean of their
advantages in each of their rows, which with verl's token-mean loss weighs it by its number of
leaves as our trainer does (:func:`~ptgpo_algos.updates.samples.flatten_batch`).

A run makes verl's TaskRunner and agent-loop workers (Ray actors) register the estimators and the loops
with Ray's setup hook: ``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=``
``ptgpo_algos.integrations.verl.leaves.register``. Nothing here uses verl's v1 trainer or TransferQueue.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, Sequence
from uuid import uuid4

import numpy as np
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop

from ptgpo_algos.records import Context, Decision, Task
from ptgpo_algos.integrations.verl import register_estimators, verl_estimator
from ptgpo_algos.integrations.verl.agent_loop import (AGENT_NAME, STEPS_AGENT_NAME, EnvAgentLoop, EnvStepsAgentLoop,
                                                      action_of, episode_spec, merge_user_turn, observation_message,
                                                      require_continuous_tokens)
from ptgpo_algos.integrations.verl.hub import hub, taken_trees
from ptgpo_algos.integrations.verl.steps import STEPS_KEY, TRAJECTORY_KEY, DecisionSpan, decision_advantages
from ptgpo_algos.integrations.verl.tree import TREE_AGENT_NAME, ServerPolicy, TreeAgentLoop, tree_nodes, tree_spec
from ptgpo_algos.rollouts.collection import collect_rollouts, sent_action

__all__ = ["GROUP_KEY", "LEAF_AGENT_NAME", "TreeLeafAgentLoop", "leaf_token_advantages", "register",
           "tree_estimator"]

#: The name the leaf loop has in verl's registry.
LEAF_AGENT_NAME = "ptgpo_tree_leaf"
#: ``extra_info`` key of a sample's group.
GROUP_KEY = "group"
#: How long a sample waits for its group's tree to be grown (seconds).
GROW_TIMEOUT_S = 3600.0


@dataclass
class _Prefix:
    """The tokens a decision was generated from, with its own response appended: what each child continues."""

    runtime: list[int]
    mask: list[int]
    messages: list[dict[str, str]]
    text: str
    spans: list[tuple[int, int]] = field(default_factory=list)  # each decision's tokens in the response


class TreeLeafAgentLoop(TreeAgentLoop):
    """One leaf of its group's shared tree per sample; see the module docstring."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Join the sample's group; grow its tree when first; return this sample's leaf as one row."""
        require_continuous_tokens(self)
        extra_info = kwargs.get("extra_info")
        env_id, seed, env_kwargs = episode_spec(extra_info)
        spec = tree_spec(extra_info.get("tree"), sampling_params)
        group, uid = extra_info.get(GROUP_KEY), kwargs.get("uid")
        if not isinstance(group, str) or not group:
            raise ValueError(f"extra_info.{GROUP_KEY}: the {LEAF_AGENT_NAME} loop needs each sample's group key "
                             f"(the same string on the group's {spec.group_size} rows), got {group!r:.80}")
        if uid is None:
            raise ValueError(f"{LEAF_AGENT_NAME}: the sample has no uid; verl's RayPPOTrainer gives every sample one")
        actor = hub()
        described = json.dumps({"env_id": env_id, "seed": seed, "env_kwargs": env_kwargs, "tree": asdict(spec)},
                               sort_keys=True, default=str)
        tree_id, slot = await actor.join.remote(group, str(uid), described, spec.group_size)
        if slot == 0:
            try:
                leaves, nodes = await self._grow(spec, Task(env_id, self._seed(seed), env_kwargs, spec.max_steps),
                                                 tree_id, dict(sampling_params))
            except Exception as error:
                await actor.post.remote(tree_id, None, [], f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
                raise
            await actor.post.remote(tree_id, leaves, nodes)
        leaf = await actor.leaf.remote(tree_id, slot, GROW_TIMEOUT_S)
        if leaf is None:  # the decision budget stopped this slot's leaf: a row that trains nothing
            prompt = await self.ct_build_initial_tokens([{"role": "user", "content": "(no leaf)"}])
            leaf = {"prompt_ids": prompt, "response_ids": [], "response_mask": [], "reward_score": 0.0,
                    "steps": [], "trajectory": f"{tree_id}/unfinished-{slot}"}
        return AgentLoopOutput(
            prompt_ids=leaf["prompt_ids"], response_ids=leaf["response_ids"], response_mask=leaf["response_mask"],
            reward_score=leaf["reward_score"], num_turns=2 * len(leaf["steps"]) + 1, metrics={},
            extra_fields={STEPS_KEY: leaf["steps"], TRAJECTORY_KEY: leaf["trajectory"]})

    @staticmethod
    def _seed(seed: int | None) -> int:
        # Every leaf from reset must be the same task instance: a seed is drawn once for the group.
        return seed if seed is not None else int(np.random.SeedSequence().entropy % 2**31)

    async def _grow(self, spec: Any, task: Task, tree_id: str, sampling_params: dict[str, Any],
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Grow the tree; each finished leaf's row and every node's fields (:func:`tree_nodes`)."""
        self._prefixes: dict[tuple, _Prefix] = {}
        self._made: dict[int, _Prefix] = {}
        loop = asyncio.get_running_loop()
        grow = partial(collect_rollouts, ServerPolicy(self, loop, sampling_params), [task],
                       group_size=spec.group_size, mode="tree", initial_rollouts=spec.initial_rollouts,
                       branch=spec.branch, rng=np.random.default_rng(spec.branch_seed), env_backend=spec.env_backend,
                       env_workers=spec.env_workers, env_options=spec.env_options, max_decisions=spec.max_decisions)
        with ThreadPoolExecutor(max_workers=1) as thread:
            batch, _ = await loop.run_in_executor(thread, grow)
        group = batch[0] if batch else []
        nodes = tree_nodes(group, tree_id)
        node_of = {id(step): fields for step, fields in nodes}
        limit = self.rollout_config.response_length
        leaves = []
        for j, trajectory in enumerate(group):
            last = self._made[id(trajectory.steps[-1].decision)]
            response = last.runtime[len(last.runtime) - len(last.mask):]
            steps = []
            for step, (start, end) in zip(trajectory.steps, last.spans):
                if end > limit:  # a decision cut by the response budget is not trained, nor any after it
                    break
                fields = node_of[id(step)]
                steps.append({**DecisionSpan(fields["state_key"], fields["action"], fields["reward"], fields["valid"],
                                             start, end, fields["node"], fields["parent"]).to_dict(),
                              "tokens": len(step.response_ids or ())})
            leaves.append({"prompt_ids": last.runtime[: len(last.runtime) - len(last.mask)],
                           "response_ids": response[:limit], "response_mask": last.mask[:limit],
                           "reward_score": float(sum(step.reward for step in trajectory.steps)),
                           "steps": steps, "trajectory": f"{tree_id}/leaf-{j}"})
        return leaves, [{**fields, "tokens": len(step.response_ids or ())} for step, fields in nodes]

    async def decision(self, context: Context, sampling_params: dict[str, Any]) -> Decision:
        """One decision of the server, generated from the tokens of the decision before it (its
        response, then the environment's answer as the next user message), so that a leaf's row holds
        every decision in the very context it was generated in."""
        message = {"role": "user", "content": observation_message(
            context.observation, {"task": context.task, "admissible_actions": context.admissible_actions})}
        history = tuple(context.history)
        if not history:
            messages = [message]
            runtime, mask, spans = await self.ct_build_initial_tokens(messages), [], []
        else:
            parent = self._prefixes[history]
            messages = parent.messages + [{"role": "assistant", "content": parent.text}, message]
            merged, mask, _ = await merge_user_turn(self, messages, parent.runtime, list(parent.mask))
            runtime, spans = merged.token_ids, list(parent.spans)
        generated = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=runtime,
                                                       sampling_params=sampling_params)
        text = self.tokenizer.decode(generated.token_ids, skip_special_tokens=True)
        start = len(mask)
        merged, after, _ = await self.ct_merge_assistant_token(runtime, generated.token_ids, mask)
        logprobs = [float(x) for x in generated.log_probs or []]
        decision = Decision(text=text, action=action_of(text) or None, prompt_ids=list(runtime),
                            response_ids=list(generated.token_ids), logprobs=logprobs,
                            entropy=-sum(logprobs) / len(logprobs) if logprobs else 0.0)
        made = _Prefix(list(merged.token_ids), list(after), messages, text, spans + [(start, len(after))])
        # Siblings that sent the same action from the same state continue the same history: the later one's
        # tokens are the prefix of both subtrees' rows there (a sample of the same state and action).
        self._prefixes[history + ((context.observation, sent_action(decision)),)] = made
        self._made[id(decision)] = made
        return decision


def leaf_token_advantages(taken: Mapping[str, Any], index: Sequence[Any], response_mask: torch.Tensor, name: str,
                          **config: Any) -> torch.Tensor:
    """Our estimator ``name`` on the trees :meth:`~ptgpo_algos.integrations.verl.hub.GroupHub.take` gave
    for the rows ``index`` (their ``uid``): each decision's advantage on its span's tokens that
    ``response_mask`` marks, zero elsewhere. A row the hub does not know, or a tree whose rows are not
    all in the batch, raises ``ValueError`` saying what to set."""
    if taken["incomplete"]:
        raise ValueError(f"groups {taken['incomplete'][:5]}: some of their rows are not in this batch (or their tree "
                         "was not grown); give a group's rows one after another with data.shuffle=False and "
                         "data.train_batch_size a multiple of the group size")
    unknown = [row for row, uid in enumerate(index) if str(uid) not in taken["rows"]]
    if unknown:
        raise ValueError(f"rows {unknown[:5]}: no tree holds them; with the {LEAF_AGENT_NAME} loop every row of "
                         "the batch is a leaf of a group (extra_info.group), not a sample of another agent loop")
    value: dict[str, float] = {}
    for tree_id, nodes in taken["trees"].items():
        values = decision_advantages([tree_id] * len(nodes), nodes, name, [node["tokens"] for node in nodes], **config)
        value.update({node["node"]: v for node, v in zip(nodes, values)})
    scores = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    for row, uid in enumerate(index):
        for step in taken["rows"][str(uid)]:
            scores[row, step["start"]:step["end"]] = value[step["node"]]
    return scores * response_mask.to(torch.float32)


def tree_estimator(name: str, **config: Any) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Estimator ``name`` for verl's registry that credits the leaf rows of the batch's trees (from the
    job's hub, by ``uid``) with our trainer's step-level credit, and any other batch as
    :func:`~ptgpo_algos.integrations.verl.verl_estimator` does. verl's ``algorithm.ptgpo_config``
    (``+algorithm.ptgpo_config.omega=1.0``) overrides ``config`` key by key; the KL penalty in the
    reward (``algorithm.use_kl_in_reward``), which the tree's own rewards would leave out, is refused."""
    rows = verl_estimator(name, **config)

    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any] | None = None,
                  config: Any = None, **columns: Any) -> tuple[torch.Tensor, torch.Tensor]:
        taken = taken_trees(index) if index is not None else None
        if taken is None:
            return rows(token_level_rewards, response_mask, index, config, **columns)
        algorithm = config if config is not None else {}
        if algorithm.get("use_kl_in_reward", False):
            raise ValueError("algorithm.use_kl_in_reward: the tree's leaves are credited with the environment's "
                             "rewards, without the KL penalty; set it false and use "
                             "actor_rollout_ref.actor.use_kl_loss")
        settings = {**estimator_config, **dict(algorithm.get("ptgpo_config") or {})}
        with torch.no_grad():
            scores = leaf_token_advantages(taken, index, response_mask, name, **settings)
        return scores, scores.clone()

    estimator_config = dict(config)
    estimator.__name__ = estimator.__qualname__ = f"ptgpo_tree_{name}"
    estimator.ptgpo_estimator = name  # type: ignore[attr-defined]
    return estimator


def register() -> None:
    """Register our estimators and agent loops (``ptgpo_env``, ``ptgpo_env_steps``, ``ptgpo_tree``,
    ``ptgpo_tree_leaf``) in verl's registries of this process; registering again changes nothing.
    Ray's ``worker_process_setup_hook`` calls it in every worker of a run."""
    register_estimators(make=tree_estimator)
    loops = {AGENT_NAME: EnvAgentLoop, STEPS_AGENT_NAME: EnvStepsAgentLoop, TREE_AGENT_NAME: TreeAgentLoop,
             LEAF_AGENT_NAME: TreeLeafAgentLoop}
    for name, loop in loops.items():
        register_agent_loop(name)(loop)
