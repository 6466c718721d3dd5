"""HiPER's plan/execute responses in ``generate`` mode: how a turn is prompted and parsed, and how the
subgoal in force is carried into the next prompt.

Every turn the model writes three blocks, in this order::

    <switch>KEEP</switch><subgoal>find the apple</subgoal><action>go to fridge 1</action>

``<switch>`` holds KEEP (go on with the subgoal in force) or SWITCH (start a new one); ``<subgoal>`` the
subgoal it follows from now on (under KEEP, the one in force, copied); ``<action>`` one admissible
action. The planner therefore decides itself when a new plan starts (no fixed period, no completion
test): a SWITCH, or the episode's first turn, opens a segment (:mod:`ptgpo_algos.hiper.segments`).
Generation still stops at ``</action>``, the last block.

Parsing (:func:`parse_plan_response`) keeps the action rules of
:func:`~ptgpo_algos.policy.parsing.parse_response` and adds: each plan tag at most once,
``<switch>`` closed before ``<subgoal>`` opens and that closed before ``<action>`` opens, a switch of
KEEP or SWITCH (any case), a non-empty subgoal. A response that breaks a plan rule but names an
action keeps the action, which is played, and the error, which makes the step invalid (HiPER plays
it and penalises it the same way).

The prompt (:class:`PlanPromptBuilder`) is PTGPO's own prompt with the plan instructions as system
text and one more line, the subgoal in force ("none yet" before the first plan).
:class:`PlanTracker` follows one episode: the subgoal in force after each response, and the switch
marker each decision recorded, which the credit reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ptgpo_algos.records import Context
from ptgpo_algos.policy.parsing import parse_response
from ptgpo_algos.policy.prompts import PromptBuilder

__all__ = [
    "KEEP",
    "SWITCH",
    "NO_SUBGOAL",
    "PLAN_SYSTEM_TEXT",
    "PlanContext",
    "PlanPromptBuilder",
    "PlanResponse",
    "PlanTracker",
    "block_spans",
    "format_plan_response",
    "low_value_index",
    "parse_plan_response",
    "token_span",
]

KEEP, SWITCH = "KEEP", "SWITCH"
#: What the prompt shows as the subgoal in force before the first plan.
NO_SUBGOAL = "none yet"

PLAN_SYSTEM_TEXT = (
    "You are an agent in a text world. Work towards the task through short subgoals: a subgoal is a "
    "small objective a few actions can reach, neither the whole task nor a single action. At every "
    "step, first decide whether the subgoal in force still fits the latest observation: write "
    "<switch>KEEP</switch> to go on with it or <switch>SWITCH</switch> to set a new one. Then write "
    "the subgoal you follow from now on inside <subgoal></subgoal> (under KEEP, the subgoal in force, "
    "copied word for word). Last, give exactly one admissible action inside <action></action>. Write "
    "nothing else."
)

_PLAN_TAG = re.compile(r"</?(switch|subgoal)>", re.IGNORECASE)
_BLOCKS = ("switch", "subgoal", "action")


@dataclass(frozen=True)
class PlanResponse:
    """A plan/execute response, parsed. ``switch`` is the switch block's content upper-cased (KEEP or
    SWITCH in a valid response; None: missing or empty); ``subgoal`` the stated subgoal (None: none
    parsable); ``action`` what to play (None: nothing parsable); ``error`` why the response breaks
    the rules (None: it keeps them)."""

    switch: str | None
    subgoal: str | None
    action: str | None
    error: str | None

    @property
    def valid(self) -> bool:
        """Whether the response named an action and broke no rule."""
        return self.action is not None and self.error is None

    @property
    def switched(self) -> bool:
        """Whether this response opens a new segment when it is not the episode's first: any switch
        content but KEEP does (an invalid one too); a missing or empty switch counts as KEEP. This is
        HiPER's code's rule."""
        return self.switch not in (None, KEEP)


def format_plan_response(action: str, subgoal: str, switch: str = KEEP) -> str:
    """The canonical response (what a perfect plan/execute policy would write)."""
    return f"<switch>{switch}</switch><subgoal>{subgoal}</subgoal><action>{action}</action>"


def _plan_blocks(text: str) -> tuple[dict[str, str], str | None]:
    """The switch and subgoal contents, or why the plan part breaks the rules."""
    tags = [(m.group(0).lower(), m.start(), m.end()) for m in _PLAN_TAG.finditer(text)]
    names = [name for name, _, _ in tags]
    for name in ("<switch>", "</switch>", "<subgoal>", "</subgoal>"):
        if names.count(name) > 1:
            return {}, f"duplicated {name} tag"
    position = {name: (start, end) for name, start, end in tags}
    action_open = text.lower().find("<action>")
    contents: dict[str, str] = {}
    previous_end = 0
    for block in ("switch", "subgoal"):
        opening, closing = f"<{block}>", f"</{block}>"
        if opening not in position or closing not in position:
            return contents, f"missing {opening}...{closing}"
        if not previous_end <= position[opening][0] < position[closing][0]:
            return contents, f"{opening}...{closing} out of order"
        if action_open != -1 and position[closing][1] > action_open:
            return contents, f"{closing} must come before <action>"
        contents[block] = text[position[opening][1] : position[closing][0]].strip()
        previous_end = position[closing][1]
    return contents, None


def parse_plan_response(text: str) -> PlanResponse:
    """Switch, subgoal and action of a response, or why it breaks the rules (the module docstring)."""
    contents, error = _plan_blocks(text)
    switch = contents.get("switch", "").upper() or None
    if switch is not None and switch not in (KEEP, SWITCH):
        error = error or f"<switch> must hold {KEEP} or {SWITCH}, got {contents['switch']!r}"
    subgoal = contents.get("subgoal") or None
    if "subgoal" in contents and subgoal is None:
        error = error or "empty subgoal"
    parsed = parse_response(text)
    return PlanResponse(switch, subgoal, parsed.action, parsed.error or error)


def block_spans(text: str) -> dict[str, tuple[int, int]]:
    """Character spans of the switch, subgoal and action blocks, tags included (the first of each
    that closes; absent blocks are left out). These are the tokens each level's credit goes to."""
    spans = {}
    lowered = text.lower()
    for block in _BLOCKS:
        start = lowered.find(f"<{block}>")
        end = lowered.find(f"</{block}>", start + 1) if start != -1 else -1
        if start != -1 and end != -1:
            spans[block] = (start, end + len(block) + 3)
    return spans


def token_span(pieces: list[str], span: tuple[int, int]) -> tuple[int, int]:
    """Token indices ``[first, stop)`` whose text overlaps the character ``span`` of the decoded
    response ``"".join(pieces)`` (one piece per response token); ``(0, 0)`` when none does."""
    first, stop, offset = None, 0, 0
    for index, piece in enumerate(pieces):
        begin, offset = offset, offset + len(piece)
        if offset > span[0] and begin < span[1]:
            first = index if first is None else first
            stop = index + 1
    return (0, 0) if first is None else (first, stop)


def low_value_index(pieces: list[str]) -> int:
    """Which hidden state the low value head reads for a response of these token pieces: the index of
    the response token that closes the subgoal block (the value of the state under the subgoal);
    failing that, the one that closes the switch block; failing that (or when no token follows it),
    ``-1``, the prompt's last token, where the high and switch heads read. This is HiPER's choice."""
    text = "".join(pieces)
    spans = block_spans(text)
    for block in ("subgoal", "switch"):
        if block in spans:
            last = token_span(pieces, spans[block])[1] - 1
            if 0 <= last < len(pieces) - 1:
                return last
    return -1


@dataclass
class PlanTracker:
    """One episode's plan state: the subgoal in force and each decision's switch marker.

    The subgoal in force is the one the latest response stated; a response without a parsable
    subgoal leaves the previous one in force (HiPER's code blanks it, or shows the action's tail,
    there; PTGPO keeps the last stated plan).
    """

    subgoal: str | None = None
    switches: list[bool] = field(default_factory=list)
    subgoals: list[str | None] = field(default_factory=list)

    def record(self, response: PlanResponse) -> None:
        """Take in the next decision's response."""
        self.switches.append(response.switched)
        self.subgoals.append(response.subgoal)
        if response.subgoal is not None:
            self.subgoal = response.subgoal

    def changed_on_keep(self) -> list[bool]:
        """Per decision: it kept the subgoal (did not SWITCH) yet wrote one different from the
        previous decision's, both stated (the consistency penalty's test; never the first)."""
        flags = [False]
        for t in range(1, len(self.subgoals)):
            before, now = self.subgoals[t - 1], self.subgoals[t]
            flags.append(not self.switches[t] and before is not None and now is not None and before != now)
        return flags[: len(self.subgoals)]


@dataclass
class PlanContext(Context):
    """A :class:`~ptgpo_algos.records.Context` with the subgoal in force (None before the first plan)."""

    subgoal: str | None = None

    @classmethod
    def of(cls, context: Context, tracker: PlanTracker) -> PlanContext:
        """The context of an episode's next decision, with its tracker's subgoal in force."""
        return cls(context.task, context.observation, context.admissible_actions, list(context.history),
                   tracker.subgoal)

    @classmethod
    def after(cls, context: Context, responses: list[str]) -> PlanContext:
        """The context of the decision that follows an episode's earlier ``responses`` (their texts)."""
        tracker = PlanTracker()
        for text in responses:
            tracker.record(parse_plan_response(text))
        return cls.of(context, tracker)


class PlanPromptBuilder(PromptBuilder):
    """PTGPO's prompt for plan/execute turns: the plan instructions as system text and the subgoal in
    force after the observation. Generate mode only, without a recipe template (HiPER's prompt is
    this one's content, not a verl-agent template)."""

    def __post_init__(self) -> None:
        if self.mode != "generate" or self.template is not None:
            raise ValueError("hiper: the plan/execute prompt needs policy.mode generate and no "
                             "policy.prompt_template (set them so, or turn hiper off)")
        super().__post_init__()

    def system_text(self) -> str:
        """The plan instructions (:data:`PLAN_SYSTEM_TEXT`)."""
        return PLAN_SYSTEM_TEXT

    def _user_text(self, context: Context, history: list[tuple[str, str]], actions: bool) -> str:
        lines = super()._user_text(context, history, actions).split("\n")
        subgoal = getattr(context, "subgoal", None) or NO_SUBGOAL
        at = len(lines) - 1 if actions else len(lines)
        lines.insert(at, f"Subgoal in force: {subgoal}")
        return "\n".join(lines)
