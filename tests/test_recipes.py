"""Recipes (ptgpo_algos.policy.recipes) and prompt templates (ptgpo_algos.policy.templates): the
verl-agent recipe's prompts on hand-built contexts, its response rule, the template loader's errors,
and the recipe's config defaults under explicit settings."""

from __future__ import annotations

import pytest
import yaml

from ptgpo_algos.config import TrainConfig
from ptgpo_algos.records import Context, Decision
from ptgpo_algos.policy import parse_response
from ptgpo_algos.policy.prompts import PromptBuilder
from ptgpo_algos.policy.templates import PromptTemplate, load_prompt_template

ALFWORLD, WEBSHOP = "ptgpo/ALFWorld-v0", "ptgpo/WebShop-v0"


class CharTokenizer:
    """One token per character; with ``chat``, a chat template that writes ``role: content`` lines."""

    eos_token_id = None

    def __init__(self, chat: bool = False):
        self.chat_template = "role: content" if chat else None
        self.conversations: list[list[dict]] = []

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(char) for char in text]

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool) -> list[int]:
        self.conversations.append(messages)
        return self.encode("".join(f"{m['role']}: {m['content']}\n" for m in messages))


def _text(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def _builder(env_id: str, history_length: int = 2, max_tokens: int = 100_000, chat: bool = False) -> PromptBuilder:
    config = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": env_id})
    template = PromptTemplate.from_mapping(config.policy.prompt_template)
    return PromptBuilder(CharTokenizer(chat), "generate", history_length, max_tokens, template)


ALFWORLD_RULE = (
    "Choose one action for this step. First reason about the situation step by step inside <think> </think>; a "
    "response without this reasoning does not count. Then write the action you chose, exactly as listed, inside "
    "<action> </action>.\n"
)
WEBSHOP_RULE = (
    "Choose one action for this step. First reason step by step about the page and about which listed action "
    "brings you closest to buying what the task asks for, inside <think> </think>; a response without this "
    "reasoning does not count. Then write the action you chose inside <action> </action> (a search with your "
    "own words between its brackets).\n"
)
FIRST = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you "
         "see a cabinet 1 and a sinkbasin 1.\n\nYour task is to: put a mug in sinkbasin.")
TASK = "put a mug in sinkbasin."
INSTRUCTION = "i need a red mug, and price lower than 20.00 dollars"
SEARCH_PAGE = f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"
RESULTS_PAGE = (f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] Next > "
                "[SEP] B0RED [SEP] Red Mug [SEP] $9.99")


# ----------------------------------------------------------------------------- the recipe's prompts
def test_alfworld_first_step_states_the_observation_and_the_quoted_actions():
    context = Context(TASK, FIRST, ["go to cabinet 1", "go to sinkbasin 1", "look"])
    assert _text(_builder(ALFWORLD).prompt_ids(context)) == (
        "\nYou are an expert agent in ALFWorld, a household simulated in text.\n"
        f"What you observe now: {FIRST}\n"
        "Actions you can take now: ['go to cabinet 1'\n 'go to sinkbasin 1'\n 'look'].\n\n" + ALFWORLD_RULE
    )


def test_alfworld_later_step_counts_steps_and_numbers_the_last_two():
    history = [(FIRST, "go to cabinet 1"), ("The cabinet 1 is closed.", "open cabinet 1"),
               ("You open the cabinet 1. In it, you see a mug 1.", "take mug 1 from cabinet 1"),
               ("You pick up the mug 1 from the cabinet 1.", "go to sinkbasin 1")]
    context = Context(TASK, "You arrive at sinkbasin 1.", ["move mug 1 to sinkbasin 1", "look"], history)
    assert _text(_builder(ALFWORLD).prompt_ids(context)) == (
        f"\nYou are an expert agent in ALFWorld, a household simulated in text. Your task: {TASK}\n"
        "You have taken 4 step(s) so far. Your last 2 observation(s), each with the action you took next: "
        "[Step 3: observation 'You open the cabinet 1. In it, you see a mug 1.'; action 'take mug 1 from cabinet 1']\n"
        "[Step 4: observation 'You pick up the mug 1 from the cabinet 1.'; action 'go to sinkbasin 1']\n"
        "This is step 5. What you observe now: You arrive at sinkbasin 1.\n"
        "Actions you can take now: ['move mug 1 to sinkbasin 1'\n 'look'].\n\n" + ALFWORLD_RULE
    )


def test_webshop_search_page_offers_the_search_grammar_and_quotes_the_page():
    context = Context(INSTRUCTION, SEARCH_PAGE, [f"search[{INSTRUCTION}]"])
    assert _text(_builder(WEBSHOP).prompt_ids(context)) == (
        "\nYou are an expert shopping agent in WebShop, an online store simulated in text.\n"
        f"Your task: {INSTRUCTION}.\n"
        "What the page shows now: 'Search'.\n"
        "Actions you can take now:\n[\n'search[<your query>]',\n].\n\n" + WEBSHOP_RULE
    )


def test_webshop_later_pages_drop_the_instruction_and_list_the_clicks_only():
    # The original pages accept (and list) a search everywhere; the prompt lists it on the search page only.
    actions = ["click[back to search]", "click[next >]", "click[b0red]", f"search[{INSTRUCTION}]"]
    context = Context(INSTRUCTION, RESULTS_PAGE, actions, [(SEARCH_PAGE, "search[red mug]")])
    assert _text(_builder(WEBSHOP).prompt_ids(context)) == (
        "\nYou are an expert shopping agent in WebShop, an online store simulated in text.\n"
        f"Your task: {INSTRUCTION}.\n"
        "You have taken 1 step(s) so far. Your last 1 observation(s), each with the action you took next: "
        "[Step 1: observation ''Search''; action 'search[red mug]']\n"
        "This is step 2. What the page shows now: 'Back to Search' [SEP] 'Page 1 (Total results: 1)' [SEP] "
        "'Next >' [SEP] 'B0RED' [SEP] 'Red Mug' [SEP] '$9.99'.\n"
        "Actions you can take now:\n[\n'click[back to search]',\n'click[next >]',\n'click[b0red]',\n].\n\n"
        + WEBSHOP_RULE
    )


def test_a_page_without_the_instruction_is_shown_as_it_is():
    template = load_prompt_template(_recipe_folder() / "webshop.yaml")
    assert template.view.observation("You have clicked red.", INSTRUCTION) == "You have clicked red."


def test_the_template_is_one_user_message_and_drops_history_before_going_over_budget():
    history = [(f"observation {i}", f"action {i}") for i in range(1, 5)]
    context = Context(TASK, "You arrive at sinkbasin 1.", ["look"], history)
    chat = _builder(ALFWORLD, chat=True)
    chat.prompt_ids(context)
    assert [message["role"] for message in chat.tokenizer.conversations[-1]] == ["user"]  # no system text of ours
    full = _builder(ALFWORLD).prompt_ids(context)
    first_step = _builder(ALFWORLD).prompt_ids(Context(TASK, "You arrive at sinkbasin 1.", ["look"]))
    # One pair fits: the oldest shown pair goes first; none fits: the first-step text, the present uncut.
    one = _builder(ALFWORLD, max_tokens=len(full) - 1).prompt_ids(context)
    assert "[Step 4: observation 'observation 4'" in _text(one) and "Step 3" not in _text(one)
    none = _text(_builder(ALFWORLD, max_tokens=len(first_step)).prompt_ids(context))
    assert none.startswith("\nYou are an expert agent in ALFWorld") and "step(s) so far" not in none
    assert "You arrive at sinkbasin 1." in none


def test_other_environments_get_the_recipes_general_prompt():
    builder = _builder("ptgpo/FrozenLake-v0")
    text = _text(builder.prompt_ids(Context("Reach the goal.", "You are at S.", ["go left"], [("S", "go up")])))
    assert "Your task: Reach the goal." in text and "This is step 2." in text and "['go left']" in text


# ----------------------------------------------------------------------------- the response rule
def test_a_response_without_think_is_invalid_under_the_recipe_and_valid_without_it():
    plain = parse_response("<action>look</action>")
    strict = parse_response("<action>look</action>", require_think=True)
    assert plain.valid and plain.action == "look" and plain.error is None
    assert not strict.valid and strict.action == "look" and strict.error == "missing <think>...</think>"
    both = parse_response("<think>the sink first</think><action>look</action>", require_think=True)
    assert both.valid and both.think == "the sink first"
    # A response without an action is invalid either way.
    assert parse_response("<think>hm</think>", require_think=True).action is None


class _Responder:
    """A rollout policy that writes every first admissible action, with or without a format error."""

    mode = "generate"

    def __init__(self, format_error):
        self.format_error = format_error

    def decide(self, contexts, *, greedy=False, generator=None, temperature=None):
        return [Decision(text="", action=c.admissible_actions[0], prompt_ids=[1], response_ids=[2], logprobs=[-0.5],
                         entropy=0.0, format_error=self.format_error) for c in contexts]


@pytest.mark.parametrize("format_error", [None, "missing <think>...</think>"])
def test_a_response_that_breaks_the_rule_is_played_but_its_step_is_invalid(format_error):
    from ptgpo_algos.rollouts.collection import Task, collect_rollouts

    tasks = [Task("ptgpo/Household-v0", 3, {"difficulty": "easy"}, 4)]
    batch, stats = collect_rollouts(_Responder(format_error), tasks, group_size=2)
    steps = [step for trajectory in batch[0] for step in trajectory.steps]
    assert len(steps) == 8  # the admissible actions were played to the horizon either way
    assert all(step.valid == (format_error is None) for step in steps)
    assert stats.as_dict()["invalid_rate"] == (0.0 if format_error is None else 1.0)


# ----------------------------------------------------------------------------- the template loader
def _write(tmp_path, data) -> str:
    path = tmp_path / "template.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


GOOD = {"no_history": "{current_observation} {admissible_actions}",
        "with_history": "{task_description} {action_history} {current_observation} {available_actions}"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"with_history": "{task_description} {current_observation} {admissible_actions}"},
         "with_history: missing placeholder(s) {action_history}"),
        ({"no_history": "{current_observation}"},
         "no_history: missing placeholder(s) {admissible_actions} (or {available_actions})"),
        ({"no_history": "{observation} {admissible_actions}"}, "no_history: unknown placeholder {observation}"),
        ({"no_history": "{current_observation.upper} {admissible_actions}"}, "unknown placeholder"),
        ({"no_history": "{current_observation:>9} {admissible_actions}"}, "must be a plain {name}"),
        ({"no_history": "{current_observation} {admissible_actions} {"}, "write a literal brace twice"),
        ({"history_item": "{step}: {observation}"}, "history_item: missing placeholder(s) {action}"),
        ({"action_item": "'{act}'"}, "action_item: unknown placeholder {act}"),
        ({"page_view": "amazon"}, "page_view 'amazon' is not one of plain, webshop"),
        ({"system": "hello"}, "unknown key(s) ['system']"),
        ({"action_separator": 3}, "action_separator must be text"),
    ],
)
def test_template_files_are_checked_where_they_enter(tmp_path, change, message):
    path = _write(tmp_path, {**GOOD, **change})
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"prompt_template": path})
    assert str(error.value).startswith("policy.prompt_template (prompt_template): ") and message in str(error.value)
    assert path in str(error.value)


def test_missing_unreadable_and_incomplete_template_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_prompt_template(tmp_path / "absent.yaml")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_prompt_template(_write(tmp_path, "no_history: [unclosed"))
    with pytest.raises(ValueError, match="missing with_history"):
        load_prompt_template(_write(tmp_path, {"no_history": GOOD["no_history"]}))
    with pytest.raises(ValueError, match="expected a mapping"):
        load_prompt_template(_write(tmp_path, "- a list"))


def test_a_users_template_file_drives_the_prompt_and_travels_in_the_config(tmp_path):
    path = _write(tmp_path, {**GOOD, "history_item": "({step}) {observation} -> {action}",
                             "no_history": "Now: {current_observation}. Do one of {{{admissible_actions}}}."})
    config = TrainConfig.from_dict({"prompt_template": path})
    # The config keeps the text, so a saved config.json builds the same prompt without the file.
    assert config.policy.prompt_template["history_item"] == "({step}) {observation} -> {action}"
    assert TrainConfig.from_dict(config.to_dict()) == config
    template = PromptTemplate.from_mapping(config.policy.prompt_template)
    builder = PromptBuilder(CharTokenizer(), "choose", 2, 1000, template)
    assert _text(builder.prompt_ids(Context("t", "a hall", ["go north", "look"]))) == \
        "Now: a hall. Do one of {'go north', 'look'}."


# ----------------------------------------------------------------------------- the recipe's defaults
def test_the_recipe_sets_verl_agents_settings_per_environment_and_estimator():
    alfworld = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": ALFWORLD, "algo": "gigpo"})
    webshop = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": WEBSHOP, "algo": "gigpo"})
    for config in (alfworld, webshop):
        optim = config.optim
        assert (optim.lr, optim.epochs, optim.kl_coef, optim.entropy_coef, optim.weight_decay) == (
            1e-6, 1, 0.01, 0.001, 0.01)
        assert (config.evaluation.temperature, config.run.iterations, config.run.total_decisions) == (0.4, 150, None)
        assert (config.rollouts.group_size, config.rollouts.tasks_per_iteration) == (8, 16)
        assert (config.policy.mode, config.policy.require_think, config.policy.history_length) == ("generate", True, 2)
    assert (alfworld.optim.minibatch_size, webshop.optim.minibatch_size) == (256, 64)
    assert (alfworld.env.max_steps, webshop.env.max_steps) == (50, 15)
    assert (alfworld.policy.max_prompt_tokens, webshop.policy.max_prompt_tokens) == (2048, 4096)
    assert alfworld.algorithm.config == {"gamma": 0.95, "invalid_penalty": 0.1, "omega": 1.0, "norm": "mean_std_norm"}
    assert webshop.algorithm.config["norm"] == "mean_norm"
    assert (alfworld.policy.prompt_template["page_view"], webshop.policy.prompt_template["page_view"]) == (
        "plain", "webshop")
    # GiGPO's norm is the recipe's for GiGPO only.
    grpo = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": WEBSHOP, "algo": "grpo"})
    assert "norm" not in grpo.algorithm.config


def test_explicit_settings_override_the_recipe_down_to_one_estimator_key():
    config = TrainConfig.from_dict({
        "recipe": "verl-agent", "env_id": WEBSHOP, "algo": "gigpo", "algo_config": {"norm": "mean_std_norm"},
        "optim": {"entropy_coef": 0.0, "minibatch_size": 32}, "eval_temperature": 0, "require_think": False,
        "iterations": 3, "total_decisions": 500,
    })
    assert (config.optim.entropy_coef, config.optim.minibatch_size, config.optim.weight_decay) == (0.0, 32, 0.01)
    assert config.algorithm.config == {"gamma": 0.95, "invalid_penalty": 0.1, "omega": 1.0, "norm": "mean_std_norm"}
    assert (config.evaluation.temperature, config.policy.require_think) == (0.0, False)
    assert (config.run.iterations, config.run.total_decisions) == (3, 500)
    # Without a recipe nothing changes: PTGPO's defaults and prompt.
    plain = TrainConfig.from_dict({"env_id": WEBSHOP})
    assert (plain.policy.prompt_template, plain.policy.require_think, plain.optim.weight_decay) == (None, False, 0.0)
    assert plain.run.iterations == 100


def test_the_saved_config_of_a_recipe_run_is_the_same_run():
    config = TrainConfig.from_dict({"recipe": "verl-agent", "env_id": WEBSHOP, "algo": "gigpo"})
    # config.json holds the resolved values, so reading it back applies nothing twice.
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.replace(seed=4).optim == config.optim


def test_unknown_recipes_are_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"policy.recipe \(recipe\): unknown recipe 'verl'; known: verl-agent"):
        TrainConfig.from_dict({"recipe": "verl"})


def _recipe_folder():
    from ptgpo_algos.policy.recipes import PRESETS

    return PRESETS / "verl-agent"


@pytest.fixture
def presets(tmp_path, monkeypatch):
    """A folder of recipes of the test's own, in place of the shipped ones."""
    from ptgpo_algos.policy import recipes

    monkeypatch.setattr(recipes, "PRESETS", tmp_path)
    recipes.load_recipe.cache_clear()
    yield tmp_path
    recipes.load_recipe.cache_clear()


def test_estimator_keys_of_a_recipe_go_to_the_estimators_that_take_them(presets):
    (presets / "norms").mkdir()
    (presets / "norms" / "recipe.yaml").write_text(yaml.safe_dump(
        {"description": "x", "rules": [{"set": {"algorithm.config.norm": "mean_norm", "optim.lr": 2e-6}}]}))
    assert TrainConfig.from_dict({"recipe": "norms", "algo": "gigpo"}).algorithm.config == {"norm": "mean_norm"}
    rloo = TrainConfig.from_dict({"recipe": "norms", "algo": "rloo"})  # RLOO has no norm
    assert rloo.algorithm.config == {} and rloo.optim.lr == 2e-6


@pytest.mark.parametrize(
    "rules, message",
    [
        ([{"when": {"env.kind": "x"}, "set": {}}], "rules[0].when may compare env.id, algorithm.name"),
        ([{"set": {"policy.prompt_template": "absent.yaml"}}], "names the prompt template 'absent.yaml'"),
        ([{"sett": {}}], "rules[0] must be"),
        ("rules: [unclosed", "not valid YAML"),
    ],
)
def test_a_broken_recipe_file_is_named(presets, rules, message):
    (presets / "broken").mkdir()
    text = rules if isinstance(rules, str) else yaml.safe_dump({"rules": rules})
    (presets / "broken" / "recipe.yaml").write_text(text)
    with pytest.raises(ValueError) as error:
        TrainConfig.from_dict({"recipe": "broken"})
    assert "recipe 'broken'" in str(error.value) and message in str(error.value)
