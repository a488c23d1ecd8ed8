"""The request mix every system is measured on: short and long prompts, short and long answers.

The mix is drawn from a seeded RNG, so one seed gives the same requests to the server, to each
reference, and to a later run. Prompt sizes are measured with the model's own chat template,
the one the server applies, so the references receive the very token ids the server sees.
Greedy decoding may stop early at the end-of-turn token; the prompts ask for long lists and
stories so that most answers run to max_tokens, and every system counts the tokens it really
produced rather than trusting max_tokens.
"""

import random
from dataclasses import dataclass, field

SHORT_PROMPT_TOKENS = (30, 60)
LONG_PROMPT_TOKENS = (300, 400)
# A conversation's user message, counted without the chat template's few tokens around it.
TURN_MESSAGE_TOKENS = (190, 215)

_TOPICS = [
    "rivers of Europe", "kitchen tools", "birds that live near the sea", "board games",
    "famous bridges", "vegetables for a small garden", "ways to save energy at home",
    "mountains and their heights", "musical instruments", "things to pack for a long hike",
    "habits of good programmers", "types of clouds", "breakfast recipes", "old sailing ships",
    "uses of a paperclip", "questions to ask a new colleague", "facts about the moon",
    "desert animals", "parts of a bicycle", "tips for learning a new language",
]
_SHORT_TEMPLATES = [
    "Write a long numbered list of {topic}, one per line, each with a short sentence about it.",
    "List as many {topic} as you can, numbered, and explain each one in a sentence.",
    "Write a long story about a child who collects {topic}. Make it at least ten paragraphs.",
    "Give me a detailed numbered list of {topic}. Add one sentence of explanation per item.",
]
_LONG_INSTRUCTIONS = [
    "Using the notes above, write a long numbered list of every idea they mention, one per line, "
    "with a sentence about each.",
    "Rewrite the notes above as a long story, in many paragraphs, keeping every detail.",
    "Write a detailed numbered summary of the notes above, one point per line.",
]
# Plain sentences for the long prompts' notes: varied enough that the model does not loop on them.
_SUBJECTS = ["The old harbour", "A quiet village", "The city library", "Our garden", "The river",
             "A small bakery", "The mountain road", "The night market", "An old lighthouse",
             "The school choir", "A busy workshop", "The winter festival"]
_VERBS = ["welcomes", "remembers", "shelters", "celebrates", "repairs", "collects", "paints",
          "follows", "protects", "measures", "describes", "gathers"]
_OBJECTS = ["travellers from distant towns", "the songs of fishermen", "letters written long ago",
            "tools that nobody uses any more", "stories about the first settlers",
            "bright lanterns every evening", "the sound of the morning bells", "seeds from many "
            "countries", "maps of forgotten paths", "the smell of fresh bread", "notes from the "
            "weekly meetings", "children who ask many questions"]
_ENDINGS = ["before the sun rises.", "during the long rainy season.", "while the town sleeps.",
            "as it has done for a hundred years.", "whenever the wind turns north.",
            "with great patience and care.", "because everyone asked it to.", "on the first day "
            "of each month."]


@dataclass(frozen=True)
class BenchRequest:
    index: int
    messages: list[dict[str, str]] = field(hash=False)
    prompt_token_ids: list[int] = field(hash=False)
    max_tokens: int
    long_prompt: bool

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True)
class Conversation:
    """What the user says at each turn; the answers come from whichever system is measured."""

    index: int
    user_messages: tuple[str, ...]


@dataclass(frozen=True)
class MixSpec:
    """How one request list is drawn."""

    count: int
    short_max_tokens: int = 48
    long_max_tokens: int = 192
    long_prompt_share: float = 0.5
    long_output_share: float = 0.5


class Workload:
    def __init__(self, tokenizer, seed: int):
        self.tokenizer = tokenizer
        self.seed = seed

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        """The same call the engine makes (LLMEngine.encode_chat)."""
        return list(self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False))

    def requests(self, name: str, spec: MixSpec) -> list[BenchRequest]:
        """The request list called `name`: the same name, spec and seed give the same list."""
        rng = random.Random(f"{self.seed}:{name}")
        out = []
        for index in range(spec.count):
            long_prompt = rng.random() < spec.long_prompt_share
            long_output = rng.random() < spec.long_output_share
            messages = self._long_prompt(rng) if long_prompt else self._short_prompt(rng)
            max_tokens = spec.long_max_tokens if long_output else spec.short_max_tokens
            out.append(BenchRequest(index, messages, self.encode(messages), max_tokens,
                                    long_prompt))
        return out

    def _short_prompt(self, rng: random.Random) -> list[dict[str, str]]:
        low, high = SHORT_PROMPT_TOKENS
        while True:
            text = rng.choice(_SHORT_TEMPLATES).format(topic=rng.choice(_TOPICS))
            messages = [{"role": "user", "content": text}]
            if low <= len(self.encode(messages)) <= high:
                return messages

    def conversations(self, name: str, count: int, turns: int) -> list[Conversation]:
        """`count` conversations of `turns` user messages of about 200 tokens each; each turn
        brings new notes and asks for a short summary of everything so far, so that the
        answers run to max_tokens and the history grows by a full message and answer a turn."""
        rng = random.Random(f"{self.seed}:{name}")
        low, high = TURN_MESSAGE_TOKENS
        conversations = []
        for index in range(count):
            messages = []
            for turn in range(turns):
                lead = f"Here are more notes for my diary, part {turn + 1}:\n"
                ask = ("\n\nAdd them to the earlier parts and write a short numbered summary of "
                       "everything so far.")
                messages.append(self._notes(rng, low, high, lambda notes: lead + notes + ask,
                                            self.message_size))
            conversations.append(Conversation(index, tuple(messages)))
        return conversations

    def turn_request(self, conversation: Conversation, history: list[dict[str, str]],
                     max_tokens: int) -> BenchRequest:
        """What a chat client sends for the turn whose user message ends `history`: the whole
        history, resent, answers included."""
        turn = sum(1 for message in history if message["role"] == "user") - 1
        index = conversation.index * len(conversation.user_messages) + turn
        return BenchRequest(index, list(history), self.encode(history), max_tokens,
                            long_prompt=True)

    def message_size(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _long_prompt(self, rng: random.Random) -> list[dict[str, str]]:
        low, high = LONG_PROMPT_TOKENS
        # Aim below the top so that the last sentence added cannot overshoot the range.
        target = rng.randint(low, high - 30)
        instruction = rng.choice(_LONG_INSTRUCTIONS)
        text = self._notes(rng, target, high, lambda notes: "Notes:\n" + notes + "\n\n" + instruction,
                           lambda text: len(self.encode([{"role": "user", "content": text}])))
        return [{"role": "user", "content": text}]

    @staticmethod
    def _notes(rng: random.Random, target: int, high: int, render, size) -> str:
        """render(notes), with sentences of notes added until its size is target..high."""
        sentences: list[str] = []
        while True:
            sentences.append(" ".join([rng.choice(_SUBJECTS), rng.choice(_VERBS),
                                       rng.choice(_OBJECTS), rng.choice(_ENDINGS)]))
            text = render(" ".join(sentences))
            length = size(text)
            if length >= target:
                if length > high:  # a sentence too long for the room left: start over
                    sentences.clear()
                    continue
                return text


def meeting_notes(turn: int, length: int = 2500) -> str:
    """About `length` characters of meeting notes (about 560 tokens), asking for a summary."""
    items = ["budget", "hiring", "the office move", "the release", "customer calls", "the audit"]
    lines, n = [f"Here are my notes from meeting {turn}. Please summarise them."], 0
    while sum(len(line) + 1 for line in lines) < length:
        n += 1
        lines.append(f"- Point {n}: {items[(turn + n) % len(items)]} was discussed for {n + turn} minutes, "
                     f"and the team agreed to revisit it on day {(n * 7 + turn) % 30 + 1}.")
    return "\n".join(lines)
