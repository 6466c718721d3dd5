"""WebShop's purchase reward, term by term (Yao et al., 2022; ``web_agent_site/engine/goal.py``).

When the agent clicks *Buy Now* on product ``p`` with the options ``O`` it selected, the original
computes, for a goal ``g`` (built from an instruction):

* **Type** ``r_type`` in {0, 0.1, 0.5, 1}: does ``p`` have the kind of product the goal asks for?
  ``query_match`` = same search query the product was scraped with; ``category_match`` = the two
  ``product_category`` breadcrumbs ("A › B › C") share at least two distinct levels; ``title_score`` =
  the fraction of the goal title's noun tokens (a list, duplicates counted) that also occur in the
  purchased title's noun tokens (0.2 when the goal title has none). Then ``r_type`` = 1, lowered to
  0.5 when none of (``query_match``, ``category_match``, ``title_score > 0.2``) holds, to 0.1 when
  ``title_score < 0.1`` and to 0 when ``title_score == 0`` (checked in that order).
* **Attributes**: a goal attribute is matched when some product attribute has a fuzzy
  ``token_set_ratio`` above 85 with it, or else when it is a substring of the lower-cased title,
  features (bullet points) or description. ``r_att`` = matched / number of goal attributes.
* **Options**: each *selected* option value (colour-normalised) is matched against the goal's option
  values: exactly for the option named ``size``, by ``token_set_ratio > 85`` otherwise, or else by
  being a substring of the lower-cased title, features or description. ``r_option`` = matches /
  number of goal options.
* **Price**: ``r_price`` = 1 when the product's price is at most the goal's ``price_upper``.

and combines them as ``r_type * (n_att + n_option + r_price) / (len(attributes) + len(options) + 1)``.

Deviations from the original, on purpose:

* The original finds nouns with spaCy's ``en_core_web_lg`` tagger (NOUN/PROPN tokens). We keep every
  word token that contains a letter and is not an English function word (:data:`FUNCTION_WORDS`), so
  adjectives and verbs count as well: a dependency-light stand-in whose title scores are close to, not
  equal to, spaCy's.
* ``token_set_ratio`` comes from ``rapidfuzz`` with thefuzz's preprocessing (ASCII folding, lower
  case, non-alphanumerics to spaces) and thefuzz's rounding to an integer, so it gives thefuzz's scores.
* :func:`normalize_color` follows the original rule (the first known colour name contained in the
  value replaces it) over our own list of colour names, :data:`COLOR_NAMES`.
* The original can exceed 1 when more selected options match than the goal has (matches are counted
  per selected option); :func:`purchase_reward` caps the total at 1.0 so that the score is in [0, 1].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

__all__ = [
    "COLOR_NAMES",
    "FUNCTION_WORDS",
    "RewardBreakdown",
    "TypeMatch",
    "attribute_matches",
    "fuzzy_score",
    "normalize_color",
    "option_matches",
    "purchase_reward",
    "title_tokens",
    "type_reward",
]

#: Fuzzy scores must exceed this (original: ``score > 85``).
FUZZY_THRESHOLD = 85
#: Option names compared exactly rather than fuzzily (original: ``EXACT_MATCH_OPTS``).
EXACT_MATCH_OPTIONS = frozenset({"size"})

#: Multi-word colours come before the single words they contain, so "navy blue" stays "navy blue".
COLOR_NAMES: tuple[str, ...] = (
    "light blue", "sky blue", "navy blue", "royal blue", "dark blue", "baby blue", "dusty blue",
    "light grey", "light gray", "dark grey", "dark gray", "charcoal grey", "heather grey",
    "light pink", "hot pink", "dusty pink", "rose gold", "rose red", "wine red", "dark green",
    "olive green", "army green", "mint green", "forest green", "light brown", "dark brown",
    "off white", "multicolor", "multi color",
    "black", "white", "grey", "gray", "silver", "gold", "red", "pink", "purple", "orange",
    "yellow", "green", "blue", "brown", "beige", "khaki", "navy", "ivory", "cream", "teal",
    "turquoise", "burgundy", "maroon", "coral", "lavender", "charcoal", "tan", "camel", "nude",
    "clear", "natural",
)

#: Tokens that never name a product type (our stand-in for spaCy's noun filter).
FUNCTION_WORDS = frozenset(
    """a an the and or nor but for of to in on at by with from into onto over under as per via
    is are was were be been being it its this that these those than then so such not no only
    very more most less least up out off about after before between both each few all any some
    other own same too can will just should now also new i me my we our you your he she his her
    they them their what which who whom whose when where why how plus pack set count ct pcs pc
    piece pieces x""".split()
)

_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")


def title_tokens(title: str) -> list[str]:
    """The title's content words, in order, duplicates kept (see the module's first deviation)."""
    return [
        token
        for token in _WORD.findall(title.lower())
        if token not in FUNCTION_WORDS and any(c.isalpha() for c in token)
    ]


def _thefuzz_process(text: str) -> str:
    return default_process(text.encode("ascii", "ignore").decode("ascii"))


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio(a, b)``: an integer 0..100."""
    pa, pb = _thefuzz_process(a), _thefuzz_process(b)
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb)))


def normalize_color(value: str) -> str:
    """The first colour of :data:`COLOR_NAMES` contained in ``value``, else ``value`` unchanged."""
    for color in COLOR_NAMES:
        if color in value:
            return color
    return value


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> TypeMatch:
    """The product-type term; ``product`` and ``goal`` carry ``query``, ``product_category``, ``name``."""
    query_match = product["query"] == goal["query"]
    bought_levels = {level.strip() for level in product["product_category"].split("›")}
    goal_levels = {level.strip() for level in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    wanted = title_tokens(goal["name"])
    bought = set(title_tokens(product["name"]))
    if wanted:
        title_score = sum(1 for token in set(wanted) if token in bought) / len(wanted)
    else:
        title_score = 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def _in_product_text(needle: str, product: Mapping[str, Any]) -> bool:
    return (
        needle in product["Title"].lower()
        or needle in " ".join(product["BulletPoints"]).lower()
        or needle in product["Description"].lower()
    )


def attribute_matches(product: Mapping[str, Any], goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzily in its attributes, or in its text)."""
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_score(have, wanted) > FUZZY_THRESHOLD for have in product["Attributes"]):
            matches += 1
        elif _in_product_text(wanted, product):
            matches += 1
    return matches


def option_matches(
    product: Mapping[str, Any], goal_options: Sequence[str], selected: Mapping[str, str]
) -> int:
    """How many selected options match a goal option (counted per selected option, as the original)."""
    goal_values = [normalize_color(value) for value in goal_options]
    matches = 0
    for name, raw_value in selected.items():
        value = normalize_color(raw_value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in goal_values
        else:
            matched = any(fuzzy_score(wanted, value) > FUZZY_THRESHOLD for wanted in goal_values)
        if matched or _in_product_text(value, product):
            matches += 1
    return matches


@dataclass(frozen=True)
class RewardBreakdown:
    """Every term of one purchase's reward; ``reward`` is the combined score in [0, 1]."""

    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    r_att: float
    r_option: float | None
    r_price: bool
    attribute_matches: int
    option_matches: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def purchase_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    selected_options: Mapping[str, str],
) -> RewardBreakdown:
    """WebShop's reward for buying ``product`` at ``price`` with ``selected_options`` for ``goal``.

    ``product`` is a loaded product (``Title``, ``name``, ``query``, ``product_category``,
    ``Attributes``, ``BulletPoints``, ``Description``); ``goal`` has ``query``, ``product_category``,
    ``name``, ``attributes`` (list), ``goal_options`` (list of values, or a name→value dict) and
    ``price_upper``.
    """
    goal_options = goal["goal_options"]
    if isinstance(goal_options, Mapping):
        goal_options = list(goal_options.values())
    attributes = goal["attributes"]
    kind = type_reward(product, goal)
    n_att = attribute_matches(product, attributes)
    n_option = option_matches(product, goal_options, selected_options)
    r_price = price <= goal["price_upper"]
    total = (n_att + n_option + int(r_price)) / (len(attributes) + len(goal_options) + 1)
    reward = min(1.0, total * kind.r_type)
    return RewardBreakdown(
        reward=reward,
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        r_att=n_att / len(attributes) if attributes else 0.0,
        r_option=n_option / len(goal_options) if goal_options else None,
        r_price=bool(r_price),
        attribute_matches=n_att,
        option_matches=n_option,
    )
