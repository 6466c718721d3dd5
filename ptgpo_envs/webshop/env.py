"""WebShop in text mode: search, browse and buy the product an instruction describes.

Pages and actions follow the original's text environment (``web_agent_text_env.py``):

* **search page**: ``search[query]``. Any query of 1-500 printable characters is accepted (keyword
  case-insensitive, the query lower-cased and its whitespace collapsed, as the original does).
  ``admissible_actions`` lists one concrete search, ``search[<the instruction, lower-cased>]``: the
  template of the grammar, filled with the one query every agent can see (the original's imitation
  baseline offers the same one among its choices). Agents may type any other query.
* **results page**: up to 10 of the (at most 50) hits, ``click[<asin>]``, ``click[next >]``,
  ``click[< prev]`` (after page 1) and ``click[back to search]``.
* **item page**: ``click[<option value>]`` for each value of each option (size, color...; clicking
  replaces that option's value), ``click[description]``, ``click[features]``, ``click[reviews]``,
  ``click[buy now]``, ``click[< prev]`` (back to the results; selected options are dropped) and
  ``click[back to search]``. A value equal to a button's name is shadowed by the button.
* **description / features / reviews pages**: ``click[< prev]`` (back to the item, options kept) and
  ``click[back to search]``.

Clicks match a listed clickable ignoring case and surrounding whitespace. ``click[buy now]`` ends the
episode with WebShop's reward (:mod:`ptgpo_envs.webshop.reward`) as the step reward and as
``info["score"]`` (0.0 before); ``won`` means a score of exactly 1. The horizon is 15 steps.

``observation_style`` (:mod:`ptgpo_envs.observation_style`) chooses the pages
(:mod:`ptgpo_envs.webshop.pages`):

* ``"original"`` (default): the original's simple text mode, and its affordances: ``next >`` on
  every results page (past the last hit it shows an empty page), ``search[...]`` accepted on every
  page (so ``admissible_actions`` ends with the instruction's search there too), clicks listed as the
  original lists them (buttons, then ASINs or option values), and an action that is not understood
  re-shows the page;
* ``"annotated"``: PTGPO's pages (instruction on every page, selected options stated, reviews,
  ``next >`` only when more hits follow), ``search[...]`` only on the search page, option values
  listed before the buttons, and :data:`~ptgpo_envs.core.INVALID_ACTION_OBSERVATION` after an action
  that is not understood.

``state_key`` is the annotated page without the instruction, in both styles.

Product-title nouns for the reward's type term come from spaCy's ``spacy_model`` when it is
installed, else from a stand-in (:mod:`ptgpo_envs.webshop.nouns`); ``reward_impl`` (attribute and
``info`` key) says which: ``"spacy"`` or ``"stand-in"``, and ``reward_model`` names the spaCy model
and version (None for the stand-in). ``info["observation_style"]`` says which pages were shown.

Goals come from ``data_path`` (or ``$WEBSHOP_DATA``), the folder of the original files, or else from the
bundled catalogue; ``split`` selects the original's goal split ("train", "eval", "test" = the first 500,
"all"). ``reset(options={"goal_index": i})`` plays goal ``i`` of the split; otherwise it is drawn with
the reset seed. The expert (:mod:`ptgpo_envs.webshop.expert`) knows the goal's product.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from ptgpo_envs.core import MAX_ACTION_CHARS, TextEnv
from ptgpo_envs.observation_style import ORIGINAL, check_observation_style
from ptgpo_envs.webshop.data import Catalog, get_catalog
from ptgpo_envs.webshop.nouns import DEFAULT_SPACY_MODEL, noun_extractor
from ptgpo_envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    DONE,
    ITEM,
    NEXT_PAGE,
    PREV_PAGE,
    PRODUCTS_PER_PAGE,
    RESULTS,
    SEARCH,
    SUB_PAGES,
    Page,
    annotated_body,
    annotated_page,
    original_page,
    page_hits,
)
from ptgpo_envs.webshop.reward import purchase_reward
from ptgpo_envs.webshop.search import SearchIndex

__all__ = ["WebShopEnv", "MAX_QUERY_CHARS", "PRODUCTS_PER_PAGE"]

MAX_QUERY_CHARS = 500


_SEARCH_ACTION = re.compile(r"search\[(.*)\]", re.IGNORECASE | re.DOTALL)

# Keyed by id(); the catalogue is kept in the value so that its id cannot be reused.
_indexes: dict[int, tuple[Catalog, SearchIndex]] = {}


def _index_for(catalog: Catalog, cache_dir: str | os.PathLike[str] | None) -> SearchIndex:
    """One search index per catalogue per process (vectorised copies of the env share it)."""
    if id(catalog) not in _indexes:
        index = SearchIndex.load_or_build(
            catalog.documents(), Path(cache_dir) if cache_dir is not None else None
        )
        _indexes[id(catalog)] = (catalog, index)
    return _indexes[id(catalog)][1]


class WebShopEnv(TextEnv):
    """WebShop text mode (see the module docstring)."""

    default_max_steps: ClassVar[int] = 15

    def __init__(
        self,
        *,
        data_path: str | os.PathLike[str] | None = None,
        split: str = "train",
        observation_style: str = ORIGINAL,
        spacy_model: str | None = DEFAULT_SPACY_MODEL,
        cache_dir: str | os.PathLike[str] | None = None,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.observation_style = check_observation_style(observation_style)
        if spacy_model is not None and (not isinstance(spacy_model, str) or not spacy_model.strip()):
            raise ValueError(
                f"spacy_model must be a spaCy model's package name or folder, or None for the stand-in, "
                f"got {spacy_model!r}"
            )
        self.nouns = noun_extractor(spacy_model)
        self.reward_impl, self.reward_model = self.nouns.impl, self.nouns.model
        if data_path is None:
            data_path = os.environ.get("WEBSHOP_DATA") or None
        self.catalog = get_catalog(data_path)
        self.goal_indices = self.catalog.split_indices(split)
        self.split = split
        # verl-agent's WebShop is the original's 1,000-product small set; results on another set differ.
        origin = "bundled" if data_path is None else "original files"
        self.product_set = f"{len(self.catalog.products)} products ({origin}), {split} goals"
        self.search_index = _index_for(self.catalog, cache_dir)
        self._world = Page(goal_index=self.goal_indices[0])

    # ----------------------------------------------------------------- reading the state
    @property
    def goal(self) -> dict[str, Any]:
        """The episode's goal: the instruction and the attributes, options and price it asks for."""
        return self.catalog.goals[self._world.goal_index]

    @property
    def page(self) -> Page:
        """The page the agent is on."""
        return self._world

    @property
    def _original(self) -> bool:
        return self.observation_style == ORIGINAL

    def _clickables(self) -> dict[str, str]:
        """Clickable text (lower case) → what it does, in the order the page's style lists them."""
        page = self._world
        if page.name == RESULTS:
            clicks = {BACK_TO_SEARCH: "search"}
            if page.page_number > 1:
                clicks[PREV_PAGE] = "prev"
            if self._original or page.page_number * PRODUCTS_PER_PAGE < len(page.hits):
                clicks[NEXT_PAGE] = "next"
            for asin in page_hits(page):
                clicks[asin.lower()] = "asin:" + asin
            return clicks
        if page.name == ITEM:
            buttons = {BACK_TO_SEARCH: "search", PREV_PAGE: "prev", **{sub: "sub" for sub in SUB_PAGES}}
            buttons[BUY_NOW] = "buy"
            option_clicks: dict[str, str] = {}
            for name, values in self.catalog.by_asin[page.asin]["options"].items():
                for value in values:
                    option_clicks[value] = "option:" + name
            options = {value: effect for value, effect in option_clicks.items() if value not in buttons}
            if self._original:
                return {**buttons, **options}
            navigation = {BACK_TO_SEARCH: "search", PREV_PAGE: "prev"}
            return {**navigation, **options, **buttons}
        if page.name in SUB_PAGES:
            return {BACK_TO_SEARCH: "search", PREV_PAGE: "prev"}
        return {}

    # ----------------------------------------------------------------- hooks
    def _new_episode(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        unknown = set(options) - {"goal_index"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; WebShop takes 'goal_index'")
        if "goal_index" in options:
            index = options["goal_index"]
            if not isinstance(index, int) or not 0 <= index < len(self.goal_indices):
                raise ValueError(
                    f"goal_index must be an int in [0, {len(self.goal_indices)}) for the "
                    f"{self.split!r} split, got {index!r}"
                )
        else:
            index = int(self.np_random.integers(len(self.goal_indices)))
        self._world = Page(goal_index=self.goal_indices[index])
        return self._render()

    def _searches_here(self) -> bool:
        """Whether ``search[...]`` is accepted on the current page (the original: on every page)."""
        return self._world.name == SEARCH or (self._original and self._world.name != DONE)

    def _admissible_actions(self) -> list[str]:
        search = f"search[{self._instruction_query()}]"
        if self._world.name == SEARCH:
            return [search]
        clicks = [f"click[{text}]" for text in self._clickables()]
        return clicks + [search] if self._searches_here() else clicks

    def match_action(self, action: str) -> str | None:
        """Free-form ``search[...]`` where searching is accepted; else an admissible click."""
        if len(action) > MAX_ACTION_CHARS:
            return None
        found = _SEARCH_ACTION.fullmatch(action.strip()) if self._searches_here() else None
        if found is None:
            return super().match_action(action) if self._world.name != SEARCH else None
        query = " ".join(found.group(1).split()).lower()
        if not query or len(query) > MAX_QUERY_CHARS or not query.isprintable():
            return None
        return f"search[{query}]"

    def _apply(self, action: str) -> tuple[str, float, bool]:
        page = self._world
        if action.startswith("search["):
            query = action[len("search[") : -1]
            hits = tuple(self.search_index.search(query))
            self._world = Page(goal_index=page.goal_index, name=RESULTS, query=query, hits=hits)
            return self._render(), 0.0, False
        effect = self._clickables()[action[len("click[") : -1]]
        reward, terminated = 0.0, False
        if effect == "search":
            self._world = Page(goal_index=page.goal_index)
        elif effect == "next":
            self._world = replace(page, page_number=page.page_number + 1)
        elif effect == "prev" and page.name == RESULTS:
            self._world = replace(page, page_number=page.page_number - 1)
        elif effect == "prev" and page.name == ITEM:
            self._world = replace(page, name=RESULTS, asin=None, options=())
        elif effect == "prev":
            self._world = replace(page, name=ITEM)
        elif effect.startswith("asin:"):
            self._world = replace(page, name=ITEM, asin=effect[len("asin:") :], options=())
        elif effect.startswith("option:"):
            chosen = dict(page.options)
            chosen[effect[len("option:") :]] = action[len("click[") : -1]
            self._world = replace(page, options=tuple(chosen.items()))
        elif effect == "sub":
            self._world = replace(page, name=action[len("click[") : -1])
        elif effect == "buy":
            breakdown = purchase_reward(
                self.catalog.by_asin[page.asin],
                self.goal,
                self.catalog.prices[page.asin],
                dict(page.options),
                nouns=self.nouns,
            )
            reward, terminated = breakdown.reward, True
            self._world = replace(page, name=DONE, score=breakdown.reward, reward_info=breakdown.as_dict())
        return self._render(), reward, terminated

    def _invalid_action_observation(self) -> str:
        # The original's step() leaves the page as it was and shows it again.
        return self._render() if self._original else super()._invalid_action_observation()

    def _state_key(self) -> str:
        return annotated_body(self._world, self.catalog.by_asin)

    def _task(self) -> str:
        return self.goal["instruction_text"]

    def _won(self) -> bool:
        return self._world.name == DONE and self._world.score == 1.0

    def _extra_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "score": self._world.score,
            "task_type": self.goal["category"],
            "goal_index": self._world.goal_index,
            "reward_impl": self.reward_impl,
            "reward_model": self.reward_model,
            "observation_style": self.observation_style,
            "webshop_set": self.product_set,
        }
        if self._world.name == DONE:
            info["purchased_asin"] = self._world.asin
            info["reward_info"] = dict(self._world.reward_info or {})
        return info

    def expert_action(self) -> str:
        """The next action of the scripted expert (:func:`ptgpo_envs.webshop.expert.expert_action`)."""
        from ptgpo_envs.webshop.expert import expert_action

        return expert_action(self.goal, self.page, self.catalog)

    # ----------------------------------------------------------------- rendering
    def _instruction_query(self) -> str:
        query = " ".join(self.goal["instruction_text"].split()).lower()
        return query[:MAX_QUERY_CHARS].strip() or "product"

    def _render(self) -> str:
        render = original_page if self._original else annotated_page
        return render(self._world, self.catalog.by_asin, self.goal["instruction_text"])
