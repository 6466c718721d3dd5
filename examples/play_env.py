"""Make an environment, play it, and fork an episode: the text-environment contract in one page.

    python examples/play_env.py
"""

import gymnasium

import ptgpo_envs  # noqa: F401  (registers the ptgpo/ environments with Gymnasium)

env = gymnasium.make("ptgpo/Household-v0", difficulty="easy")
observation, info = env.reset(seed=0)
print(observation)
print("task:", info["task"], "| type:", info["task_type"])
print("admissible:", info["admissible_actions"][:6], "...")

# An action that is not admissible wastes a step and earns nothing; it never crashes the environment.
observation, reward, terminated, truncated, info = env.step("dance on the table")
print("\n> dance on the table\n" + observation, "| valid:", info["action_valid"])

# Fork here: snapshot() copies the whole episode state, restore() returns to it exactly.
snapshot = env.unwrapped.snapshot()

# The environment's own solver plays the episode out.
steps = 0
while not (terminated or truncated):
    action = env.unwrapped.expert_action()
    observation, reward, terminated, truncated, info = env.step(action)
    steps += 1
    print(f"> {action}")
print(f"\nexpert: reward {reward}, won {info['won']}, {steps} steps")

# Back to the fork: replaying the same actions gives the same episode (what tree rollouts rely on).
env.unwrapped.restore(snapshot)
first = env.unwrapped.expert_action()
print("after restore, the expert's first action is again:", first)
env.close()
