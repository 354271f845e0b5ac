"""Short children's stories that flyviz writes itself, to train the demo brain on.

The demo brain needs English to learn from, and flyviz ships nothing it did
not make. This module composes simple stories in the register of children's
picture books: a character (a child or a small animal) in a place, with an
object, a problem, a little dialogue, feelings, a helper and an ending.
Twelve plots, each sentence drawn from several phrasings, give thousands of
different stories; the text is deterministic from a seed (Python's
``random.Random``, whose streams are stable across Python versions).

Examples
--------
>>> from flyviz.demo.corpus import make_stories
>>> stories = make_stories(3, seed=1)
>>> len(stories)
3
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

GIRLS = ("Lily", "Mia", "Sara", "Emma", "Anna", "Lucy", "Zoe", "Ella", "Rosa", "Nina", "Amy",
         "Kate", "Molly", "Daisy", "Ruby", "Sue", "Jenny", "Maya")
BOYS = ("Tom", "Ben", "Max", "Sam", "Leo", "Jack", "Tim", "Finn", "Noah", "Jake", "Oscar",
        "Hugo", "Pete", "Billy", "Joe", "Danny", "Alex", "Theo")
ANIMALS = ("bunny", "puppy", "kitten", "bear", "duck", "frog", "fox", "owl", "mouse", "turtle",
           "squirrel", "bird", "pig", "lamb", "elephant", "hedgehog", "goat", "monkey")
ANIMAL_NAMES = ("Pip", "Gus", "Bella", "Spot", "Coco", "Fluffy", "Bongo", "Dot", "Milo", "Rosie",
                "Pepper", "Sunny", "Bubbles", "Toby", "Ziggy", "Hazel")
TRAITS = ("little", "kind", "curious", "happy", "shy", "brave", "playful", "silly", "sleepy",
          "tiny", "clever", "friendly", "cheerful", "gentle")
PLACES = ("the park", "the garden", "the forest", "the beach", "the farm", "the pond",
          "the big hill", "the library", "the kitchen", "the school yard", "the market",
          "the zoo", "the playground", "the river", "the meadow", "the old barn")
OBJECTS = (("red", "ball"), ("blue", "kite"), ("shiny", "key"), ("small", "box"),
           ("soft", "teddy bear"), ("little", "toy car"), ("yellow", "hat"), ("big", "drum"),
           ("warm", "blanket"), ("new", "picture book"), ("golden", "coin"), ("green", "leaf"),
           ("paper", "boat"), ("wooden", "spoon"), ("pink", "ribbon"), ("round", "stone"),
           ("purple", "crayon"), ("silver", "bell"))
HELPERS = ("mom", "dad", "grandma", "grandpa", "the teacher", "a wise old owl",
           "a friendly dog", "a kind neighbor", "big sister", "little brother")
FOODS = ("cookies", "apples", "a cake", "soup", "bread", "berries", "ice cream", "a pie",
         "carrots", "honey", "pancakes", "a sandwich")
GAMES = ("tag", "hide and seek", "ball", "catch", "jump rope", "house", "pretend pirates")
SKILLS = (("ride a bike", "rode the bike"), ("swim", "swam across the pool"),
          ("read a book", "read the whole book"), ("climb the tree", "climbed to the top"),
          ("tie a shoe", "tied the shoe"), ("fly a kite", "flew the kite high"),
          ("whistle", "whistled a happy song"), ("bake bread", "baked a warm loaf"))
SCARY = ("the dark", "the thunder", "the big dog next door", "the deep water", "the tall slide",
         "the noisy wind", "the shadow on the wall", "the first day of school")
WEATHER = ("sunny", "rainy", "windy", "snowy", "warm", "cold", "cloudy")
GOOD_FEELINGS = ("happy", "glad", "proud", "excited", "thankful", "calm")
BAD_FEELINGS = ("sad", "scared", "worried", "upset", "lonely", "angry")
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "pink", "white")


@dataclass
class Character:
    """The hero of a story and the words that refer to it."""

    name: str
    noun: str          # "girl", "boy" or an animal
    subject: str       # she / he
    object: str        # her / him
    possessive: str    # her / his
    trait: str

    @property
    def Subject(self) -> str:  # noqa: N802 - capitalised form for sentence starts
        return self.subject.capitalize()

    @property
    def Possessive(self) -> str:  # noqa: N802
        return self.possessive.capitalize()


def _a(word: str) -> str:
    """``word`` with its indefinite article."""
    return ("an " if word[0].lower() in "aeiou" else "a ") + word


def _cap(text: str) -> str:
    return text[0].upper() + text[1:] if text else text


class _Story:
    """One story under construction: a random source and its sentences."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sentences: list[str] = []
        self.paragraphs: list[list[str]] = []

    def pick(self, options):
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def say(self, *options: str) -> None:
        self.sentences.append(_cap(self.rng.choice(options)))

    def paragraph(self) -> None:
        if self.sentences:
            self.paragraphs.append(self.sentences)
            self.sentences = []

    def text(self) -> str:
        self.paragraph()
        return "\n".join(" ".join(p) for p in self.paragraphs)

    def character(self, kind: str | None = None) -> Character:
        kind = kind or self.pick(("girl", "boy", "animal"))
        trait = self.pick(TRAITS)
        if kind == "girl":
            return Character(self.pick(GIRLS), "girl", "she", "her", "her", trait)
        if kind == "boy":
            return Character(self.pick(BOYS), "boy", "he", "him", "his", trait)
        female = self.chance(0.5)
        return Character(self.pick(ANIMAL_NAMES), self.pick(ANIMALS), "she" if female else "he",
                         "her" if female else "him", "her" if female else "his", trait)

    def friend_of(self, hero: Character) -> Character:
        while True:
            friend = self.character()
            if friend.name != hero.name:
                return friend


def _introduce(s: _Story, c: Character, place: str) -> None:
    who = f"{_a(c.trait)} {c.noun} named {c.name}"
    s.say(f"Once upon a time, there was {who}.",
          f"Once upon a time, in a small town, there lived {who}.",
          f"One day, {who} went to {place}.",
          f"There once was {who}.",
          f"Once upon a time, there was {who} who lived near {place}.",
          f"{c.name} was {_a(c.trait)} {c.noun}.")
    s.say(f"{c.Subject} liked to play at {place} every day.",
          f"{c.Subject} loved the {s.pick(WEATHER)} days at {place}.",
          f"Every morning, {c.subject} said hello to the birds and the trees.",
          f"{c.Subject} had a {s.pick(COLOURS)} hat and a big smile.",
          f"{c.Subject} liked to sing and to play {s.pick(GAMES)}.",
          f"{c.Subject} was always very {s.pick(('kind', 'curious', 'busy', 'happy'))}.")


def _ending(s: _Story, c: Character, friend: Character | None, lesson: str) -> None:
    both = f"{c.name} and {friend.name}" if friend else c.name
    s.say(f"From that day on, {both} {'were' if friend else 'was'} always {s.pick(GOOD_FEELINGS)}.",
          f"{_cap(both)} learned that {lesson}.",
          f"And from then on, {c.name} knew that {lesson}.",
          "It was the best day ever.",
          f"{_cap(both)} smiled all the way home.",
          f"That night, {c.name} went to sleep with a big smile.")
    if s.chance(0.35):
        s.say("The end.")


def _plot_lost(s: _Story) -> None:
    c = s.character()
    place = s.pick(PLACES)
    colour, thing = s.pick(OBJECTS)
    _introduce(s, c, place)
    s.say(f"{c.Subject} had {_a(colour)} {thing} that {c.subject} loved very much.",
          f"{c.Possessive} favorite toy was {_a(colour)} {thing}.",
          f"One day, {c.name} took {c.possessive} {colour} {thing} to {place}.")
    s.paragraph()
    s.say(f"But when it was time to go home, the {thing} was gone!",
          f"Then {c.subject} looked down, and the {thing} was not there.",
          f"Oh no! {c.name} could not find the {thing} anywhere.")
    feeling = s.pick(BAD_FEELINGS)
    s.say(f"{c.name} felt very {feeling}.", f"{c.Subject} was so {feeling} that {c.subject} began to cry.")
    helper = s.pick(HELPERS)
    s.say(f'"Where is my {thing}?" {c.subject} asked.',
          f'"I lost my {thing}," {c.name} said to {helper}.',
          f'"Can you help me find my {thing}?" {c.name} asked {helper}.')
    s.say(f'"Let us look together," said {helper}.',
          f'{_cap(helper)} said, "Do not worry. We will find it."',
          f'"Think about where you played last," said {helper}.')
    spot = s.pick(("under a big tree", "behind a rock", "in the tall grass", "under the bench",
                   "next to the pond", "inside an old shoe", "under the bed"))
    s.say(f"They looked and looked. At last, they found the {thing} {spot}.",
          f"They searched everywhere. Then {c.name} saw something {colour} {spot}. It was the {thing}!")
    s.paragraph()
    s.say(f"{c.name} hugged the {thing} and said, \"Thank you!\"",
          f"{c.name} was so happy. \"Thank you for helping me,\" {c.subject} said.")
    _ending(s, c, None, s.pick(("it is good to ask for help", "friends help each other",
                                  "you should take care of your things")))


def _plot_friend(s: _Story) -> None:
    c = s.character()
    f = s.friend_of(c)
    place = s.pick(PLACES)
    _introduce(s, c, place)
    s.say(f"One day, {c.subject} saw {_a(f.trait)} {f.noun} sitting alone at {place}.",
          f"One {s.pick(WEATHER)} morning, {c.name} met {_a(f.noun)} named {f.name}.",
          f"At {place}, there was a new {f.noun} named {f.name}.")
    s.say(f"The {f.noun} looked {s.pick(('sad', 'lonely', 'shy', 'scared'))}.",
          f"{f.name} did not have anyone to play with.")
    s.paragraph()
    s.say(f'"Hello, my name is {c.name}. What is your name?" {c.subject} asked.',
          f'{c.name} said, "Hi! Do you want to play with me?"',
          f'"Would you like to be my friend?" asked {c.name}.')
    s.say(f'"I am {f.name}," said the {f.noun}. "Yes, I would like that!"',
          f'The {f.noun} smiled and said, "Yes, please!"',
          f'"Okay," said {f.name} in a small voice.')
    game = s.pick(GAMES)
    s.say(f"They played {game} all day long.", f"They played {game} and laughed a lot.",
          f"{c.name} and {f.name} ran and jumped and played {game}.")
    if s.chance(0.6):
        food = s.pick(FOODS)
        s.say(f"Then they shared some {food}." if not food.startswith("a ")
              else f"Then they shared {food}.",
              f"When they were hungry, {c.possessive} mom gave them {food}.")
    s.paragraph()
    _ending(s, c, f, s.pick(("it is fun to make new friends", "a kind word can make a friend",
                               "being friendly makes everyone happy")))


def _plot_share(s: _Story) -> None:
    c = s.character()
    f = s.friend_of(c)
    colour, thing = s.pick(OBJECTS)
    place = s.pick(PLACES)
    _introduce(s, c, place)
    s.say(f"{c.name} and {f.name} were playing at {place}.",
          f"One day, {c.name} and {c.possessive} friend {f.name} went to {place}.")
    s.say(f"They both wanted to play with the {colour} {thing}.",
          f"They found {_a(colour)} {thing}, and they both wanted it.")
    s.say(f'"It is mine!" said {c.name}. "No, it is mine!" said {f.name}.',
          f'"I want the {thing}!" shouted {f.name}.',
          f"{c.name} pulled the {thing}, and {f.name} pulled it too.")
    s.paragraph()
    helper = s.pick(HELPERS)
    s.say(f"Then {helper} came and said, \"Why don't you share?\"",
          f'{_cap(helper)} saw them and said, "You can take turns."',
          f"{c.name} stopped and thought for a moment.")
    s.say(f"{c.name} gave the {thing} to {f.name} first.",
          f'"You can play with it first," said {c.name}.',
          f"So they took turns with the {thing}.")
    s.say(f"{f.name} smiled. \"Thank you, {c.name}!\"",
          "Soon they were laughing and playing together.",
          "Playing together was much more fun.")
    s.paragraph()
    _ending(s, c, f, s.pick(("sharing is caring", "it is better to share",
                               "taking turns makes playing more fun")))


def _plot_fear(s: _Story) -> None:
    c = s.character()
    fear = s.pick(SCARY)
    helper = s.pick(("mom", "dad", "grandma", "grandpa", "big sister"))
    _introduce(s, c, s.pick(PLACES))
    s.say(f"But {c.name} was afraid of {fear}.",
          f"{c.name} was scared of {fear}.",
          f"There was one thing {c.name} did not like: {fear}.")
    s.say(f"Every time {c.subject} thought about it, {c.possessive} tummy felt funny.",
          f"{c.Subject} would hide under {c.possessive} blanket.",
          f"It made {c.object} want to run away.")
    s.paragraph()
    s.say(f'One day, {c.subject} told {helper}, "I am scared."',
          f'{c.name} went to {helper} and said, "I do not like {fear}."')
    s.say(f'{_cap(helper)} gave {c.object} a hug. "It is okay to be scared," said {helper}.',
          f'"Everyone is scared sometimes," {helper} said softly.')
    s.say(f'"Let us be brave together," said {helper}.',
          f'"Take a deep breath and hold my hand," said {helper}.')
    s.say(f"{c.name} took a deep breath.", f"{c.name} held {helper}'s hand tight.")
    s.say("It was not so bad after all!", f"Soon {c.subject} was not scared anymore.",
          f"{c.Subject} felt brave and strong.")
    s.paragraph()
    _ending(s, c, None, s.pick(("being brave means trying even when you are scared",
                                  "it is okay to ask for a hug", "you can be brave too")))


def _plot_help_animal(s: _Story) -> None:
    c = s.character(s.pick(("girl", "boy")))
    animal = s.pick(("bird", "puppy", "kitten", "duck", "frog", "squirrel", "bunny", "turtle"))
    place = s.pick(PLACES)
    problem = s.pick(("a hurt wing", "a hurt leg", "no home", "a thorn in its paw",
                      "nobody to take care of it"))
    _introduce(s, c, place)
    s.say(f"One day, {c.name} found a little {animal} at {place}.",
          f"While walking to {place}, {c.name} heard a small sound. It was a little {animal}.")
    s.say(f"The {animal} had {problem}.", f"The poor {animal} had {problem} and could not move.")
    s.say(f'"Poor little {animal}," said {c.name}. "I will help you."',
          f'"Do not be afraid," {c.name} said softly.')
    s.paragraph()
    s.say(f"{c.name} took the {animal} home in a box.",
          f"{c.name} carried the {animal} home very carefully.")
    s.say(f"{c.Subject} gave it water and some {s.pick(('seeds', 'bread', 'milk', 'berries'))}.",
          f"Every day, {c.subject} fed the {animal} and kept it warm.")
    s.say(f"After a few days, the {animal} was strong again.",
          f"Soon the {animal} felt much better.")
    s.say(f"Then the {animal} {'flew' if animal in ('bird', 'duck') else 'ran'} back to {place}.",
          f"The {animal} looked at {c.name} as if to say thank you.")
    s.paragraph()
    _ending(s, c, None, s.pick(("it is good to help others", "small friends need kindness too",
                                  "helping makes your heart happy")))


def _plot_gift(s: _Story) -> None:
    c = s.character()
    who = s.pick(("mom", "dad", "grandma", "grandpa", "the teacher", "big sister"))
    food = s.pick(("a cake", "cookies", "a pie", "pancakes", "a card", "a necklace", "a drawing"))
    _introduce(s, c, s.pick(PLACES))
    s.say(f"Tomorrow was {who}'s birthday.", f"It was almost {who}'s special day.")
    s.say(f"{c.name} wanted to make {food} for {who}.",
          f'"I will make {food} as a surprise," {c.name} said.')
    s.paragraph()
    s.say(f"{c.Subject} worked very hard.", f"{c.Subject} got everything ready on the table.")
    s.say("But then, oops! Everything fell on the floor.",
          f"But it did not look right, and {c.name} felt {s.pick(BAD_FEELINGS)}.",
          f"But {c.subject} made a big mess.")
    s.say(f'"I will try again," said {c.name}.', f"{c.name} did not give up.",
          f"{c.Subject} cleaned up and tried one more time.")
    s.say("This time, it was perfect.", "The second time, it was even better.")
    s.paragraph()
    s.say(f'When {who} saw it, {who} said, "What a lovely surprise! Thank you!"',
          f"{_cap(who)} was so happy and gave {c.name} a big hug.")
    _ending(s, c, None, s.pick(("it is good to keep trying", "a gift from the heart is the best gift",
                                  "making others happy makes you happy too")))


def _plot_weather(s: _Story) -> None:
    c = s.character()
    f = s.friend_of(c)
    place = s.pick(("the park", "the beach", "the meadow", "the big hill", "the forest", "the farm"))
    _introduce(s, c, place)
    s.say(f"One sunny day, {c.name} and {f.name} went to {place}.",
          f"It was a bright morning, so {c.name} went to {place} with {f.name}.")
    s.say(f"They played {s.pick(GAMES)} and picked {s.pick(COLOURS)} flowers.",
          "They ran in the grass and looked at the clouds.")
    s.paragraph()
    s.say("Suddenly, the sky got dark and it began to rain.",
          "Then the wind blew hard, and big drops of rain fell.",
          "But then, dark clouds came and it started to rain.")
    s.say(f'"Quick, let us hide!" said {f.name}.', f'"Oh no, we will get wet!" cried {c.name}.')
    s.say("They ran under a big tree.", "They hid in a small cave.",
          "They stood under an old roof and waited.")
    s.say("They told stories while they waited.", "They sang a song to feel brave.")
    s.paragraph()
    s.say("Soon the rain stopped, and the sun came out.", "After a while, the rain went away.")
    s.say("They saw a big rainbow in the sky!", "The grass was shiny and the air smelled fresh.")
    s.say(f'"Look, a rainbow!" said {c.name}.', f'"How pretty!" said {f.name}.')
    _ending(s, c, f, s.pick(("after the rain comes the sun", "every day can be an adventure",
                               "good friends make bad days better")))


def _plot_race(s: _Story) -> None:
    c = s.character("animal")
    f = s.friend_of(c)
    place = s.pick(PLACES)
    _introduce(s, c, place)
    s.say(f"One day, {c.name} and {f.name} had a race to {place}.",
          f'"Let us have a race!" said {f.name} one morning.')
    s.say(f"{f.name} was very fast, and {c.name} was slow.",
          f"{f.name} ran ahead and laughed.")
    s.say(f"But {c.name} did not stop.", f"{c.name} kept going, step by step.")
    s.paragraph()
    s.say(f"{f.name} was so far ahead that {f.subject} took a nap.",
          f"Then {f.name} fell and hurt {f.possessive} knee.",
          f"Then {f.name} got tired and sat down.")
    s.say(f"{c.name} {s.pick(('walked past', 'stopped to help', 'came along'))}.",
          f"{c.name} saw {f.object} and came closer.")
    s.say(f'"Are you okay?" asked {c.name}.', f'"Come on, let us finish together," said {c.name}.')
    s.say("In the end, they crossed the line together.", f"In the end, {c.name} won the race.")
    s.paragraph()
    _ending(s, c, f, s.pick(("slow and steady wins the race", "being kind is better than winning",
                               "it is fun to play fair")))


def _plot_skill(s: _Story) -> None:
    c = s.character(s.pick(("girl", "boy")))
    want, done = s.pick(SKILLS)
    helper = s.pick(("mom", "dad", "grandpa", "grandma", "big sister", "the teacher"))
    _introduce(s, c, s.pick(PLACES))
    s.say(f"{c.name} wanted to learn to {want}.", f"More than anything, {c.name} wanted to {want}.")
    s.say(f"{c.Subject} tried, but it was very hard.", f"The first time, {c.subject} fell down.",
          f"{c.Subject} tried and tried, but {c.subject} could not do it.")
    s.say(f'"I can not do it!" {c.subject} said.', f"{c.name} felt {s.pick(BAD_FEELINGS)}.")
    s.paragraph()
    s.say(f'{_cap(helper)} said, "Let me show you. Go slow and try again."',
          f'"Practice every day, and you will get better," said {helper}.')
    s.say(f"So {c.name} practiced every day.", f"{c.name} tried again the next day, and the next.")
    s.say(f"At last, {c.subject} {done}!", f"One morning, {c.name} {done}.")
    s.say(f'"I did it!" shouted {c.name}.', f"{_cap(helper)} clapped and cheered.")
    s.paragraph()
    _ending(s, c, None, s.pick(("practice makes things easier", "you should never give up",
                                  "hard things become easy when you keep trying")))


def _plot_mess(s: _Story) -> None:
    c = s.character()
    room = s.pick(("room", "kitchen", "garden", "toy box", "classroom"))
    _introduce(s, c, s.pick(PLACES))
    s.say(f"{c.name} played all morning and made a big mess in the {room}.",
          f"One day, the {room} was full of toys, paper and crumbs.")
    s.say(f'Mom said, "Please clean up the {room}."', '"Time to tidy up," said dad.')
    s.say(f'"But cleaning is boring," said {c.name}.', f"{c.name} did not want to clean.")
    s.paragraph()
    s.say(f"Then {c.subject} had an idea. {c.Subject} made cleaning a game.",
          f"So {c.name} sang a song while {c.subject} cleaned.")
    s.say(f"{c.Subject} put the blocks in the box and the books on the shelf.",
          f"{c.Subject} picked up every toy, one by one.")
    s.say(f"Soon the {room} was clean and shiny.", "In no time, everything was neat.")
    s.say(f'Mom smiled. "Good job, {c.name}!"', f'"Look how nice it is!" said {c.name}.')
    _ending(s, c, None, s.pick(("cleaning up can be fun", "a little work can make a big difference",
                                  "helping at home is a good thing")))


def _plot_treasure(s: _Story) -> None:
    c = s.character()
    f = s.friend_of(c)
    place = s.pick(PLACES)
    _introduce(s, c, place)
    s.say(f"One day, {c.name} found an old map.", f"One day, {c.name} and {f.name} found a strange note.")
    s.say(f'"It is a treasure map!" said {f.name}.', f"The map showed a big X near {place}.")
    s.say("They walked past the tall trees and over the little bridge.",
          f"They followed the path to {place}.")
    s.paragraph()
    s.say("They dug and dug in the sand.", "They looked under every rock.")
    s.say("At last, they found a small box.", "Then they saw an old box under the leaves.")
    inside = s.pick(("shiny stones", "old toys", "a note that said: friends are the real treasure",
                     "seeds for a garden", "a little silver bell"))
    s.say(f"Inside the box, there were {inside}." if not inside.startswith("a ")
          else f"Inside the box, there was {inside}.")
    s.say('"We did it!" they said.', "They jumped and cheered.")
    s.paragraph()
    _ending(s, c, f, s.pick(("friends are the best treasure", "adventures are better with a friend",
                               "it is fun to explore")))


def _plot_bedtime(s: _Story) -> None:
    c = s.character()
    _introduce(s, c, s.pick(PLACES))
    s.say(f"One night, {c.name} could not sleep.", f"It was bedtime, but {c.name} was not sleepy.")
    s.say(f"{c.Subject} looked out of the window at the big round moon.",
          "The stars were bright in the sky.")
    s.say(f'"Moon, are you lonely up there?" {c.subject} asked.',
          f'"I wish I could fly to the stars," said {c.name}.')
    s.paragraph()
    s.say("Mom came in and sat on the bed.", f"Dad came and read {c.object} a story.")
    s.say('"The moon watches over you every night," said mom.',
          '"Close your eyes and dream of the stars," said dad.')
    s.say(f"{c.name} closed {c.possessive} eyes.", f"{c.name} hugged {c.possessive} teddy bear.")
    s.say(f"Soon {c.subject} was fast asleep.", f"{c.Subject} dreamed of flying to the moon.")
    _ending(s, c, None, s.pick(("the night is quiet and safe", "dreams can take you anywhere",
                                  "bedtime can be cozy")))


PLOTS: tuple[Callable[[_Story], None], ...] = (
    _plot_lost, _plot_friend, _plot_share, _plot_fear, _plot_help_animal, _plot_gift,
    _plot_weather, _plot_race, _plot_skill, _plot_mess, _plot_treasure, _plot_bedtime)


def make_story(rng: random.Random) -> str:
    """One story (paragraphs separated by single newlines)."""
    story = _Story(rng)
    rng.choice(PLOTS)(story)
    return story.text()


def make_stories(count: int, seed: int = 0) -> list[str]:
    """``count`` stories, deterministic from ``seed``."""
    rng = random.Random(seed)
    return [make_story(rng) for _ in range(count)]


def make_corpus(min_chars: int, seed: int = 0,
                held_out_fraction: float = 0.05) -> tuple[list[str], list[str]]:
    """Stories totalling at least ``min_chars`` characters, split into train and held-out.

    The held-out stories are every ``round(1 / held_out_fraction)``-th story,
    so both splits cover every plot.
    """
    rng = random.Random(seed)
    stories: list[str] = []
    total = 0
    while total < min_chars:
        story = make_story(rng)
        stories.append(story)
        total += len(story)
    every = max(2, round(1.0 / held_out_fraction))
    held_out = [s for i, s in enumerate(stories) if i % every == every - 1]
    train = [s for i, s in enumerate(stories) if i % every != every - 1]
    return train, held_out


#: Separator between stories in the corpus text files.
STORY_SEPARATOR = "\n\n"


def join_stories(stories: list[str]) -> str:
    """Corpus text: stories separated by blank lines."""
    return STORY_SEPARATOR.join(stories) + "\n"


def split_stories(text: str) -> list[str]:
    """Inverse of :func:`join_stories`."""
    return [s.strip() for s in text.split(STORY_SEPARATOR) if s.strip()]
