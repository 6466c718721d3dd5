"""What each rank runs in the multi-rank tests (tests/test_distributed.py): module-level functions,
so that spawned processes can import them by name. Each returns plain data (numpy arrays) to the test.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ptgpo_algos.distributed.fsdp import shard_model
from ptgpo_algos.distributed.fsdp_config import FsdpConfig
from ptgpo_algos.distributed.gather import gathered_weights
from ptgpo_algos.distributed.process_group import ENV_KEYS
from ptgpo_algos.distributed.policy import RootRouted
from ptgpo_algos.distributed.work_split import split_evenly

#: The two architectures the tests shard: the tiny model's (TinyModelSpec's defaults: tied
#: embeddings, 2 heads of 32, 1 key-value head) and a 2-layer Qwen2.5-7B look-alike (untied output
#: layer, grouped-query attention with 2 key-value heads of 4 query heads), both randomly initialised.
ARCHITECTURES = {
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=1024, tie_word_embeddings=True),
    "qwen2": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=320, tie_word_embeddings=False, rms_norm_eps=1e-6,
                  rope_theta=1000000.0),
}


def build_model(kind: str, seed: int = 0, lora: bool = False) -> torch.nn.Module:
    """A randomly initialised Qwen2ForCausalLM of ``ARCHITECTURES[kind]``, the same for a seed on every rank."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**ARCHITECTURES[kind], max_position_embeddings=256, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
        torch.manual_seed(seed + 1)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "lora_B" in name:  # peft starts B at zero: give the adapters something to gather
                    parameter.normal_(0.0, 0.02)
    return model


#: The tiny policy's contexts the update scenarios decide on: FrozenLake boards with 1-3 actions.
_BOARD = "You stand on the start S.\nP F F\nF H F\nF F G"


def tiny_policy(path: str, mode: str = "choose"):
    """The tiny policy of the model folder ``path`` (built once by the test, the same on every rank)."""
    from ptgpo_algos.policy import load_policy

    return load_policy(path, mode=mode, max_new_tokens=8)


def make_samples(policy, count: int = 7, seed: int = 0) -> list:
    """``count`` training samples of ``policy``'s own decisions (sampled with ``seed``: the same on every
    rank) among 2 or 3 actions, advantages of both signs, weights 1 to 3; two prompts recur (their samples share a mini-batch)."""
    from ptgpo_algos.policy import Context
    from ptgpo_algos.updates.samples import TrainingSample

    contexts = [Context("Walk across the frozen lake to the goal G.", _BOARD + "\n" * k,
                        ["go left", "go right", "go up"][: 2 + k % 2]) for k in range(5)]
    decisions = policy.decide((contexts + contexts[:2])[:count], generator=torch.Generator().manual_seed(seed))
    rng = np.random.default_rng(seed)
    return [TrainingSample(d, float(rng.normal()), float(rng.integers(1, 4))) for d in decisions]


def update(policy, samples: list, info=None, micro_batch_size: int | None = None, max_grad_norm: float = 0.05,
           optimizer=None, seed: int = 0) -> dict:
    """The trainer's update (:class:`~ptgpo_algos.updates.updater.Updater`, or across ranks the
    :class:`~ptgpo_algos.distributed.updater.ShardedUpdater` on ``policy`` already sharded) on ``samples``
    (this rank's block), one optimiser step (a mini-batch holds them all); its figures.

    SGD by default, not AdamW: Adam's first step is about ``lr * sign(gradient)``, which would hide a
    gradient scaled wrongly; SGD's moves each weight by ``lr`` times its gradient."""
    from ptgpo_algos.updates.settings import AlgorithmConfig, OptimConfig
    from ptgpo_algos.distributed.updater import ShardedUpdater
    from ptgpo_algos.updates.updater import Updater

    optim = OptimConfig(lr=0.5, epochs=1, minibatch_size=64, micro_batch_size=micro_batch_size,
                        max_grad_norm=max_grad_norm, kl_coef=0.0)
    optimizer = optimizer or torch.optim.SGD(policy.parameters(), lr=0.5)
    keywords = dict(rng=np.random.default_rng(seed), old_logprobs="rollout")
    if info is None:
        updater = Updater(policy, optimizer, optim, AlgorithmConfig(), **keywords)
    else:
        updater = ShardedUpdater(policy, optimizer, optim, AlgorithmConfig(), rank=info.rank, **keywords)
    return updater.run(samples)


def policy_weights(policy, root=None) -> dict[str, np.ndarray]:
    """The policy's full weights by the model's names (gathered from the shards under ``root``)."""
    if root is None:
        return {name: t.detach().numpy().copy() for name, t in policy.model.state_dict().items()}
    return _full_numpy(root)


def step_on_rank(info, path: str, count: int, micro_batch_size: int | None, max_grad_norm: float = 0.05) -> dict:
    """This rank's block of the batch, one update on the sharded tiny policy; the gathered weights
    (rank 0) and the update's figures."""
    from ptgpo_algos.distributed.policy import shard_policy

    policy = tiny_policy(path)
    samples = make_samples(policy, count)
    mine = [samples[i] for i in split_evenly(len(samples), info.world_size)[info.rank]]
    root = shard_policy(policy, FsdpConfig(), "cpu")
    figures = update(policy, mine, info, micro_batch_size=micro_batch_size, max_grad_norm=max_grad_norm)
    weights = policy_weights(policy, root)
    return {"figures": figures, "weights": weights if info.is_main else None}


def _full_numpy(module: torch.nn.Module, prefix: str = "model.", **keywords) -> dict[str, np.ndarray]:
    return {name: tensor.numpy().copy() for name, tensor in gathered_weights(module, prefix=prefix, **keywords)}


def resume_on_rank(info, folder: str, path: str) -> dict:
    """AdamW on the sharded tiny policy: an update on batch A, a checkpoint, an update on batch B; then a
    fresh policy loads the checkpoint and takes the update on B again. Both weights (rank 0)."""
    from ptgpo_algos.distributed.policy import shard_policy
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded, save_sharded

    def sharded(policy):
        root = shard_policy(policy, FsdpConfig(), "cpu")
        return policy, root, torch.optim.AdamW(policy.parameters(), lr=1e-2)

    def mine(policy, seed: int) -> list:
        samples = make_samples(policy, 6, seed)  # decided by the unsharded policy, as a rollout copy decides
        return [samples[i] for i in split_evenly(len(samples), info.world_size)[info.rank]]

    policy = tiny_policy(path)
    batch_a, batch_b = mine(policy, 1), mine(policy, 2)
    policy, root, optimizer = sharded(policy)
    update(policy, batch_a, info, optimizer=optimizer)
    save_sharded(folder, root, optimizer, {"iteration": 1, "rank_rng": [info.rank]})
    update(policy, batch_b, info, optimizer=optimizer)
    uninterrupted = policy_weights(policy, root)
    policy, root, optimizer = sharded(tiny_policy(path))
    extra = load_sharded(folder, root, optimizer)
    update(policy, batch_b, info, optimizer=optimizer)
    resumed = policy_weights(policy, root)
    return {"uninterrupted": uninterrupted, "resumed": resumed, "extra": extra} if info.is_main else {}


def collectives_on_rank(info) -> dict:
    """Rank-dependent metrics and lists, combined and gathered."""
    from ptgpo_algos.distributed.collectives import Metric, all_reduce, gather_in_order, reduce_metrics

    r = info.rank
    local = {"decisions": Metric(10.0 + r, kind="sum"), "success": Metric([0.5, 1.0][r], count=[2, 6][r]),
             "longest": Metric(float(3 - 2 * r), kind="max")}
    if r == 1:
        local["only_one"] = Metric(4.0, count=3)
    episodes = [f"episode {i}" for i in split_evenly(5, info.world_size)[r]]
    return {"metrics": reduce_metrics(local), "sum_max": (all_reduce([r + 1, 2.5]), all_reduce([r, -r], op="max")),
            "gathered": gather_in_order(episodes)}


def sync_on_rank(info, limit: int) -> dict:
    """The LoRA model sharded: its full weights and its adapters gathered, and the weight stream's
    messages of ``limit`` bytes reassembled (rank 0)."""
    from ptgpo_algos.distributed.gather import gathered_messages
    from ptgpo_algos.policy.weight_stream import assemble

    scorer = shard_model(RootRouted(build_model("qwen2", lora=True)), FsdpConfig(), "cpu")
    adapters = _full_numpy(scorer, adapters_only=True)
    messages = list(gathered_messages(scorer, limit, main=info.is_main, prefix="model."))
    sizes = [sum(piece.size for piece in pieces) for pieces, _ in messages]
    streamed = {name: tensor.numpy().copy() for name, tensor in assemble(messages)}
    return {"adapters": adapters, "streamed": streamed, "sizes": sizes} if info.is_main else {"sizes": sizes}


def all_on_rank(info, folder: str, path: str) -> dict:
    """Every multi-rank scenario in one launch (starting ranks is the slow part: torch and transformers
    are imported by each); ``path``: the tiny model's folder."""
    return {
        "clipped": step_on_rank(info, path, 7, 2),
        "unclipped": step_on_rank(info, path, 7, None, max_grad_norm=1e3),
        "lonely": step_on_rank(info, path, 1, None),
        "resume": resume_on_rank(info, folder, path),
        "collectives": collectives_on_rank(info),
        "sync": sync_on_rank(info, limit=20_000),
        "variables": {key: os.environ[key] for key in ENV_KEYS},
    }


# ----------------------------------------------------------------------------------------- training runs
#: The runs of tests/test_distributed_training.py: FrozenLake 3x3 with the tiny model (hidden 32, untrained).
def save_tiny_checkpoint(folder) -> tuple:
    """A single-process sharded checkpoint of the tiny model in ``folder``, and the model and optimiser
    it was saved from (to load it into again)."""
    from ptgpo_algos.distributed.sharded_checkpoint import save_sharded

    scorer = RootRouted(build_model("tiny"))
    optimizer = torch.optim.AdamW(scorer.parameters(), lr=1e-2)
    save_sharded(folder, scorer, optimizer, {"iteration": 4})
    return folder, scorer, optimizer


LAKE = {"desc": ["SFF", "FHF", "FFG"]}


def training_config(out_dir: str, algo: str, **change) -> dict:
    """A small run's config as plain data: 3 tasks of 4 episodes an iteration, greedy evaluation on 3
    seeds every 2 iterations, a checkpoint every 2."""
    data = dict(env_id="ptgpo/FrozenLake-v0", env_kwargs=LAKE, max_steps=8, algo=algo, group_size=4,
                tasks_per_iteration=3, iterations=3, eval_every=2, eval_seeds=3, eval_temperature=0,
                checkpoint_every=2, ppo_epochs=2, minibatch_size=16, out_dir=out_dir,
                tiny={"hidden_size": 32, "pretrain_steps": 0})
    data.update(change)
    return data


def train_on_rank(info, runs: list[dict], copies: dict[int, str]) -> list[dict]:
    """Each config of ``runs`` trained in turn on this rank (the :class:`Trainer` placed on it); after the run
    whose index is a key of ``copies``, rank 0 copies its folder there (a checkpoint to resume
    elsewhere). Rank 0 returns each run's decisions and iterations."""
    import shutil

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.distributed.collectives import all_reduce
    from ptgpo_algos.distributed.placement import Ranks
    from ptgpo_algos.training.trainer import Trainer

    out = []
    for index, run in enumerate(runs):
        summary = Trainer(TrainConfig.from_dict(run), placement=Ranks(info), progress=False).train()
        out.append({"decisions": summary.decisions, "iterations": summary.iterations})
        if index in copies and info.is_main:
            shutil.copytree(run["out_dir"], copies[index])
        all_reduce([0])  # the copy is complete before any rank goes on
    return out if info.is_main else []


# ----------------------------------------------------------------------------------------- vLLM engines
def vllm_sync_on_rank(info, folder: str, bucket: int, lora: bool, saved: str) -> dict:
    """Each rank's own vLLM engine (tests/test_vllm_distributed.py): the model in ``folder`` loaded,
    its engine built as the trainer builds it (before sharding), the model sharded with FSDP2; the
    sync check's noise floor measured; one AdamW step; the check run on the stale engine (no push),
    then after the gathered push in messages of ``bucket`` bytes; the final model saved to ``saved``
    by rank 0 from the gathered weights (``lora``: the same with LoRA adapters, pushed through the
    engine's own LoRA support). Returns each figure."""
    import os
    import time

    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.records import Decision
    from ptgpo_algos.distributed.engine import build_rank_engine, push_gathered
    from ptgpo_algos.distributed.policy import gathered_state, shard_policy
    from ptgpo_algos.policy.backends import WeightSyncError, sync_tolerance, sync_weights
    from ptgpo_algos.policy.hf import CausalLMPolicy

    adapters = {"r": 8, "alpha": 16} if lora else None
    config = TrainConfig.from_dict({"model": folder, "mode": "generate", "max_new_tokens": 8,
                                    "rollout_backend": "vllm", "lora": adapters})
    policy = CausalLMPolicy.from_pretrained(folder, mode="generate", max_new_tokens=8, lora=adapters)
    start = time.perf_counter()
    engine = build_rank_engine(config, policy, info)
    built = time.perf_counter() - start
    try:
        root = shard_policy(policy, FsdpConfig(), info.device)
        prompts = [policy.tokenizer.encode(text) for text in ("go to the kitchen", "take the apple", "open the door")]
        floor = engine.verify_sync(policy, prompts).mean_logprob_diff
        tolerance = sync_tolerance(config, floor)

        sampled = engine.sample_tokens(prompts, 8, seed=1)
        decisions = [Decision(text="", action=None, prompt_ids=list(p), response_ids=t, logprobs=lp, entropy=0.0)
                     for p, (t, lp) in zip(prompts, sampled)]
        # Adapters start at zero (peft's B) and move by about lr in a first AdamW step: a larger one.
        optimizer = torch.optim.AdamW(list(policy.parameters()), lr=1e-2 if lora else 1e-3)
        (-policy.score(decisions).logprobs.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        stale = engine.verify_sync(policy, prompts).mean_logprob_diff
        try:
            sync_weights(engine, policy, prompts, floor, tolerance, push=lambda: {})
            stale_refused = ""
        except WeightSyncError as error:
            stale_refused = str(error)
        engine.sync_bucket_bytes = bucket
        synced = sync_weights(engine, policy, prompts, floor, tolerance,
                              push=lambda: push_gathered(engine, policy, root, info.device))
        # The engine's own tokens are no sure thing after the step (the check would pass trivially on
        # log-probabilities of 0): their mean surprisal, in nats.
        surprisal = -float(np.mean([lp for _, row in engine.sample_tokens(prompts, 8, seed=3) for lp in row]))
        state = gathered_state(policy, root, keep=info.is_main)
        reloaded = None
        if info.is_main:
            policy.save_pretrained(saved, state_dict=state)
            fresh = CausalLMPolicy.from_pretrained(saved, mode="generate", max_new_tokens=8)
            reloaded = engine.verify_sync(fresh, prompts).mean_logprob_diff
        return {"floor": floor, "tolerance": tolerance, "stale": stale, "stale_refused": stale_refused,
                "after": synced["sync_mean_logprob_diff"], "messages": synced.get("sync_messages"),
                "bytes": synced["sync_bytes"], "reloaded": reloaded, "surprisal": surprisal,
                "cores": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), "engine_build_s": built,
                "sync_s": synced["sync_time_s"]}
    finally:
        engine.close()  # else the rank waits for the engine's processes at exit


def train_in_small_chunks(info, run: dict) -> list[dict]:
    """``run`` trained on this rank with the policy scoring in small pieces, so that every mini-batch
    is scored in several forward passes, a different number on each rank: at most 8 candidate rows a
    chunk (``policy.share_prefixes`` off), or one packed row a pass (on)."""
    from ptgpo_algos.policy import hf_scoring
    from ptgpo_algos.policy.hf import CausalLMPolicy

    init = CausalLMPolicy.__init__

    def small_chunks(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.max_rows = 8

    CausalLMPolicy.__init__ = small_chunks
    hf_scoring._PASS_MASK = 1
    return train_on_rank(info, [run], {})
