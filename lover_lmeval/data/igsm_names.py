"""The world knowledge of iGSM problems (data/igsm.py): three hierarchies of four category families each, e.g. Zoos >
Enclosures > Animals > Body Parts, and the items of every family. Names never contain ",", " and ", "'s", digits or
periods, so every sentence a problem states stays unambiguous to parse."""

from typing import NamedTuple


class Category(NamedTuple):
    plural: str
    items: tuple


def _family(plural, names):
    return Category(plural, tuple(names.split(", ")))


HIERARCHIES = (
    (_family("Zoos", "Riverview Zoo, Sunset Zoo, Maple Grove Zoo, Harbor Zoo, Pinecrest Zoo, "
                     "Cedar Valley Zoo, Lakeside Zoo, Golden Hills Zoo, Willow Creek Zoo, Stonebridge Zoo, "
                     "Northgate Zoo, Clearwater Zoo"),
     _family("Enclosures", "Reptile House, Aviary, Aquarium Hall, Savanna Pen, Monkey Island, Insect Dome, "
                           "Polar Pool, Night House, Petting Barn, Rainforest Dome, Penguin Cove, "
                           "Desert Pavilion"),
     _family("Animals", "Parrot, Goldfish, Owl, Lion, Zebra, Gecko, Tortoise, Penguin, Lemur, Flamingo, "
                        "Iguana, Otter, Meerkat, Toucan"),
     _family("Body Parts", "Cerebellum, Femur, Proximal Phalanx, Beak, Tibia, Skull, Rib, Vertebra, "
                           "Scapula, Jawbone, Clavicle, Patella, Sternum, Pelvis")),
    (_family("Schools", "Oakwood High, Riverside Academy, Hillcrest School, Lincoln Prep, "
                        "Brookfield School, Westlake Academy, Summit High, Evergreen School, Fairview Prep, "
                        "Meadowbrook High, Kingsley Academy, Bayside School"),
     _family("Classrooms", "Chemistry Lab, Art Studio, Music Room, Library Hall, Math Room, Gym Hall, "
                           "History Room, Robotics Lab, Drama Studio, Biology Lab, Computer Lab, "
                           "Language Room"),
     _family("Backpacks", "Canvas Backpack, Leather Backpack, Rolling Backpack, Hiking Backpack, "
                          "Mesh Backpack, Nylon Backpack, Drawstring Bag, Messenger Bag, Sling Bag, "
                          "Tote Bag, Duffel Bag, Laptop Bag"),
     _family("School Supplies", "Pencil, Eraser, Ruler, Highlighter, Stapler, Glue Stick, Notebook, "
                                "Compass, Protractor, Marker, Crayon, Sharpener, Calculator, Scissors")),
    (_family("Cities", "Brightwater, Ashford, Millbrook, Redcliff, Elmstead, Kingsport, Dunmore, Fairhaven, "
                       "Glenrock, Oakridge, Silverton, Thornbury"),
     _family("Markets", "Central Market, Night Market, Harbor Market, Farmers Market, Flea Market, "
                        "Spice Bazaar, Fish Market, Flower Market, Craft Fair, Book Fair, Street Market, "
                        "Antique Market"),
     _family("Stalls", "Fruit Stall, Bakery Stall, Cheese Stall, Tea Stall, Toy Stall, Candle Stall, "
                       "Pottery Stall, Jewelry Stall, Noodle Stall, Honey Stall, Soap Stall, Herb Stall"),
     _family("Products", "Apple, Bread Loaf, Cheese Wheel, Tea Box, Wooden Toy, Candle, Clay Pot, Bracelet, "
                         "Noodle Cup, Honey Jar, Soap Bar, Herb Bundle, Orange, Teapot")),
)
