"""WebShop data: the original-schema loader (on a hand-written fixture) and the bundled catalogue."""

import json
import random
from pathlib import Path

import pytest

from ptgpo_envs.webshop.catalog import generate_raw_data
from ptgpo_envs.webshop.data import (
    PRICE_RANGE,
    build_catalog,
    load_products,
    read_raw_data,
    search_document,
    write_raw_data,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "webshop"


@pytest.fixture(scope="module")
def fixture_catalog():
    return build_catalog(read_raw_data(FIXTURE), source="fixture")


class TestOriginalLoader:
    def test_skips_duplicate_nan_and_overlong_asins(self, fixture_catalog):
        assert [p["asin"] for p in fixture_catalog.products] == ["B09QKP7XQL", "B08KBVJ4XN", "B09P39QN2W"]

    def test_product_record_follows_the_original_engine(self, fixture_catalog):
        deodorant = fixture_catalog.by_asin["B09QKP7XQL"]
        assert deodorant["query"] == "deodorant"  # lower-cased and stripped
        assert deodorant["Title"] == deodorant["name"]
        assert deodorant["options"] == {
            "scent": ["bright citrus", "calming lavender", "ginger fresh"],
            "size": ["3 ounce (pack of 1)", "travel set (4-pack)"],
        }
        assert deodorant["Attributes"] == ["natural ingredients", "sensitive skin", "aluminum free"]
        assert deodorant["Rating"] == 4.5 and deodorant["Reviews"][0]["score"] == 5
        assert "\n" not in deodorant["Description"]
        assert (deodorant["pricing"], deodorant["Price"]) == ([10.99], "$10.99")

    def test_ranges_strings_and_missing_fields(self, fixture_catalog):
        barrel = fixture_catalog.by_asin["B08KBVJ4XN"]
        assert (barrel["pricing"], barrel["Price"]) == ([15.95, 35.95], "$15.95 to $35.95")
        assert barrel["options"] == {} and barrel["Rating"] == "N.A."
        tee = fixture_catalog.by_asin["B09P39QN2W"]
        assert (tee["pricing"], tee["Price"]) == ([100.0], "$100.0")
        assert tee["BulletPoints"] == ["Machine wash cold"]
        assert tee["Attributes"] == ["DUMMY_ATTR"]
        assert tee["options"] == {"color": ["navy | white", "heather grey"], "size": ["small", "medium", "x-large"]}

    def test_prices_lie_in_their_ranges(self, fixture_catalog):
        assert fixture_catalog.prices["B09QKP7XQL"] == 10.99
        assert 15.95 <= fixture_catalog.prices["B08KBVJ4XN"] <= 35.95

    def test_one_goal_per_human_instruction_with_attributes(self, fixture_catalog):
        goals = {goal["asin"]: goal for goal in fixture_catalog.goals}
        assert len(fixture_catalog.goals) == 3  # the instruction without attributes is skipped
        deodorant = goals["B09QKP7XQL"]
        assert deodorant["attributes"] == ["natural ingredients", "sensitive skin"]
        assert deodorant["goal_options"] == ["bright citrus", "3 ounce (pack of 1)"]
        assert (deodorant["query"], deodorant["category"]) == ("deodorant", "beauty")
        assert deodorant["name"] == fixture_catalog.by_asin["B09QKP7XQL"]["name"]

    def test_price_ceiling_is_the_larger_of_two_of_the_next_four_tens(self, fixture_catalog):
        for goal in fixture_catalog.goals:
            price = fixture_catalog.prices[goal["asin"]]
            allowed = [p for p in PRICE_RANGE if p > price][:4]
            assert goal["price_upper"] in allowed[1:]
            assert goal["instruction_text"].endswith(f", and price lower than {goal['price_upper']:.2f} dollars")
            assert not goal["instruction_text"].startswith(".")
        deodorant = next(g for g in fixture_catalog.goals if g["asin"] == "B09QKP7XQL")
        assert "(pack of 1), and price" in deodorant["instruction_text"]  # final "." stripped

    def test_goals_are_shuffled_with_the_original_seed(self, fixture_catalog):
        in_product_order = ["B09QKP7XQL", "B08KBVJ4XN", "B09P39QN2W"]
        random.Random(233).shuffle(in_product_order)
        assert [g["asin"] for g in fixture_catalog.goals] == in_product_order

    def test_splits_follow_the_original_and_reject_empty_ones(self, fixture_catalog):
        assert list(fixture_catalog.split_indices("test")) == [0, 1, 2]
        with pytest.raises(ValueError, match="'train' split is empty"):
            fixture_catalog.split_indices("train")
        with pytest.raises(ValueError, match="split must be one of"):
            fixture_catalog.split_indices("dev")

    def test_search_document_is_the_original_index_text(self, fixture_catalog):
        text = search_document(fixture_catalog.by_asin["B09P39QN2W"])
        assert text == (
            "men's slim fit crew neck t-shirt, short sleeve cotton tee a soft cotton tee. machine wash cold "
            "color: navy | white, heather grey, and size: small, medium, x-large"
        )

    def test_clear_errors_for_missing_or_bad_files(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="not a directory"):
            read_raw_data(tmp_path / "nowhere")
        with pytest.raises(FileNotFoundError, match="no product file"):
            read_raw_data(tmp_path)
        (tmp_path / "items_shuffle.json").write_text("{not json")
        with pytest.raises(FileNotFoundError, match="no attribute file"):
            read_raw_data(tmp_path)
        (tmp_path / "items_ins_v2.json").write_text("{}")
        (tmp_path / "items_human_ins.json").write_text("{}")
        with pytest.raises(ValueError, match="items_shuffle.json is not valid JSON"):
            read_raw_data(tmp_path)

    def test_any_items_ins_v2_file_is_accepted(self, tmp_path):
        for source in FIXTURE.iterdir():
            target = "items_ins_v2_custom.json" if source.name.startswith("items_ins_v2") else source.name
            (tmp_path / target).write_bytes(source.read_bytes())
        raw = read_raw_data(tmp_path)
        assert raw.attributes["B08KBVJ4XN"]["attributes"] == ["aluminum free", "essential oils"]

    def test_product_without_required_key_is_reported(self, tmp_path):
        raw = read_raw_data(FIXTURE)
        raw.products.append({"asin": "B0MISSING1", "name": "x"})
        with pytest.raises(ValueError, match="B0MISSING1.*lacks category"):
            load_products(raw)


@pytest.fixture(scope="module")
def raw():
    return generate_raw_data()


@pytest.fixture(scope="module")
def bundled(raw):
    return build_catalog(raw, source="bundled")


class TestBundledCatalogue:
    def test_is_deterministic(self, raw):
        assert json.dumps(raw.products) == json.dumps(generate_raw_data().products)

    def test_size_and_variety(self, bundled):
        catalog = bundled
        assert len(catalog.products) >= 1000
        assert len({p["category"] for p in catalog.products}) >= 10
        assert len({p["Title"] for p in catalog.products}) == len(catalog.products)
        assert len(catalog.goals) >= 1500 + 500  # every original split is non-empty
        assert all(g["attributes"] and g["price_upper"] < 1_000_000 for g in catalog.goals)
        assert sum(bool(g["goal_options"]) for g in catalog.goals) > len(catalog.goals) / 2
        for product in catalog.products:
            assert product["Attributes"] and product["Description"] and product["BulletPoints"]

    def test_goal_options_are_values_the_product_offers(self, bundled):
        catalog = bundled
        for goal in catalog.goals[:300]:
            offered = {v for values in catalog.by_asin[goal["asin"]]["options"].values() for v in values}
            assert set(goal["goal_options"]) <= offered
            assert set(goal["attributes"]) <= set(catalog.by_asin[goal["asin"]]["Attributes"])

    def test_written_files_load_back_identically(self, raw, bundled, tmp_path):
        write_raw_data(raw, tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "items_human_ins.json", "items_ins_v2.json", "items_shuffle.json", "reviews.json",
        ]
        again = build_catalog(read_raw_data(tmp_path), source="files")
        assert again.products == bundled.products and again.goals == bundled.goals
