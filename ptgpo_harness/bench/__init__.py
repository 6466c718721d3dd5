"""The benchmark harness: every (environment, method, seed) cell of a YAML config, resumable.

A layer of its own above the algorithms, the baselines and the leaderboard (nothing imports it back):
:mod:`.config` (the YAML schema), :mod:`.plan` (the cells and the checks before the first),
:mod:`.records` (one cell run here, and its record), :mod:`.pool` (the cell processes),
:mod:`.ray_pool` (the cells as tasks on a Ray cluster, ``--ray``).

A benchmark is a grid. Each *environment* is crossed with each *method* (an RL estimator trained with
the shared policy settings) and each *baseline*, for each *seed*; every such cell leaves one result
record (:mod:`leaderboard.records`), whatever happened to it, and the leaderboard is built from the
records at the end. Cells whose record already exists are skipped, so an interrupted benchmark is
resumed by running the same command again.

Config schema (YAML; unknown keys are errors)::

    name: babyai-cpu             # names the output folder: bench_results/<name>/
    budget: 3000                 # matched budget: policy decisions of training per RL/SB3 run
                                 # (an environment's own `budget` overrides it for that environment)
    budget_unit: decisions       # optional: what `budget` counts: decisions, or a cost every RL
                                 # cell stops at: train_cpu_s, trained_tokens, optimizer_updates, gpu_s
    budget_stop: reached         # optional, with a cost: stop at the first iteration boundary at or
                                 # past the budget (reached), or at the one nearest it (nearest)
    iterations: 150              # optional: RL cells stop after this many iterations instead (every
                                 # method the same; `budget` then serves the baselines that train)
    seeds: [0, 1]                # one cell per seed per (environment, method)
    workers: 2                   # optional: parallel cells (default: the number of CPU cores)
    resources: {cpus: 1, gpus: 0}   # optional: what each cell asks of a Ray cluster (--ray); a
                                 # method or baseline may set its own `resources` (key by key)
    policy:                      # TrainConfig fields shared by every method (model, mode, group
      model: tiny                # size, tasks per iteration, eval_every... see
      mode: choose               # ptgpo_algos.config.TrainConfig); `iterations` is uncapped unless
      group_size: 8              # set here, so that the budget ends each run
    environments:
      - label: household-easy    # the environment's name in records and tables
        id: ptgpo/Household-v0
        kwargs: {difficulty: easy}                # constructor keyword arguments
        eval_kwargs: {}          # optional: kwargs that override `kwargs` in evaluation (e.g. a split)
        max_steps: 30            # optional: horizon (default: the environment's)
        train_seeds: {start: 0, count: 10000}     # a range of task seeds for training
        budget: 20000            # optional: this environment's matched budget (default: the top one)
        iterations: 100          # optional: this environment's iteration budget (default: the top one)
        eval_seeds: {start: 1000000, count: 50}   # or an explicit list [3, 5, 8]
        held_out: 0.25           # optional: the share of start layouts kept for evaluation: the eval
                                 # seeds are the first `count` from `start` whose layout falls there
                                 # (of a list: those that do), and training redraws seeds that do
    methods:                     # RL cells: TrainConfig = policy + these (+ env, seed, budget); policy,
                                 # a method's train and quick's policy each set a field once, in one
                                 # spelling (ptgpo_algos.config.check_spellings)
      - name: gigpo              # method name in records (defaults to algo)
        algo: gigpo              # estimator name
        algo_config: {}          # estimator keyword arguments
        rollout: linear          # linear | tree | patr | 3spo (their settings: train: {rollouts.patr: {...}})
        train: {}                # optional: other TrainConfig fields for this method only
        objectives: []           # optional: auxiliary objectives beside the estimator, e.g.
                                 # [{name: isdpo, weight: 1.0}] (ptgpo_algos.objectives)
        seeds: [0, 1]            # optional: this method's own seeds instead of the top-level ones
                                 # (baselines take it too; --quick's seeds replace it)
    baselines:                   # baseline cells (see baselines.registry for names)
      - name: random
      - name: sb3_ppo
        options: {max_slots: 48} # the baseline's own settings
      - name: zero_shot          # a baseline twice: a label names each one's cells and records
        label: zero_shot_t1
        options: {eval_temperature: 1.0}   # zero_shot's options: policy settings of its own
    quick:                       # optional: overrides applied by `ptgpo bench --quick`
      budget: 300                # any of: name, budget (replaces every environment's), iterations
      seeds: [0]                 # (likewise; a quick budget without it ends the RL cells too), seeds,
                                 # workers, policy (merged field by field), max_eval_episodes (caps every
                                 # environment's eval seeds)
      max_eval_episodes: 10

The matched budget counts policy decisions (environment steps chosen by the policy) spent in training.
Tree and PATR rollouts count every decision they take, like linear ones, so prefix reuse shows up as
more episodes for the same budget. An RL run spends its budget exactly: its last iteration stops taking
decisions when the budget is reached, and the episodes still running then are left out of that
iteration's update (their decisions count as spent); SB3 PPO spends it exactly or slightly under
(whole rollouts). Records store the decisions actually spent, and the leaderboard refuses a column
whose RL cells spent more than 2 % apart. With an iteration budget every RL cell trains exactly that
many iterations of ``tasks_per_iteration`` × ``group_size`` episodes (the literature's protocol; a
recipe's own ``iterations`` applies only through it, since each cell's stopping is the bench's), its
record says ``budget_unit: iterations``, and the leaderboard checks the iterations trained instead.
With ``budget_unit`` a cost (training CPU seconds, trained tokens, optimizer updates, GPU seconds:
:data:`ptgpo_algos.cost.BUDGET_UNITS`), every RL cell trains until its spend in that unit reaches the
budget (``run.budget``), stopping at the first iteration boundary at or past it, or with ``budget_stop:
nearest`` at the boundary nearest it (so that a method whose iterations cost more is not handed more of
the unit): the record keeps the spend and ``budget_overshoot`` (signed, within one iteration's cost),
the leaderboard refuses a column with a cell that something else stopped, and
``leaderboard/matched-cost.md`` reads every curve at one common cost. A budget in CPU seconds is measured, not counted, so such a run does not replay bit
for bit (its curves depend on the machine's speed and load); baselines that train for decisions
(SB3 PPO) are refused in such a config.
Records also carry the ``protocol`` the cell ran under (the policy section's recipe, and what the
evaluation environment reported of its pages and scoring), their ``provenance`` (commit, library
versions, processor, threads, the full resolved config), the compute spent (training episodes,
trained tokens, optimizer updates; the cell's CPU seconds split into training, evaluation and model
building, the tiny model's pretraining counted in the last only: :mod:`ptgpo_algos.cost`) and
``eval_overlap``, the share of evaluation episodes that started in a
layout the run trained on (``held_out`` makes it 0; a baseline that trains nothing has 0, SB3 PPO is
not measured). Random, expert and zero-shot do not train: their
records have ``budget: null`` and ``decisions: 0``. Every cell evaluates on the same ``eval_seeds``
(the LLM policies with the policy section's protocol: greedy, or sampled at ``eval_temperature``;
random plays uniformly, SB3 PPO greedily); ``final_success`` is the last evaluation and
``best_success`` the best along the curve.

Output folder (default ``bench_results/<name>/``, ``<name>-quick`` with ``--quick``)::

    <cell>.json            one result record per cell (leaderboard.records; status ok or failed)
    runs/<cell>/           the cell's working folder: curve.jsonl, cost.jsonl, checkpoints, cell.log (its
                           output), cpu_seconds.txt (the cell process's whole CPU time, model building
                           included: its wall time on an idle core)
    leaderboard/           tables and plots built from the records
    config.yaml            the resolved config the cells ran with (a resumed run must match it)
    bench.log              one line per cell started, finished, failed or skipped

Each cell runs in its own spawned process with one torch thread (with ``--ray``, inside a Ray task
that asked for the cell's ``resources``, on whichever node fits) (on small CPUs, two one-thread
processes do more work than one two-thread process), at most ``workers`` at a time. An exception in
a cell is recorded as a failed record carrying the exception's last line (the full traceback is in
the cell's ``cell.log``); a process that dies without a record (killed, out of memory) is recorded as
failed by the harness. Either way the other cells go on.
"""

from __future__ import annotations

from ptgpo_harness.bench.config import (
    DEFAULT_CONFIG_NAME,
    BaselineEntry,
    BenchConfig,
    BenchError,
    EnvironmentEntry,
    MethodEntry,
    default_config_text,
    load_config,
)
from ptgpo_harness.bench.grid import BenchReport, run_bench
from ptgpo_harness.bench.plan import Cell, check_out_dir, check_train_configs, plan_cells
from ptgpo_harness.bench.pool import default_workers
from ptgpo_harness.bench.records import run_cell

__all__ = [
    "BaselineEntry",
    "BenchConfig",
    "BenchError",
    "BenchReport",
    "Cell",
    "DEFAULT_CONFIG_NAME",
    "EnvironmentEntry",
    "MethodEntry",
    "check_out_dir",
    "check_train_configs",
    "default_config_text",
    "default_workers",
    "load_config",
    "plan_cells",
    "run_bench",
    "run_cell",
]
