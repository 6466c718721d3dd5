"""The bundled WebShop catalogue's tables, as literals: the 48 product types (4 in each of 12
categories) with their queries, breadcrumbs, attribute pools, option groups, price bands and pitches, and
the brands, title tails, option phrases, instruction openings and reviews products are drawn from.
:mod:`ptgpo_envs.webshop.catalog` generates the catalogue from them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BRANDS", "CATEGORIES", "INSTRUCTION_OPENINGS", "OPTION_PHRASES", "REVIEW_LINES", "TITLE_TAILS",
           "ProductType"]

APPAREL_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large"]
SHOE_SIZES = ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12"]
COLORS = [
    "black",
    "white",
    "navy blue",
    "heather grey",
    "red",
    "olive green",
    "light blue",
    "pink",
    "beige",
    "burgundy",
    "purple",
    "brown",
]
VOLUMES = ["2 fl oz", "4 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"]
PACKS = ["pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12"]
SCENTS = ["lavender", "coconut", "citrus", "unscented", "eucalyptus", "vanilla", "sandalwood"]
FLAVORS = [
    "dark chocolate",
    "peanut butter",
    "vanilla bean",
    "strawberry",
    "mint",
    "salted caramel",
    "original",
    "honey almond",
]
WEIGHTS = ["8 ounce", "12 ounce", "1 pound", "2 pound", "5 pound"]
FURNITURE_SIZES = ["small", "medium", "large", "extra large"]
LENGTHS = ["3 ft", "6 ft", "10 ft"]
MATERIALS = ["oak", "walnut", "pine", "metal", "bamboo"]


@dataclass(frozen=True)
class ProductType:
    """One of the bundled catalogue's product types: its query, noun, breadcrumb, attribute pool, option
    groups, price band and pitch."""

    query: str
    noun: str
    breadcrumb: str
    attributes: tuple[str, ...]
    options: dict[str, list[str]]
    price_band: tuple[float, float]
    pitch: str


def _t(
    query: str,
    noun: str,
    breadcrumb: str,
    attributes: str,
    options: dict[str, list[str]],
    price_band: tuple[float, float],
    pitch: str,
) -> ProductType:
    """A product type; ``attributes`` is one comma-separated string, for a compact table."""
    return ProductType(query, noun, breadcrumb, tuple(attributes.split(", ")), options, price_band, pitch)


CATEGORIES: dict[str, list[ProductType]] = {
    "beauty": [
        _t(
            "shampoo",
            "Shampoo",
            "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
            "sulfate free, paraben free, tea tree, argan oil, dry hair, color treated, natural ingredients, cruelty free",
            {"size": VOLUMES, "scent": SCENTS},
            (6, 38),
            "Cleans gently and leaves hair soft and shiny.",
        ),
        _t(
            "face moisturizer",
            "Face Moisturizer",
            "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers",
            "hyaluronic acid, fragrance free, sensitive skin, oil free, anti aging, spf 30, vegan, dermatologist tested",
            {"size": VOLUMES},
            (9, 60),
            "Hydrates all day without a greasy feel.",
        ),
        _t(
            "lipstick",
            "Matte Lipstick",
            "Beauty & Personal Care › Makeup › Lips › Lipstick",
            "long lasting, cruelty free, vegan, moisturizing, waterproof, paraben free, highly pigmented",
            {"color": ["red", "pink", "burgundy", "nude", "coral", "purple", "brown"]},
            (5, 30),
            "Rich colour in a single swipe.",
        ),
        _t(
            "nail polish",
            "Nail Polish",
            "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
            "quick dry, long lasting, non toxic, chip resistant, gel effect, vegan, cruelty free",
            {
                "color": ["red", "pink", "black", "white", "nude", "coral", "light blue", "purple"],
                "size": PACKS[:4],
            },
            (4, 22),
            "A glossy salon finish at home.",
        ),
    ],
    "grocery": [
        _t(
            "protein snack bar",
            "Protein Snack Bar",
            "Grocery & Gourmet Food › Snacks & Sweets › Bars › Protein Bars",
            "gluten free, non gmo, high protein, low sugar, keto friendly, plant based, dairy free, individually wrapped",
            {"flavor": FLAVORS, "size": PACKS},
            (8, 45),
            "A filling snack for busy days.",
        ),
        _t(
            "coffee beans",
            "Whole Bean Coffee",
            "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
            "medium roast, dark roast, organic, fair trade, single origin, low acid, arabica",
            {"size": WEIGHTS},
            (9, 55),
            "Roasted in small batches for a smooth cup.",
        ),
        _t(
            "herbal tea",
            "Herbal Tea Bags",
            "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
            "caffeine free, organic, non gmo, kosher, gluten free, sugar free, individually wrapped",
            {
                "flavor": [
                    "chamomile",
                    "peppermint",
                    "ginger lemon",
                    "hibiscus",
                    "rooibos",
                    "lavender honey",
                ],
                "size": PACKS[:4],
            },
            (4, 30),
            "Calming blends for any time of day.",
        ),
        _t(
            "olive oil",
            "Extra Virgin Olive Oil",
            "Grocery & Gourmet Food › Pantry Staples › Cooking Oils › Olive Oils",
            "cold pressed, organic, non gmo, first cold pressed, kosher, single origin, gluten free",
            {"size": ["8.5 fl oz", "16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "101 fl oz"]},
            (8, 48),
            "Fruity and peppery, for cooking and dressing.",
        ),
    ],
    "men's fashion": [
        _t(
            "men's t-shirt",
            "Men's Crew Neck T-Shirt",
            "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
            "machine washable, cotton, slim fit, short sleeve, moisture wicking, relaxed fit, tagless, breathable",
            {"color": COLORS, "size": APPAREL_SIZES},
            (8, 35),
            "A soft everyday tee.",
        ),
        _t(
            "men's jeans",
            "Men's Straight Fit Jeans",
            "Clothing, Shoes & Jewelry › Men › Clothing › Jeans",
            "machine washable, stretch, slim fit, relaxed fit, button closure, cotton, classic fit",
            {
                "color": ["light blue", "navy blue", "black", "grey", "dark blue"],
                "size": ["30w x 30l", "32w x 30l", "32w x 32l", "34w x 32l", "36w x 32l", "38w x 34l"],
            },
            (20, 70),
            "Built for comfort from morning to night.",
        ),
        _t(
            "men's running shoes",
            "Men's Running Shoes",
            "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
            "rubber sole, lightweight, breathable, non slip, lace up, memory foam, arch support",
            {"color": COLORS[:8], "size": SHOE_SIZES},
            (30, 140),
            "Cushioned for every mile.",
        ),
        _t(
            "men's hoodie",
            "Men's Pullover Hoodie",
            "Clothing, Shoes & Jewelry › Men › Clothing › Active › Active Hoodies",
            "fleece lined, machine washable, drawstring closure, long sleeve, cotton blend, kangaroo pocket",
            {"color": COLORS, "size": APPAREL_SIZES},
            (18, 60),
            "Warm layers for cool days.",
        ),
    ],
    "women's fashion": [
        _t(
            "women's summer dress",
            "Women's Summer Dress",
            "Clothing, Shoes & Jewelry › Women › Clothing › Dresses › Casual",
            "machine washable, short sleeve, v neck, pockets, flowy, polyester, knee length",
            {"color": COLORS, "size": APPAREL_SIZES},
            (16, 55),
            "Light and easy for warm days.",
        ),
        _t(
            "women's leggings",
            "Women's High Waist Leggings",
            "Clothing, Shoes & Jewelry › Women › Clothing › Active › Active Leggings",
            "high waist, tummy control, squat proof, moisture wicking, four way stretch, pockets, machine washable",
            {"color": COLORS, "size": APPAREL_SIZES},
            (12, 40),
            "Stays put through every workout.",
        ),
        _t(
            "women's sandals",
            "Women's Flat Sandals",
            "Clothing, Shoes & Jewelry › Women › Shoes › Sandals › Flat",
            "open toe, ankle strap, non slip, rubber sole, arch support, memory foam, leather",
            {"color": ["black", "white", "beige", "brown", "pink", "red"], "size": SHOE_SIZES[:9]},
            (15, 60),
            "Comfortable support for summer walks.",
        ),
        _t(
            "women's cardigan",
            "Women's Knit Cardigan",
            "Clothing, Shoes & Jewelry › Women › Clothing › Sweaters › Cardigans",
            "long sleeve, open front, button down, soft knit, machine washable, lightweight, pockets",
            {"color": COLORS, "size": APPAREL_SIZES},
            (20, 55),
            "A cozy layer over anything.",
        ),
    ],
    "furniture": [
        _t(
            "office chair",
            "Ergonomic Office Chair",
            "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Desk Chairs",
            "lumbar support, adjustable height, swivel, mesh back, padded armrests, easy assembly, heavy duty",
            {"color": ["black", "white", "grey", "navy blue", "red"]},
            (60, 280),
            "Comfort for long work days.",
        ),
        _t(
            "bookshelf",
            "5 Tier Bookshelf",
            "Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
            "easy assembly, solid wood, storage space, wall mounted, industrial, space saving, sturdy",
            {"color": ["black", "white", "brown", "grey"], "material": MATERIALS},
            (40, 220),
            "Room for books, plants and more.",
        ),
        _t(
            "coffee table",
            "Coffee Table",
            "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
            "storage space, solid wood, mid century, easy assembly, living room, lift top, round",
            {"color": ["black", "white", "brown", "grey"], "material": MATERIALS},
            (50, 260),
            "A centrepiece for the living room.",
        ),
        _t(
            "bed frame",
            "Platform Bed Frame",
            "Home & Kitchen › Furniture › Bedroom Furniture › Beds, Frames & Bases › Beds",
            "heavy duty, no box spring needed, under bed storage, easy assembly, noise free, wood slat support",
            {"size": ["twin", "full", "queen", "king"], "color": ["black", "white", "grey", "brown"]},
            (90, 300),
            "Sturdy support for a good night's sleep.",
        ),
    ],
    "electronics": [
        _t(
            "wireless earbuds",
            "Wireless Earbuds",
            "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
            "noise cancelling, bluetooth 5.3, water resistant, long battery life, charging case, built in microphone, touch control",
            {"color": ["black", "white", "navy blue", "pink", "grey"]},
            (18, 150),
            "Clear sound anywhere you go.",
        ),
        _t(
            "phone case",
            "Phone Case",
            "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
            "shockproof, slim fit, wireless charging compatible, drop protection, raised edges, clear back, anti scratch",
            {
                "color": ["black", "clear", "navy blue", "pink", "purple", "red", "olive green"],
                "style": ["iphone 14", "iphone 15", "galaxy s23", "pixel 8"],
            },
            (6, 30),
            "Protection without the bulk.",
        ),
        _t(
            "usb c cable",
            "USB C Charging Cable",
            "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Cables & Interconnects › USB Cables",
            "fast charging, braided nylon, durable, data sync, high speed, tangle free",
            {"size": LENGTHS, "color": ["black", "white", "grey", "red"]},
            (5, 25),
            "Charges and syncs quickly.",
        ),
        _t(
            "bluetooth speaker",
            "Portable Bluetooth Speaker",
            "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
            "waterproof, long battery life, stereo sound, deep bass, wireless, dustproof, built in microphone",
            {"color": ["black", "blue", "red", "grey", "olive green"]},
            (20, 130),
            "Big sound in a small package.",
        ),
    ],
    "home & kitchen": [
        _t(
            "frying pan",
            "Nonstick Frying Pan",
            "Home & Kitchen › Kitchen & Dining › Cookware › Pots & Pans › Skillets",
            "nonstick, dishwasher safe, oven safe, induction compatible, pfoa free, stay cool handle, heavy duty",
            {"size": ["8 inch", "10 inch", "12 inch"], "color": ["black", "grey", "red", "beige"]},
            (15, 75),
            "Even heating for perfect eggs and steaks.",
        ),
        _t(
            "bath towel set",
            "Bath Towel Set",
            "Home & Kitchen › Bath › Towels › Bath Towels",
            "cotton, highly absorbent, quick dry, machine washable, soft, hotel quality, lint free",
            {"color": COLORS, "size": PACKS[:5]},
            (18, 65),
            "Soft, plush and absorbent.",
        ),
        _t(
            "scented candle",
            "Scented Candle",
            "Home & Kitchen › Home Décor Products › Candles & Holders › Candles › Jar Candles",
            "soy wax, long lasting, natural ingredients, non toxic, lead free, hand poured",
            {"scent": SCENTS[:2] + SCENTS[3:], "size": ["8 ounce", "12 ounce", "16 ounce"]},
            (9, 40),
            "A warm glow and a calming scent.",
        ),
        _t(
            "storage bins",
            "Fabric Storage Bins",
            "Home & Kitchen › Storage & Organization › Baskets, Bins & Containers › Storage Bins",
            "foldable, handles, space saving, easy assembly, closet storage, durable, lightweight",
            {"color": ["grey", "beige", "white", "navy blue", "black"], "size": PACKS[:5]},
            (12, 45),
            "Keep shelves and closets tidy.",
        ),
    ],
    "sports & outdoors": [
        _t(
            "yoga mat",
            "Yoga Mat",
            "Sports & Outdoors › Exercise & Fitness › Yoga › Yoga Mats",
            "non slip, extra thick, eco friendly, carrying strap, tear resistant, lightweight, sweat resistant",
            {"color": ["black", "purple", "pink", "light blue", "olive green", "grey"]},
            (14, 70),
            "Grip and cushioning for every pose.",
        ),
        _t(
            "water bottle",
            "Insulated Water Bottle",
            "Sports & Outdoors › Outdoor Recreation › Camping & Hiking › Hydration & Filtration › Water Bottles",
            "stainless steel, bpa free, leak proof, double wall, keeps drinks cold, dishwasher safe, wide mouth",
            {"color": COLORS[:9], "size": ["18 oz", "24 oz", "32 oz", "40 oz"]},
            (12, 45),
            "Cold for 24 hours, hot for 12.",
        ),
        _t(
            "camping tent",
            "Camping Tent",
            "Sports & Outdoors › Outdoor Recreation › Camping & Hiking › Tents & Shelters › Tents",
            "waterproof, easy setup, lightweight, rain fly, ventilation windows, carry bag, wind resistant",
            {
                "size": ["2 person", "4 person", "6 person", "8 person"],
                "color": ["olive green", "grey", "orange", "blue"],
            },
            (45, 260),
            "Shelter for weekend adventures.",
        ),
        _t(
            "dumbbells",
            "Adjustable Dumbbells",
            "Sports & Outdoors › Exercise & Fitness › Strength Training Equipment › Dumbbells",
            "non slip grip, adjustable weight, space saving, home gym, rubber coated, hex shape",
            {"size": ["5 lb", "10 lb", "15 lb", "20 lb", "25 lb"]},
            (20, 200),
            "A full gym in a corner.",
        ),
    ],
    "toys & games": [
        _t(
            "building blocks",
            "Building Blocks Set",
            "Toys & Games › Building Toys › Building Sets",
            "stem toy, compatible with major brands, storage box, non toxic, educational, ages 6 and up",
            {"size": ["500 pieces", "1000 pieces", "1500 pieces"]},
            (15, 90),
            "Hours of creative building.",
        ),
        _t(
            "jigsaw puzzle",
            "Jigsaw Puzzle",
            "Toys & Games › Puzzles › Jigsaw Puzzles",
            "thick pieces, family game, educational, poster included, perfect fit, recycled paper",
            {"size": ["300 pieces", "500 pieces", "1000 pieces", "2000 pieces"]},
            (9, 35),
            "A relaxing challenge for the whole family.",
        ),
        _t(
            "plush toy",
            "Stuffed Animal Plush Toy",
            "Toys & Games › Stuffed Animals & Plush Toys › Plush Figures",
            "super soft, machine washable, hypoallergenic, gift for kids, huggable",
            {
                "size": ["8 inch", "12 inch", "16 inch", "24 inch"],
                "color": ["brown", "white", "pink", "grey", "light blue"],
            },
            (8, 40),
            "A cuddly friend for bedtime.",
        ),
        _t(
            "board game",
            "Strategy Board Game",
            "Toys & Games › Games & Accessories › Board Games",
            "family game, 2 to 4 players, ages 8 and up, quick setup, party game, educational",
            {"style": ["classic edition", "travel edition", "deluxe edition"]},
            (12, 60),
            "Fun for game night.",
        ),
    ],
    "pet supplies": [
        _t(
            "dry dog food",
            "Dry Dog Food",
            "Pet Supplies › Dogs › Food › Dry",
            "grain free, high protein, real chicken, no artificial preservatives, small breed, natural ingredients",
            {"flavor": ["chicken", "salmon", "lamb", "beef"], "size": ["4 pound", "15 pound", "30 pound"]},
            (12, 80),
            "Balanced nutrition for happy dogs.",
        ),
        _t(
            "cat litter",
            "Clumping Cat Litter",
            "Pet Supplies › Cats › Litter & Housebreaking › Litter",
            "odor control, dust free, unscented, clumping, low tracking, natural ingredients",
            {"size": ["10 pound", "20 pound", "40 pound"]},
            (10, 40),
            "Locks in odours, easy to scoop.",
        ),
        _t(
            "dog bed",
            "Orthopedic Dog Bed",
            "Pet Supplies › Dogs › Beds & Furniture › Beds",
            "memory foam, removable cover, machine washable, non slip bottom, waterproof lining, orthopedic",
            {"size": FURNITURE_SIZES, "color": ["grey", "brown", "beige", "navy blue"]},
            (25, 120),
            "Joint support for restful naps.",
        ),
        _t(
            "pet shampoo",
            "Pet Shampoo",
            "Pet Supplies › Dogs › Grooming › Shampoos & Conditioners",
            "oatmeal, sensitive skin, tear free, natural ingredients, paraben free, deodorizing",
            {"size": VOLUMES[2:], "scent": SCENTS},
            (7, 28),
            "Gentle clean for a shiny coat.",
        ),
    ],
    "health & household": [
        _t(
            "vitamin d3",
            "Vitamin D3 Softgels",
            "Health & Household › Vitamins, Minerals & Supplements › Vitamins › Vitamin D",
            "non gmo, gluten free, easy to swallow, third party tested, high potency, dairy free",
            {"size": ["60 count", "120 count", "240 count", "360 count"]},
            (6, 30),
            "Supports bones and immunity.",
        ),
        _t(
            "hand sanitizer",
            "Hand Sanitizer Gel",
            "Health & Household › Health Care › First Aid › Hand Sanitizers",
            "kills 99.9% of germs, moisturizing, aloe vera, travel size, alcohol based, fragrance free",
            {"size": VOLUMES, "scent": ["unscented", "citrus", "lavender", "aloe"]},
            (4, 25),
            "Clean hands on the go.",
        ),
        _t(
            "protein powder",
            "Whey Protein Powder",
            "Health & Household › Sports Nutrition › Protein › Whey",
            "gluten free, low sugar, high protein, keto friendly, non gmo, easy to mix",
            {"flavor": FLAVORS[:6], "size": WEIGHTS[2:]},
            (20, 80),
            "Supports muscle recovery.",
        ),
        _t(
            "electric toothbrush",
            "Electric Toothbrush",
            "Health & Household › Oral Care › Toothbrushes & Accessories › Electric Toothbrushes",
            "rechargeable, 2 minute timer, pressure sensor, travel case, soft bristles, waterproof",
            {"color": ["black", "white", "pink", "light blue", "purple"]},
            (20, 120),
            "A dentist-clean feeling.",
        ),
    ],
    "baby": [
        _t(
            "diapers",
            "Baby Diapers",
            "Baby › Diapering › Disposable Diapers",
            "hypoallergenic, fragrance free, leak protection, wetness indicator, breathable, chlorine free",
            {"size": ["newborn", "size 1", "size 2", "size 3", "size 4", "size 5"]},
            (12, 55),
            "Dry and comfortable day and night.",
        ),
        _t(
            "baby wipes",
            "Baby Wipes",
            "Baby › Diapering › Wipes & Holders › Wipes",
            "unscented, hypoallergenic, sensitive skin, plant based, alcohol free, 99% water",
            {"size": PACKS},
            (6, 40),
            "Gentle on delicate skin.",
        ),
        _t(
            "baby bottle",
            "Anti Colic Baby Bottle",
            "Baby › Feeding › Bottle-Feeding › Bottles",
            "bpa free, anti colic, easy to clean, slow flow nipple, dishwasher safe, breast like nipple",
            {"size": ["4 oz", "8 oz", "10 oz"], "color": ["clear", "light blue", "pink", "white"]},
            (8, 35),
            "Comfortable feeding with less fussing.",
        ),
        _t(
            "swaddle blanket",
            "Muslin Swaddle Blanket",
            "Baby › Nursery › Bedding › Swaddling Blankets",
            "cotton, breathable, machine washable, soft, lightweight, gender neutral",
            {"color": ["white", "beige", "pink", "light blue", "olive green", "grey"], "size": PACKS[:4]},
            (12, 45),
            "Soft and breathable for snug swaddles.",
        ),
    ],
}

BRANDS = [
    "Aerlune",
    "Birchway",
    "Calderon",
    "Dovetail",
    "Emberly",
    "Fernhollow",
    "Glimmer & Co",
    "Halvard",
    "Ivoria",
    "Juniper Lane",
    "Kestrel",
    "Lumora",
    "Marisol",
    "Northvale",
    "Oakhurst",
    "Pellucid",
    "Quillon",
    "Rosewick",
    "Solenne",
    "Tidemark",
    "Umbral",
    "Velora",
    "Wrenfield",
    "Xanthe",
    "Yarrowby",
    "Zephyrine",
    "Amberlyn",
    "Brightmoor",
    "Cobalt Ridge",
    "Duskline",
]
TITLE_TAILS = [
    "",
    "Premium",
    "Everyday",
    "Classic",
    "Pro Series",
    "Essentials",
    "Signature",
    "Value Pack",
    "Deluxe",
    "Original",
    "Plus",
    "Select",
]
OPTION_PHRASES = {
    "color": "in {value} color",
    "size": "in size {value}",
    "scent": "with {value} scent",
    "flavor": "in {value} flavor",
    "material": "made of {value}",
    "style": "in {value} style",
}
INSTRUCTION_OPENINGS = [
    "i am looking for {article} {subject}",
    "i need {article} {subject}",
    "find me {article} {subject}",
    "i want to buy {article} {subject}",
    "i'm searching for {article} {subject}",
]
REVIEW_LINES = [
    ("Great value", 5, "Exactly as described and arrived quickly."),
    ("Works well", 4, "Does the job, would buy again."),
    ("Just okay", 3, "Fine for the price but nothing special."),
    ("Love it", 5, "Better than I expected, highly recommend."),
    ("Not for me", 2, "Quality was lower than I hoped."),
]
