"""WebShop's pages: where the shopper is (:class:`Page`) and the text of each page in both styles.

**original** (:func:`original_page`): the original's text environment in its "simple" mode
(``web_agent_text_env.py`` with ``observation_mode="text"``, the mode verl-agent and the GiGPO runs
use). That mode renders the page's HTML template (``web_agent_site/templates/*.html``), takes every
visible text node and joins the stripped strings with ``" [SEP] "``:

* search page: ``WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search``;
* results page: ``Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] Page N (Total results:
  T) [SEP] < Prev`` (after page 1) ``[SEP] Next >`` (on every page, even past the last hit), then
  each hit's ASIN, title and price;
* item page: the same head, ``< Prev``, each option's name and values, the title, ``Price: ...``,
  ``Rating: N.A.``, ``Description``, ``Features``, ``Reviews``, ``Buy Now``; selected options are not
  shown;
* description / features / reviews: the head, ``< Prev``, then the description, each bullet point,
  or nothing (the original's loader never reads ``reviews.json``: no review, every rating "N.A.");
* done page: the template's every text, hidden ones included (``Thank you for shopping with us! [SEP]
  Your code: [SEP] None [SEP] ...``), with the purchased ASIN, the selected options as JSON and
  ``Your score (min 0.0, max 1.0) [SEP] <reward>``.

Empty values leave no text node, and a value of ASCII blanks without a newline leaves an empty
string, as BeautifulSoup parses the rendered HTML (:func:`join_visible`).

**annotated** (:func:`annotated_page`): every page starts ``WebShop [SEP] Instruction: [SEP]
<instruction>``; the item page first states the selected options ("You have clicked large."); the
reviews page lists the catalogue's reviews; the done page gives the score to four decimals. Its body
(:func:`annotated_body`, the page without the instruction) is the environment's ``state_key`` in both
styles, since it names everything that makes the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = [
    "DONE",
    "ITEM",
    "Page",
    "PRODUCTS_PER_PAGE",
    "RESULTS",
    "SEARCH",
    "SEP",
    "SUB_PAGES",
    "annotated_body",
    "annotated_page",
    "join_visible",
    "original_page",
    "page_hits",
]

PRODUCTS_PER_PAGE = 10
SEP = " [SEP] "
SEARCH, RESULTS, ITEM, DONE = "search", "results", "item", "done"
#: The buttons every page type shares.
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "back to search", "next >", "< prev", "buy now"
SUB_PAGES = ("description", "features", "reviews")
#: The original's loader leaves every product without reviews and with this rating.
ORIGINAL_RATING = "N.A."

_ASCII_BLANKS = " \t\n\r\f"
_HTML_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "'": "\\u0027"}

Products = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Page:
    """Where the shopper is: everything that determines the page, the score and what is clickable."""

    goal_index: int
    name: str = SEARCH
    query: str = ""
    hits: tuple[str, ...] = ()
    page_number: int = 1
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    score: float = 0.0
    reward_info: dict[str, Any] | None = field(default=None, compare=False)


def page_hits(page: Page) -> tuple[str, ...]:
    """The ASINs shown on the current results page (none past the last hit)."""
    start = (page.page_number - 1) * PRODUCTS_PER_PAGE
    return page.hits[start : start + PRODUCTS_PER_PAGE]


# ----------------------------------------------------------------- original
def join_visible(texts: Iterable[str]) -> str:
    """The original's simple text of a page whose text nodes are ``texts``.

    An empty string is no text node; BeautifulSoup turns a string of ASCII blanks into ``"\\n"``
    (dropped) when it holds a newline, else into ``" "`` (kept, stripped to ``""``).
    """
    parts = []
    for text in texts:
        if not text or (not text.strip(_ASCII_BLANKS) and "\n" in text):
            continue
        parts.append(text.strip())
    return SEP.join(parts)


def _tojson(value: Any) -> str:
    """Flask 2.1's ``tojson`` filter: sorted keys, ASCII, HTML-unsafe characters escaped."""
    text = json.dumps(value, sort_keys=True)
    for char, escaped in _HTML_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


def _original_texts(page: Page, products: Products, instruction: str) -> list[str]:
    if page.name == SEARCH:
        return ["WebShop", "Instruction: ", instruction, "Search"]
    if page.name == DONE:
        return [
            "Thank you for shopping with us!", "Your code: ", "None", " (Paste it in your MTurk interface.)",
            "Purchased", "asin", page.asin or "", "options", _tojson(dict(page.options)),
            "attrs", "None", "category", "None", "query", "None", "product category", "None",
            "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
            "product category", "query", "Goal", "None",
            "Reward", "Your score (min 0.0, max 1.0)", str(page.score), "Reward Details", "None",
        ]  # fmt: skip
    texts = ["Instruction:", instruction, "Back to Search"]
    if page.name == RESULTS:
        texts.append(f"Page {page.page_number} (Total results: {len(page.hits)})")
        if page.page_number > 1:
            texts.append("< Prev")
        texts.append("Next >")
        for asin in page_hits(page):
            product = products[asin]
            texts += [product["asin"], product["Title"], product["Price"]]
        return texts
    product = products[page.asin]
    texts.append("< Prev")
    if page.name == ITEM:
        for name, values in product["options"].items():
            texts += [name, *values]
        texts += [product["Title"], f"Price: {product['Price']}", f"Rating: {ORIGINAL_RATING}"]
        return texts + ["Description", "Features", "Reviews", "Buy Now"]
    if page.name == "description":
        return texts + [product["Description"]]
    if page.name == "features":
        return texts + [" " + bullet for bullet in product["BulletPoints"]]
    return texts  # reviews


def original_page(page: Page, products: Products, instruction: str) -> str:
    """The original's simple-mode text of ``page`` (see the module docstring)."""
    return join_visible(_original_texts(page, products, instruction))


# ----------------------------------------------------------------- annotated
def annotated_body(page: Page, products: Products) -> str:
    """The annotated page without its instruction head: the environment's ``state_key``."""
    if page.name == SEARCH:
        return "Search"
    if page.name == RESULTS:
        parts = ["Back to Search", f"Page {page.page_number} (Total results: {len(page.hits)})"]
        if page.page_number > 1:
            parts.append("< Prev")
        if page.page_number * PRODUCTS_PER_PAGE < len(page.hits):
            parts.append("Next >")
        for asin in page_hits(page):
            product = products[asin]
            parts += [asin, product["Title"], product["Price"]]
        return SEP.join(parts)
    product = products[page.asin] if page.asin else None
    if page.name == ITEM:
        parts = [f"You have clicked {value}." for _, value in page.options]
        parts += ["Back to Search", "< Prev"]
        for name, values in product["options"].items():
            parts += [name, *values]
        parts += [
            product["Title"],
            f"Price: {product['Price']}",
            f"Rating: {product['Rating']}",
            "Description",
            "Features",
            "Reviews",
            "Buy Now",
        ]
        return SEP.join(parts)
    if page.name == "description":
        return SEP.join(["Back to Search", "< Prev", product["Description"] or "No description."])
    if page.name == "features":
        return SEP.join(["Back to Search", "< Prev", *(product["BulletPoints"] or ["No features."])])
    if page.name == "reviews":
        reviews = [
            f"{review['title']} [{review['score']} stars] {review['body']}".strip()
            for review in product["Reviews"]
        ]
        return SEP.join(["Back to Search", "< Prev", *(reviews or ["No reviews."])])
    return SEP.join(
        ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{page.score:.4f}"]
    )


def annotated_page(page: Page, products: Products, instruction: str) -> str:
    """A page as the agent sees it in the annotated style: ``WebShop``, the instruction, then
    :func:`annotated_body`."""
    return f"WebShop{SEP}Instruction:{SEP}{instruction}{SEP}{annotated_body(page, products)}"
