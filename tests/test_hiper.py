"""HiPER's critic-free pieces: segments, the two-level credit (hand-computed numbers and properties
against a textbook GAE written here), the plan/execute format and prompt, the settings and the
reported rows."""

from __future__ import annotations

import numpy as np
import pytest

from leaderboard.reported import DEFAULT_REPORTED, load_reported
from ptgpo_algos.records import Context
from ptgpo_algos.critic.gae import chained_gae
from ptgpo_algos.critic.gae import whitened
from ptgpo_algos.hiper.credit import hae, segment_to_go, shaped_rewards
from ptgpo_algos.hiper.estimate import EpisodeTurns, hiper_credit
from ptgpo_algos.hiper.plan_format import (NO_SUBGOAL, PlanContext, PlanPromptBuilder, PlanTracker, block_spans,
                                           format_plan_response, low_value_index, parse_plan_response,
                                           token_span)
from ptgpo_algos.hiper.segments import Segment, segment_index, segment_starts, segments
from ptgpo_algos.hiper.settings import HiperSettings
from ptgpo_algos.policy.prompts import SYSTEM_TEXT, PromptBuilder


def reference_gae(rewards, values, gamma, lam, terminated, bootstrap=0.0):
    """Textbook GAE of one episode, one step at a time (the value after the last step: 0 when it
    ended the episode, else ``bootstrap``)."""
    advantages, carry = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        following = values[t + 1] if t + 1 < len(rewards) else (0.0 if terminated else bootstrap)
        carry = rewards[t] + gamma * following - values[t] + gamma * lam * carry
        advantages[t] = carry
    return np.array(advantages)


# ---------------------------------------------------------------- segments

def test_segments_start_at_the_first_decision_and_at_each_switch():
    switches = [False, False, True, False, True]
    assert segment_starts(switches).tolist() == [True, False, True, False, True]
    assert segments(switches) == [Segment(0, 1), Segment(2, 3), Segment(4, 4)]
    assert segment_index(switches).tolist() == [0, 0, 1, 1, 2]
    assert [s.length for s in segments([True, True])] == [1, 1]
    assert segments([]) == []


def test_segments_refuse_a_table():
    with pytest.raises(ValueError, match="one flag per decision"):
        segment_starts([[True]])


# ---------------------------------------------------------------- credit, hand-computed
# Two segments: turns 0-1 and 2-3; gamma 0.9, lambda_L 0.5, lambda_H 0.8. v_high is read at the
# starts only (the 99s must not matter).
V_LOW = [[1.0, 2.0, 3.0, 4.0]]
V_HIGH = [[5.0, 99.0, 6.0, 99.0]]
STARTS = [[True, False, True, False]]
SETTINGS = dict(gamma=0.9, lam_turn=0.5, lam_seg=0.8)


def test_hae_of_a_terminal_episode_with_two_segments():
    credit = hae([[0, 0, 0, 10]], V_LOW, V_HIGH, STARTS, [4], [True], **SETTINGS)
    # Low: A1 = 0 + .9*V_H(2) - 2 = 3.4 (the segment ends: bootstrap on the next start's high value),
    # A0 = (.9*2 - 1) + .45*3.4 = 2.33; A3 = 10 - 4 = 6, A2 = (.9*4 - 3) + .45*6 = 3.3.
    np.testing.assert_allclose(credit.low_advantages, [[2.33, 3.4, 3.3, 6.0]])
    np.testing.assert_allclose(credit.low_returns, [[3.33, 5.4, 6.3, 10.0]])
    # G: G3 = 10, G2 = 9; G1 = .9*6 = 5.4, G0 = 4.86.
    np.testing.assert_allclose(credit.segment_returns, [[4.86, 5.4, 9.0, 10.0]])
    # High: A(seg 1) = 9 - 6 = 3; A(seg 0) = (4.86 - 5) + .9**2 * .8 * 3 = 1.804.
    np.testing.assert_allclose(credit.high_advantages, [[1.804, 0.0, 3.0, 0.0]])
    np.testing.assert_allclose(credit.high_returns, [[6.804, 0.0, 9.0, 0.0]])


def test_hae_of_a_cut_episode_bootstraps_from_its_own_values():
    credit = hae([[0, 0, 0, 1]], V_LOW, V_HIGH, STARTS, [4], [False], bootstrap_truncated=True, **SETTINGS)
    # Last turn: next value = V_L(3) itself: A3 = 1 + .9*4 - 4 = .6, A2 = .6 + .45*.6 = .87.
    np.testing.assert_allclose(credit.low_advantages, [[2.33, 3.4, 0.87, 0.6]])
    # G3 = 1 + .9 * V_H(start of the last segment = 2) = 6.4, G2 = 5.76; A(seg 1) = -.24;
    # A(seg 0) = -.14 + .648 * -.24 = -.29552.
    np.testing.assert_allclose(credit.segment_returns, [[4.86, 5.4, 5.76, 6.4]])
    np.testing.assert_allclose(credit.high_advantages, [[-0.29552, 0.0, -0.24, 0.0]])


def test_hae_of_a_cut_episode_without_bootstrap_ends_at_zero():
    credit = hae([[0, 0, 0, 1]], V_LOW, V_HIGH, STARTS, [4], [False], bootstrap_truncated=False, **SETTINGS)
    np.testing.assert_allclose(credit.low_advantages, [[2.33, 3.4, -0.75, -3.0]])
    np.testing.assert_allclose(credit.high_advantages, [[-3.4448, 0.0, -5.1, 0.0]])
    # A terminal step never bootstraps, whatever bootstrap_truncated says.
    ended = hae([[0, 0, 0, 1]], V_LOW, V_HIGH, STARTS, [4], [True], bootstrap_truncated=True, **SETTINGS)
    np.testing.assert_allclose(ended.low_advantages, credit.low_advantages)


# ---------------------------------------------------------------- credit, properties

@pytest.mark.parametrize("terminated", [True, False])
def test_one_segment_over_the_episode_is_ordinary_gae_below_and_one_step_above(terminated):
    rng = np.random.default_rng(0)
    r, v_low, v_high = rng.normal(size=(3, 1, 6))
    starts = [[True] + [False] * 5]
    credit = hae(r, v_low, v_high, starts, [6], [terminated], gamma=0.9, lam_turn=0.7, lam_seg=0.6)
    np.testing.assert_allclose(credit.low_advantages[0],
                               reference_gae(r[0], v_low[0], 0.9, 0.7, terminated, bootstrap=v_low[0][-1]))
    # The planner made one decision: its advantage is the segment's return (bootstrapped like the
    # last turn) less its value, GAE of a one-step chain.
    tail = 0.0 if terminated else 0.9 ** 6 * v_high[0][0]
    expected = sum(0.9 ** t * r[0][t] for t in range(6)) + tail - v_high[0][0]
    np.testing.assert_allclose(credit.high_advantages[0], [expected] + [0.0] * 5)


def test_a_segment_every_turn_is_ordinary_gae_on_the_high_values():
    rng = np.random.default_rng(1)
    r, v_low, v_high = rng.normal(size=(3, 1, 5))
    credit = hae(r, v_low, v_high, [[True] * 5], [5], [True], gamma=0.95, lam_turn=0.3, lam_seg=0.8)
    np.testing.assert_allclose(credit.high_advantages[0], reference_gae(r[0], v_high[0], 0.95, 0.8, True))
    # Each low-level step is one TD error onto the next high value.
    following = np.append(v_high[0][1:], 0.0)
    np.testing.assert_allclose(credit.low_advantages[0], r[0] + 0.95 * following - v_low[0])


def test_padding_and_batching_change_nothing():
    rng = np.random.default_rng(2)
    r, v_low, v_high = rng.normal(size=(3, 2, 7))
    starts = [[True, False, True, True, False, False, True], [True, False, False, True, False, True, False]]
    both = hae(r, v_low, v_high, starts, [7, 4], [False, True])
    second = hae(r[1:, :4], v_low[1:, :4], v_high[1:, :4], [starts[1][:4]], [4], [True])
    np.testing.assert_allclose(both.low_advantages[1, :4], second.low_advantages[0])
    np.testing.assert_allclose(both.high_advantages[1, :4], second.high_advantages[0])
    assert not both.low_advantages[1, 4:].any() and not both.high_advantages[1, 4:].any()
    assert both.starts[1].tolist() == [True, False, False, True, False, False, False]


def test_high_values_off_the_starts_are_never_read():
    r = [[0.0, 1.0, 0.0, 2.0, 0.0]]
    starts = [[True, False, False, True, False]]
    a = hae(r, [[1.0] * 5], [[3.0, 0.0, 0.0, 4.0, 0.0]], starts, [5], [False])
    b = hae(r, [[1.0] * 5], [[3.0, -7.0, 8.0, 4.0, 5.0]], starts, [5], [False])
    for field in ("low_advantages", "high_advantages", "segment_returns"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field))


def test_monte_carlo_limit_gives_rewards_to_go():
    # gamma = lambda = 1 with one segment: low returns are the undiscounted rewards to go.
    credit = hae([[1.0, 0.0, 2.0]], [[0.5, -1.0, 3.0]], [[0.0] * 3], [[True, False, False]], [3], [True],
                 gamma=1.0, lam_turn=1.0, lam_seg=1.0)
    np.testing.assert_allclose(credit.low_returns, [[3.0, 2.0, 2.0]])
    np.testing.assert_allclose(credit.segment_returns, [[3.0, 2.0, 2.0]])


def test_chained_gae_cuts_the_chain_where_told():
    advantages = chained_gae(np.array([[1.0, 1.0]]), np.zeros((1, 2)), np.zeros((1, 2)),
                          np.array([[False, False]]), 0.9, 1.0)
    np.testing.assert_allclose(advantages, [[1.0, 1.0]])
    chained = chained_gae(np.array([[1.0, 1.0]]), np.zeros((1, 2)), np.zeros((1, 2)),
                       np.array([[True, False]]), 0.9, 1.0)
    np.testing.assert_allclose(chained, [[1.9, 1.0]])


def test_credit_refuses_misshapen_input():
    with pytest.raises(ValueError, match="v_low must have shape"):
        hae([[0.0, 1.0]], [[0.0]], [[0.0, 0.0]], [[True, False]], [2], [True])
    with pytest.raises(ValueError, match="lengths must lie in"):
        segment_to_go([[0.0]], [[0.0]], [[True]], [2], [True], gamma=1.0, bootstrap_truncated=True)


def test_shaped_rewards_apply_hipers_penalties():
    common = dict(valid=[[True, False, True, True]], kept=[[True, True, False, True]],
                  changed_on_keep=[[False, True, False, False]])
    normalized = shaped_rewards([[0, 0, 0, 10]], [4], **common)
    # three KEEP turns of four: each loses .3 / 4; turn 1 is also invalid and rewrote its subgoal.
    np.testing.assert_allclose(normalized, [[-0.075, -0.475, 0.0, 9.925]])
    fixed = shaped_rewards([[0, 0, 0, 10]], [4], keep_penalty_mode="fixed", **common)
    np.testing.assert_allclose(fixed, [[-0.3, -0.7, 0.0, 9.7]])
    with pytest.raises(ValueError, match="keep_penalty_mode"):
        shaped_rewards([[0.0]], [1], valid=[[True]], kept=[[True]], changed_on_keep=[[False]],
                       keep_penalty_mode="ratio")


def test_whitened_pools_the_selected_entries_only():
    np.testing.assert_allclose(whitened([1.0, 2.0, 3.0], [True, True, False]), [-1.0, 1.0, 0.0], atol=1e-6)
    assert whitened([1.0], [False]).tolist() == [0.0]


# ---------------------------------------------------------------- the plan/execute format

def test_a_plan_and_an_action_parse():
    text = "<switch>switch</switch>\n<subgoal> find the apple </subgoal>\n<action>go to fridge 1</action>"
    parsed = parse_plan_response(text)
    assert (parsed.switch, parsed.subgoal, parsed.action, parsed.error) == \
        ("SWITCH", "find the apple", "go to fridge 1", None)
    assert parsed.valid and parsed.switched
    again = parse_plan_response(format_plan_response("open fridge 1", "find the apple"))
    assert again.valid and again.switch == "KEEP" and not again.switched


def test_a_plan_without_an_action_keeps_the_plan_and_plays_nothing():
    parsed = parse_plan_response("<switch>KEEP</switch><subgoal>find the apple</subgoal>")
    assert parsed.action is None and not parsed.valid
    assert parsed.subgoal == "find the apple" and parsed.error == "missing <action>...</action>"


@pytest.mark.parametrize("text, error", [
    ("<action>look</action>", "missing <switch>...</switch>"),
    ("<switch>KEEP</switch><action>look</action>", "missing <subgoal>...</subgoal>"),
    ("<subgoal>a</subgoal><switch>KEEP</switch><action>look</action>", "<subgoal>...</subgoal> out of order"),
    ("<switch>KEEP</switch><switch>KEEP</switch><subgoal>a</subgoal><action>look</action>",
     "duplicated <switch> tag"),
    ("<switch>KEEP</switch><subgoal> </subgoal><action>look</action>", "empty subgoal"),
    ("<switch>later</switch><subgoal>a</subgoal><action>look</action>", "<switch> must hold KEEP or SWITCH"),
])
def test_a_broken_plan_still_plays_its_action_but_is_invalid(text, error):
    parsed = parse_plan_response(text)
    assert parsed.action == "look" and not parsed.valid and parsed.error.startswith(error)


def test_action_rules_stay_those_of_generate_mode():
    parsed = parse_plan_response("<switch>KEEP</switch><subgoal>a</subgoal><action>look</action> and more")
    assert parsed.action is None and parsed.error == "text after </action>"
    late = parse_plan_response("<switch>KEEP</switch><action>look</action><subgoal>a</subgoal>")
    assert late.action is None and late.error == "text after </action>"
    inside = parse_plan_response("<switch>KEEP</switch><subgoal>a<action>b</subgoal></action>")
    assert not inside.valid and inside.error == "</subgoal> must come before <action>"


def test_segments_follow_hipers_switch_rule():
    # Only KEEP, a missing switch or an empty one keep the segment going; any other content opens one.
    assert not parse_plan_response("<action>look</action>").switched
    assert parse_plan_response("<switch>later</switch><subgoal>a</subgoal><action>look</action>").switched


def test_block_spans_and_token_spans_locate_each_level():
    text = "<switch>KEEP</switch> <subgoal>x</subgoal><action>look</action>"
    spans = block_spans(text)
    assert {k: text[a:b] for k, (a, b) in spans.items()} == {
        "switch": "<switch>KEEP</switch>", "subgoal": "<subgoal>x</subgoal>", "action": "<action>look</action>"}
    pieces = ["<switch>", "KEEP", "</switch>", " <", "subgoal>", "x", "</subgoal>", "<action>", "look", "</action>"]
    assert token_span(pieces, spans["subgoal"]) == (3, 7)
    assert token_span(pieces, spans["action"]) == (7, 10)
    assert token_span(pieces, (100, 120)) == (0, 0)
    assert block_spans("<action>look") == {}


def test_the_low_value_is_read_where_the_subgoal_closes():
    pieces = ["<switch>", "KEEP", "</switch>", "<subgoal>", "x", "</sub", "goal>", "<action>", "look", "</action>"]
    assert low_value_index(pieces) == 6
    no_subgoal = ["<switch>", "KEEP", "</switch>", "<action>", "look", "</action>"]
    assert low_value_index(no_subgoal) == 2
    assert low_value_index(["<action>", "look", "</action>"]) == -1
    # A block that closes the response has no token after it to act under: the prompt's last token.
    assert low_value_index(["<switch>", "KEEP", "</switch>"]) == -1


def test_the_tracker_carries_the_last_stated_subgoal():
    tracker = PlanTracker()
    for text in ("<switch>SWITCH</switch><subgoal>find the apple</subgoal><action>go to fridge 1</action>",
                 "<switch>KEEP</switch><subgoal>find an apple</subgoal><action>open fridge 1</action>",
                 "<action>take apple 1 from fridge 1</action>",
                 "<switch>SWITCH</switch><subgoal>heat the apple</subgoal><action>go to microwave 1</action>"):
        tracker.record(parse_plan_response(text))
    assert tracker.subgoal == "heat the apple"
    assert tracker.switches == [True, False, False, True]
    assert segments(tracker.switches) == [Segment(0, 2), Segment(3, 3)]
    assert tracker.changed_on_keep() == [False, True, False, False]


class CharTokenizer:
    """One token per character, no chat template: the prompt renders as plain text."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def _context():
    return Context("put a hot apple in the fridge", "You arrive at fridge 1.", ["open fridge 1", "look"],
                   [("You are in the kitchen.", "go to fridge 1")])


def test_the_plan_is_carried_into_the_next_prompt():
    tokenizer, tracker = CharTokenizer(), PlanTracker()
    builder = PlanPromptBuilder(tokenizer, "generate", history_length=2, max_tokens=100_000)
    first = tokenizer.decode(builder.prompt_ids(PlanContext.of(_context(), tracker)))
    assert f"Subgoal in force: {NO_SUBGOAL}\nAdmissible actions: open fridge 1 | look" in first
    assert "<subgoal></subgoal>" in first and SYSTEM_TEXT["generate"] not in first
    tracker.record(parse_plan_response(format_plan_response("open fridge 1", "find the apple", "SWITCH")))
    second = tokenizer.decode(builder.prompt_ids(PlanContext.of(_context(), tracker)))
    assert "Subgoal in force: find the apple\nAdmissible actions:" in second
    # Over budget the history goes first, then the actions, as in PTGPO's prompt; the subgoal stays.
    short = PlanPromptBuilder(tokenizer, "generate", history_length=0, max_tokens=100_000)
    builder.max_tokens = len(short.prompt_ids(PlanContext.of(_context(), tracker))) - 5
    squeezed = tokenizer.decode(builder.prompt_ids(PlanContext.of(_context(), tracker)))
    assert "Admissible actions" not in squeezed and "kitchen" not in squeezed
    assert squeezed.endswith("Subgoal in force: find the apple\nAction:")


def test_ptgpos_own_prompt_is_unchanged_by_the_plan_prompt():
    plain = CharTokenizer().decode(PromptBuilder(CharTokenizer(), "generate").prompt_ids(_context()))
    assert plain.startswith(SYSTEM_TEXT["generate"]) and "Subgoal" not in plain


def test_the_plan_prompt_needs_generate_mode_and_no_template():
    with pytest.raises(ValueError, match="policy.mode generate"):
        PlanPromptBuilder(CharTokenizer(), "choose")


# ---------------------------------------------------------------- settings and reported rows

def test_settings_default_to_the_published_alfworld_values():
    settings = HiperSettings()
    assert (settings.gamma, settings.lam_turn, settings.lam_seg) == (1.0, 1.0, 0.95)
    assert (settings.keep_penalty, settings.keep_penalty_mode, settings.consistency_penalty) == \
        (0.3, "normalized", 0.3)
    assert settings.bootstrap_truncated and settings.normalize and settings.invalid_penalty == 0.1
    assert HiperSettings.from_mapping({"keep_penalty": "3.5"}).keep_penalty == 3.5


@pytest.mark.parametrize("values, message", [
    ({"lam_seg": 1.5}, r"algorithm\.hiper\.lam_seg"),
    ({"keep_penalty_mode": "ratio"}, r"algorithm\.hiper\.keep_penalty_mode"),
    ({"lam_sag": 0.9}, "lam_sag"),
    ({"normalize": "yes"}, r"algorithm\.hiper\.normalize"),
])
def test_settings_name_the_key_to_fix(values, message):
    with pytest.raises(ValueError, match=message):
        HiperSettings.from_mapping(values)


def test_the_reported_table_has_hipers_readme_figures():
    loaded = load_reported(DEFAULT_REPORTED)
    rows = {(row.method, row.model): row for row in loaded.rows if row.source == "hiper"}
    small, large = rows["HiPER", "Qwen2.5-1.5B-Instruct"], rows["HiPER", "Qwen2.5-7B-Instruct"]
    assert small.results["ALFWorld"]["All"].value == 95.3 and small.results["WebShop"]["success"].value == 71.4
    assert large.results["ALFWorld"]["All"].value == 97.4 and large.results["WebShop"]["success"].value == 83.3
    source = loaded.sources["hiper"]
    assert source.quality == "official code" and "2602.16165" in source.citation
    assert source.protocol and source.protocol != "verl-agent"


# ---------------------------------------------------------------- the batch entry point

def _two_episodes():
    switch = parse_plan_response(format_plan_response("go to fridge 1", "find apple", "SWITCH"))
    keep = parse_plan_response(format_plan_response("open fridge 1", "find apple"))
    won = EpisodeTurns([0.0, 1.0], [switch, keep], [True, True], terminated=True)
    cut = EpisodeTurns([0.0, 0.0, 0.0], [parse_plan_response(format_plan_response("look", "a")),
                                         parse_plan_response(format_plan_response("look", "b", "SWITCH")),
                                         parse_plan_response("<action>look</action>")],
                       [True, True, False], terminated=False)
    return [won, cut]


def test_hiper_credit_composes_rewards_penalties_and_both_levels():
    settings = HiperSettings(normalize=False, switch_head=False)
    zeros = np.zeros((2, 3))
    credit = hiper_credit(_two_episodes(), zeros, zeros, settings)
    # Won: rewards x10 = [0, 10], the KEEP turn loses .3 / 2 -> [0, 9.85]; gamma = lambda = 1, zero values.
    # Cut: KEEP turn 0 loses .3 / 3; turn 1 switches; turn 2 (no plan: counts as KEEP) loses .1 and .1
    # (invalid) -> [-.1, 0, -.2]; segments [0] and [1, 2]; A_H(0) = -.1 + .95 * -.2.
    np.testing.assert_allclose(credit.low_advantages, [[9.85, 9.85, 0.0], [-0.1, -0.2, -0.2]])
    np.testing.assert_allclose(credit.high_advantages, [[9.85, 0.0, 0.0], [-0.29, -0.2, 0.0]])
    assert credit.starts.tolist() == [[True, False, False], [True, True, False]]
    assert credit.high_turns.tolist() == [[True, False, False], [True, True, False]]
    assert credit.switch_turns.tolist() == [[True, True, False], [True, True, False]]
    assert credit.switch_advantages is None and credit.switch_returns is None


def test_hiper_credit_whitens_each_level_over_its_turns_and_fits_a_switch_head():
    v_switch = np.ones((2, 3))
    zeros = np.zeros((2, 3))
    credit = hiper_credit(_two_episodes(), zeros, zeros, HiperSettings(), v_switch=v_switch)
    inside = np.array([[True, True, False], [True, True, True]])
    low = credit.low_advantages[inside]
    assert abs(low.mean()) < 1e-9 and abs(low.std() - 1) < 1e-6
    assert abs(credit.high_advantages[credit.high_turns].mean()) < 1e-9 and not credit.high_advantages[0, 1:].any()
    # Before whitening the switch advantage is G - V_S, on the turns with a switch block only.
    raw = credit.switch_returns - v_switch * inside
    expected = whitened(raw, credit.switch_turns)
    np.testing.assert_allclose(credit.switch_advantages, expected)
    with pytest.raises(ValueError, match="v_switch"):
        hiper_credit(_two_episodes(), np.zeros((2, 3)), np.zeros((2, 3)), HiperSettings())


def test_an_episode_needs_one_entry_per_turn():
    with pytest.raises(ValueError, match="one reward, response and validity per turn"):
        EpisodeTurns([0.0], [], [True], terminated=True)
