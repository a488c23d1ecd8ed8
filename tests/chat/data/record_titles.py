"""Records the default model's title answers for 30 varied first exchanges, once, into
titles_recorded.json beside this file (test data for tests/chat/test_title_cleaning.py).

Each exchange is a question, the model's own answer to it (sampled as the chat samples), and
what the model said when asked for the title (titles.prompt, greedy, as titles.ask asks).
Run: DJANGO_SETTINGS_MODULE=tests.settings python -m tests.chat.data.record_titles
"""

import json
from pathlib import Path

import django
import httpx2

django.setup()

from chatapp.upstream import titles  # noqa: E402  (needs the settings loaded above)
from tests.inference.serving import real_model_serving  # noqa: E402

QUESTIONS = [
    "How do I make a quick tomato soup?",
    "What is the capital of Australia?",
    "Explain recursion to a ten-year-old.",
    "Write a haiku about autumn leaves.",
    "How do I reverse a list in Python?",
    "What are the health benefits of green tea?",
    "Can you help me plan a three-day trip to Rome?",
    "Why is the sky blue?",
    "Give me tips for a job interview.",
    "What is the difference between a virus and a bacterium?",
    "How do I change a flat tire?",
    "Summarize the plot of Romeo and Juliet.",
    "What's a good name for a golden retriever puppy?",
    "How does compound interest work?",
    "Translate 'good morning' into French, Spanish and German.",
    "What exercises help with lower back pain?",
    "hi",
    "Write a SQL query that counts orders per customer.",
    "How many planets are in the solar system?",
    "What should I cook for dinner tonight with chicken and rice?",
    "Tell me a joke about cats.",
    "How do I fix 'permission denied' when running a shell script?",
    "What causes inflation?",
    "Recommend three science fiction books.",
    "How do vaccines work?",
    "I feel stressed about exams. Any advice?",
    "What is photosynthesis?",
    "Write a short birthday message for my grandmother.",
    "How do I center a div in CSS?",
    "What is the tallest mountain in the world?",
]


def completion(url: str, messages: list[dict], **sampling) -> str:
    response = httpx2.post(f"{url}/v1/chat/completions", timeout=300,
                          json={"model": "SmolLM2-135M-Instruct", "messages": messages, "stream": False, **sampling})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def main() -> None:
    records = []
    with real_model_serving() as url:
        for question in QUESTIONS:
            answer = completion(url, [{"role": "user", "content": question}],
                                max_tokens=200, temperature=0.7, top_p=0.9)
            said = completion(url, titles.prompt(question, answer), max_tokens=titles.MAX_TOKENS, temperature=0)
            records.append({"question": question, "answer": answer, "said": said})
            print(json.dumps(said))
    path = Path(__file__).with_name("titles_recorded.json")
    path.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
