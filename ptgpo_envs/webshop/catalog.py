"""The bundled WebShop catalogue: 1,200 products in 12 categories, generated deterministically.

:func:`generate_raw_data` writes, in memory, exactly the original's files (see
:mod:`ptgpo_envs.webshop.data`): a product list, an attribute file and human-style instructions, plus
reviews. Nothing is stored in the repository; the catalogue is rebuilt (in about a second) the first
time a process needs it, and the search index over it is cached on disk by content hash.

Each of the 48 product types (4 per category) has a search query, a breadcrumb, a pool of attributes
("sulfate free", "machine washable"...), option groups (size, color, scent, flavor...) and a price band.
A product draws a brand, 3-5 attributes, a few values of each option group and a price (one in five
has a price range, as in the original). Each product gets three instructions, templated like the
human ones ("i am looking for a sulfate free shampoo in lavender scent"): 1-3 of its attributes and
some of its option values. The goal builder then appends the price ceiling, as it does for the original
data, so every goal constrains attributes, options and price.

``python -m ptgpo_envs.webshop.catalog DIR`` writes the files to ``DIR``, loadable with ``data_path``.
"""

from __future__ import annotations

import random
import string
import sys
from typing import Any

from ptgpo_envs.webshop.catalog_tables import (
    BRANDS,
    CATEGORIES,
    INSTRUCTION_OPENINGS,
    OPTION_PHRASES,
    REVIEW_LINES,
    TITLE_TAILS,
    ProductType,
)
from ptgpo_envs.webshop.raw import RawWebShopData, write_raw_data

__all__ = ["CATALOG_SEED", "CATEGORIES", "PRODUCTS_PER_TYPE", "generate_raw_data"]

CATALOG_SEED = 20220701
PRODUCTS_PER_TYPE = 25
INSTRUCTIONS_PER_PRODUCT = 3


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = string.ascii_uppercase + string.digits
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _price_text(rng: random.Random, band: tuple[float, float]) -> str:
    low = round(rng.uniform(*band), 0) - 0.01
    if rng.random() < 0.2:
        high = round(low * rng.uniform(1.1, 1.5), 0) - 0.01
        return f"${low:.2f} - ${high:.2f}"
    return f"${low:.2f}"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _option_phrase(name: str, value: str) -> str:
    if name == "size" and value.startswith("pack of"):
        return f"in a {value}"
    if name == "size" and value.split()[-1] in ("count", "pieces", "person"):
        return f"with {value}"
    return OPTION_PHRASES[name].format(value=value)


def _instruction(
    rng: random.Random, kind: ProductType, attributes: list[str], options: dict[str, list[str]]
) -> dict[str, Any]:
    wanted = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
    chosen: dict[str, str] = {}
    for name, values in options.items():
        if rng.random() < 0.75:
            chosen[name] = rng.choice(values)
    listed = wanted[0] if len(wanted) == 1 else f"{', '.join(wanted[:-1])} and {wanted[-1]}"
    subject = f"{listed} {kind.query}"
    text = rng.choice(INSTRUCTION_OPENINGS).format(article=_article(subject), subject=subject)
    phrases = [_option_phrase(name, value) for name, value in chosen.items()]
    if phrases:
        text += " " + " and ".join(phrases)
    return {
        "instruction": text,
        "instruction_attributes": wanted,
        "instruction_options": list(chosen.values()),
    }


def _product(
    rng: random.Random, category: str, kind: ProductType, brand: str, asin: str
) -> tuple[dict[str, Any], list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """One product's raw record, attributes, instructions and reviews."""
    attributes = rng.sample(list(kind.attributes), rng.randint(3, min(5, len(kind.attributes))))
    options = {
        name: sorted(rng.sample(pool, rng.randint(min(3, len(pool)), min(6, len(pool)))), key=pool.index)
        for name, pool in kind.options.items()
    }
    tail = rng.choice(TITLE_TAILS)
    title = f"{brand} {attributes[0].title()} {kind.noun}"
    title += f", {attributes[1].title()}" + (f" - {tail}" if tail else "")
    description = (
        f"{title}. {kind.pitch} This item is {', '.join(attributes[:-1])} and "
        f"{attributes[-1]}. Designed by {brand} for {category} shoppers who want quality at a fair price."
    )
    bullets = [f"{a.upper()}: {kind.pitch}" for a in attributes] + [f"Sold by {brand}."]
    raw = {
        "asin": asin,
        "category": category,
        "query": kind.query,
        "name": title,
        "product_category": kind.breadcrumb,
        "full_description": description,
        "small_description": bullets,
        "pricing": _price_text(rng, kind.price_band),
        "customization_options": {
            name.title(): [{"value": value, "image": None} for value in values]
            for name, values in options.items()
        },
        "images": [],
    }
    instructions = [_instruction(rng, kind, attributes, options) for _ in range(INSTRUCTIONS_PER_PRODUCT)]
    reviews = [
        {"title": t, "stars": s, "review": r} for t, s, r in rng.sample(REVIEW_LINES, rng.randint(1, 3))
    ]
    return raw, attributes, instructions, reviews


def generate_raw_data(seed: int = CATALOG_SEED) -> RawWebShopData:
    """The bundled catalogue as the original's files, identical for equal ``seed``."""
    rng = random.Random(seed)
    taken: set[str] = set()
    products, attribute_file, human, reviews = [], {}, {}, []
    for category, kinds in CATEGORIES.items():
        for kind in kinds:
            for brand in rng.sample(BRANDS, PRODUCTS_PER_TYPE):
                asin = _asin(rng, taken)
                raw, attributes, instructions, product_reviews = _product(rng, category, kind, brand, asin)
                products.append(raw)
                attribute_file[asin] = {"attributes": attributes}
                human[asin] = instructions
                stars = [r["stars"] for r in product_reviews]
                reviews.append(
                    {
                        "asin": asin,
                        "average_rating": round(sum(stars) / len(stars), 1),
                        "reviews": product_reviews,
                    }
                )
    # The original's product file is shuffled (items_shuffle); so is ours.
    rng.shuffle(products)
    return RawWebShopData(products, attribute_file, human, reviews)


def main(argv: list[str]) -> int:
    """``python -m ptgpo_envs.webshop.catalog OUTPUT_DIR``: write the bundled catalogue's raw files to a
    folder."""
    if len(argv) != 1:
        print("usage: python -m ptgpo_envs.webshop.catalog OUTPUT_DIR", file=sys.stderr)
        return 2
    folder = write_raw_data(generate_raw_data(), argv[0])
    print(f"wrote the bundled WebShop catalogue to {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
