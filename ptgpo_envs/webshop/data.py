"""WebShop's data in the original schema: reading the files, loading products, building goals.

The original ships (``data/`` of princeton-nlp/WebShop):

* ``items_shuffle_1000.json`` or ``items_shuffle.json``: a list of scraped products, each with ``asin``,
  ``category``, ``query``, ``name``, ``product_category`` ("A › B › C"), ``full_description``,
  ``small_description`` (bullet points), ``pricing`` ("$12.99" or "$10.99 - $15.99"),
  ``customization_options`` ({name: [{"value", "image"}]}) and ``images``;
* ``items_ins_v2_1000.json`` / ``items_ins_v2.json`` (else any ``items_ins_v2*.json``):
  ``{asin: {"attributes": [...], ...}}``;
* ``items_human_ins.json``: ``{asin: [{"instruction", "instruction_attributes", "instruction_options"}]}``;
* optionally ``reviews.json``: ``[{"asin", "average_rating", "reviews": [{"title", "stars", "review"}]}]``.

:func:`load_products` turns them into the original engine's product records (``Title``,
``Description``, ``BulletPoints``, ``Attributes``, ``options``, ``pricing``, ``Price``...) with the same
rules (skip malformed or duplicate ASINs, lower-case option names and values, "/" → " | "...).
:func:`build_goals` makes one goal per human instruction as the original's ``get_human_goals``: the
product's ``category``/``query``/``name``/``product_category``, the instruction's attributes and options,
and a price ceiling drawn from the four multiples of $10 above the product's price (the larger of two
sampled), appended to the instruction as ", and price lower than N dollars". Goals are then shuffled
with ``random.seed(233)`` as the original does, which fixes its split: test = goals 0-499, eval =
500-1499, train = the rest (``baseline_models/env.py``).

One difference: the original draws a product's price inside its price range, and the goals' price
ceilings, from the unseeded global ``random``; we draw both from ``random.Random(price_seed)``, so a
catalogue's prices and ceilings are the same in every process.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from ptgpo_envs.webshop.catalog import generate_raw_data
from ptgpo_envs.webshop.raw import RawWebShopData, read_raw_data, write_raw_data

__all__ = [
    "Catalog",
    "PRICE_RANGE",
    "RawWebShopData",
    "SPLITS",
    "build_catalog",
    "build_goals",
    "get_catalog",
    "load_products",
    "read_raw_data",
    "search_document",
    "write_raw_data",
]

#: Price ceilings goals may use (original: ``PRICE_RANGE``).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: Without a price ceiling the original uses this one.
NO_PRICE_LIMIT = 1_000_000
#: The original's shuffle seed for goals.
GOAL_SHUFFLE_SEED = 233
#: Goal-index ranges of the original's splits (``None``: to the end).
SPLITS: dict[str, tuple[int, int | None]] = {
    "test": (0, 500),
    "eval": (500, 1500),
    "train": (1500, None),
    "all": (0, None),
}

_REQUIRED_PRODUCT_KEYS = ("asin", "category", "query", "name", "product_category")
_NON_PRINTABLE = re.compile(r"[^\S ]|[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\ufeff]")


def _clean(text: Any) -> str:
    """Text safe to show: a string, with control and invisible characters turned into spaces."""
    if text is None:
        return ""
    return _NON_PRINTABLE.sub(" ", str(text)).strip()


def _parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """The original's parse: every "$..." amount, keeping at most two; $100 when there is none."""
    amounts: list[float] = []
    if isinstance(pricing, str):
        for piece in pricing.split("$")[1:]:
            try:
                amounts.append(float(Decimal(re.sub(r"[^\d.]", "", piece))))
            except InvalidOperation:
                continue
    if not amounts:
        return [100.0], "$100.0"
    if len(amounts) == 1:
        return amounts, f"${amounts[0]}"
    return amounts[:2], f"${amounts[0]} to ${amounts[1]}"


def _options(customization: Any) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    if not isinstance(customization, dict):
        return options
    for name, contents in customization.items():
        if not contents:
            continue
        values = []
        for content in contents:
            value = content.get("value") if isinstance(content, dict) else content
            value = _clean(value).replace("/", " | ").lower()
            if value and value not in values:
                values.append(value)
        if values:
            options[_clean(name).lower()] = values
    return options


def _reviews(raw_reviews: list[dict[str, Any]]) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    by_asin: dict[str, list[dict]] = {}
    ratings: dict[str, Any] = {}
    for entry in raw_reviews:
        asin = entry.get("asin")
        if not isinstance(asin, str):
            continue
        by_asin[asin] = [
            {
                "title": _clean(review.get("title")),
                "score": review.get("score", review.get("stars")),
                "body": _clean(review.get("body", review.get("review"))),
            }
            for review in entry.get("reviews") or []
            if isinstance(review, dict)
        ]
        ratings[asin] = entry.get("average_rating", "N.A.")
    return by_asin, ratings


def load_products(raw: RawWebShopData) -> list[dict[str, Any]]:
    """The original engine's product records, in file order (see the module docstring)."""
    reviews, ratings = _reviews(raw.reviews)
    products: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, item in enumerate(raw.products):
        if not isinstance(item, dict):
            raise ValueError(f"product #{position} is a {type(item).__name__}, not a JSON object")
        asin = item.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        missing = [key for key in _REQUIRED_PRODUCT_KEYS if key not in item]
        if missing:
            raise ValueError(f"product {asin} (#{position}) lacks {', '.join(missing)}")
        seen.add(asin)
        bullets = item.get("small_description")
        bullets = bullets if isinstance(bullets, list) else [bullets]
        pricing, price_tag = _parse_pricing(item.get("pricing"))
        attributes = raw.attributes.get(asin)
        attributes = attributes if isinstance(attributes, dict) else {}
        title = _clean(item["name"])
        products.append(
            {
                "asin": asin,
                "category": _clean(item["category"]),
                "query": _clean(item["query"]).lower(),
                "name": title,
                "product_category": _clean(item["product_category"]),
                "Title": title,
                "Description": _clean(item.get("full_description")),
                "BulletPoints": [_clean(b) for b in bullets if _clean(b)],
                "Reviews": reviews.get(asin, []),
                "Rating": ratings.get(asin, "N.A."),
                "pricing": pricing,
                "Price": price_tag,
                "options": _options(item.get("customization_options")),
                "Attributes": [_clean(a) for a in attributes.get("attributes", ["DUMMY_ATTR"])],
                "instructions": list(raw.human_instructions.get(asin, [])),
            }
        )
    return products


def product_prices(products: list[dict[str, Any]], rng: random.Random) -> dict[str, float]:
    """One price per product: its only price, or uniform within its range (original rule)."""
    prices = {}
    for product in products:
        pricing = product["pricing"]
        prices[product["asin"]] = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
    return prices


def build_goals(
    products: list[dict[str, Any]], prices: dict[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """One goal per human instruction with attributes, shuffled as the original (seed 233)."""
    goals = []
    for product in products:
        for instruction in product["instructions"]:
            attributes = [_clean(a).lower() for a in instruction.get("instruction_attributes") or []]
            if not attributes:
                continue
            ceilings = [p for p in PRICE_RANGE if p > prices[product["asin"]]][:4]
            if len(ceilings) >= 2:
                _, price_upper = sorted(rng.sample(ceilings, 2))
                price_text = f", and price lower than {price_upper:.2f} dollars"
            else:
                price_upper, price_text = NO_PRICE_LIMIT, ""
            options = instruction.get("instruction_options") or []
            if isinstance(options, dict):
                options = list(options.values())
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": _clean(instruction.get("instruction", "")).strip(".")
                    + price_text,
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": [_clean(o).lower() for o in options],
                }
            )
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return goals


def search_document(product: dict[str, Any]) -> str:
    """The text the original indexes for a product (``convert_product_file_format.py``)."""
    option_text = ", and ".join(
        f"{name}: {', '.join(values)}" for name, values in product["options"].items()
    )
    first_bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


@dataclass
class Catalog:
    """Loaded products, their prices and the goals, ready for the environment (read-only)."""

    products: list[dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    source: str
    by_asin: dict[str, dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {product["asin"]: product for product in self.products}

    def documents(self) -> list[tuple[str, str]]:
        """``(asin, search document)`` for every product: what the search index is built from."""
        return [(product["asin"], search_document(product)) for product in self.products]

    def split_indices(self, split: str) -> range:
        """Goal indices of ``split`` ("train", "eval", "test" or "all")."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        start, stop = SPLITS[split]
        stop = len(self.goals) if stop is None else min(stop, len(self.goals))
        indices = range(min(start, stop), stop)
        if not indices:
            raise ValueError(
                f"the {split!r} split is empty: {self.source} has only {len(self.goals)} goals"
            )
        return indices


def build_catalog(raw: RawWebShopData, source: str, price_seed: int = 0) -> Catalog:
    """A :class:`Catalog` from raw WebShop data: the usable products, their prices (drawn with
    ``price_seed``) and the goals."""
    products = load_products(raw)
    if not products:
        raise ValueError(f"{source} holds no usable product")
    rng = random.Random(price_seed)
    prices = product_prices(products, rng)
    goals = build_goals(products, prices, rng)
    if not goals:
        raise ValueError(f"{source} yields no goal: no human instruction has attributes")
    return Catalog(products=products, prices=prices, goals=goals, source=source)


@lru_cache(maxsize=4)
def _cached_catalog(data_path: str | None) -> Catalog:
    if data_path is None:
        return build_catalog(generate_raw_data(), source="the bundled catalogue")
    return build_catalog(read_raw_data(data_path), source=data_path)


def get_catalog(data_path: str | os.PathLike[str] | None = None) -> Catalog:
    """The catalogue at ``data_path`` (original files), or the bundled one; loaded once per process."""
    key = None if data_path is None else str(Path(data_path).expanduser().resolve())
    return _cached_catalog(key)
