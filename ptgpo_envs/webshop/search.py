"""BM25 product search, standing in for the original's Lucene (pyserini) server.

Each product is indexed as the original's ``convert_product_file_format.py`` writes it: title,
description, first bullet point and the options (``"color: red, blue, and size: s, m"``), lower-cased.
Scoring is ``bm25s``'s Lucene variant with pyserini's defaults (``k1=0.9``, ``b=0.4``). Text is split
into lower-case alphanumeric tokens, English stop words dropped and plurals folded by the "S-stemmer"
(Harman, 1991) instead of Lucene's Porter stemmer.

Ranking is deterministic: products with a positive score, by descending score, ties broken by the
product's position in the catalogue (earlier first); at most :data:`SEARCH_RETURN_N` are returned, as in
the original.

The index is built once per catalogue and cached on disk under ``<cache root>/bm25-<fingerprint>``
(cache root: ``$PTGPO_CACHE/webshop``, default ``~/.cache/ptgpo/webshop``), where the fingerprint hashes
the indexed text, the tokenizer and the BM25 parameters. It is written to a temporary folder and
renamed into place, so a crash or a concurrent build never leaves a half-written index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

__all__ = [
    "SEARCH_RETURN_N",
    "SearchIndex",
    "corpus_fingerprint",
    "default_cache_root",
    "tokenize",
]

#: How many products one search returns (original: ``SEARCH_RETURN_N``).
SEARCH_RETURN_N = 50
#: Bump when tokenization or scoring changes, so cached indexes are rebuilt.
INDEX_FORMAT = "webshop-bm25-v1"
BM25_PARAMS = {"method": "lucene", "k1": 0.9, "b": 0.4}

_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(STOPWORDS_EN)
_ASINS_FILE = "asins.json"

logger = logging.getLogger(__name__)


def _s_stem(token: str) -> str:
    """Harman's S-stemmer: "berries"→"berry", "shoes"→"shoe"; "glass" and "bus" unchanged."""
    if len(token) > 3 and token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if len(token) > 2 and token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """The search tokens of ``text``: lower-cased words without stop words, with a light plural stemming."""
    return [_s_stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


def corpus_fingerprint(documents: Iterable[tuple[str, str]]) -> str:
    """A hash of ``(asin, text)`` pairs, the tokenizer version and the BM25 parameters."""
    digest = hashlib.sha256()
    digest.update(json.dumps([INDEX_FORMAT, BM25_PARAMS], sort_keys=True).encode())
    for asin, text in documents:
        digest.update(json.dumps([asin, text]).encode())
    return digest.hexdigest()


def default_cache_root() -> Path:
    """Where search indexes are cached: ``$PTGPO_CACHE/webshop`` (default ``~/.cache/ptgpo/webshop``)."""
    root = os.environ.get("PTGPO_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "ptgpo"
    return base / "webshop"


class SearchIndex:
    """A BM25 index over products; :meth:`search` maps a query to a ranked list of ASINs."""

    def __init__(self, asins: Sequence[str], retriever: bm25s.BM25):
        self.asins = list(asins)
        self._retriever = retriever

    @classmethod
    def build(cls, documents: Sequence[tuple[str, str]]) -> SearchIndex:
        """Index ``(asin, text)`` documents with BM25."""
        retriever = bm25s.BM25(**BM25_PARAMS)
        retriever.index([tokenize(text) for _, text in documents], show_progress=False)
        return cls([asin for asin, _ in documents], retriever)

    @classmethod
    def load_or_build(
        cls, documents: Sequence[tuple[str, str]], cache_root: Path | None = None
    ) -> SearchIndex:
        """The cached index of ``documents``, building and caching it on first use."""
        root = Path(cache_root) if cache_root is not None else default_cache_root()
        folder = root / f"bm25-{corpus_fingerprint(documents)[:24]}"
        if folder.is_dir():
            try:
                return cls._load(folder)
            except (OSError, ValueError, KeyError) as error:
                logger.warning("rebuilding the unreadable WebShop index %s (%s)", folder, error)
                shutil.rmtree(folder, ignore_errors=True)
        index = cls.build(documents)
        index._save(folder)
        return index

    @classmethod
    def _load(cls, folder: Path) -> SearchIndex:
        asins = json.loads((folder / _ASINS_FILE).read_text())
        retriever = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
        return cls(asins, retriever)

    def _save(self, folder: Path) -> None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".bm25-", dir=folder.parent))
        try:
            self._retriever.save(str(staging), show_progress=False)
            (staging / _ASINS_FILE).write_text(json.dumps(self.asins))
            os.replace(staging, folder)
        except OSError:
            # Another process renamed its identical index into place first: keep that one.
            if not folder.is_dir():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The ASINs of the ``k`` best-matching products (see the module docstring for the order)."""
        tokens = [t for t in tokenize(query) if t in self._retriever.vocab_dict]
        if not tokens:
            return []
        scores = self._retriever.get_scores(tokens)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))][:k]
        return [self.asins[i] for i in order]
