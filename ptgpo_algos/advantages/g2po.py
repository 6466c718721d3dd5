"""G2PO: a group's states as graph nodes valued by their visits' discounted outcomes; each step (an
edge) is credited against the other edges leaving its node and by the value jump it makes."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import pool_moments, pooled_norm, successor
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal, environment_returns, solved
from ptgpo_algos.advantages.table import StepTable

__all__ = ["g2po"]


def g2po(
    table: StepTable,
    signal: Signal,
    *,
    gamma: float = 0.95,
    invalid_penalty: float = 0.1,
    norm: str = "mean_std_norm",
    omega: float = 1.0,
    success_reward: float = 1.0,
) -> Estimate:
    """Group-Graph Policy Optimization (arXiv 2606.22995; code github.com/Nala-YN/G2PO,
    ``g2po/core_g2po.py``, which this follows and is tested against).

    Nodes are the group's distinct ``state_key`` values. With ``R_i`` the environment return (no
    penalty), ``T_i`` the length and t = 1..T_i:

    - visit value ``v_{i,t} = gamma^(T_i - t + 1) * R_i``; ``V(g)`` = mean over every visit of node g,
      revisits within one trajectory counted separately;
    - successor value ``V^+_{i,t} = V(g(s_{i,t+1}))``, and after the last step the terminal node:
      ``success_reward`` if trajectory i succeeded, else 0;
    - node-centric ``A_NC = norm(V^+_{i,t} - p * 1[invalid a_{i,t}], over the steps leaving g(s_{i,t}))``;
    - edge-centric ``A_EC = norm(V^+_{i,t} - V(g(s_{i,t})), over every step of the group)`` (no gamma,
      no reward, no penalty);
    - episode ``A_EP = norm(R_i - p * 1[invalid a_{i,t}], over every step of the group)``;
    - ``A_{i,t} = A_EP + omega * (A_NC + A_EC)``, with ``p`` = ``invalid_penalty`` and one ``norm``
      (``mean_norm``: centre only; ``mean_std_norm``: divide by the sample std + 1e-6) for all three.

    Choices, where the paper and code leave our setting open:

    - Success (``success_reward`` [1.0]): trajectory i succeeded iff ``R_i >= success_reward``; the
      success node is worth ``success_reward``. The official code tests ``R_i == 10`` and values the
      node at 10, the success reward of its ALFWorld/WebShop wrappers; our environments pay 1 for a
      solved task, so the default is 1 and every value is the official one divided by 10. ``>=``
      agrees with ``==`` wherever no return exceeds a solved task's, and keeps a solved task with
      extra subgoal rewards a success; a failure whose subgoal rewards reach ``success_reward`` would
      count as a success. A trajectory cut at the step limit ends in the failure node, as in the code.
    - The episode term is step-weighted, as the code computes it: each step row carries the episode
      return minus that step's penalty (verl-agent's token-level reward of the row) and the mean and
      std pool every step of the group, so long trajectories weigh more and an invalid step gets a
      lower episode advantage than its trajectory's valid steps.
    - The invalid-action penalty (``invalid_penalty`` [0.1], the official script's coefficient) enters
      the episode and node-centric terms. The code hard-codes 0.1 in the node-centric term (its
      ``invalid_action_penalty`` argument is not passed through); here one key sets both. On our
      1-for-success scale 0.1 weighs ten times what it does against the code's 10: 0.01 keeps the
      paper's ratio.
    - ``norm`` [mean_std_norm]: the ALFWorld script's mode and the default of our other estimators
      (the code's config default and WebShop script use ``mean_norm``). ``omega`` [1.0] is the code's
      ``step_advantage_w`` (the paper's sweep found 0.8 best on WebShop). ``gamma`` [0.95] is the
      code's hard-coded discount.
    - A node with a single leaving step gets ``A_NC = 0`` (the code leaves it unset, i.e. 0). Groups
      with fewer than two non-empty trajectories get zeros (the driver's rule for every estimator).
    - No coverage credit: the values come from the environment returns, not from the signal.

    Group counts: ``multi_edge_nodes``, the nodes left by >= 2 steps (where ``A_NC`` compares).
    """
    returns = environment_returns(table)
    length = table.trajectory_length[table.trajectory]
    visits = gamma ** (length - table.time) * returns[table.trajectory]  # time is t - 1
    node_steps, node_value, _ = pool_moments(visits, table.state, table.n_states)

    following = successor(table)
    terminal = np.where(solved(table, success_reward), success_reward, 0.0)[table.trajectory]
    successor_value = np.where(following >= 0, node_value[table.state[following]], terminal)
    penalty = invalid_penalty * ~table.valid

    node_term = pooled_norm(successor_value - penalty, table.state, table.n_states, norm)
    jump = successor_value - node_value[table.state]
    edge_term = pooled_norm(jump, table.group, table.n_groups, norm)
    episode_term = pooled_norm(returns[table.trajectory] - penalty, table.group, table.n_groups, norm)

    node_group = np.zeros(table.n_states, dtype=np.int64)
    node_group[table.state] = table.group
    counts = {"multi_edge_nodes": np.bincount(node_group[node_steps >= 2], minlength=table.n_groups)}
    return Estimate(episode_term + omega * (node_term + edge_term), counts)
