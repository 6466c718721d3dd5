"""The tiny policy model: a Qwen2-architecture model built locally, with no download.

Its tokenizer is a byte-level BPE trained with ``tokenizers`` on the environments' own text (a corpus
made by playing the built-in environments with random and expert actions, plus the prompt template),
so that a game word is one or two tokens and a ~150k-parameter model sees short prompts. The model is
initialised from a seed and then **pretrained as a language model** (``pretrain_steps``) on transcripts
of *random* play rendered with the prompt template: prompts of both action modes and of history
lengths 0-2, each followed by the uniformly random action that was taken. Like a pretrained LLM, the
result knows the text of the game (what an action looks like, that it is one of the admissible ones,
how it continues once begun) but nothing about which actions succeed: its policy starts close to
uniform over the admissible actions, with either candidate score, and RL learns from there. (Measured
on Household easy: from this start, behaviour cloning on expert decisions reached greedy success 0.7
in 200 steps, against 0.2 from a bare random initialisation, whose ``mean`` scores also stay nearly
flat -- a candidate's few discriminating tokens are averaged with its many predictable ones.)
``pretrain_steps=0`` gives the bare model.

With ``pretrain_tasks="hindsight"`` the transcripts tell the truth about their task: on an environment
that reports :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks` (Household), a random-play episode stops
at the first step that completes some task (putting whatever it carried wherever it stood, say) and
its transcript states that task instead of the episode's own; episodes that complete none are left
out. An LLM's pretraining text is like that -- instructions and what follows them agree -- while
transcripts of the episode's own task teach that the actions ignore it. No reward and no expert go
in: the actions are still random, but they concern the objects and places the task names. (Measured
on Household easy with the easy config's spec: the untrained policy wins 1.6-4.7 % of 256 held-out
episodes at temperature 0.4, against 2.7 % from transcripts of the episode's own task; it reads the
task no more than that one does, and 10-minute GiGPO runs from it were not better. The numbers are in
docs/results/household-tiny-model.md.)

Model and tokenizer are saved with ``save_pretrained`` to ``$PTGPO_CACHE/tiny-<hash>`` (default
``~/.cache/ptgpo``), where the hash covers the corpus and the configuration, so a change in an
environment's text builds a new model rather than reusing a stale vocabulary. The folder is built in a temporary directory and renamed into place, so concurrent runs
never see a half-written model. Reload it by path like any Hugging Face checkpoint (the tokenizer
with ``PreTrainedTokenizerFast``; see :func:`load_tiny_tokenizer`).

Measured on a 2-core CPU: hidden size 64 and 2 layers learns fastest in wall time; a 1M-parameter
model was 4.5x slower per iteration and did not learn faster per decision. Pretraining takes about 4
minutes on one core for 1,000 steps, once per environment and spec (then cached).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ptgpo_algos.files import atomic_folder, build_lock, check_writable

__all__ = ["TinyModelSpec", "build_tiny_model", "tiny_corpus", "load_tiny_tokenizer", "TINY_MARKER"]

#: A file in the model folder that marks a tiny PTGPO model (its tokenizer loads as a fast BPE).
TINY_MARKER = "ptgpo_tiny.json"
_FORMAT_VERSION = 2
SPECIAL_TOKENS = ["<|endoftext|>", "<think>", "</think>", "<action>", "</action>"]

#: Environments (and kwargs variants) whose text makes the tokenizer's corpus.
CORPUS_ENVS: dict[str, list[dict[str, Any]]] = {
    "ptgpo/Household-v0": [{"difficulty": d} for d in ("easy", "medium", "hard")],
    "ptgpo/FrozenLake-v0": [{}],
    "ptgpo/Sokoban-v0": [{}],
    "ptgpo/BabyAI-v0": [{"level": level} for level in ("GoToLocal", "PutNextLocalS6N4", "KeyCorridorS3R1", "DoorKey-5x5", "MultiRoom-N2-S4")],
}


PRETRAIN_TASKS = ("episode", "hindsight")


class TinyModelSpec(dict):
    """The tiny model's architecture and pretraining (a dict, so it is stored as JSON and hashed as is).

    :attr:`FIELDS` names the keys a config's ``policy.tiny`` may set.

    ``pretrain_steps`` AdamW steps of ``pretrain_batch_size`` random-play transcripts at peak learning
    rate ``pretrain_lr`` (linear warm-up over the first tenth, then linear decay to a tenth); 0 keeps
    the randomly initialised model. ``pretrain_tasks`` says which task the transcripts state:
    ``"episode"`` the episode's own, ``"hindsight"`` one that the random play completed, where the
    environment can tell (see the module docstring). Bad values raise ``ValueError`` naming the field.
    """

    FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size", "seed", "pretrain_steps", "pretrain_batch_size", "pretrain_lr", "pretrain_tasks")

    def __init__(
        self,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        # Head size 32: vLLM's CPU attention kernels support no head size below 32.
        num_attention_heads: int = 2,
        num_key_value_heads: int = 1,
        intermediate_size: int = 256,
        vocab_size: int = 1024,
        seed: int = 0,
        pretrain_steps: int = 1000,
        pretrain_batch_size: int = 32,
        pretrain_lr: float = 3e-3,
        pretrain_tasks: str = "episode",
    ):
        super().__init__(
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            intermediate_size=intermediate_size,
            vocab_size=vocab_size,
            seed=seed,
            pretrain_steps=pretrain_steps,
            pretrain_batch_size=pretrain_batch_size,
            pretrain_lr=pretrain_lr,
            pretrain_tasks=pretrain_tasks,
        )
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size", "pretrain_batch_size"):
            if not isinstance(self[name], int) or isinstance(self[name], bool) or self[name] < 1:
                raise ValueError(f"tiny.{name}: expected a positive integer, got {self[name]!r}")
        for name in ("seed", "pretrain_steps"):
            if not isinstance(self[name], int) or isinstance(self[name], bool) or self[name] < 0:
                raise ValueError(f"tiny.{name}: expected an integer >= 0, got {self[name]!r}")
        if not isinstance(pretrain_lr, (int, float)) or isinstance(pretrain_lr, bool) or not 0 < pretrain_lr < 1:
            raise ValueError(f"tiny.pretrain_lr: expected a number in (0, 1), got {pretrain_lr!r}")
        if pretrain_tasks not in PRETRAIN_TASKS:
            raise ValueError(f"tiny.pretrain_tasks: expected one of {', '.join(PRETRAIN_TASKS)}, got {pretrain_tasks!r}")


def _play(env_id: str, kwargs: dict[str, Any], seeds: Iterable[int], max_steps: int) -> list[str]:
    import numpy as np

    from ptgpo_envs import make_env

    lines: list[str] = []
    for seed in seeds:
        env = make_env(env_id, kwargs).unwrapped
        rng = np.random.default_rng(seed)
        for use_expert in (False, True):
            observation, info = env.reset(seed=seed)
            lines += [info["task"], observation, " | ".join(info["admissible_actions"])]
            for _ in range(max_steps):
                admissible = info["admissible_actions"]
                action = admissible[int(rng.integers(len(admissible)))]
                if use_expert:
                    try:
                        action = env.expert_action()
                    except NotImplementedError:
                        pass
                observation, _, terminated, truncated, info = env.step(action)
                lines += [action, observation, " | ".join(info["admissible_actions"])]
                if terminated or truncated:
                    break
        env.close()
    return lines


def tiny_corpus(env_ids: Sequence[str] | None = None, seeds: int = 12, max_steps: int = 40) -> list[str]:
    """Text for the tokenizer: the prompt template and episodes of each environment."""
    import gymnasium as gym

    import ptgpo_envs  # noqa: F401  (registers the corpus environments)
    from ptgpo_algos.policy.prompts import SYSTEM_TEXT

    lines = list(SYSTEM_TEXT.values())
    lines += ["Task:", "Observation:", "Action:", "Current observation:", "Admissible actions:"]
    lines += ["<think> </think><action> </action>"]
    wanted = list(env_ids) if env_ids is not None else [e for e in CORPUS_ENVS if e in gym.registry]
    for env_id in wanted:
        for kwargs in CORPUS_ENVS.get(env_id, [{}]):
            lines += _play(env_id, kwargs, range(seeds), max_steps)
    return lines


def _random_play_transcripts(
    env_ids: Sequence[str], tokenizer, rows: int, seed: int, hindsight: bool = False
) -> list[tuple[list[int], list[int]]]:
    """``rows`` (prompt ids, response ids) pairs of uniformly random play, spread over the corpus
    environments, each rendered in a random action mode with a random history length (0-2).

    ``hindsight``: on environments that report :meth:`~ptgpo_envs.core.TextEnv.achieved_tasks`, an
    episode ends at the first step that completes a task, and its transcript states that task (one
    of them at random) instead of its own; an episode that completes none is not used.
    """
    import numpy as np

    from ptgpo_envs import make_env
    from ptgpo_algos.records import Context
    from ptgpo_algos.policy.parsing import format_response
    from ptgpo_algos.policy.prompts import PromptBuilder

    rng = np.random.default_rng(seed)
    builders = {(mode, h): PromptBuilder(tokenizer, mode, history_length=h, max_tokens=1024)
                for mode in ("choose", "generate") for h in (0, 1, 2)}
    variants = [(env_id, kwargs) for env_id in env_ids for kwargs in CORPUS_ENVS.get(env_id, [{}])]
    envs = [make_env(env_id, kwargs).unwrapped for env_id, kwargs in variants]
    out: list[tuple[list[int], list[int]]] = []

    def render(context: Context, action: str) -> None:
        mode = "choose" if rng.random() < 0.5 else "generate"
        builder = builders[(mode, int(rng.integers(3)))]
        prompt = builder.prompt_ids(context)
        if mode == "choose":
            response = builder.candidate_ids(action)
        else:
            response = tokenizer.encode(format_response(action), add_special_tokens=False) + [tokenizer.eos_token_id]
        out.append((prompt, response))

    episode = 0
    while len(out) < rows:
        # Training-range seeds (evaluation seeds start at 1,000,000).
        for context, action in _random_episode(envs[episode % len(envs)], episode, rng, hindsight):
            render(context, action)
            if len(out) >= rows:
                break
        episode += 1
    for env in envs:
        env.close()
    return out


def _random_episode(env, seed: int, rng, hindsight: bool) -> Iterator[tuple[Any, str]]:
    """``(context, action)`` of each step of a uniformly random episode, as it is played; with
    ``hindsight`` (where the environment reports completed tasks), only an episode that completes
    one, up to that step, each context stating that task (one of them at random), after the episode."""
    from ptgpo_algos.records import Context

    observation, info = env.reset(seed=seed)
    relabel = hindsight and env.achieved_tasks() is not None
    steps: list[tuple[Context, str]] = []  # held back until the episode's task is known
    achieved: list[str] = []
    history: list[tuple[str, str]] = []
    for _ in range(getattr(env, "max_steps", None) or 50):
        admissible = list(info["admissible_actions"])
        if not admissible:
            break
        action = admissible[int(rng.integers(len(admissible)))]
        context = Context(info["task"], observation, admissible, list(history))
        if relabel:
            steps.append((context, action))
        else:
            yield context, action
        history.append((observation, action))
        observation, _, terminated, truncated, info = env.step(action)
        achieved = list(env.achieved_tasks()) if relabel else []
        if achieved or terminated or truncated:
            break
    if relabel and achieved:
        task = achieved[int(rng.integers(len(achieved)))]
        for context, action in steps:
            yield context.with_task(task), action


#: Steps timed before the pretraining's length is estimated (the first ones include warm-up costs, so
#: the estimate errs long).
_ESTIMATE_AFTER = 5


def _say_how_long(steps: int, seconds_per_step: float) -> None:
    """Tell the user, on standard error, how long pretraining will take at the pace of its first steps."""
    minutes = steps * seconds_per_step / 60
    print(f"pretraining the tiny model ({steps} steps; once per spec, then cached): about "
          f"{minutes:.0f} min at this machine's pace; pretrain_steps: 0 (or a smaller number) under policy.tiny "
          "skips or shortens it", file=sys.stderr, flush=True)


def _pretrain(model, tokenizer, env_ids: Sequence[str], spec: TinyModelSpec) -> None:
    """Next-token prediction on random-play transcripts (seeded: the same spec gives the same weights)."""
    import numpy as np
    import torch
    from ptgpo_envs.progress import progress_bar

    steps, batch = spec["pretrain_steps"], spec["pretrain_batch_size"]
    # Each transcript is seen about twice.
    rows = _random_play_transcripts(
        env_ids, tokenizer, max(batch, steps * batch // 2), spec["seed"], spec["pretrain_tasks"] == "hindsight"
    )
    rng = np.random.default_rng(spec["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["pretrain_lr"], weight_decay=0.0)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * max(0.1, 1.0 - step / steps)
    )
    pad = tokenizer.pad_token_id
    model.train()
    bar = progress_bar(range(steps), desc="pretraining the tiny model", disable=steps < 50, leave=False)
    started = time.monotonic()
    for step in bar:
        if step == _ESTIMATE_AFTER and steps >= 50:
            _say_how_long(steps, (time.monotonic() - started) / step)
        chosen = [rows[i][0] + rows[i][1] for i in rng.choice(len(rows), size=batch, replace=len(rows) < batch)]
        width = max(map(len, chosen))
        ids = torch.full((batch, width), pad, dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for j, sequence in enumerate(chosen):
            ids[j, : len(sequence)] = torch.tensor(sequence)
            labels[j, : len(sequence)] = ids[j, : len(sequence)]
            mask[j, : len(sequence)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
    model.eval()


def _train_tokenizer(corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def default_cache_dir() -> Path:
    """Where built tiny models are cached: ``$PTGPO_CACHE`` (default ``~/.cache/ptgpo``)."""
    return Path(os.environ.get("PTGPO_CACHE", Path.home() / ".cache" / "ptgpo"))


def build_tiny_model(
    spec: TinyModelSpec | None = None,
    *,
    env_ids: Sequence[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Return the folder of the tiny model for ``spec``, building it on first use."""
    import gymnasium as gym

    import ptgpo_envs  # noqa: F401  (registers the corpus environments)

    spec = spec or TinyModelSpec()
    env_ids = list(env_ids) if env_ids is not None else [e for e in CORPUS_ENVS if e in gym.registry]
    corpus = tiny_corpus(env_ids)
    digest = hashlib.sha256(
        json.dumps({"v": _FORMAT_VERSION, "spec": spec, "corpus": corpus}, sort_keys=True).encode()
    ).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"tiny-{digest}"
    if (target / TINY_MARKER).exists():
        return target  # read only: a shared or read-only cache serves a built model as it is
    check_writable(root, "PTGPO_CACHE (the tiny model cache)", folder=True)
    root.mkdir(parents=True, exist_ok=True)
    # Concurrent runs (benchmark cells, seeds in parallel) wait for one build instead of repeating
    # minutes of pretraining.
    with build_lock(root / f".tiny-{digest}.lock"):
        if not (target / TINY_MARKER).exists():
            _build(spec, env_ids, corpus, root, target)
    return target


def _build(spec: TinyModelSpec, env_ids: Sequence[str], corpus: list[str], root: Path, target: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(corpus, spec["vocab_size"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"],
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(spec["seed"])
        model = Qwen2ForCausalLM(config)
        if spec["pretrain_steps"]:
            _pretrain(model, tokenizer, env_ids, spec)
    finally:
        torch.random.set_rng_state(state)
    # Another process may finish the same build first; its folder is identical in content.
    with atomic_folder(target, replace=False) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / TINY_MARKER).write_text(json.dumps({"spec": spec, "corpus_lines": len(corpus)}, indent=1))


def load_tiny_tokenizer(path: str | os.PathLike):
    """The tiny model's tokenizer (``AutoTokenizer`` would substitute a Qwen2 tokenizer class)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))
