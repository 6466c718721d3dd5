"""An agent loop of verl's (``verl.experimental.agent_loop``, verl 0.9) that plays our environments.

``actor_rollout_ref.rollout.agent.default_agent_loop=ptgpo_env`` (or a dataset's ``agent_name``
column) makes verl's ``AgentLoopWorker`` play each sample as one episode of one of our environments,
named by the sample's ``extra_info``: ``{"env_id": "ptgpo/Household-v0", "seed": 3, "env_kwargs": {...}}``.
Each turn the policy's response (through verl's LLM server and its Continuous Token builder, as verl's
own tool agent loop does) is the action; the environment's answer is the next user message. The
row verl gets back is the whole episode (the model's tokens ``response_mask`` 1, the environment's 0),
``reward_score`` its return, and ``extra_fields`` every decision's fields and token span
(:data:`~ptgpo_algos.integrations.verl.steps.STEPS_KEY`) with the trajectory's id, for
:func:`~ptgpo_algos.integrations.verl.steps.compute_step_advantage`.

``ptgpo_env_steps`` (:class:`EnvStepsAgentLoop`) plays the same episode but returns one output per
decision, for verl's v1 trainer (``trainer.use_v1=True``), whose worker stores each output of a list
as its own row (key ``{uid}_{session}_{index}``): the decision's context as prompt, its generated
tokens as response, the step's reward as ``reward_score`` and, in
``extra_fields[DECISION_KEY]``, the trajectory, node, parent, state key, action and validity; verl's
one-row-per-step layout for :func:`ptgpo_algos.integrations.verl.compute_advantage` follows from
:func:`~ptgpo_algos.integrations.verl.steps.decision_columns`. Both play linear episodes; PTGPO's
prefix tree, grown from snapshots, is the ``ptgpo_tree`` loop's (:mod:`ptgpo_algos.integrations.verl.tree`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from uuid import uuid4

import gymnasium as gym
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from ptgpo_algos.integrations.verl.steps import DECISION_KEY, STEPS_KEY, TRAJECTORY_KEY, DecisionSpan

__all__ = ["AGENT_NAME", "STEPS_AGENT_NAME", "EnvAgentLoop", "EnvStepsAgentLoop", "action_of", "episode_spec",
           "merge_user_turn", "observation_message", "require_continuous_tokens"]

#: The names the agent loops have in verl's registry: one output per episode, one per decision.
AGENT_NAME = "ptgpo_env"
STEPS_AGENT_NAME = "ptgpo_env_steps"

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def episode_spec(extra_info: Any) -> tuple[str, int | None, dict[str, Any]]:
    """``(env_id, seed, env_kwargs)`` of a sample's ``extra_info``; a bad one raises naming the key."""
    if not isinstance(extra_info, Mapping) or not isinstance(extra_info.get("env_id"), str):
        raise ValueError("extra_info: each sample names its episode, e.g. {'env_id': 'ptgpo/Household-v0', "
                         f"'seed': 3, 'env_kwargs': {{}}}}; got {extra_info!r:.120}")
    seed = extra_info.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"extra_info.seed: a non-negative integer or none, got {seed!r:.80}")
    kwargs = extra_info.get("env_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"extra_info.env_kwargs: a mapping of keyword arguments, got {kwargs!r:.80}")
    return extra_info["env_id"], None if seed is None else int(seed), dict(kwargs)


def observation_message(observation: str, info: Mapping[str, Any]) -> str:
    """What the policy reads each turn: the task, the observation and the admissible actions."""
    actions = "\n".join(f"- {action}" for action in info.get("admissible_actions", []))
    return (f"Task: {info.get('task', '')}\n\n{observation}\n\nAdmissible actions:\n{actions}\n\n"
            "Answer with one admissible action.")


def action_of(text: str) -> str:
    """The action in a response: the last ``\\boxed{...}``'s content when there is one, else its last
    non-empty line (the environment ignores case and surrounding spaces)."""
    found = _BOXED.findall(text)
    if found:
        return found[-1]
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


async def merge_user_turn(loop: AgentLoopBase, messages: list[dict], runtime: list[int],
                          mask: list[int]) -> tuple[Any, list[int], Any]:
    """verl's Continuous Token merge of ``messages``' last one (the environment's answer as the next
    user turn, after the assistant turn whose tokens ``runtime`` already ends with) into ``runtime``
    and its response mask: ``ct_merge_context_msg`` in verl 0.9.1, ``ct_merge_non_assistant_msg`` in
    verl 0.9.0 and on verl's neo line, which append user, tool and system turns only."""
    merge = getattr(loop, "ct_merge_context_msg", None) or loop.ct_merge_non_assistant_msg
    return await merge(messages[:-1], messages, runtime, mask)


def require_continuous_tokens(loop: AgentLoopBase) -> None:
    """Refuse, saying what to set, a loop whose verl builds no Continuous Token builder: verl 0.9.0 and
    the neo line build one only with ``data.continuous_token.enable=true`` (verl 0.9.1 always does)."""
    if getattr(loop, "continuous_token_builder", None) is None:
        raise ValueError("data.continuous_token.enable: our agent loops build each turn's tokens with verl's "
                         "Continuous Token builder; set data.continuous_token.enable=true")


@register(AGENT_NAME)
class EnvAgentLoop(AgentLoopBase):
    """One episode of one of our environments per sample; see the module docstring."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the sample's episode until it ends or the response budget is spent; the episode's row."""
        return self._output(await self._play(sampling_params, kwargs))

    async def _play(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> "_Episode":
        require_continuous_tokens(self)
        env_id, seed, env_kwargs = episode_spec(kwargs.get("extra_info"))
        env = gym.make(env_id, disable_env_checker=True, **env_kwargs).unwrapped
        try:
            observation, info = env.reset(seed=seed)
            messages = [{"role": "user", "content": observation_message(observation, info)}]
            runtime = await self.ct_build_initial_tokens(messages)
            episode = _Episode(runtime=runtime)
            while not env.done and self._budget_left(episode):
                info = await self._turn(env, info, messages, episode, sampling_params)
            return episode
        finally:
            env.close()

    def _budget_left(self, episode: "_Episode") -> bool:
        """Whether another turn fits: the whole episode is one response here."""
        return len(episode.mask) < self.rollout_config.response_length

    async def _turn(self, env: Any, info: dict[str, Any], messages: list[dict], episode: "_Episode",
                    sampling_params: dict[str, Any]) -> dict[str, Any]:
        generated = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=episode.runtime,
                                                       sampling_params=sampling_params)
        start = len(episode.mask)
        episode.contexts.append((list(episode.runtime), list(generated.token_ids)))
        merged, episode.mask, _ = await self.ct_merge_assistant_token(episode.runtime, generated.token_ids,
                                                                      episode.mask)
        episode.runtime = merged.token_ids
        text = self.tokenizer.decode(generated.token_ids, skip_special_tokens=True)
        state_key = info["state_key"]
        observation, reward, _, _, info = env.step(action_of(text))
        node = f"{episode.trajectory}/{len(episode.spans)}"
        episode.spans.append(DecisionSpan(state_key, action_of(text), float(reward), bool(info["action_valid"]),
                                          start, len(episode.mask), node,
                                          episode.spans[-1].node if episode.spans else None))
        episode.reward += float(reward)
        if not env.done:
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": observation_message(observation, info)}]
            merged, episode.mask, _ = await merge_user_turn(self, messages, episode.runtime, episode.mask)
            episode.runtime = merged.token_ids
        return info

    def _output(self, episode: "_Episode") -> AgentLoopOutput:
        limit = self.rollout_config.response_length
        responses = episode.runtime[len(episode.runtime) - len(episode.mask):]
        prompt = episode.runtime[: len(episode.runtime) - len(episode.mask)]
        # A decision cut by the response budget is dropped with everything after it: its tokens are not trained.
        spans = [span for span in episode.spans if span.end <= limit]
        return AgentLoopOutput(
            prompt_ids=prompt, response_ids=responses[:limit], response_mask=episode.mask[:limit],
            reward_score=episode.reward, num_turns=2 * len(spans) + 1, metrics={},
            extra_fields={STEPS_KEY: [span.to_dict() for span in spans], TRAJECTORY_KEY: episode.trajectory})


@register(STEPS_AGENT_NAME)
class EnvStepsAgentLoop(EnvAgentLoop):
    """One episode per sample, one output per decision (verl's v1 trainer stores each as a row)."""

    def _budget_left(self, episode: "_Episode") -> bool:
        # Each decision is its own response; the environment's horizon ends the episode.
        return True

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """Play the sample's episode; one output per decision, in order."""
        episode = await self._play(sampling_params, kwargs)
        limit = self.rollout_config.response_length
        outputs = []
        for k, (span, (context, generated)) in enumerate(zip(episode.spans, episode.contexts)):
            decision = {**span.to_dict(), "trajectory": episode.trajectory, "index": k}
            del decision["start"], decision["end"]  # the whole response is the decision
            outputs.append(AgentLoopOutput(
                prompt_ids=self._cap_text_prompt_length(context), response_ids=generated[:limit],
                response_mask=[1] * len(generated[:limit]), reward_score=span.reward, num_turns=2, metrics={},
                # verl's v1 worker copies the last output's reward_extra_info onto the others: it must be there.
                extra_fields={DECISION_KEY: decision, TRAJECTORY_KEY: episode.trajectory, "reward_extra_info": {}}))
        return outputs


class _Episode:
    """The growing token sequence of one episode and its decisions."""

    def __init__(self, runtime: list[int]):
        self.runtime = list(runtime)
        self.mask: list[int] = []
        #: Each decision's context (the tokens it was generated from) and generated tokens.
        self.contexts: list[tuple[list[int], list[int]]] = []
        self.spans: list[DecisionSpan] = []
        self.reward = 0.0
        self.trajectory = uuid4().hex
