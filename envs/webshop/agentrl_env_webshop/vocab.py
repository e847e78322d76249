"""The generated catalog's vocabulary: WebShop's five categories, product types with their
Amazon-style category paths, attribute pools, option dimensions and price ranges, and brands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    category: str  # WebShop's top category: beauty, electronics, fashion, food, furniture
    query: str  # the search query the product was scraped under (WebShop's ``query``)
    path: str  # Amazon category levels, joined with " › "
    nouns: tuple[str, ...]  # what the product is called in titles
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


COLORS = (
    "black", "white", "navy blue", "red", "green", "grey", "pink", "beige", "brown", "purple", "khaki",
    "light blue", "dark grey", "olive green", "burgundy", "ivory", "teal", "gold", "silver", "rose gold",
)  # fmt: skip
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = tuple(f"{s:g}" for s in (6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5, 10, 10.5, 11, 12))
PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12")
BED_SIZES = ("twin", "full", "queen", "king", "california king")


def _t(category, query, path, nouns, attributes, options, price) -> ProductType:
    return ProductType(category, query, path, tuple(nouns), tuple(attributes), tuple(options), price)


_BEAUTY = "Beauty & Personal Care"
_ELEC = "Electronics"
_FASHION = "Clothing, Shoes & Jewelry"
_FOOD = "Grocery & Gourmet Food"
_HOME = "Home & Kitchen"

TYPES: tuple[ProductType, ...] = (
    # beauty
    _t("beauty", "hair extensions", f"{_BEAUTY} › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
       ["Clip in Hair Extensions", "Hair Extension", "Ponytail Extension"],
       ["natural looking", "long lasting", "high quality", "heat resistant", "easy to use", "synthetic hair", "human hair"],
       [("color", ("natural black", "dark brown", "light brown", "ash blonde", "platinum blonde", "auburn")),
        ("size", ('14 inch', '16 inch', '18 inch', '20 inch', '22 inch'))], (8, 80)),
    _t("beauty", "face moisturizer", f"{_BEAUTY} › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
       ["Face Moisturizer", "Facial Cream", "Day Cream", "Night Cream"],
       ["paraben free", "cruelty free", "sensitive skin", "dry skin", "hyaluronic acid", "fragrance free", "anti aging", "natural ingredients"],
       [("size", ("1.7 fl oz", "2 fl oz", "3.4 fl oz", "pack of 2")), ("scent", ("unscented", "lavender", "rose", "citrus"))], (6, 60)),
    _t("beauty", "shampoo", f"{_BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos",
       ["Shampoo", "Shampoo and Conditioner Set", "Dry Shampoo"],
       ["sulfate free", "paraben free", "dry hair", "hair growth", "natural ingredients", "color treated", "tea tree"],
       [("size", ("8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz")), ("scent", ("argan oil", "coconut", "peppermint", "unscented"))], (5, 40)),
    _t("beauty", "lipstick", f"{_BEAUTY} › Makeup › Lips › Lipstick",
       ["Lipstick", "Liquid Lipstick", "Lip Gloss", "Lip Tint"],
       ["long lasting", "cruelty free", "highly pigmented", "waterproof", "matte finish", "easy to apply"],
       [("color", ("ruby red", "nude", "berry", "coral", "mauve", "deep plum", "pink"))], (4, 30)),
    _t("beauty", "nail polish", f"{_BEAUTY} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
       ["Nail Polish", "Gel Nail Polish Set", "Nail Lacquer"],
       ["long lasting", "non toxic", "quick dry", "high gloss", "easy to apply", "cruelty free"],
       [("color", ("red", "pink", "nude", "black", "white", "teal", "glitter silver")), ("size", ("0.5 fl oz", "pack of 6", "pack of 12"))], (3, 35)),
    _t("beauty", "electric toothbrush", f"{_BEAUTY} › Oral Care › Toothbrushes & Accessories › Electric Toothbrushes",
       ["Electric Toothbrush", "Sonic Toothbrush", "Toothbrush Replacement Heads"],
       ["rechargeable", "travel case", "sensitive teeth", "long battery life", "easy to use", "teeth whitening"],
       [("color", ("white", "black", "pink", "blue"))], (15, 120)),
    _t("beauty", "body wash", f"{_BEAUTY} › Skin Care › Body › Cleansers › Body Washes",
       ["Body Wash", "Shower Gel", "Bath Bomb Set"],
       ["natural ingredients", "sensitive skin", "moisturizing", "paraben free", "essential oils", "vegan"],
       [("scent", ("eucalyptus", "vanilla", "lavender", "coconut", "unscented")), ("size", ("16 fl oz", "pack of 3", "32 fl oz"))], (5, 35)),
    _t("beauty", "makeup brush", f"{_BEAUTY} › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
       ["Makeup Brush Set", "Foundation Brush", "Blending Sponge Set"],
       ["synthetic bristles", "cruelty free", "easy to clean", "travel size", "high quality", "soft bristles"],
       [("color", ("black", "rose gold", "pink", "white")), ("size", ("5 piece", "12 piece", "18 piece"))], (6, 45)),
    # electronics
    _t("electronics", "bluetooth headphones", f"{_ELEC} › Headphones, Earbuds & Accessories › Headphones & Earbuds › Over-Ear Headphones",
       ["Bluetooth Headphones", "Wireless Earbuds", "Over Ear Headphones", "Noise Cancelling Headphones"],
       ["noise cancelling", "long battery life", "wireless bluetooth", "hands free", "fast charging", "high fidelity", "water resistant"],
       [("color", ("black", "white", "silver", "navy blue", "rose gold"))], (20, 300)),
    _t("electronics", "phone case", f"{_ELEC} › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
       ["Phone Case", "Protective Case", "Wallet Case", "Clear Case"],
       ["shock absorbing", "wireless charging", "slim fit", "easy install", "scratch resistant", "card holder"],
       [("color", ("black", "clear", "red", "navy blue", "pink", "green")), ("size", ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8"))], (6, 40)),
    _t("electronics", "usb c cable", f"{_ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Cables & Accessories › USB Cables",
       ["USB C Cable", "Charging Cable", "Lightning Cable", "HDMI Cable"],
       ["fast charging", "high speed", "nylon braided", "durable", "data transfer"],
       [("size", ("3 ft", "6 ft", "10 ft", "pack of 3")), ("color", ("black", "white", "grey"))], (5, 30)),
    _t("electronics", "wireless mouse", f"{_ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
       ["Wireless Mouse", "Gaming Mouse", "Ergonomic Mouse", "Bluetooth Keyboard"],
       ["ergonomic design", "rechargeable", "silent click", "plug and play", "long battery life", "adjustable dpi"],
       [("color", ("black", "white", "grey", "pink"))], (10, 90)),
    _t("electronics", "portable speaker", f"{_ELEC} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
       ["Portable Speaker", "Bluetooth Speaker", "Smart Speaker", "Soundbar"],
       ["waterproof", "long battery life", "deep bass", "wireless bluetooth", "hands free", "easy to carry"],
       [("color", ("black", "blue", "red", "grey", "teal"))], (20, 250)),
    _t("electronics", "security camera", f"{_ELEC} › Camera & Photo › Video Surveillance › Surveillance Cameras › Dome Cameras",
       ["Security Camera", "WiFi Camera", "Doorbell Camera", "Baby Monitor"],
       ["night vision", "motion detection", "two way audio", "easy install", "high definition", "cloud storage"],
       [("size", ("1 camera", "2 cameras", "4 cameras"))], (25, 200)),
    _t("electronics", "tablet stand", f"{_ELEC} › Computers & Accessories › Tablet Accessories › Stands",
       ["Tablet Stand", "Laptop Stand", "Phone Holder", "Monitor Mount"],
       ["height adjustable", "aluminum alloy", "non slip", "foldable", "heavy duty", "easy assemble"],
       [("color", ("silver", "black", "space grey"))], (10, 80)),
    _t("electronics", "power bank", f"{_ELEC} › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
       ["Power Bank", "Portable Charger", "Wall Charger", "Car Charger"],
       ["fast charging", "high capacity", "compact size", "usb c", "led display", "travel friendly"],
       [("size", ("10000mah", "20000mah", "26800mah")), ("color", ("black", "white", "blue"))], (12, 80)),
    # fashion
    _t("fashion", "men's t-shirt", f"{_FASHION} › Men › Clothing › Shirts › T-Shirts",
       ["T-Shirt", "Crew Neck Tee", "Polo Shirt", "Henley Shirt"],
       ["machine wash", "cotton spandex", "short sleeve", "regular fit", "slim fit", "moisture wicking", "classic fit"],
       [("color", COLORS[:12]), ("size", APPAREL_SIZES)], (8, 40)),
    _t("fashion", "women's dress", f"{_FASHION} › Women › Clothing › Dresses › Casual",
       ["Maxi Dress", "Summer Dress", "Cocktail Dress", "Wrap Dress"],
       ["machine wash", "hand wash", "polyester spandex", "short sleeve", "long sleeve", "elastic waist", "v neck"],
       [("color", COLORS[2:16]), ("size", APPAREL_SIZES[:6])], (15, 70)),
    _t("fashion", "running shoes", f"{_FASHION} › Men › Shoes › Athletic › Running › Road Running",
       ["Running Shoes", "Walking Shoes", "Sneakers", "Trail Shoes"],
       ["rubber sole", "non slip", "arch support", "memory foam", "lightweight", "breathable mesh", "lace up"],
       [("color", ("black white", "grey", "navy blue", "all black", "red", "blue")), ("size", SHOE_SIZES)], (25, 150)),
    _t("fashion", "women's jeans", f"{_FASHION} › Women › Clothing › Jeans",
       ["Skinny Jeans", "High Waisted Jeans", "Bootcut Jeans", "Denim Shorts"],
       ["machine wash", "high waist", "button closure", "stretch fabric", "classic fit", "cotton blend"],
       [("color", ("light wash", "dark wash", "black", "medium blue", "white")), ("size", ("0", "2", "4", "6", "8", "10", "12", "14"))], (18, 80)),
    _t("fashion", "winter jacket", f"{_FASHION} › Men › Clothing › Jackets & Coats › Down & Down Alternative",
       ["Winter Jacket", "Puffer Jacket", "Rain Jacket", "Fleece Jacket"],
       ["water resistant", "zipper closure", "machine wash", "warm lining", "hooded", "windproof"],
       [("color", COLORS[:10]), ("size", APPAREL_SIZES[1:])], (30, 200)),
    _t("fashion", "socks", f"{_FASHION} › Men › Clothing › Socks › Athletic Socks",
       ["Athletic Socks", "Crew Socks", "Ankle Socks", "Compression Socks"],
       ["moisture wicking", "cushioned sole", "cotton blend", "machine wash", "arch support", "breathable"],
       [("color", ("black", "white", "grey", "assorted")), ("size", ("shoe size 6-8", "shoe size 9-11", "shoe size 12-14")),
        ("pack", PACKS[2:])], (6, 30)),
    _t("fashion", "handbag", f"{_FASHION} › Women › Handbags & Wallets › Shoulder Bags",
       ["Shoulder Bag", "Tote Bag", "Crossbody Bag", "Leather Wallet"],
       ["vegan leather", "adjustable strap", "zipper closure", "large capacity", "multiple pockets", "lightweight"],
       [("color", ("black", "brown", "beige", "red", "white", "navy blue"))], (15, 120)),
    _t("fashion", "sunglasses", f"{_FASHION} › Men › Accessories › Sunglasses & Eyewear Accessories › Sunglasses",
       ["Polarized Sunglasses", "Aviator Sunglasses", "Blue Light Glasses"],
       ["uv protection", "polarized lens", "lightweight frame", "scratch resistant", "unisex"],
       [("color", ("black", "tortoise", "gold", "silver", "clear"))], (10, 90)),
    # food
    _t("food", "coffee beans", f"{_FOOD} › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
       ["Whole Bean Coffee", "Ground Coffee", "Coffee Pods", "Cold Brew Coffee"],
       ["medium roast", "dark roast", "single origin", "fair trade", "usda organic", "low acid", "non gmo"],
       [("size", ("12 ounce", "2 pound", "5 pound", "pack of 2")), ("flavor", ("original", "french vanilla", "hazelnut", "caramel"))], (8, 50)),
    _t("food", "protein bar", f"{_FOOD} › Snack Foods › Bars › Protein Bars",
       ["Protein Bar", "Granola Bar", "Energy Bar", "Snack Bar"],
       ["gluten free", "high protein", "low sugar", "non gmo", "keto friendly", "plant based"],
       [("flavor", ("chocolate chip", "peanut butter", "cookies and cream", "almond", "berry")), ("size", ("pack of 12", "pack of 15", "pack of 24"))], (10, 45)),
    _t("food", "green tea", f"{_FOOD} › Beverages › Coffee, Tea & Cocoa › Tea › Green",
       ["Green Tea", "Herbal Tea", "Matcha Powder", "Chai Tea"],
       ["usda organic", "caffeine free", "non gmo", "individually wrapped", "natural ingredients", "kosher certified"],
       [("flavor", ("jasmine", "mint", "lemon ginger", "original", "peach")), ("size", ("20 count", "40 count", "100 count"))], (5, 30)),
    _t("food", "olive oil", f"{_FOOD} › Pantry Staples › Cooking Oils, Vinegars & Sprays › Oils › Olive",
       ["Extra Virgin Olive Oil", "Avocado Oil", "Coconut Oil"],
       ["cold pressed", "usda organic", "non gmo", "first cold press", "kosher certified", "glass bottle"],
       [("size", ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "pack of 2"))], (8, 45)),
    _t("food", "dark chocolate", f"{_FOOD} › Snack Foods › Candy & Chocolate › Chocolate Bars",
       ["Dark Chocolate Bar", "Chocolate Truffles", "Milk Chocolate Bar"],
       ["fair trade", "dairy free", "gluten free", "low sugar", "individually wrapped", "gift box"],
       [("flavor", ("sea salt", "almond", "orange", "raspberry", "mint")), ("size", ("pack of 4", "pack of 10", "3.5 ounce"))], (5, 40)),
    _t("food", "mixed nuts", f"{_FOOD} › Snack Foods › Nuts & Seeds › Mixed Nuts",
       ["Mixed Nuts", "Roasted Almonds", "Trail Mix", "Cashews"],
       ["lightly salted", "non gmo", "high protein", "resealable bag", "kosher certified", "gluten free"],
       [("size", ("1 pound", "2 pound", "3 pound")), ("flavor", ("unsalted", "honey roasted", "sea salt"))], (8, 40)),
    _t("food", "hot sauce", f"{_FOOD} › Pantry Staples › Condiments & Salad Dressings › Hot Sauce",
       ["Hot Sauce", "Chili Sauce", "Barbecue Sauce", "Salsa"],
       ["gluten free", "non gmo", "low sodium", "vegan", "no preservatives", "small batch"],
       [("flavor", ("habanero", "chipotle", "ghost pepper", "original", "garlic")), ("size", ("5 fl oz", "pack of 3", "12 fl oz"))], (4, 25)),
    # furniture
    _t("furniture", "office chair", f"{_HOME} › Furniture › Home Office Furniture › Home Office Chairs › Desk Chairs",
       ["Office Chair", "Gaming Chair", "Desk Chair", "Ergonomic Chair"],
       ["lumbar support", "height adjustable", "easy assemble", "high back", "breathable mesh", "heavy duty"],
       [("color", ("black", "grey", "white", "blue", "pink"))], (60, 400)),
    _t("furniture", "bookshelf", f"{_HOME} › Furniture › Living Room Furniture › Bookcases",
       ["Bookshelf", "Bookcase", "Storage Shelf", "Ladder Shelf"],
       ["easy assemble", "solid wood", "space saving", "industrial style", "heavy duty", "storage space"],
       [("color", ("rustic brown", "white", "black", "espresso", "walnut")), ("size", ("3 tier", "4 tier", "5 tier"))], (40, 250)),
    _t("furniture", "bed frame", f"{_HOME} › Furniture › Bedroom Furniture › Beds, Frames & Bases › Beds",
       ["Bed Frame", "Platform Bed", "Upholstered Bed", "Headboard"],
       ["easy assemble", "noise free", "solid wood", "metal frame", "storage space", "no box spring needed"],
       [("color", ("black", "grey", "white", "walnut")), ("size", BED_SIZES)], (100, 600)),
    _t("furniture", "coffee table", f"{_HOME} › Furniture › Living Room Furniture › Tables › Coffee Tables",
       ["Coffee Table", "Side Table", "End Table", "Console Table"],
       ["easy assemble", "storage space", "solid wood", "mid century", "tempered glass", "living room"],
       [("color", ("walnut", "white", "black", "oak", "grey"))], (40, 300)),
    _t("furniture", "sofa", f"{_HOME} › Furniture › Living Room Furniture › Sofas & Couches",
       ["Sofa", "Loveseat", "Sectional Sofa", "Futon Couch"],
       ["easy assemble", "living room", "memory foam", "velvet fabric", "solid wood legs", "removable cushions"],
       [("color", ("grey", "beige", "navy blue", "green", "dark grey")), ("size", ("loveseat", "3 seat", "sectional"))], (200, 1200)),
    _t("furniture", "bean bag", f"{_HOME} › Furniture › Game & Recreation Room Furniture › Bean Bags",
       ["Bean Bag Chair", "Floor Pillow", "Ottoman", "Pouf"],
       ["machine washable", "memory foam", "living room", "removable cover", "soft fabric", "kids room"],
       [("color", ("grey", "black", "navy blue", "pink", "cream")), ("size", ("small", "large", "x-large"))], (25, 180)),
    _t("furniture", "shoe rack", f"{_HOME} › Storage & Organization › Clothing & Closet Storage › Shoe Organizers › Free Standing Shoe Racks",
       ["Shoe Rack", "Shoe Organizer", "Entryway Bench", "Coat Rack"],
       ["easy assemble", "space saving", "metal frame", "storage space", "bamboo", "stackable"],
       [("color", ("white", "black", "natural")), ("size", ("3 tier", "4 tier", "6 tier"))], (15, 90)),
    _t("furniture", "nightstand", f"{_HOME} › Furniture › Bedroom Furniture › Nightstands",
       ["Nightstand", "Bedside Table", "Dresser", "Chest of Drawers"],
       ["easy assemble", "storage space", "solid wood", "charging station", "drawers", "bedroom"],
       [("color", ("white", "black", "rustic brown", "grey", "oak")), ("pack", ("set of 1", "set of 2"))], (30, 250)),
)  # fmt: skip

#: Title words before the product noun, beside its attributes.
DESCRIPTORS = (
    "Premium", "Professional", "Upgraded", "Classic", "Deluxe", "Original", "Modern", "Essential",
    "Everyday", "Compact", "Signature", "Value", "Ultra", "Advanced", "Select", "Pro",
)  # fmt: skip

_BRAND_A = "Ar Bel Cor Dav Eli Fen Gal Hal Iv Jun Kel Lum Mar Nor Ori Pal Quin Ros Sol Tav Ul Ven Wil Xan Yor Zen".split()
_BRAND_B = "a o ia en ora ix us ella an eo ix io ara on elle ova".split()
_BRAND_C = ["", "x", "ly", "co", "la", "ra", "go", "ia"]
#: Made-up brand names (no real trademarks): 26 × 16 × 8 combinations, deduplicated.
BRANDS: tuple[str, ...] = tuple(dict.fromkeys(a + b + c for a in _BRAND_A for b in _BRAND_B for c in _BRAND_C))
