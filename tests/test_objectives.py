"""The auxiliary objectives (ptgpo_algos.objectives): config checks, routing, masks, weights, folds and the
direction of each gradient on hand-built batches, then short training runs through the command line."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ptgpo_algos.advantages import StepAdvantages
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.metrics import TIMED
from ptgpo_algos.records import Context, Decision, Step, Trajectory
from ptgpo_algos.objectives import OBJECTIVES, Objective, ObjectiveInputs, ObjectiveSpec
from ptgpo_algos.objectives.base import candidate_logprobs, split_parts
from ptgpo_algos.objectives.isdpo import ISDPO, hint_context, isdpo_unit_loss, mixed_kl, route_groups, teacher_weights
from ptgpo_algos.objectives.mcgpo import MCGPO, context_keys, group_pairs, pair_loss
from ptgpo_algos.objectives.seed import SEED, seed_unit_loss, template_skill

ACTIONS = ["left", "right", "up"]


# ----------------------------------------------------------------------------- a policy of a table
class _Table(torch.nn.Module):
    def __init__(self, rows: int):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(rows, len(ACTIONS)))


class TablePolicy:
    """``choose`` mode over ACTIONS; each distinct task line is a row of logits (a prompt is its row)."""

    mode = "choose"
    device = torch.device("cpu")

    def __init__(self, rows: int = 8):
        self.model = _Table(rows)
        self.rows: dict[str, int] = {}
        self.prompts = SimpleNamespace(prompt_ids=self.prompt_ids)

    def prompt_ids(self, context: Context) -> list[int]:
        return [self.rows.setdefault(context.task, len(self.rows))]

    def score(self, decisions, *, entropy_grad=True):
        logp = F.log_softmax(self.model.logits[[d.prompt_ids[0] for d in decisions]], -1)
        chosen = logp[torch.arange(len(decisions)), [d.choice for d in decisions]][:, None]
        entropy = -(logp.exp() * logp).sum(-1, keepdim=True)
        return SimpleNamespace(logprobs=chosen, entropy=entropy, mask=torch.ones_like(chosen))

    def parameters(self):
        return self.model.parameters()

    def reference_policy(self):
        clone = copy.copy(self)
        clone.model = copy.deepcopy(self.model).requires_grad_(False)
        return clone

    def probs(self, task: str) -> torch.Tensor:
        return F.softmax(self.model.logits[self.rows[task]].detach(), -1)


def _step(policy, task, state, action, *, plan=None, valid=True, achieved=None, reward=0.0):
    context = Context(task, f"at {state}", list(ACTIONS))
    choice = ACTIONS.index(action) if action in ACTIONS else 0
    with torch.no_grad():
        decision = Decision(action, action, policy.prompt_ids(context), [choice], [0.0], 0.0,
                            candidate_ids=[[i] for i in range(len(ACTIONS))], choice=choice)
        decision.choice_logprob = float(policy.score([decision]).logprobs[0, 0])
    extras = {"expert_plan": plan} if plan is not None else {}
    return Step(state, action, reward, valid, [choice], decision, context, achieved, extras)


def _trajectory(steps, won=False):
    return Trajectory(steps, {"won": won})


def _sgd(policy, loss, lr=0.5):
    policy.model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in policy.parameters():
            p -= lr * p.grad


# ----------------------------------------------------------------------------- config and registry
@pytest.mark.parametrize("objectives, message", [
    ([{"name": "isdp"}], "unknown objective 'isdp' (did you mean 'isdpo'?); choose one of"),
    ([{"name": "seed", "beta": 1.0}], "unknown key(s) 'beta' for objective 'seed'; valid keys: weight, beta_opd"),
    ([{"name": "mcgpo", "folds": 1}], "folds=1 is invalid for objective 'mcgpo'"),
    ([{"name": "isdpo", "weight": -1}], "weight=-1 is invalid for objective 'isdpo'"),
    ([{"name": "isdpo", "hint_template": "{task}"}], "hint_template='{task}' is invalid"),
    ([{"name": "seed"}, {"name": "seed"}], "objective 'seed' is listed twice"),
    ({"name": "seed"}, "expected a list of objectives"),
])
def test_bad_objectives_fail_at_the_edge_with_the_key_to_fix(objectives, message):
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"objectives": objectives})
    assert "algorithm.objectives (objectives)" in str(error.value) and message in str(error.value)


def test_objectives_are_complete_in_every_spelling():
    from ptgpo_harness.commands.train import parse_set

    flat = TrainConfig.from_dict(parse_set(["objectives=[{name: seed}, {name: mcgpo, beta: 2}]"]))
    dotted = TrainConfig.from_dict({"algorithm.objectives": ["seed", {"name": "mcgpo", "beta": 2}]})
    assert flat.algorithm.objectives == dotted.algorithm.objectives
    seed, mcgpo = flat.algorithm.objectives
    assert seed == {"name": "seed", "weight": 0.01, "beta_opd": 5.0, "max_skills": 5, "skill_source": "auto",
                    "skill_template": "{task} (skills from an earlier attempt: {skill})"}
    assert mcgpo["beta"] == 2.0 and mcgpo["folds"] == 2 and mcgpo["weight"] == 1.0
    assert TrainConfig.from_dict(flat.to_dict()).algorithm.objectives == flat.algorithm.objectives
    assert TrainConfig().algorithm.objectives == []


def test_split_parts_cover_every_item_once():
    items = list(range(7))
    parts = [split_parts(items, 3, i) for i in range(3)]
    assert parts == [[0, 1], [2, 3, 4], [5, 6]] and split_parts(items[:1], 3, 0) == []


# ----------------------------------------------------------------------------- I-SDPO
def test_isdpo_routes_only_all_failed_groups_with_privileged_information():
    policy = TablePolicy()
    won = [_trajectory([_step(policy, "t", "a", "left", plan=["right"])], won=True),
           _trajectory([_step(policy, "t", "a", "up", plan=["right"])])]
    failed = [_trajectory([_step(policy, "t", "a", "up", plan=["right"]), _step(policy, "t", "b", "up", plan=["up"])]),
              _trajectory([_step(policy, "t", "a", "left", plan=["right"])])]
    unprivileged = [_trajectory([_step(policy, "t", "a", "up")]), _trajectory([_step(policy, "t", "a", "left")])]
    batch = [won, failed, unprivileged]
    assert route_groups(batch, None) == [False, True, False]
    # A threshold on the return replaces the won flag.
    assert route_groups([failed], -1.0) == [False]
    advantages = StepAdvantages.from_nested([[[0.5], [-0.5]], [[0.3, -0.1], [0.2]], [[0.1], [0.0]]])
    routed = ISDPO(alpha=0.5, tau_ema=0.05, beta=1.0, is_clip=2.0, threshold=None, hint_actions=1,
                   hint_template="{task} ({plan})").route(batch, advantages)
    assert routed.nested() == [[[0.5], [-0.5]], [[0.0, 0.0], [0.0]], [[0.1], [0.0]]]


def test_isdpo_hint_and_mixed_kl_on_hand_computed_numbers():
    context = Context("go home", "here", ["a", "b"], [("there", "a")])
    hinted = hint_context(context, ["b", "a", "a"], "{task} (next: {plan})", 2)
    assert hinted.task == "go home (next: b, a)" and hinted.history == context.history
    student = torch.log(torch.tensor([0.5, 0.5]))
    teacher = torch.log(torch.tensor([0.8, 0.2]))
    forward = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    reverse = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    assert float(mixed_kl(student, teacher, 0.25)) == pytest.approx(0.75 * forward + 0.25 * reverse)
    weights = teacher_weights(torch.tensor([0.0, math.log(2.0)]), 1.0)  # exp(-H) = 1, 0.5
    assert weights.tolist() == pytest.approx([1 / 0.75, 0.5 / 0.75])


def test_isdpo_generate_surrogate_numbers_and_direction():
    student = torch.tensor([-1.0], requires_grad=True)
    teacher, old = torch.tensor([-0.5]), torch.tensor([-1.0])
    loss = isdpo_unit_loss(student, teacher, old, 0.5, 2.0)
    # ratio 1; reverse 1 * (-1 + 0.5) = -0.5; forward -min(e^0.5, 2) * -1 = 1.6487
    assert float(loss.detach()) == pytest.approx(0.5 * math.exp(0.5) + 0.5 * -0.5)
    loss.backward()
    # d/dl: forward -e^0.5, reverse ratio * (l - l_tea) = -0.5: the teacher-preferred token rises.
    assert float(student.grad) == pytest.approx(0.5 * -math.exp(0.5) + 0.5 * -0.5)


def _isdpo(policy):
    objective = ISDPO(alpha=0.5, tau_ema=0.5, beta=1.0, is_clip=2.0, threshold=None, hint_actions=1,
                      hint_template="{task} (next: {plan})")
    # The teacher reads the hint: its row for the hinted task prefers "right".
    group = [_trajectory([_step(policy, "t", "a", "up", plan=["right"])]),
             _trajectory([_step(policy, "t", "a", "left", plan=["right"])])]
    policy.prompt_ids(hint_context(group[0].steps[0].context, ["right"], "{task} (next: {plan})", 1))
    with torch.no_grad():
        policy.model.logits[policy.rows["t (next: right)"]] = torch.tensor([0.0, 3.0, 0.0])
    return objective, [group]


def test_isdpo_distillation_raises_the_teacher_preferred_action():
    policy = TablePolicy()
    objective, batch = _isdpo(policy)
    zeros = StepAdvantages.from_nested([[[0.0], [0.0]]])
    objective.route(batch, zeros)
    items, stats = objective.prepare(ObjectiveInputs(batch, zeros, policy, np.random.default_rng(0)))
    assert stats["routed_share"] == 1.0 and len(items) == 2
    assert items[0].teacher_logp.exp().argmax() == 1 and items[0].decision.prompt_ids == [policy.rows["t"]]
    before = policy.probs("t")[1]
    loss, _ = objective.loss(policy, items)
    _sgd(policy, loss)
    assert policy.probs("t")[1] > before + 0.05
    # The EMA teacher moves tau_ema of the way to the policy.
    teacher_row = objective.teacher.model.logits[policy.rows["t"]].clone()
    objective.after_update(ObjectiveInputs(batch, zeros, policy, np.random.default_rng(0)), None)
    expected = 0.5 * teacher_row + 0.5 * policy.model.logits[policy.rows["t"]].detach()
    assert torch.allclose(objective.teacher.model.logits[policy.rows["t"]], expected)


def test_candidate_logprobs_are_the_full_candidate_distribution():
    policy = TablePolicy()
    step = _step(policy, "t", "a", "up")
    with torch.no_grad():
        policy.model.logits[0] = torch.tensor([1.0, 2.0, 3.0])
    (logp,) = candidate_logprobs(policy, [step.decision])
    assert torch.allclose(logp, F.log_softmax(torch.tensor([1.0, 2.0, 3.0]), -1))


# ----------------------------------------------------------------------------- SEED
def test_seed_template_says_what_the_trajectory_achieved():
    policy = TablePolicy()
    won = _trajectory([_step(policy, "t", "a", "left"), _step(policy, "t", "b", "bad", valid=False),
                       _step(policy, "t", "b", "up", achieved={"open the door": None})], won=True)
    assert template_skill(won, 5) == ("these actions solved the task: left, up; 'up' completed 'open the door'; "
                                      "'bad' was not admissible")
    failed = _trajectory([_step(policy, "t", "a", "left")])
    assert template_skill(failed, 1) == "the task was not solved in 1 steps"


def test_seed_gate_and_term_on_hand_computed_numbers():
    logp = torch.tensor([-1.0, -1.0], requires_grad=True)
    skill = torch.tensor([-0.5, -3.0])
    loss = seed_unit_loss(logp, skill, 5.0)
    gates = [1 / (1 + math.exp(-2.5)), 1 / (1 + math.exp(10.0))]
    assert loss.tolist() == pytest.approx([gates[0] * 0.5, gates[1] * -2.0])
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-gates[0], -gates[1]])  # descent raises both, the first most


def test_seed_skills_shape_training_prompts_only():
    policy = TablePolicy()
    trajectory = _trajectory([_step(policy, "t", "a", "right", reward=1.0)], won=True)
    template = "{task} [{skill}]"
    skilled = "t [these actions solved the task: right]"
    policy.prompt_ids(Context(skilled, "", []))
    with torch.no_grad():
        policy.model.logits[policy.rows[skilled]] = torch.tensor([0.0, 2.0, 0.0])
    objective = SEED(beta_opd=5.0, max_skills=5, skill_source="auto", skill_template=template)
    items, stats = objective.prepare(ObjectiveInputs([[trajectory]], StepAdvantages.from_nested([[[0.0]]]), policy,
                                                     np.random.default_rng(0)))
    assert stats["skills"] == 1 and objective.source_for(policy) == "template"
    # The step's own decision keeps its prompt: skills are never part of what evaluation renders.
    assert items[0].decision.prompt_ids == [policy.rows["t"]] == trajectory.steps[0].decision.prompt_ids
    before = policy.probs("t")[1]
    loss, figures = objective.loss(policy, items)
    assert figures["gate"] > 0.9
    _sgd(policy, loss)
    assert policy.probs("t")[1] > before


# ----------------------------------------------------------------------------- MCGPO
def _mcgpo_group(policy):
    # Folds by index: 0 and 2 are compared with 1 and 3's outcomes, and the other way round.
    return [
        _trajectory([_step(policy, "t", "s", "left")]),
        _trajectory([_step(policy, "t", "s", "left", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right"), _step(policy, "t", "s", "right")]),
    ]


SETTINGS = dict(folds=2, rules=("exact", "coarse"), min_support=2, min_gap=0.0, support_prior=1.0, coarse_weight=0.5,
                gamma=1.0)


def test_mcgpo_folds_orient_each_fold_by_the_others_outcomes():
    policy = TablePolicy()
    group = _mcgpo_group(policy)
    pairs = group_pairs(group, **SETTINGS)
    assert len(pairs) == 3
    first, *others = pairs
    # Fold 0 (trajectories 0, 2) by fold 1: left 1.0, right 0.0 -> trajectory 0's "left" is preferred,
    # though its own outcome was 0; each value rests on one trajectory: w = 1 / (1 + 1).
    assert (first.better, first.worse, first.weight, first.rule) == (group[0][0], group[2][0], 0.5, "exact")
    # Fold 1 by fold 0: right 1.0, left 0.0; each of trajectory 3's two decisions in the state is compared.
    assert [(p.better, p.worse) for p in others] == [(group[3][0], group[1][0]), (group[3][1], group[1][0])]
    assert {p.better for p in pairs} | {p.worse for p in pairs} <= {s for t in group for s in t.steps}


def test_mcgpo_support_rule_falls_back_to_the_coarse_context():
    policy = TablePolicy()
    done = {"lit the lamp": None}
    group = [
        _trajectory([_step(policy, "t", "r", "up", achieved=done), _step(policy, "t", "s", "left")]),
        _trajectory([_step(policy, "t", "s", "left", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right")]),
    ]
    assert context_keys(group[0])[1] == {"exact": ("s", ("lit the lamp",)), "coarse": ("s",)}
    pairs = group_pairs(group, **SETTINGS)
    coarse = [p for p in pairs if p.rule == "coarse"]
    # Trajectory 0's second step has progress no other decision shares: it is matched by the coarse
    # rule (w = 0.5 * 1 / (1 + 1)); in fold 1 the exact context has one valued action, so coarse again.
    assert [(p.better, p.worse, p.weight) for p in coarse] == [(group[0][1], group[2][0], 0.25),
                                                                (group[3][0], group[1][0], 0.25)]
    # Without enough distinct actions in the other folds no pair is made.
    assert group_pairs(group, **{**SETTINGS, "min_support": 3}) == []
    assert all(p.rule == "exact" for p in group_pairs(group, **{**SETTINGS, "rules": ("exact",)}))


def test_mcgpo_values_discount_the_steps_left_so_a_wasted_step_loses():
    policy = TablePolicy()
    group = [
        _trajectory([_step(policy, "t", "s", "up"), _step(policy, "t", "s", "right", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "up"), _step(policy, "t", "s", "right", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right", reward=1.0)]),
        _trajectory([_step(policy, "t", "s", "right", reward=1.0)]),
    ]
    # Every trajectory succeeded: undiscounted, standing still ("up") and moving tie; discounted, "up"
    # is worth 0.9 (one step more to go) against 1.0.
    assert group_pairs(group, **SETTINGS) == []
    pairs = group_pairs(group, **{**SETTINGS, "gamma": 0.9})
    assert pairs and all(p.better.action == "right" and p.worse.action == "up" for p in pairs)


def test_mcgpo_pair_loss_numbers_and_direction():
    better = torch.tensor([-1.0], requires_grad=True)
    loss = pair_loss(better, torch.tensor([-2.0]), torch.tensor([0.5]), 1.0)
    assert float(loss.detach()) == pytest.approx(-0.5 * math.log(1 / (1 + math.exp(-1.0))))
    loss.backward()
    assert float(better.grad) < 0

    policy = TablePolicy()
    group = _mcgpo_group(policy)
    objective = MCGPO(beta=1.0, folds=2, rules="exact-coarse", min_support=2, min_gap=0.0, support_prior=1.0,
                      coarse_weight=0.5, max_pairs=1, gamma=0.95, margin="reference")
    items, stats = objective.prepare(ObjectiveInputs([group], StepAdvantages.from_nested([]), policy,
                                                     np.random.default_rng(0)))
    assert stats["pairs"] == 1 and len(items) == 1  # capped
    preferred = items[0].better.action
    before = policy.probs("t")[ACTIONS.index(preferred)]
    loss, _ = objective.loss(policy, items)
    # Against the rollout policy the margin starts at 0: -w log sigmoid(0) with w = 1 / (1 + 1).
    assert float(loss.detach()) == pytest.approx(0.5 * math.log(2.0))
    _sgd(policy, loss)
    assert policy.probs("t")[ACTIONS.index(preferred)] > before
    # In absolute terms the margin is the log-probabilities' own difference.
    with torch.no_grad():
        policy.model.logits[policy.rows["t"]] = torch.tensor([2.0, 0.0, 0.0])
    absolute = MCGPO(**{**objective.__dict__["settings"], "rules": "exact-coarse", "beta": 1.0, "max_pairs": 1,
                        "margin": "absolute"})
    loss, _ = absolute.loss(policy, items)
    gap = 2.0 if preferred == "left" else -2.0
    assert float(loss.detach()) == pytest.approx(-0.5 * math.log(1 / (1 + math.exp(-gap))))


# ----------------------------------------------------------------------------- in the trainer
def test_objectives_add_their_loss_to_every_ppo_step():
    from ptgpo_algos.updates.settings import OptimConfig
    from ptgpo_algos.updates.samples import TrainingSample
    from ptgpo_algos.updates.updater import ppo_update

    policy = TablePolicy()
    calls = []
    step = _step(policy, "t", "a", "left")
    sample = TrainingSample(step.decision, 0.0, 1.0)

    def auxiliary(index, parts):
        calls.append((index, parts))
        (-policy.score([step.decision]).logprobs.sum()).backward()
        return {"aux_loss": 1.0}

    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    before = policy.probs("t")[0]
    optim = OptimConfig(clip_ratio=0.2, entropy_coef=0.0, kl_coef=0.0, max_grad_norm=10.0, epochs=2, minibatch_size=4)
    stats = ppo_update(policy, optimizer, [sample], optim, rng=np.random.default_rng(0), auxiliary=auxiliary)
    # No RL unit (zero advantage), yet each epoch's one mini-batch steps with the auxiliary term.
    assert calls == [(0, 1), (0, 1)] and stats["updates"] == 2 and policy.probs("t")[0] > before


class _Counting(Objective):
    def __init__(self, *, scale: float):
        self.scale, self.seen = scale, []

    def prepare(self, inputs):
        steps = [s for g in inputs.batch for t in g for s in t.steps]
        self.seen.append(len(steps))
        return steps, {"steps": len(steps)}

    def loss(self, policy, items):
        scored = policy.score([s.decision for s in items])
        return -self.scale * scored.logprobs.mean(), {}


def test_an_objective_registered_from_outside_trains(tmp_path, monkeypatch):
    from ptgpo_algos.advantages.config import ConfigKey
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    built = []

    def build(**params):
        built.append(_Counting(**params))
        return built[-1]

    OBJECTIVES.register("counting", ObjectiveSpec("counting", build, {"scale": 1.0},
                                                  {"scale": ConfigKey("scale", "a number", float)}))
    try:
        config = TrainConfig.from_dict(dict(
            env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=6, group_size=4,
            tasks_per_iteration=2, iterations=2, eval_every=2, eval_seeds=2, out_dir=str(tmp_path / "run"),
            tiny={"hidden_size": 32, "pretrain_steps": 0}, algo="grpo",
            objectives=[{"name": "counting", "scale": 0.5, "weight": 0.1}]))
        summary = run_training(config, progress=False)
    finally:
        OBJECTIVES.unregister("counting")
    rows = [json.loads(line) for line in summary.metrics_path.read_text().splitlines()]
    assert built[-1].scale == 0.5 and [r["objective/counting/steps"] for r in rows] == built[-1].seen
    assert all(r["objective/counting/items"] > 0 and "objective/counting/loss" in r for r in rows)


@pytest.mark.parametrize("objective, algo, env", [
    ("{name: isdpo}", "gigpo", "ptgpo/FrozenLake-v0"),
    ("{name: seed, weight: 0.1}", "grpo", "ptgpo/FrozenLake-v0"),
    ("{name: mcgpo}", "g2po", "ptgpo/FrozenLake-v0"),
])
def test_each_objective_trains_from_the_command_line(tmp_path, monkeypatch, objective, algo, env):
    from ptgpo_harness.cli import main

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["train", "--env", env, "--algo", algo, "--iterations", "2", "--group-size", "4", "--tasks", "2",
            "--eval-episodes", "2", "--out", str(out), "--set", "env_kwargs={desc: [SFF, FHF, FFG]}",
            "--set", "max_steps=6", "--set", "tiny={hidden_size: 32, pretrain_steps: 0}",
            "--set", f"objectives=[{objective}]"]
    assert main(argv) == 0
    name = objective.split()[1].rstrip(",}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(f"objective/{name}/items" in r for r in rows)
    assert json.loads((out / "config.json").read_text())["algorithm"]["objectives"][0]["name"] == name
    if name == "isdpo":
        assert all(0.0 <= r["objective/isdpo/routed_share"] <= 1.0 for r in rows)


def test_rollouts_record_the_experts_next_action_only_when_asked(tmp_path):
    from ptgpo_algos.records import Task
    from ptgpo_algos.policy import load_policy
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model
    from ptgpo_algos.rollouts.collection import collect_rollouts
    import gymnasium as gym

    path = build_tiny_model(TinyModelSpec(hidden_size=32, pretrain_steps=0), env_ids=["ptgpo/FrozenLake-v0"],
                            cache_dir=tmp_path / "cache")
    policy = load_policy(path)
    tasks = [Task("ptgpo/FrozenLake-v0", 5, {"desc": ["SFF", "FHF", "FFG"]}, 6)]

    def play(expert):
        return collect_rollouts(policy, tasks, group_size=2, rng=np.random.default_rng(1),
                                generator=torch.Generator().manual_seed(1), expert=expert)[0]

    plain, recorded = play(False), play(True)
    assert all(not s.extras for t in plain[0] for s in t.steps)
    env = gym.make("ptgpo/FrozenLake-v0", desc=["SFF", "FHF", "FFG"], max_steps=6)
    for trajectory in recorded[0]:
        env.reset(seed=5)
        for step in trajectory.steps:
            assert step.extras["expert_plan"] == [env.unwrapped.expert_action()]
            env.step(step.sent)
    # Recording changes nothing else about the rollouts.
    assert [[s.action for s in t.steps] for t in plain[0]] == [[s.action for s in t.steps] for t in recorded[0]]


# ----------------------------------------------------------------------------- in the benchmark
def _bench(method):
    return {"name": "t", "budget": 100, "seeds": [0], "methods": [method],
            "environments": [{"id": "ptgpo/FrozenLake-v0", "train_seeds": {"count": 10}, "eval_seeds": [100]}]}


def test_bench_methods_take_objectives_beside_their_estimator():
    from ptgpo_harness.bench import BenchConfig, plan_cells
    from ptgpo_algos.config import merge_overrides

    config = BenchConfig.from_dict(_bench({"name": "g2po+mcgpo", "algo": "g2po", "objectives": [{"name": "mcgpo"}]}))
    (cell,) = plan_cells(config)
    trained = TrainConfig.from_dict(merge_overrides(cell.spec, {"tiny": {"pretrain_steps": 0}}))
    assert trained.algorithm.name == "g2po" and [o["name"] for o in trained.algorithm.objectives] == ["mcgpo"]


@pytest.mark.parametrize("method, message", [
    ({"algo": "grpo", "objectives": [{"name": "sed"}]}, r"methods\[0\].objectives\[0\]: unknown objective 'sed'"),
    ({"algo": "grpo", "objectives": ["seed"], "train": {"objectives": ["seed"]}}, "both as"),
])
def test_bench_objectives_are_checked_with_the_method_named(method, message):
    from ptgpo_harness.bench import BenchConfig, BenchError

    with pytest.raises(BenchError, match=message):
        BenchConfig.from_dict(_bench(method))


def test_isdpo_refuses_lora_before_any_work():
    with pytest.raises(ValueError, match="isdpo needs a full copy of the model's weights"):
        TrainConfig.from_dict({"objectives": ["isdpo"], "policy.lora": {"r": 8}})


def test_a_resumed_isdpo_run_reproduces_the_uninterrupted_one(tmp_path, monkeypatch):
    from ptgpo_algos.training.trainer import run_training

    monkeypatch.setenv("PTGPO_CACHE", str(tmp_path / "cache"))
    timing = TIMED

    def config(out, iterations, **change):
        return TrainConfig.from_dict(dict(
            env_id="ptgpo/FrozenLake-v0", env_kwargs={"desc": ["SFF", "FHF", "FFG"]}, max_steps=6, group_size=4,
            tasks_per_iteration=2, iterations=iterations, eval_every=3, eval_seeds=2, checkpoint_every=1,
            out_dir=str(tmp_path / out), tiny={"hidden_size": 32, "pretrain_steps": 0}, algo="gigpo",
            objectives=[{"name": "isdpo", "tau_ema": 0.5}], **change))

    def rows(summary):
        return [{k: v for k, v in json.loads(line).items() if k not in timing}
                for line in summary.metrics_path.read_text().splitlines()]

    whole = rows(run_training(config("whole", 3), progress=False))
    run_training(config("parts", 2), progress=False)
    resumed = rows(run_training(config("parts", 3, resume=True), progress=False))
    assert any(r["objective/isdpo/items"] for r in whole) and resumed == whole


def test_seed_skills_written_by_the_policy_drop_answers_without_an_action():
    policy = TablePolicy()
    trajectories = [_trajectory([_step(policy, "t", "a", "right", reward=1.0)], won=True),
                    _trajectory([_step(policy, "t", "a", "left")])]
    seen = []

    def decide(contexts, *, greedy=False, **_):
        seen.extend(contexts)
        return [SimpleNamespace(action="go right early"), SimpleNamespace(action=None)]

    policy.decide = decide
    objective = SEED(beta_opd=5.0, max_skills=3, skill_source="policy", skill_template="{task} [{skill}]")
    assert objective.skills(policy, trajectories) == ["go right early", None]
    assert "up to 3 short lessons" in seen[0].task
    assert seen[0].observation == "Action: right -> reward 1\nOutcome: solved"
