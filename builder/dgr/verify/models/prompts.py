"""Fixed prompts of the conformance checks."""

from __future__ import annotations

# long enough for a 64-token prefill with the tokenizer of every locked model (77 tokens with SmolLM2's and
# with Gemma 3's; the checks refuse a prompt that is shorter)
LONG = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type, oil-based ink and a wooden screw press into a system that could produce books at a "
    "scale no scribe could match. Within fifty years, presses were operating in more than two hundred cities "
    "across Europe, and the price of books fell sharply, which changed education, religion and science."
)

GENERATION = (
    "The capital of France is",
    "Write a short poem about the sea:",
    "def fibonacci(n):",
)

SESSIONS = (
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "A recipe for pancakes: first,",
    "In computer science, a hash table is",
)
