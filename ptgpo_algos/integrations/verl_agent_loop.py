"""An agent loop of verl's (``verl.experimental.agent_loop``, verl 0.9) that plays our environments.

``actor_rollout_ref.rollout.agent.default_agent_loop=ptgpo_env`` (or a dataset's ``agent_name``
column) makes verl's ``AgentLoopWorker`` play each sample as one episode of one of our environments,
named by the sample's ``extra_info``: ``{"env_id": "ptgpo/Household-v0", "seed": 3, "env_kwargs": {...}}``.
Each turn the policy's response (through verl's LLM server and its Continuous Token builder, as verl's
own tool agent loop does) is the action; the environment's answer is the next user message. The
row verl gets back is the whole episode (the model's tokens ``response_mask`` 1, the environment's 0),
``reward_score`` its return, and ``extra_fields`` every decision's fields and token span
(:data:`~ptgpo_algos.integrations.verl_steps.STEPS_KEY`) with the trajectory's id, for
:func:`~ptgpo_algos.integrations.verl_steps.compute_step_advantage`.

A row is a linear episode: verl 0.9's worker runs one ``run`` per sample and takes one output back,
so a group's episodes cannot share a prefix tree there; tree rollouts need a trainer whose agent loop
returns several outputs per call.
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from uuid import uuid4

import gymnasium as gym
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from ptgpo_algos.integrations.verl_steps import STEPS_KEY, TRAJECTORY_KEY, DecisionSpan

__all__ = ["AGENT_NAME", "EnvAgentLoop", "action_of", "episode_spec", "observation_message"]

#: The name this agent loop has in verl's registry.
AGENT_NAME = "ptgpo_env"

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


@register(AGENT_NAME)
class EnvAgentLoop(AgentLoopBase):
    """One episode of one of our environments per sample; see the module docstring."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the sample's episode until it ends or the response budget is spent."""
        env_id, seed, env_kwargs = episode_spec(kwargs.get("extra_info"))
        env = gym.make(env_id, disable_env_checker=True, **env_kwargs).unwrapped
        try:
            observation, info = env.reset(seed=seed)
            messages = [{"role": "user", "content": observation_message(observation, info)}]
            runtime = await self.ct_build_initial_tokens(messages)
            episode = _Episode(runtime=runtime)
            while not env.done and len(episode.mask) < self.rollout_config.response_length:
                info = await self._turn(env, info, messages, episode, sampling_params)
            return self._output(episode)
        finally:
            env.close()

    async def _turn(self, env: Any, info: dict[str, Any], messages: list[dict], episode: "_Episode",
                    sampling_params: dict[str, Any]) -> dict[str, Any]:
        generated = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=episode.runtime,
                                                       sampling_params=sampling_params)
        start = len(episode.mask)
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
            previous = list(messages)
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": observation_message(observation, info)}]
            merged, episode.mask, _ = await self.ct_merge_context_msg(previous, messages, episode.runtime,
                                                                      episode.mask)
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


class _Episode:
    """The growing token sequence of one episode and its decisions."""

    def __init__(self, runtime: list[int]):
        self.runtime = list(runtime)
        self.mask: list[int] = []
        self.spans: list[DecisionSpan] = []
        self.reward = 0.0
        self.trajectory = uuid4().hex
