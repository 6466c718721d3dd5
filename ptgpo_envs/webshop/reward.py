"""WebShop's purchase reward, term by term, as the original computes it (``engine/goal.py``).

When the agent clicks *Buy Now* on product ``p`` with the options it selected, for a goal ``g``:

* **Type** ``r_type`` in {0, 0.1, 0.5, 1}: does ``p`` have the kind of product the goal asks for?
  ``query_match`` = same search query the product was scraped with; ``category_match`` = the two
  ``product_category`` breadcrumbs ("A › B › C") share at least two distinct levels; ``title_score`` =
  the number of distinct goal-title nouns found among the purchased title's nouns, over the number of
  goal-title nouns (a list, duplicates counted; 0.2 when the goal title has none). Then ``r_type`` = 1,
  lowered to 0.5 when none of (``query_match``, ``category_match``, ``title_score > 0.2``) holds, to
  0.1 when ``title_score < 0.1`` and to 0 when ``title_score == 0`` (checked in that order). Nouns come
  from :mod:`ptgpo_envs.webshop.nouns`: spaCy's when a model is installed, else a stand-in.
* **Attributes**: a goal attribute is matched when ``token_set_ratio(product attribute, goal
  attribute) > 85`` for some product attribute, or else when it is a substring of the lower-cased
  title, features (bullet points joined by spaces) or description. ``r_att`` = matched / attributes.
* **Options**: the selected option values and the goal's options are colour-normalised
  (:func:`normalize_color`); a goal option is matched when ``token_set_ratio(selected, goal option)
  > 85`` for some selected value, whatever the option's name. ``r_option`` = matched goal options /
  goal options (None when the goal has none). Goals whose options are a name → value dict are compared
  on their ``(name, value)`` pairs, as the original does: a pair normalises to a colour only when one
  of its two strings is exactly that colour, and otherwise is matched on its ``repr``.
* **Price**: ``r_price`` = the price is at most the goal's ``price_upper``.

and combines them as ``r_type * (n_att + n_option + r_price) / (len(attributes) + len(options) + 1)``,
which stays in [0, 1]. ``token_set_ratio`` is thefuzz 0.19.0's (:mod:`ptgpo_envs.webshop.fuzz`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from ptgpo_envs.webshop.fuzz import token_set_ratio
from ptgpo_envs.webshop.nouns import stand_in_nouns

__all__ = [
    "COLOR_SET",
    "FUZZY_THRESHOLD",
    "RewardBreakdown",
    "TypeMatch",
    "attribute_matches",
    "normalize_color",
    "option_matches",
    "purchase_reward",
    "type_reward",
]

#: Fuzzy scores must exceed this.
FUZZY_THRESHOLD = 85

#: The original's colour names (``engine/normalize.py``), in its order: the first one contained in a
#: value replaces it, so "navy blue" becomes "blue" and "light grey" becomes "grey".
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

Nouns = Callable[[str], list[str]]
#: A goal option: a value, or a (name, value) pair for goals whose options are a dict.
GoalOption = Any


def normalize_color(value: GoalOption) -> GoalOption:
    """The first colour of :data:`COLOR_SET` that ``value`` contains, else ``value`` unchanged.

    For a string "contains" means substring ("pink" in "hot pink"); for a (name, value) pair it means
    one of the two strings is exactly that colour.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


@dataclass(frozen=True)
class TypeMatch:
    """The product-type part of WebShop's reward: ``r_type`` and the query, category and title matches it
    comes from."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any], nouns: Nouns = stand_in_nouns) -> TypeMatch:
    """The product-type term; ``product`` and ``goal`` carry ``query``, ``product_category``, ``name``."""
    query_match = product["query"] == goal["query"]
    bought_levels = {level.strip() for level in product["product_category"].split("›")}
    goal_levels = {level.strip() for level in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2
    wanted = nouns(goal["name"])
    bought = nouns(product["name"])
    title_score = len(set(bought) & set(wanted)) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(product: Mapping[str, Any], goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzily among its attributes, or in its text)."""
    title = product["Title"].lower()
    features = " ".join(product["BulletPoints"]).lower()
    description = product["Description"].lower()
    matches = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product["Attributes"]):
            matches += 1
        elif wanted in title or wanted in features or wanted in description:
            matches += 1
    return matches


def option_matches(goal_options: Iterable[GoalOption], selected_values: Iterable[str]) -> int:
    """How many goal options some selected value matches (each goal option counted once)."""
    selected = [normalize_color(value) for value in selected_values]
    wanted = [normalize_color(option) for option in goal_options]
    return sum(
        1 for option in wanted if any(token_set_ratio(value, option) > FUZZY_THRESHOLD for value in selected)
    )


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
        """Every term of the reward, by name."""
        return dict(self.__dict__)


def purchase_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    selected_options: Mapping[str, str],
    nouns: Nouns = stand_in_nouns,
) -> RewardBreakdown:
    """WebShop's reward for buying ``product`` at ``price`` with ``selected_options`` for ``goal``.

    ``product`` is a loaded product (``Title``, ``name``, ``query``, ``product_category``,
    ``Attributes``, ``BulletPoints``, ``Description``); ``goal`` has ``query``, ``product_category``,
    ``name``, ``attributes`` (a non-empty list), ``goal_options`` (a list of values, or a name → value
    dict) and ``price_upper`` (positive: the original fails on any other). ``nouns`` extracts a title's
    nouns (:func:`ptgpo_envs.webshop.nouns.noun_extractor`).
    """
    if not goal["price_upper"] > 0:
        raise ValueError(f"goal price_upper must be positive, got {goal['price_upper']!r}")
    goal_options = goal["goal_options"]
    if isinstance(goal_options, Mapping):
        goal_options = list(goal_options.items())
    attributes = goal["attributes"]
    kind = type_reward(product, goal, nouns)
    n_att = attribute_matches(product, attributes)
    n_option = option_matches(goal_options, selected_options.values())
    r_price = price <= goal["price_upper"]
    total = (n_att + n_option + r_price) / (len(attributes) + len(goal_options) + 1)
    return RewardBreakdown(
        reward=total * kind.r_type,
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        r_att=n_att / len(attributes),
        r_option=n_option / len(goal_options) if goal_options else None,
        r_price=bool(r_price),
        attribute_matches=n_att,
        option_matches=n_option,
    )
