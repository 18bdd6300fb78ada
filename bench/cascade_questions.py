"""A labelled question set with short known answers, for calibrating a cascade.

Four kinds, easy and hard mixed (a 135M model gets the easy ones right and guesses the
rest): arithmetic, capitals, unit conversions and dates. Deterministic: the same list every
time. ``python -m bench.cascade_questions > questions.jsonl`` writes it in the format
``shunter calibrate --questions`` reads: one ``{"question": ..., "answers": [...]}`` a line.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo",
    "the United Kingdom": "London", "Greece": "Athens", "Portugal": "Lisbon",
    "Ireland": "Dublin", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Poland": "Warsaw", "Austria": "Vienna", "Hungary": "Budapest", "Canada": "Ottawa",
    "Australia": "Canberra", "Brazil": "Brasilia", "Argentina": "Buenos Aires",
    "Mexico": "Mexico City", "Peru": "Lima", "Chile": "Santiago", "Kenya": "Nairobi",
    "Nigeria": "Abuja", "Turkey": "Ankara", "Thailand": "Bangkok", "Vietnam": "Hanoi",
    "South Korea": "Seoul", "Indonesia": "Jakarta", "Pakistan": "Islamabad",
    "New Zealand": "Wellington", "Switzerland": "Bern", "Morocco": "Rabat",
    "Kazakhstan": "Astana", "Mongolia": "Ulaanbaatar", "Iceland": "Reykjavik",
    "Bolivia": "Sucre", "Myanmar": "Naypyidaw", "Tanzania": "Dodoma",
}  # fmt: skip

CONVERSIONS = [
    ("How many centimeters are in 1 meter?", "100"),
    ("How many meters are in 1 kilometer?", "1000"),
    ("How many minutes are in 1 hour?", "60"),
    ("How many seconds are in 1 minute?", "60"),
    ("How many hours are in 1 day?", "24"),
    ("How many days are in 1 week?", "7"),
    ("How many months are in 1 year?", "12"),
    ("How many grams are in 1 kilogram?", "1000"),
    ("How many milliliters are in 1 liter?", "1000"),
    ("How many centimeters are in 3 meters?", "300"),
    ("How many minutes are in 4 hours?", "240"),
    ("How many seconds are in 1 hour?", "3600"),
    ("How many hours are in 3 days?", "72"),
    ("How many grams are in 2.5 kilograms?", "2500"),
    ("How many meters are in 7 kilometers?", "7000"),
    ("How many inches are in 1 foot?", "12"),
    ("How many feet are in 1 yard?", "3"),
    ("How many inches are in 3 feet?", "36"),
    ("How many ounces are in 1 pound?", "16"),
    ("How many millimeters are in 1 centimeter?", "10"),
    ("How many minutes are in 1 day?", "1440"),
    ("How many days are in 6 weeks?", "42"),
    ("How many millimeters are in 2 meters?", "2000"),
    ("How many seconds are in 5 minutes?", "300"),
]

DATES = [
    ("How many days are in a leap year?", "366"),
    ("How many days are in a common year, that is not a leap year?", "365"),
    ("How many days does January have?", "31"),
    ("How many days does April have?", "30"),
    ("How many days does February have in 2024?", "29"),
    ("How many days does February have in 2023?", "28"),
    ("Which month comes after March?", "April"),
    ("Which month comes before December?", "November"),
    ("Which day of the week comes after Monday?", "Tuesday"),
    ("Which day of the week comes before Sunday?", "Saturday"),
    ("In which year did World War II end?", "1945"),
    ("In which year did the Berlin Wall fall?", "1989"),
    ("In which year did humans first land on the Moon?", "1969"),
    ("In which year did World War I begin?", "1914"),
    ("In which year did Columbus first reach the Americas?", "1492"),
    ("How many years are in a century?", "100"),
    ("How many years are in a decade?", "10"),
    ("What year comes 25 years after 1990?", "2015"),
    ("What year was 40 years before 2000?", "1960"),
    ("What is the 12th month of the year?", "December"),
    ("What is the 5th month of the year?", "May"),
    ("How many weeks are in a year, rounded down?", "52"),
]


@dataclass(frozen=True)
class Question:
    """One question, its accepted answers and its kind."""

    question: str
    answers: tuple[str, ...]
    kind: str

    def line(self) -> str:
        """The question as one JSON line."""
        return json.dumps({"question": self.question, "answers": list(self.answers)})


def questions(seed: int = 7) -> list[Question]:
    """The whole set, 130 questions."""
    rng = random.Random(seed)
    found = [_arithmetic(rng, hard=i % 2 == 1) for i in range(42)]
    found += [
        Question(f"What is the capital of {c}?", (a,), "capital") for c, a in CAPITALS.items()
    ]
    found += [Question(q, (a,), "conversion") for q, a in CONVERSIONS]
    found += [Question(q, (a,), "date") for q, a in DATES]
    return found


def _arithmetic(rng: random.Random, *, hard: bool) -> Question:
    op = rng.choice("+-*")
    top = 999 if hard else 12
    a, b = rng.randint(2, top), rng.randint(2, top if op != "*" or not hard else 99)
    if op == "-" and b > a:
        a, b = b, a
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return Question(f"What is {a} {op} {b}?", (str(value),), "arithmetic")


if __name__ == "__main__":
    for item in questions():
        sys.stdout.write(item.line() + "\n")
