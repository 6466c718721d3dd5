"""GraphGPO: a group's transitions as one state graph; each step is credited by how close to success
(in shortest-path steps over that graph) its transition leads, against the other steps from its state."""

from __future__ import annotations

import numpy as np

from ptgpo_algos.advantages.ops import episode_norm, pooled_norm, successor
from ptgpo_algos.advantages.registry import Estimate
from ptgpo_algos.advantages.signal import Signal, solved
from ptgpo_algos.advantages.table import StepTable

__all__ = ["graphgpo", "success_distances"]


def success_distances(table: StepTable, success_reward: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, ``d(s')``: the fewest transitions from the state its action led to until a success,
    over the graph of every transition of its group, and whether that distance is finite; per group,
    whether any trajectory succeeded.

    A step's successor is the next step's state; after the last step of a solved trajectory it is
    the group's success node (distance 0); after the last step of an unsolved one the environment's
    final state is not recorded, so that successor reaches nothing. A state with no path to success
    takes its group's largest finite distance + 1 (the recipe's finite stand-in for infinity).
    """
    sink = table.n_states + table.group  # one success node per group, after the state ids
    following = successor(table)
    ends_solved = solved(table, success_reward)[table.trajectory] & (following < 0)
    target = np.where(following >= 0, table.state[np.maximum(following, 0)], np.where(ends_solved, sink, -1))
    edge = target >= 0
    source, target_of_edge = table.state[edge], target[edge]

    distance = np.full(table.n_states + table.n_groups, np.inf)
    distance[sink[ends_solved]] = 0.0
    # Unit-cost Bellman-Ford over all groups at once: each pass extends every path by one edge.
    for _ in range(table.n_states + 1):
        relaxed = distance.copy()
        np.minimum.at(relaxed, source, distance[target_of_edge] + 1.0)
        if np.array_equal(relaxed, distance):
            break
        distance = relaxed

    node_group = np.concatenate([np.zeros(table.n_states, dtype=np.int64), np.arange(table.n_groups)])
    node_group[table.state] = table.group
    finite = np.isfinite(distance)
    farthest = np.zeros(table.n_groups)
    np.maximum.at(farthest, node_group[finite], distance[finite])
    next_distance = np.where(edge, distance[np.maximum(target, 0)], np.inf)
    reachable = np.isfinite(next_distance)
    next_distance = np.where(reachable, next_distance, farthest[table.group] + 1.0)
    has_success = np.bincount(table.group[ends_solved], minlength=table.n_groups) > 0
    return next_distance, reachable, has_success


def graphgpo(
    table: StepTable,
    signal: Signal,
    *,
    norm: str = "mean_std_norm",
    omega: float = 1.0,
    success_reward: float = 1.0,
    distance_base: float = 0.2,
) -> Estimate:
    """Graph-based Group Policy Optimization (Cheng et al., ICML 2026, arXiv 2605.26684; recipe in
    verl-agent ``recipe/GraphGPO``, whose ``core_graph.py`` and ``compare_advantages.py`` this follows).

    The group's transitions form one directed graph: nodes are its distinct ``state_key`` values
    plus a success node, edges the steps ``s_{i,t} -> s_{i,t+1}`` (the last step of a solved
    trajectory points to the success node). ``d(s)`` is the shortest-path distance from ``s`` to
    success in unit steps (:func:`success_distances`). Then:

    - graph return of a step ``r^G_{i,t} = success_reward * distance_base^d(s_{i,t+1})``: the value of
      the best path its transition opens (the recipe's ``compute_graph_path_returns``);
    - ``A^G_{i,t} = norm(r^G_{i,t}, {r^G_{j,u} : s_{j,u} = s_{i,t}})``, against every step of the
      group leaving the same state (GiGPO's anchor groups); a state left once gives 0;
    - ``A_{i,t} = norm(R_i, {R_j}) + omega * A^G_{i,t}`` with ``R`` = ``signal.episode`` (the return
      after the invalid-action penalty) and one ``norm`` for both terms.

    So a step that moves closer to success than its alternatives gains, in a failed trajectory too,
    and a detour in a solved one loses. A group with no success has no distances: its graph term is 0.

    Choices, where the recipe's code leaves our setting open:

    - ``distance_base`` [0.2]: the recipe's comparison script's value (its ``gamma``); the paper's
      Eq. 4 writes the exponent ``d + 1`` with the edge's own unit cost, which under
      ``mean_std_norm`` gives the same advantages and under ``mean_norm`` ``distance_base`` times ours.
    - ``success_reward`` [1.0]: our environments' reward for a solved task, which also decides which
      trajectories succeeded (return >= it); the recipe hard-codes 10, which cancels under
      ``mean_std_norm`` and scales everything by 10 under ``mean_norm``.
    - ``omega`` [1.0] and an episode term of weight 1: the recipe's advantage function's defaults
      (its comparison script sets the episode weight to 0).
    - The recipe records the observation after an unsolved trajectory's last step; our records do
      not, so that step leads nowhere and takes the unreachable distance.
    - No coverage credit: the graph term reads the outcomes from the table, not from the signal.

    Group counts: ``reachable_steps``, the steps whose transition leads to a state with a path to
    success in the group's graph.
    """
    next_distance, reachable, has_success = success_distances(table, success_reward)
    reward = success_reward * distance_base ** next_distance
    graph = pooled_norm(reward, table.state, table.n_states, norm)
    graph = np.where(has_success[table.group], graph, 0.0)
    episode = episode_norm(table, signal.episode, norm)[table.trajectory]

    counts = {"reachable_steps": np.bincount(table.group[reachable], minlength=table.n_groups)}
    return Estimate(episode + omega * graph, counts)
