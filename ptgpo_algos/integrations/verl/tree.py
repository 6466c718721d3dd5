"""PTGPO's prefix tree grown inside verl's agent loop (``verl.experimental.agent_loop``, verl 0.9): ``ptgpo_tree``.

verl runs an agent loop per sample and session (``rollout.n`` sessions of a prompt, each on its own),
so no loop sees its siblings; a tree must grow in one place, because its leaves branch from each
other's snapshots. Here one sample carries the whole group: with ``actor_rollout_ref.rollout.n=1``
the sample's ``extra_info`` names the episode (as for ``ptgpo_env``) and the tree
(``extra_info["tree"]``: :class:`TreeSpec`), and :class:`TreeAgentLoop` grows it with our own tree
rollouts (:func:`ptgpo_algos.rollouts.collection.collect_rollouts`, ``mode="tree"``, in a thread of its own):
``initial_rollouts`` episodes from reset, then each new leaf restored from a snapshot at a decision point of the finished
ones (``branch``: ``uniform``, ``entropy`` or ``novel``), until ``group_size`` leaves or
``max_decisions`` decisions are spent. The environments step where ``env_backend`` says (``ray``:
on Ray actors). Every decision of the group is one request to verl's LLM server; a decision step
asks for the live leaves' decisions together.

The loop returns one :class:`AgentLoopOutput` per node of the tree (a decision: a step that several
leaves share is one output), which verl's v1 trainer (``trainer.use_v1=True``) stores as its own row
(key ``{uid}_{session}_{index}``): the decision's context as prompt, its generated tokens as
response, its reward as ``reward_score`` and, in ``extra_fields[DECISION_KEY]``, the tree, node,
parent, state key, action, validity, its depth (``index``) and the leaves through it, from which
:func:`~ptgpo_algos.integrations.verl.steps.decision_advantages` rebuilds the group's trajectories
and gives each node the credit our trainer gives that step. A sample whose tree finished no leaf
within the budget returns no output (verl's v1 worker logs it and stores nothing).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Mapping, Sequence
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from ptgpo_algos.records import Context, Decision, Step, Task, Trajectory
from ptgpo_algos.integrations.verl.agent_loop import (action_of, episode_spec, observation_message,
                                                      require_continuous_tokens)
from ptgpo_algos.integrations.verl.steps import DECISION_KEY, TRAJECTORY_KEY
from ptgpo_algos.rollouts.branching import BRANCH_STRATEGIES
from ptgpo_algos.rollouts.collection import collect_rollouts

__all__ = ["TREE_AGENT_NAME", "ServerPolicy", "TreeAgentLoop", "TreeSpec", "context_messages", "tree_nodes",
           "tree_spec"]

#: The name the tree-growing agent loop has in verl's registry.
TREE_AGENT_NAME = "ptgpo_tree"


@dataclass(frozen=True)
class TreeSpec:
    """How a sample's tree grows: the group's leaves, those from reset, where to branch, the decision
    budget, where the environments step, and the branching RNG's seed (None: fresh)."""

    group_size: int = 8
    initial_rollouts: int | None = None
    branch: str = "uniform"
    max_decisions: int | None = None
    max_steps: int | None = None
    env_backend: str = "in-process"
    env_workers: int | None = None
    env_options: dict[str, Any] = field(default_factory=dict)
    branch_seed: int | None = None


def _count(value: Any, key: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"extra_info.tree.{key}: an integer >= {low} or none, got {value!r:.80}")
    return value


def tree_spec(value: Any, sampling_params: Mapping[str, Any]) -> TreeSpec:
    """The :class:`TreeSpec` of a sample's ``extra_info["tree"]`` (a mapping, or none for the
    defaults); a bad key or value raises ``ValueError`` saying what it takes."""
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise ValueError("extra_info.tree: a mapping such as {'group_size': 8, 'branch': 'uniform'}, "
                         f"got {value!r:.80}")
    unknown = sorted(set(value) - set(TreeSpec.__dataclass_fields__))
    if unknown:
        raise ValueError(f"extra_info.tree: unknown key(s) {unknown}; known: {sorted(TreeSpec.__dataclass_fields__)}")
    spec = TreeSpec(**value)
    _count(spec.group_size, "group_size", 1)
    for key in ("initial_rollouts", "max_decisions", "max_steps", "env_workers", "branch_seed"):
        _count(getattr(spec, key), key, 0 if key == "branch_seed" else 1)
    if spec.initial_rollouts is not None and spec.initial_rollouts > spec.group_size:
        raise ValueError(f"extra_info.tree.initial_rollouts: at most group_size ({spec.group_size}), "
                         f"got {spec.initial_rollouts}")
    if spec.branch not in BRANCH_STRATEGIES:
        raise ValueError(f"extra_info.tree.branch: one of {BRANCH_STRATEGIES}, got {spec.branch!r:.80}")
    if spec.branch == "entropy" and not sampling_params.get("logprobs"):
        raise ValueError("extra_info.tree.branch: 'entropy' reads the decisions' log-probabilities; set "
                         "actor_rollout_ref.rollout.calculate_log_probs=True or branch 'uniform' or 'novel'")
    if spec.env_backend not in ("in-process", "processes", "ray"):
        raise ValueError(f"extra_info.tree.env_backend: in-process, processes or ray, got {spec.env_backend!r:.80}")
    return spec


def context_messages(context: Context) -> list[dict[str, str]]:
    """The conversation a decision is generated from: each earlier observation and the action sent
    there as user and assistant turns, then the present as the linear loops show it (the task, the
    observation, the admissible actions). A node's context is its history, which all leaves through
    it share, so a branch continues the very context its prefix was generated in."""
    messages: list[dict[str, str]] = []
    for observation, action in context.history:
        messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": action}]
    info = {"task": context.task, "admissible_actions": context.admissible_actions}
    return messages + [{"role": "user", "content": observation_message(context.observation, info)}]


def tree_nodes(group: Sequence[Trajectory], tree: str) -> list[tuple[Step, dict[str, Any]]]:
    """Each distinct step of a tree group (shared prefix steps are one object in our trees) with its
    decision fields, in order of first appearance: ``tree``, ``node``, ``parent``, ``index`` (the
    depth), ``trajectory`` (the first leaf through it), ``leaves`` (every leaf through it, in the
    group's order), ``state_key``, ``action``, ``reward``, ``valid``."""
    position: dict[int, int] = {}
    nodes: list[tuple[Step, dict[str, Any]]] = []
    for j, trajectory in enumerate(group):
        leaf, parent = f"{tree}/leaf-{j}", None
        for k, step in enumerate(trajectory.steps):
            if id(step) not in position:
                position[id(step)] = len(nodes)
                nodes.append((step, {"tree": tree, "node": f"{tree}/{len(nodes)}", "parent": parent, "index": k,
                                     "trajectory": leaf, "leaves": [], "state_key": step.state_key,
                                     "action": step.action, "reward": float(step.reward), "valid": bool(step.valid)}))
            fields = nodes[position[id(step)]][1]
            if fields["index"] != k or fields["parent"] != parent:
                raise ValueError(f"tree {tree}: step {k} of leaf {j} is shared at another depth or after another "
                                 "parent; a prefix tree shares whole prefixes")
            fields["leaves"].append(leaf)
            parent = fields["node"]
    return nodes


@dataclass
class ServerPolicy:
    """Our rollout policy's ``decide`` (what the tree rollouts call, from their thread) answered by
    verl's LLM server through the agent loop, on the loop's event loop: one request per context, all
    at once."""

    agent: "TreeAgentLoop"
    event_loop: asyncio.AbstractEventLoop
    sampling_params: dict[str, Any]
    mode: str = "generate"

    def decide(self, contexts: Sequence[Context], *, greedy: bool = False, generator: Any = None,
               temperature: float | None = None) -> list[Decision]:
        """One decision per context (``generator`` is unused: the server samples)."""
        params = dict(self.sampling_params)
        if temperature is not None:
            params["temperature"] = temperature
        if greedy:
            params.update(temperature=0, top_p=1.0, top_k=-1)

        async def all_decisions() -> list[Decision]:
            return list(await asyncio.gather(*(self.agent.decision(c, params) for c in contexts)))

        return asyncio.run_coroutine_threadsafe(all_decisions(), self.event_loop).result()


@register(TREE_AGENT_NAME)
class TreeAgentLoop(AgentLoopBase):
    """One PTGPO prefix tree per sample, one output per node; see the module docstring."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """Grow the sample's tree; one output per node, in order of first appearance."""
        require_continuous_tokens(self)
        extra_info = kwargs.get("extra_info")
        env_id, seed, env_kwargs = episode_spec(extra_info)
        spec = tree_spec(extra_info.get("tree"), sampling_params)
        # Every leaf from reset must be the same task instance: a seed is drawn once for the group.
        task = Task(env_id, seed if seed is not None else int(np.random.SeedSequence().entropy % 2**31),
                    env_kwargs, spec.max_steps)
        loop = asyncio.get_running_loop()
        grow = partial(collect_rollouts, ServerPolicy(self, loop, dict(sampling_params)), [task],
                       group_size=spec.group_size, mode="tree", initial_rollouts=spec.initial_rollouts,
                       branch=spec.branch, rng=np.random.default_rng(spec.branch_seed), env_backend=spec.env_backend,
                       env_workers=spec.env_workers, env_options=spec.env_options, max_decisions=spec.max_decisions)
        # A thread of its own: the tree's thread waits on the server while the decisions' tokens are built
        # in the loop's default executor, which many trees growing at once would otherwise fill.
        with ThreadPoolExecutor(max_workers=1) as thread:
            batch, _ = await loop.run_in_executor(thread, grow)
        tree = uuid4().hex
        return [self._output(step, fields) for step, fields in tree_nodes(batch[0] if batch else [], tree)]

    async def decision(self, context: Context, sampling_params: dict[str, Any]) -> Decision:
        """One decision of the server on ``context``: the response, its action and token ids; the
        entropy is the sampled tokens' mean negative log-probability (when the server returns them)."""
        prompt = await self.ct_build_initial_tokens(context_messages(context))
        generated = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt,
                                                       sampling_params=sampling_params)
        text = self.tokenizer.decode(generated.token_ids, skip_special_tokens=True)
        logprobs = [float(x) for x in generated.log_probs or []]
        return Decision(text=text, action=action_of(text) or None, prompt_ids=list(prompt),
                        response_ids=list(generated.token_ids), logprobs=logprobs,
                        entropy=-sum(logprobs) / len(logprobs) if logprobs else 0.0)

    def _output(self, step: Step, fields: dict[str, Any]) -> AgentLoopOutput:
        limit = self.rollout_config.response_length
        decision = step.decision
        response = list(decision.response_ids[:limit])
        return AgentLoopOutput(
            prompt_ids=self._cap_text_prompt_length(list(decision.prompt_ids)), response_ids=response,
            response_mask=[1] * len(response), response_logprobs=list(decision.logprobs[:limit]) or None,
            reward_score=float(step.reward), num_turns=2, metrics={},
            # verl's v1 worker copies the last output's reward_extra_info onto the others: it must be there.
            extra_fields={DECISION_KEY: fields, TRAJECTORY_KEY: fields["trajectory"], "reward_extra_info": {}})
