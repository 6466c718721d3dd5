"""WebShop's purchase reward, term by term, against hand-computed cases."""

import pytest

from ptgpo_envs.webshop.reward import (
    attribute_matches,
    fuzzy_score,
    normalize_color,
    option_matches,
    purchase_reward,
    title_tokens,
    type_reward,
)


def _kind(query="q1", category="a › b › c", name="Blue Cotton Shirt"):
    return {"query": query, "product_category": category, "name": name}


def _product(**overrides):
    product = {
        "query": "q1",
        "product_category": "a › b › c",
        "name": "Blue Cotton Shirt",
        "Title": "Blue Cotton Shirt",
        "Attributes": ["machine washable", "cotton"],
        "BulletPoints": ["Soft and breathable"],
        "Description": "A shirt made with organic cotton.",
    }
    product.update(overrides)
    return product


class TestTypeReward:
    def test_identical_product_matches_on_all_three(self):
        match = type_reward(_kind(), _kind())
        assert (match.r_type, match.query_match, match.category_match, match.title_score) == (1.0, True, True, 1.0)

    @pytest.mark.parametrize(
        "bought, expected",
        [("b › c › a", True), ("a › d › b", True), ("a › a › b", True), ("a › a › d", False), ("d › e › f", False)],
    )
    def test_category_match_needs_two_shared_levels_in_any_order(self, bought, expected):
        assert type_reward(_kind(category=bought), _kind()).category_match is expected

    def test_title_score_is_shared_content_words_over_goal_words(self):
        # Goal words [blue, cotton, shirt]; bought {red, cotton, shirt}: 2 of 3.
        match = type_reward(_kind(name="Red Cotton Shirt"), _kind())
        assert match.title_score == pytest.approx(2 / 3)

    def test_goal_duplicates_count_in_the_denominator(self):
        match = type_reward(_kind(name="shoe"), _kind(name="shoe shoe sock"))
        assert match.title_score == pytest.approx(1 / 3)

    def test_no_query_category_or_title_match_halves(self):
        # 1 shared word of 5 gives exactly 0.2, which is not > 0.2.
        goal = _kind(name="alpha bravo charlie delta echo")
        bought = _kind(query="q2", category="x › y", name="echo foxtrot")
        match = type_reward(bought, goal)
        assert match.title_score == pytest.approx(0.2)
        assert match.r_type == 0.5

    def test_title_below_a_tenth_gives_a_tenth_even_with_query_match(self):
        goal = _kind(name="a1 b1 c1 d1 e1 f1 g1 h1 i1 j1 k1")
        match = type_reward(_kind(name="k1 zz"), goal)
        assert match.title_score == pytest.approx(1 / 11)
        assert match.r_type == 0.1

    def test_no_shared_title_word_gives_zero(self):
        assert type_reward(_kind(name="Kitchen Knob"), _kind(name="Eyebrow Tweezers")).r_type == 0.0

    def test_goal_title_without_content_words_scores_a_fifth(self):
        goal = _kind(name="the 2 of 3")
        assert type_reward(_kind(), goal).title_score == 0.2
        assert type_reward(_kind(), goal).r_type == 1.0  # query still matches
        assert type_reward(_kind(query="q2", category="z"), goal).r_type == 0.5

    def test_title_tokens_drop_function_words_and_numbers(self):
        assert title_tokens("adidas Unisex-Adult D.o.n. Issue 2 Shoe for Men") == [
            "adidas", "unisex", "adult", "d.o.n", "issue", "shoe", "men",
        ]


class TestAttributeReward:
    def test_fuzzy_match_above_85(self):
        assert fuzzy_score("essential oils", "essential oil") > 85
        product = _product(Attributes=["tea tree", "essential oil", "natural ingredients"])
        assert attribute_matches(product, ["tea tree", "essential oils", "natural ingredients"]) == 3

    def test_falls_back_to_title_features_and_description(self):
        product = _product(
            Attributes=[],
            Title="",
            BulletPoints=["This shampoo has essential oils"],
            Description="Made with natural ingredients",
        )
        assert attribute_matches(product, ["tea tree", "essential oils", "natural ingredients"]) == 2

    def test_unrelated_attributes_do_not_match(self):
        product = _product(Attributes=["tea bag", "earl grey"], Title="English tea", BulletPoints=[], Description="")
        assert attribute_matches(product, ["tea tree", "essential oils"]) == 0


class TestOptionReward:
    def test_size_is_matched_exactly(self):
        product = _product()
        assert option_matches(product, ["xl"], {"size": "xl"}) == 1
        assert option_matches(product, ["xl"], {"size": "x-large"}) == 0

    def test_other_options_are_matched_fuzzily(self):
        assert option_matches(_product(), ["cool powder snow", "pack of 12"], {"color": "powder snow"}) == 1

    def test_selected_value_found_in_product_text_counts(self):
        assert option_matches(_product(), ["green"], {"material": "organic cotton"}) == 1

    def test_colours_are_normalised_before_matching(self):
        assert normalize_color("dark navy blue heather") == "navy blue"
        assert normalize_color("gray") == "gray"
        assert normalize_color("pack of 12") == "pack of 12"
        assert option_matches(_product(), ["navy blue"], {"color": "navy blue heather"}) == 1

    def test_no_selection_matches_nothing(self):
        assert option_matches(_product(), ["grey", "xl"], {}) == 0


class TestPurchaseReward:
    GOAL = {
        "query": "q1",
        "product_category": "a › b › c",
        "name": "Blue Cotton Shirt",
        "attributes": ["machine washable", "cotton", "slim fit"],
        "goal_options": {"color": "blue", "size": "xl"},
        "price_upper": 40.0,
    }

    def test_perfect_purchase_scores_one(self):
        product = _product(Attributes=["machine washable", "cotton", "slim fit"])
        result = purchase_reward(product, self.GOAL, 35.0, {"color": "blue", "size": "xl"})
        assert result.reward == 1.0
        assert (result.r_att, result.r_option, result.r_price) == (1.0, 1.0, True)

    def test_terms_combine_as_a_weighted_count(self):
        # 2 of 3 attributes, 1 of 2 options, price ok: (2 + 1 + 1) / (3 + 2 + 1).
        result = purchase_reward(_product(), self.GOAL, 35.0, {"size": "xl"})
        assert (result.attribute_matches, result.option_matches) == (2, 1)
        assert result.reward == pytest.approx(4 / 6)

    def test_price_over_the_ceiling_loses_its_share(self):
        result = purchase_reward(_product(), self.GOAL, 40.01, {"size": "xl"})
        assert result.r_price is False
        assert result.reward == pytest.approx(3 / 6)

    def test_type_multiplies_the_total(self):
        bought = _product(query="q2", product_category="x › y", name="Blue Denim Jacket Coat Wear")
        goal = dict(self.GOAL, name="Blue Cotton Shirt Top Tee")
        # Shared words {blue} of 5 = 0.2, not > 0.2, no query or category match: r_type 0.5.
        result = purchase_reward(bought, goal, 35.0, {"size": "xl"})
        assert result.r_type == 0.5
        assert result.reward == pytest.approx(0.5 * 4 / 6)

    def test_list_of_goal_options_and_no_options(self):
        goal = dict(self.GOAL, goal_options=[])
        result = purchase_reward(_product(), goal, 35.0, {})
        assert result.r_option is None
        assert result.reward == pytest.approx(3 / 4)

    def test_more_matching_selections_than_goal_options_is_capped_at_one(self):
        product = _product(Attributes=["machine washable", "cotton", "slim fit"], Title="Blue Cotton Shirt xl")
        goal = dict(self.GOAL, goal_options=["blue"])
        # Original: (3 + 2 + 1) / (3 + 1 + 1) = 1.2; we cap at 1.
        result = purchase_reward(product, goal, 35.0, {"color": "blue", "size": "xl"})
        assert result.option_matches == 2
        assert result.reward == 1.0
