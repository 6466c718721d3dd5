"""Training across ranks (``ptgpo train --nproc N``, :mod:`ptgpo_algos.distributed.placement`) on 2 gloo
ranks on CPUs against the same trainer on 1, with the tiny model on FrozenLake 3x3.

One launch of 2 ranks and one of 1 run every scenario (starting ranks is the slow part):

* GiGPO (linear rollouts) with verl-agent's KL (0.01, to the sharded frozen reference) and entropy
  (0.001) terms under a decision budget of 200, and PTGPO (tree rollouts) for 3 iterations:
  the 2-rank run's metrics equal the 1-rank run's within ``REL`` (relative) / ``ABS`` (absolute),
  and both spend exactly the budget. Why not bit for bit: the rollouts are the same (each task is
  played with generators seeded from its own seed, on a full copy of the same weights), but each
  rank sums the gradient of its own samples before FSDP adds the ranks' sums, so the float32 sums
  run in another order: gradients differ in the last bits (relative ~1e-7), AdamW carries that into
  the weights, and the figures of the next iterations differ slightly (measured: at most 1.4e-7
  apart, 3e-6 relative for losses and gradient norms; 1.1e-5 relative for ``approx_kl_old``, a
  mean of differences of nearly equal log-probabilities). Counts, rewards, advantages and
  evaluations are equal.
* A 2-rank PTGPO run stopped after 2 iterations and resumed to 3 equals the uninterrupted run bit
  for bit (the same world size: the same sums in the same order); its 2-iteration checkpoint
  resumed on 1 rank gives the uninterrupted 2-rank run's metrics within the same tolerance.

* PPO with its learned critic (the value head replicated, its gradients summed, the advantages
  whitened over every rank's) on 2 ranks, 1 rank and in one process gives the same metrics within the
  same tolerance; stopped after 2 iterations and resumed on 2 ranks it equals the uninterrupted run
  bit for bit (the head and its AdamW moments in ``checkpoint/``); stopped on 2 ranks and resumed on 1,
  or stopped on 1 and resumed on 2, it gives the uninterrupted run's metrics within the tolerance; and
  with LoRA adapters its 2-rank run gives the 1-rank run's (launched apart: 3 launches).

* The single-process trainer (no ``--nproc``) on the GiGPO, PTGPO and BabyAI configs gives the 1- and
  2-rank runs' metrics within the same tolerance: it plays each task with generators of its own,
  seeded as the ranks seed them (``rollouts.seeding: per_task``).

* The PTGPO config started by ``torchrun`` (``ptgpo train --config``, no ``--nproc``) is the 2-rank
  run bit for bit.

Wall-clock figures differ by nature and are left out; so are the weight-sync check's figures
(``sync_*``), measured once per process on that process's first batch.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.distributed.launch import launch
from ptgpo_algos.distributed.placement import check_sharded_config
from ptgpo_algos.training.trainer import run_training

import distributed_scenarios as scenarios

REL, ABS = 1e-5, 1e-6
BUDGET = 200
GIGPO = {"total_decisions": BUDGET, "iterations": 4, "kl_coef": 0.01, "entropy_coef": 0.001}
#: PTGPO's runs train under a learning-rate schedule: the resumed runs must take it back where it was.
PTGPO = {"lr_schedule": "cosine", "lr_warmup_steps": 1, "lr_decay_steps": 40}
#: The strategies whose collections count more than the rollouts' common figures (PATR's, BPO's).
STRATEGIES = [("patr", "grpo", {"rollout": "patr"}), ("bpo", "bpo", {})]
#: PPO with its learned critic: a value head fast enough to learn something in 3 iterations.
PPO = {"algorithm": {"critic": {"value_head_lr": 2e-2}}, "seed": 3}
#: HiPER in generate mode (its plan/execute responses), its three heads fast enough to learn in 3 iterations.
HIPER = {"policy": {"mode": "generate", "max_new_tokens": 24}, "algorithm": {"critic": {"value_head_lr": 2e-2}}}
#: BabyAI's GoToLocal, 2 tasks of 4 episodes of at most 8 steps an iteration, 2 iterations.
BABYAI = {"env_id": "ptgpo/BabyAI-v0", "env_kwargs": {"level": "GoToLocal"}, "max_steps": 8, "tasks_per_iteration": 2,
          "iterations": 2, "eval_every": 2}


def _rows(folder, name="metrics"):
    rows = [json.loads(line) for line in open(folder / f"{name}.jsonl")]
    timed = ("_time_s", "_per_s", "/time_s", "/wait_s")
    # computed_tokens: a rank shares prefixes among its own samples only (compared on its own below).
    return [{k: v for k, v in row.items() if not k.endswith(timed) and not k.startswith("sync/")
             and k != "update/computed_tokens"} for row in rows]


def _assert_close(a: list[dict], b: list[dict]) -> None:
    """Rows equal key by key, their floats within REL of each other or ABS apart."""
    assert len(a) == len(b) and [sorted(x) for x in a] == [sorted(y) for y in b]
    for x, y in zip(a, b):
        for key, value in x.items():
            if isinstance(value, float) and isinstance(y[key], float):
                assert math.isclose(value, y[key], rel_tol=REL, abs_tol=ABS), (x["iteration"], key, value, y[key])
            else:
                assert value == y[key], (x["iteration"], key, value, y[key])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run's folder, after one launch of 2 ranks and one of 1."""
    root = tmp_path_factory.mktemp("sharded_runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTGPO_CACHE", str(root / "cache"))
        babyai = [scenarios.training_config(str(root / f"babyai-{algo}-{{ranks}}"), algo, **BABYAI)
                  for algo in ("gigpo", "ptgpo")]
        babyai += [scenarios.training_config(str(root / f"{name}-{{ranks}}"), algo, iterations=2, **change)
                   for name, algo, change in STRATEGIES]
        two = [scenarios.training_config(str(root / "gigpo-2"), "gigpo", **GIGPO),
               scenarios.training_config(str(root / "ptgpo-2"), "ptgpo", **PTGPO),
               scenarios.training_config(str(root / "cut-2"), "ptgpo", iterations=2, **PTGPO),
               scenarios.training_config(str(root / "cut-2"), "ptgpo", resume=True, **PTGPO),
               *[{**run, "out_dir": run["out_dir"].format(ranks=2)} for run in babyai],
               scenarios.training_config(str(root / "ppo-2"), "ppo", **PPO),
               scenarios.training_config(str(root / "ppo-cut-2"), "ppo", **{**PPO, "iterations": 2}),
               scenarios.training_config(str(root / "ppo-cut-2"), "ppo", resume=True, **PPO)]
        summaries_two = launch(scenarios.train_on_rank, 2, two, {2: str(root / "cut-1")})[0]
        one = [scenarios.training_config(str(root / "gigpo-1"), "gigpo", **GIGPO),
               scenarios.training_config(str(root / "ptgpo-1"), "ptgpo", **PTGPO),
               scenarios.training_config(str(root / "cut-1"), "ptgpo", resume=True, **PTGPO),
               *[{**run, "out_dir": run["out_dir"].format(ranks=1)} for run in babyai],
               scenarios.training_config(str(root / "ppo-1"), "ppo", **PPO)]
        summaries_one = launch(scenarios.train_on_rank, 1, one, {})[0]
        for run in [scenarios.training_config(str(root / "gigpo-0"), "gigpo", **GIGPO),
                    scenarios.training_config(str(root / "ptgpo-0"), "ptgpo", **PTGPO),
                    *[{**run, "out_dir": run["out_dir"].format(ranks=0)} for run in babyai[:2]],
                    scenarios.training_config(str(root / "ppo-0"), "ppo", **PPO)]:
            run_training(TrainConfig.from_dict(run), progress=False)  # one process: no --nproc
    return {"root": root, "two": summaries_two, "one": summaries_one}


@pytest.mark.distributed
@pytest.mark.parametrize("algo", ["gigpo", "ptgpo"])
def test_two_ranks_give_the_single_process_metrics(runs, algo):
    root = runs["root"]
    two, one = _rows(root / f"{algo}-2"), _rows(root / f"{algo}-1")
    _assert_close(two, one)
    assert _rows(root / f"{algo}-2", "curve") == _rows(root / f"{algo}-1", "curve")
    assert any(row.get("update/grad_norm", 0) > 0 for row in two)  # the updates trained
    computed = [sum(json.loads(line)["update/computed_tokens"]
                    for line in open(root / f"{algo}-{ranks}" / "metrics.jsonl")) for ranks in (2, 1)]
    assert computed[0] >= computed[1] > 0  # two ranks share fewer prefixes than one process
    assert [r["iteration"] for r in two][-1] == 3
    if algo == "gigpo":  # the same exact budget on 1 and 2 ranks; the KL term on
        assert all(row["update/kl"] > 0 for row in two[1:])
        assert runs["two"][0]["decisions"] == runs["one"][0]["decisions"] == BUDGET == two[-1]["run/total_decisions"]
    else:
        assert two[-1]["run/total_decisions_saved"] > 0  # prefix trees shared their steps
    if algo == "ptgpo":  # the schedule moved the learning rate
        assert len({row["update/lr"] for row in two if "update/lr" in row}) > 1
    assert (root / f"{algo}-2" / "final_model" / "config.json").is_file()
    assert sorted(p.name for p in (root / f"{algo}-2" / "checkpoint").iterdir()) == [
        "__0_0.distcp", "__1_0.distcp", "manifest.json", "state.pt"]


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["gigpo", "ptgpo", "babyai-gigpo", "babyai-ptgpo"])
def test_one_process_gives_the_metrics_of_one_and_two_ranks(runs, name):
    # One process played all of an iteration's tasks in one pass from the run's generators, so each
    # task's draws depended on the others': its metrics differed from --nproc's from the first iteration.
    root = runs["root"]
    alone = _rows(root / f"{name}-0")
    for ranks in (1, 2):
        _assert_close(alone, _rows(root / f"{name}-{ranks}"))
        assert _rows(root / f"{name}-0", "curve") == _rows(root / f"{name}-{ranks}", "curve")


@pytest.mark.distributed
@pytest.mark.parametrize("algo", ["gigpo", "ptgpo"])
def test_two_ranks_give_the_single_process_metrics_on_babyai(runs, algo):
    root = runs["root"]
    two, one = _rows(root / f"babyai-{algo}-2"), _rows(root / f"babyai-{algo}-1")
    _assert_close(two, one)
    assert _rows(root / f"babyai-{algo}-2", "curve") == _rows(root / f"babyai-{algo}-1", "curve")
    assert [row["iteration"] for row in two] == [1, 2] and two[-1]["run/total_decisions"] > 0


@pytest.mark.distributed
@pytest.mark.parametrize("name, prefix", [("patr", "rollout/patr_"), ("bpo", "rollout/bpo_")])
def test_a_strategy_s_own_counts_are_combined_across_ranks(runs, name, prefix):
    # Each rank's counts were added up as the common RolloutStats: PATR's and BPO's own figures were lost.
    two, one = _rows(runs["root"] / f"{name}-2"), _rows(runs["root"] / f"{name}-1")
    _assert_close(two, one)
    assert all(any(key.startswith(prefix) for key in row) for row in two)


@pytest.mark.distributed
def test_ppo_s_critic_across_ranks_gives_the_single_process_metrics_and_resumes_exactly(runs):
    # PPO was refused with --nproc: its value head and value loss were not sharded.
    root = runs["root"]
    two, one, alone = _rows(root / "ppo-2"), _rows(root / "ppo-1"), _rows(root / "ppo-0")
    _assert_close(two, one)
    _assert_close(two, alone)
    assert _rows(root / "ppo-2", "curve") == _rows(root / "ppo-1", "curve") == _rows(root / "ppo-0", "curve")
    # the head learnt, the same on both
    assert two[0]["critic/value_mean"] == 0.0 and two[-1]["critic/value_mean"] != 0.0
    assert all(row["update/value_loss"] > 0 and row["advantages/nonzero_fraction"] > 0 for row in two)
    assert _rows(root / "ppo-cut-2") == two  # stopped after 2 iterations, resumed on 2 ranks: bit for bit
    state = torch.load(root / "ppo-2" / "checkpoint" / "state.pt", weights_only=True)
    assert state["extra"]["critic"]["head"]["weight"].any()
    assert "value_head.weight" in (root / "ppo-2" / "checkpoint" / "manifest.json").read_text()  # and its moments


@pytest.mark.distributed
def test_ppo_resumes_on_another_number_of_ranks_and_trains_lora_adapters_across_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))

    def run(name, **change):
        return scenarios.training_config(str(tmp_path / name), "ppo", **{**PPO, **change})

    lora = {"lora": {"r": 4, "alpha": 8}}
    # Stopped after 2 iterations on 2 ranks and resumed on 1; stopped on 1 and resumed on 2.
    launch(scenarios.train_on_rank, 2, [run("two"), run("cut-two", iterations=2), run("lora-two", **lora)],
           {1: str(tmp_path / "two-then-one")})
    launch(scenarios.train_on_rank, 1, [run("cut-one", iterations=2), run("two-then-one", resume=True),
                                        run("lora-one", **lora)], {0: str(tmp_path / "one-then-two")})
    launch(scenarios.train_on_rank, 2, [run("one-then-two", resume=True)], {})
    two = _rows(tmp_path / "two")
    assert two[-1]["critic/value_mean"] != 0.0 and two[-1]["iteration"] == 3  # the head learnt: there was state to carry
    for resumed in ("two-then-one", "one-then-two"):
        _assert_close(_rows(tmp_path / resumed), two)
        assert _rows(tmp_path / resumed, "curve") == _rows(tmp_path / "two", "curve")
    # LoRA adapters and the value head across 2 ranks take the step of 1.
    lora_two = _rows(tmp_path / "lora-two")
    _assert_close(lora_two, _rows(tmp_path / "lora-one"))
    assert lora_two[-1]["critic/value_mean"] != 0.0 and all(row["update/value_loss"] > 0 for row in lora_two)
    saved = {p.name for p in (tmp_path / "lora-two" / "final_model").iterdir()}
    assert {"adapter_config.json", "critic.safetensors"} <= saved  # the adapters trained, and the head beside them


@pytest.mark.distributed
def test_hiper_across_ranks_gives_the_single_process_metrics(tmp_path, monkeypatch):
    # HiPER ran across ranks with each rank whitening its own episodes' credit and reporting its own
    # figures: not the run one process makes.
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))

    def run(name):
        # A lake of its own per task: each rank's states, values and credit differ from the other's.
        return scenarios.training_config(str(tmp_path / name), "hiper", env_kwargs={"size": 3}, max_steps=3,
                                         group_size=2, **HIPER)

    launch(scenarios.train_on_rank, 2, [run("two")], {})
    run_training(TrainConfig.from_dict(run("alone")), progress=False)  # one process: no --nproc
    two, alone = _rows(tmp_path / "two"), _rows(tmp_path / "alone")
    _assert_close(two, alone)
    assert _rows(tmp_path / "two", "curve") == _rows(tmp_path / "alone", "curve")
    assert two[0]["critic/value_mean"] == 0.0 and two[-1]["critic/value_mean"] != 0.0  # the heads learnt, the same on both
    assert all(row["update/value_high_loss"] > 0 and row["update/value_switch_loss"] > 0 and row["critic/hiper_segments"] >= 1
               for row in two)


@pytest.mark.distributed
def test_a_stopped_two_rank_run_resumes_exactly_on_two_ranks_and_within_tolerance_on_one(runs):
    root = runs["root"]
    uninterrupted = _rows(root / "ptgpo-2")
    assert _rows(root / "cut-2") == uninterrupted  # same world size: bit for bit
    assert _rows(root / "cut-2", "curve") == _rows(root / "ptgpo-2", "curve")
    _assert_close(_rows(root / "cut-1"), uninterrupted)  # written on 2 ranks, resumed on 1
    assert runs["one"][2] == runs["two"][1] == {"decisions": uninterrupted[-1]["run/total_decisions"], "iterations": 3}


@pytest.mark.distributed
def test_a_single_process_run_refuses_a_checkpoint_written_across_ranks(runs, tmp_path):
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(runs["root"] / "cut-2", folder)
    config = TrainConfig.from_dict(scenarios.training_config(str(folder), "ptgpo", resume=True, iterations=4, **PTGPO))
    with pytest.raises(ValueError, match=r"checkpoint written across ranks \(checkpoint/\): resume it with --nproc N"):
        run_training(config, progress=False)


@pytest.mark.parametrize("change, message", [
    ({"async_rollouts": True}, r"rollouts.asynchronous \(async_rollouts\): not with --nproc"),
    ({"objectives": [{"name": "hindsight"}]}, r"algorithm.objectives \(objectives\): hindsight do not run across"),
    ({"rollout": "3spo"}, r"rollouts.strategy \(rollout\): 3spo keeps what it learnt of the states across iterations"),
    ({"rollouts": {"seeding": "shared"}}, r"rollouts.seeding: shared draws every task's rollouts from one generator"),
])
def test_what_does_not_run_across_ranks_is_refused_with_the_setting_named(change, message):
    config = TrainConfig.from_dict(scenarios.training_config("unused", "gigpo", **change))
    with pytest.raises(ValueError, match=message):
        check_sharded_config(config)


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_each_rank_plays_with_a_transformers_copy_or_its_own_vllm_engine(backend):
    check_sharded_config(TrainConfig.from_dict(scenarios.training_config("unused", "gigpo", rollout_backend=backend)))


def test_a_rollout_backend_other_than_transformers_and_vllm_is_refused_across_ranks():
    from ptgpo_algos.policy.backends import ROLLOUT_BACKENDS

    ROLLOUT_BACKENDS.register("my-engine", lambda policy, config, device: policy)
    try:
        config = TrainConfig.from_dict(scenarios.training_config("unused", "gigpo", rollout_backend="my-engine"))
        with pytest.raises(ValueError, match=r"rollouts.backend \(rollout_backend\): 'my-engine' is not supported "
                                             r"with --nproc .*; use transformers or vllm"):
            check_sharded_config(config)
    finally:
        ROLLOUT_BACKENDS.unregister("my-engine")


def test_the_fsdp_section_is_checked_where_the_config_is_read():
    config = TrainConfig.from_dict({"optim": {"fsdp": {"param_dtype": "bfloat16", "reshard_after_forward": False}}})
    assert config.optim.fsdp.param_dtype == "bfloat16" and TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"optim.fsdp: unknown key\(s\) 'param_dtyp' \(did you mean 'param_dtype'"):
        TrainConfig.from_dict({"optim.fsdp.param_dtyp": "bfloat16"})
    with pytest.raises(ValueError, match="optim.fsdp.cpu_offload: expected true or false"):
        TrainConfig.from_dict({"optim": {"fsdp": {"cpu_offload": "yes"}}})


def test_the_whole_batch_layout_numbers_the_samples_in_rank_order():
    from ptgpo_algos.distributed.updater import passes, whole_layout
    from ptgpo_algos.updates.updater import BatchLayout

    # Rank 0 holds 3 samples (prompts 11, 12, 11), rank 1 holds 2 (prompts 12, 13).
    parts = [BatchLayout([[11], [12], [11]], [1.0, 2.0, 1.0], [True, False, True], [5, 6, 5]),
             BatchLayout([[12], [13]], [3.0, 1.0], [True, True], [7, 8])]
    whole = whole_layout(parts, rank=1)
    assert whole.groups == [[0, 2], [1, 3], [4]]  # the same prompt grouped across ranks
    assert whole.units == [1.0, 2.0, 1.0, 3.0, 1.0] and whole.trained == [True, False, True, True, True]
    assert (whole.offset, whole.count) == (3, 2)
    assert whole.local(["rank 1's first", "rank 1's second"], [0, 3, 4]) == ["rank 1's first", "rank 1's second"]
    assert whole_layout(parts, rank=0).local(["a", "b", "c"], [1, 3, 4]) == ["b"]


def _choice(prompt, count):
    from ptgpo_algos.records import Decision

    return Decision(text="", action=None, prompt_ids=list(prompt), response_ids=[1], logprobs=[0.0], entropy=0.0,
                    candidate_ids=[[c] for c in range(count)], choice=0, choice_logprob=0.0)


def test_a_rank_counts_the_chunks_its_policy_scores_not_its_micro_batches():
    # A micro-batch whose candidate rows exceed max_rows is scored in several chunks, and contexts
    # that recur (a tree's siblings) once: ranks that counted micro-batches instead made a different
    # number of FSDP collectives on a prefix tree across 2 ranks (a gloo size mismatch, SIGABRT).
    from ptgpo_algos.distributed.updater import passes
    from ptgpo_algos.policy.hf_scoring import PolicyScoring, candidate_chunks
    from ptgpo_algos.updates.samples import TrainingSample

    assert candidate_chunks([4, 4, 4], 8) == [(0, 2), (2, 3)]
    assert candidate_chunks([9, 1], 8) == [(0, 1), (1, 2)]  # a context beyond max_rows is a chunk alone
    assert candidate_chunks([], 8) == []
    policy = PolicyScoring()
    policy.mode, policy.max_rows, policy.share_prefixes = "choose", 8, False
    sample = lambda prompt, count: TrainingSample(_choice(prompt, count), 0.0, 1.0)  # noqa: E731
    distinct = [sample([p], 4) for p in range(3)]      # 12 rows: 2 chunks
    siblings = [sample([7], 4) for _ in range(3)]      # one context 3 times: 1 chunk
    assert passes(policy, [distinct]) == 2 and passes(policy, [siblings]) == 1
    assert passes(policy, [distinct, siblings, []]) == 3
    # In the update each chunk is a micro-batch of its own (its own backward).
    mixed = [distinct[0], siblings[0], distinct[1], siblings[1], distinct[2]]
    assert policy.one_chunk_parts([s.decision for s in mixed]) == [[0, 1], [2, 3], [4]]
    assert passes(policy, [mixed], one_chunk_each=True) == 3
    tree = siblings + [distinct[0]]  # the recurring context counts once: 8 rows, one chunk
    assert policy.one_chunk_parts([s.decision for s in tree]) == [[0, 1, 2, 3]]
    policy.mode = "generate"
    assert passes(policy, [distinct, siblings, []]) == 2
    assert policy.one_chunk_parts([s.decision for s in mixed]) == [[0, 1, 2, 3, 4]]
    # Shared-prefix scoring is one call a micro-batch; its passes are agreed across ranks inside it.
    policy.mode, policy.share_prefixes = "choose", True
    assert passes(policy, [distinct, siblings, []]) == 2
    assert policy.one_chunk_parts([s.decision for s in mixed]) == [[0, 1, 2, 3, 4]]


@pytest.mark.distributed
@pytest.mark.parametrize("share_prefixes", [False, True])
def test_a_prefix_tree_scored_in_chunks_of_different_counts_on_each_rank_trains(tmp_path, monkeypatch, share_prefixes):
    # Each rank's mini-batch was scored in as many chunks (or shared-prefix passes) as its rows asked,
    # and the ranks made different numbers of FSDP collectives: gloo's size check aborted the run (SIGABRT).
    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    run = scenarios.training_config(str(tmp_path / "run"), "ptgpo", iterations=2, minibatch_size=64,
                                    policy={"share_prefixes": share_prefixes})
    assert launch(scenarios.train_in_small_chunks, 2, run)[0][0]["iterations"] == 2
    rows = _rows(tmp_path / "run")
    assert rows[-1]["iteration"] == 2 and all(row["update/updates"] > 0 for row in rows[1:])


def test_a_task_s_most_decisions_are_what_its_strategy_declares():
    from ptgpo_algos.records import Task
    from ptgpo_algos.training.collectors import most_decisions

    task, five = Task("ptgpo/FrozenLake-v0", 3, {}, None), Task("ptgpo/FrozenLake-v0", 3, {}, 5)
    # Linear episodes and a tree's leaves: group_size x the horizon (the task's own step limit first).
    assert most_decisions(TrainConfig.from_dict({"algo": "gigpo", "group_size": 4}), task, 8) == 32
    assert most_decisions(TrainConfig.from_dict({"algo": "ptgpo", "group_size": 4}), five, 8) == 20
    # PATR: max_leaves x the horizon, whatever group_size says.
    patr = TrainConfig.from_dict({"algo": "grpo", "rollout": "patr", "group_size": 4, "patr": {"max_leaves": 10}})
    assert most_decisions(patr, five, 8) == 50
    # 3SPO: g_max x (1 + trajectories x (horizon - 1)): 4 x (1 + 3 x 7) and 4 x (1 + 3 x 4).
    spo3 = TrainConfig.from_dict({"algo": "3spo", "group_size": 2, "spo3": {"g_max": 4, "trajectories": 3}})
    assert (most_decisions(spo3, task, 8), most_decisions(spo3, five, 8)) == (88, 52)
    # BPO: 2 trunks x (8 + 4 forks x 8 at its one branch point); tests/test_bpo.py has more.
    assert most_decisions(TrainConfig.from_dict({"algo": "bpo", "group_size": 2}), task, 8) == 80


class Wandering:
    """Uniform over the admissible actions, drawn from the collection's generator, with a drawn entropy
    (BPO's branch points): the same decisions for the same generator."""

    def decide(self, contexts, generator=None):
        from ptgpo_algos.records import Decision

        decisions = []
        for context in contexts:
            action = context.admissible_actions[int(torch.randint(len(context.admissible_actions), (1,),
                                                                  generator=generator))]
            decisions.append(Decision(text=action, action=action, prompt_ids=[1], response_ids=[2], logprobs=[0.0],
                                      entropy=float(torch.rand(1, generator=generator))))
        return decisions


#: Each built-in strategy, sized to spend far more than group_size (2) x the horizon where it can.
BOUNDED = {
    "linear": {"algo": "grpo", "rollout": "linear", "group_size": 3},
    "tree": {"algo": "ptgpo", "group_size": 4, "initial_rollouts": 2},
    "patr": {"algo": "grpo", "rollout": "patr", "patr": {"initial_branches": 2, "every": 2, "max_leaves": 6}},
    "3spo": {"algo": "3spo", "spo3": {"g_max": 3, "trajectories": 4}},
    "bpo": {"algo": "bpo", "bpo": {"trunks": 2, "branch_points": 2, "forks": 2}},
}


@pytest.mark.parametrize("strategy", BOUNDED)
@pytest.mark.parametrize("seed", range(4))
def test_a_group_never_spends_more_than_its_strategy_declares(strategy, seed):
    # The trainer caps each task's group at its declared most (share_budget gives each task at most
    # that): a group that could spend more would be cut short by a budget it has not used up.
    import numpy as np

    from ptgpo_algos.records import Task
    from ptgpo_algos.rollouts.registry import collect_with, new_memory
    from ptgpo_algos.training.collectors import most_decisions

    config = TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "group_size": 2, **BOUNDED[strategy]})
    rollouts = config.rollouts
    task = Task("ptgpo/FrozenLake-v0", seed, {"desc": ["SFF", "FFF", "FFG"]}, 6)

    def collect(cap):
        batch, stats = collect_with(rollouts.strategy, Wandering(), [task], rollouts, rng=np.random.default_rng(seed),
                                    generator=torch.Generator().manual_seed(seed), max_decisions=cap,
                                    memory=new_memory(rollouts.strategy, rollouts))
        return [[step.sent for step in trajectory.steps] for group in batch for trajectory in group], stats.decisions

    cap = most_decisions(config, task, 6)
    free, capped = collect(None), collect(cap)
    assert free[1] <= cap
    assert capped == free  # capped at its most, the group plays as it would unbounded


def test_ptgpo_train_nproc_refuses_before_starting_a_process(capsys):
    from ptgpo_harness.cli import main

    assert main(["train", "--nproc", "2", "--async-rollouts", "--env", "ptgpo/FrozenLake-v0", "--no-progress"]) == 2
    assert "ptgpo train: rollouts.asynchronous (async_rollouts): not with --nproc" in capsys.readouterr().err


@pytest.mark.distributed
def test_the_same_config_under_torchrun_is_the_same_run(runs, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ptgpo_algos.distributed.launch import free_port

    root, out = runs["root"], tmp_path / "torchrun"
    config = tmp_path / "config.yaml"  # JSON is YAML
    config.write_text(json.dumps(scenarios.training_config(str(out), "ptgpo", **PTGPO)))
    # A rank that dies in native code prints its Python threads' stacks (faulthandler).
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1",
           "PTGPO_CACHE": str(root / "cache"), "PYTHONFAULTHANDLER": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
                           "-m", "ptgpo_harness.cli", "train", "--config", str(config), "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=600)
    # The ranks' own words come first in stderr; torchrun's report of them last.
    assert done.returncode == 0, f"{done.stderr[:3000]}\n...\n{done.stderr[-1500:]}\nstdout: {done.stdout[-1000:]}"
    assert json.loads(done.stdout[done.stdout.index("{"):])["out_dir"] == str(out)  # rank 0 alone reports
    assert _rows(out) == _rows(root / "ptgpo-2") and _rows(out, "curve") == _rows(root / "ptgpo-2", "curve")
