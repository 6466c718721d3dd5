"""The text-environment contract every PTGPO environment honours.

A :class:`TextEnv` is a :class:`gymnasium.Env` whose observations and actions are ``str``:

* ``reset(seed=...)`` returns ``(observation, info)`` and ``step(action)`` returns
  ``(observation, reward, terminated, truncated, info)``. Reward is the task's sparse outcome (1.0 on
  success, else 0.0) unless a subclass documents partial scores.
* ``info`` always carries ``task`` (the goal in words), ``admissible_actions`` (exactly the actions valid
  now), ``state_key`` (a canonical string of the state as the agent observes it, without history: steps
  with equal keys are "the same state" for step-level grouping), ``won`` and ``layout`` (a hash of
  how the episode started, the same at every step: :meth:`TextEnv._layout_key`; episodes with equal
  hashes start alike, so an evaluation can tell held-out starts from trained ones); after a step also
  ``action_valid``. Subclasses may add keys (``task_type``, ``score``...).
* The same seed and the same actions give identical observations, rewards and infos, in any process.
* ``snapshot()`` / ``restore(snapshot)`` on the unwrapped environment fork an episode at any step:
  restoring and replaying reproduces the original continuation exactly. The horizon is counted inside
  the environment, so a restored episode truncates where the original would have.
* ``achieved_tasks()`` on the unwrapped environment maps the tasks (worded like ``info["task"]``) that
  the last step completed, whatever the episode's own task, to their types (as ``info["task_type"]``
  names them), for hindsight relabelling; None where an environment does not track it (Household does).
* ``progress()`` on the unwrapped environment says how far the episode is towards its task, a number in
  [0, 1] (1 once won) that depends on the current state only, for process scorers (PATR's heuristic);
  None where an environment cannot say it cheaply (the default).
* Bad input never crashes nor corrupts state: an action that is not admissible (empty, malformed,
  100 KB long, control characters...) uses up a step, earns reward 0, sets ``action_valid=False`` and
  gets :meth:`TextEnv._invalid_action_observation` (by default :data:`INVALID_ACTION_OBSERVATION`,
  saying it was not understood; an environment reproducing an original's texts gives the original's
  response instead). Case and surrounding whitespace are ignored when matching admissible actions. A
  non-``str`` action raises :class:`TypeError`.

Subclasses implement the hooks in the "world" section below; this class owns action matching, step
counting, the horizon, ``info`` and forking.
"""

from __future__ import annotations

import copy
import hashlib
import string
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

__all__ = ["TextEnv", "TextSpace", "Snapshot", "INVALID_ACTION_OBSERVATION", "MAX_ACTION_CHARS", "held_out",
           "layout_hash"]

#: Longer action strings are rejected without being parsed, so a runaway generation costs nothing.
MAX_ACTION_CHARS = 4096

INVALID_ACTION_OBSERVATION = (
    "Nothing happens. That action was not understood: choose one of the admissible actions."
)


def layout_hash(layout_key: str) -> str:
    """The ``info["layout"]`` of a layout key: 16 hex digits of its BLAKE2b digest (stable across
    processes and platforms, unlike ``hash``)."""
    return hashlib.blake2b(layout_key.encode("utf-8"), digest_size=8).hexdigest()


def held_out(layout: str, share: float) -> bool:
    """Whether ``layout`` (an ``info["layout"]``) falls in the ``share`` of layouts kept for
    evaluation: its hash read as a fraction of 2**64 is below ``share``. A fixed split of the layout
    space, so evaluation and training agree on it without seeing each other's seeds."""
    return int(layout, 16) / 2.0**64 < share


class TextSpace(spaces.Text):
    """Printable Unicode text of at most ``max_length`` characters (newlines and tabs allowed).

    Sampling draws printable ASCII; membership accepts any printable text, since real observations
    (product titles, game text) are not ASCII-only.
    """

    def __init__(self, max_length: int, seed: int | None = None):
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string of printable text (newlines and tabs allowed) within ``max_length``."""
        return (
            isinstance(x, str)
            and len(x) <= self.max_length
            and all(c.isprintable() or c in "\n\t" for c in x)
        )

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


@dataclass(frozen=True)
class Snapshot:
    """An opaque, immutable copy of an episode's full state, for :meth:`TextEnv.restore`."""

    env_class: str
    state: Any


class TextEnv(gym.Env[str, str]):
    """Base class of PTGPO's text environments (see the module docstring for the contract)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    #: Default horizon; ``gymnasium.make`` registrations use the same number.
    default_max_steps: ClassVar[int] = 50
    observation_max_chars: ClassVar[int] = 65536
    #: Reset options whose values name files on this machine: for local use only, a server refuses them.
    file_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, max_steps: int | None = None, render_mode: str | None = None):
        if max_steps is None:
            max_steps = self.default_max_steps
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = TextSpace(self.observation_max_chars)
        self.action_space = TextSpace(MAX_ACTION_CHARS)
        self._steps = 0
        self._done = True
        self._observation = ""
        self._admissible_cache: list[str] | None = None
        #: The admissible action the last step applied (None after an invalid one, reset or restore).
        self._last_action: str | None = None
        #: ``info["layout"]`` of the episode: the hash of its start's :meth:`_layout_key`.
        self._start_layout = ""

    # ----------------------------------------------------------------- world (subclass hooks)
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        """Build a new episode from ``self.np_random`` and return the first observation."""
        raise NotImplementedError

    def _admissible_actions(self) -> list[str]:
        """The canonical actions valid now, in a deterministic order."""
        raise NotImplementedError

    def _apply(self, action: str) -> tuple[str, float, bool]:
        """Apply an admissible ``action``; return ``(observation, reward, terminated)``."""
        raise NotImplementedError

    def _state_key(self) -> str:
        raise NotImplementedError

    def _task(self) -> str:
        raise NotImplementedError

    def _won(self) -> bool:
        raise NotImplementedError

    def _layout_key(self) -> str:
        """A canonical string of how the episode starts, called right after :meth:`_new_episode`. The
        default is the task and the first state key: an environment whose agent sees only part of
        the world overrides it with the whole start (BabyAI: the full grid), else two layouts that look
        alike at first count as one, which overstates, never hides, an overlap."""
        return f"{self._task()}\n{self._state_key()}"

    def _extra_info(self) -> dict[str, Any]:
        """Environment-specific ``info`` keys (e.g. ``task_type``)."""
        return {}

    def _invalid_action_observation(self) -> str:
        """The observation after an inadmissible action; the state is unchanged when it is called."""
        return INVALID_ACTION_OBSERVATION

    def _get_state(self) -> Any:
        """Everything that defines the episode now; the default deep-copies ``self._world``."""
        return copy.deepcopy(self._world)

    def _set_state(self, state: Any) -> None:
        self._world = copy.deepcopy(state)

    def expert_action(self) -> str:
        """An action of an optimal (or near-optimal) solver from the current state."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def achieved_tasks(self) -> dict[str, str | None] | None:
        """Tasks, worded as ``info["task"]`` words them, that the last step completed, whatever the
        episode's own task, each mapped to its type as ``info["task_type"]`` would name it (None on an
        environment without types): hindsight relabelling turns any play into successes at these.

        ``{}`` when the last step completed none (or no step has been taken); None when the
        environment does not track it (the default).
        """
        return None

    def progress(self) -> float | None:
        """How far the episode is towards its task now: a number in [0, 1], 1 once the task is done,
        from the current state alone (a heuristic, never a reward); None where the environment cannot
        say it cheaply (the default). PATR's ``progress`` scorer reads it."""
        return None

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode (Gymnasium's ``reset``): the first observation and its ``info``."""
        super().reset(seed=seed)
        self._steps = 0
        self._done = False
        self._admissible_cache = None
        self._last_action = None
        self._observation = self._new_episode(options)
        self._start_layout = layout_hash(self._layout_key())
        return self._observation, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play ``action`` (Gymnasium's ``step``). An action that is not admissible uses up a step, earns
        0 and sets ``info["action_valid"]`` False; a non-``str`` action raises TypeError."""
        if not isinstance(action, str):
            raise TypeError(
                f"actions are text: expected str, got {type(action).__name__} ({action!r:.80})"
            )
        if self._done:
            raise RuntimeError("the episode has ended: call reset() before step()")
        canonical = self.match_action(action)
        self._steps += 1
        self._admissible_cache = None
        self._last_action = canonical
        if canonical is None:
            observation, reward, terminated = self._invalid_action_observation(), 0.0, False
        else:
            observation, reward, terminated = self._apply(canonical)
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._observation = observation
        info = self._info()
        info["action_valid"] = canonical is not None
        return observation, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        """The current observation in ``ansi`` render mode; None otherwise."""
        return self._observation if self.render_mode == "ansi" else None

    # ----------------------------------------------------------------- helpers
    def admissible_actions(self) -> list[str]:
        """The actions valid now, in the environment's deterministic order (a copy)."""
        if self._admissible_cache is None:
            self._admissible_cache = list(self._admissible_actions())
        return list(self._admissible_cache)

    def match_action(self, action: str) -> str | None:
        """The admissible action that ``action`` names (ignoring case and surrounding whitespace)."""
        if len(action) > MAX_ACTION_CHARS:
            return None
        wanted = action.strip().casefold()
        if not wanted:
            return None
        for candidate in self.admissible_actions():
            if candidate.casefold() == wanted:
                return candidate
        return None

    def _info(self) -> dict[str, Any]:
        info = {
            "task": self._task(),
            "admissible_actions": self.admissible_actions() if not self._done else [],
            "state_key": self._state_key(),
            "won": bool(self._won()),
            "step": self._steps,
            "layout": self._start_layout,
        }
        info.update(self._extra_info())
        return info

    @property
    def steps_taken(self) -> int:
        """Steps taken in this episode (what the horizon counts)."""
        return self._steps

    @property
    def done(self) -> bool:
        """Whether the episode has ended (terminated or truncated)."""
        return self._done

    # ----------------------------------------------------------------- forking
    def snapshot(self) -> Snapshot:
        """Copy the episode's whole state (world, step count, RNG, last observation)."""
        return Snapshot(
            env_class=type(self).__qualname__,
            state=(
                self._get_state(),
                self._steps,
                self._done,
                self._observation,
                copy.deepcopy(self.np_random.bit_generator.state),
                self._start_layout,
            ),
        )

    def restore(self, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        """Return to ``snapshot`` (taken on an environment of the same class and kwargs).

        Returns the observation and ``info`` of that moment, as ``reset``/``step`` gave them less
        ``action_valid``, which belongs to the step that led there rather than to the state.
        """
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"restore() takes a Snapshot from snapshot(), got {type(snapshot).__name__}")
        if snapshot.env_class != type(self).__qualname__:
            raise ValueError(
                f"this snapshot was taken on a {snapshot.env_class}, not a {type(self).__qualname__}"
            )
        world, steps, done, observation, rng_state, self._start_layout = snapshot.state
        self._set_state(world)
        self._steps, self._done, self._observation = steps, done, observation
        self.np_random.bit_generator.state = copy.deepcopy(rng_state)
        self._admissible_cache = None
        self._last_action = None
        return observation, self._info()
