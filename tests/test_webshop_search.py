"""WebShop's BM25 search: ranking, determinism, tie-break and the on-disk cache."""

from ptgpo_envs.webshop.search import SearchIndex, corpus_fingerprint, tokenize

DOCS = [
    ("B000000001", "red cotton shirt for men"),
    ("B000000002", "blue cotton shirt slim fit"),
    ("B000000003", "blue denim jeans"),
    ("B000000004", "blue cotton shirt slim fit"),  # identical text: tie with ...002
    ("B000000005", "stainless steel water bottle"),
]


def test_tokenize_lowercases_drops_stop_words_and_folds_plurals():
    assert tokenize("The Shoes, Berries and Glasses of 2 Bus") == ["shoe", "berry", "glasse", "2", "bus"]


def test_ranks_by_score_then_catalogue_order():
    index = SearchIndex.build(DOCS)
    hits = index.search("blue cotton shirts")
    assert hits[:2] == ["B000000002", "B000000004"]  # tied: earlier product first
    assert hits[2] == "B000000001" and "B000000005" not in hits


def test_no_match_and_stop_words_only_return_nothing():
    index = SearchIndex.build(DOCS)
    assert index.search("zebra") == []
    assert index.search("the of and") == []
    assert index.search("") == []


def test_at_most_k_results():
    assert len(SearchIndex.build(DOCS).search("blue shirt bottle jeans", k=2)) == 2


def test_cache_is_written_once_and_loads_to_the_same_ranking(tmp_path):
    built = SearchIndex.load_or_build(DOCS, tmp_path)
    folders = list(tmp_path.iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("bm25-")
    loaded = SearchIndex.load_or_build(DOCS, tmp_path)
    for query in ("blue cotton shirt", "steel bottle", "red men"):
        assert loaded.search(query) == built.search(query) == SearchIndex.build(DOCS).search(query)
    assert list(tmp_path.iterdir()) == folders  # nothing rebuilt, no temporary left over


def test_a_corrupt_cache_is_rebuilt(tmp_path):
    SearchIndex.load_or_build(DOCS, tmp_path)
    folder = next(tmp_path.iterdir())
    (folder / "asins.json").write_text("not json")
    assert SearchIndex.load_or_build(DOCS, tmp_path).search("denim") == ["B000000003"]


def test_fingerprint_depends_on_the_text():
    changed = DOCS[:-1] + [("B000000005", "steel water bottle")]
    assert corpus_fingerprint(DOCS) == corpus_fingerprint(list(DOCS))
    assert corpus_fingerprint(DOCS) != corpus_fingerprint(changed)
