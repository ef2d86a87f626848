"""What `cdlaw paraphrase` and `cdlaw distill` ask a model, and how a document is cut and
its answers joined.

An Item asks either for a rewrite (an instruction and the text: paraphrase styles, or a
distill prompt) or for a continuation (no instruction: the model goes on from the text, as
a base model does). Shared by both backends (generate.LocalModel, endpoint).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cdlaw.system.errors import BadInput

KEEP = "Keep every fact, name and number exactly as given, and add no new facts."
PROMPTS = {
    "faq": "Rewrite the text below as questions and answers (an FAQ), answering each question "
    f"with a full sentence. {KEEP}",
    "math": "Rewrite the text below in the style of a math textbook: state its quantities and "
    f"relations as givens, with short worked reasoning in full sentences. {KEEP}",
    "table": "Rewrite the text below as a small table of its key facts, followed by a paragraph "
    f"that restates every row in full sentences. {KEEP}",
    "tutorial": "Rewrite the text below as a short tutorial that teaches its content step by "
    f"step, in plain, clear prose. {KEEP}",
}
STYLES = tuple(PROMPTS)


def style_for(doc_id: str, k: int, styles: tuple[str, ...], seed: int = 0) -> str:
    """The style of pass k of a document: consecutive passes cycle through the styles."""
    h = int.from_bytes(
        hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), "little"
    )
    return styles[(h + k - 1) % len(styles)]


def request_text(instruction: str, text: str) -> str:
    """The instruction and the text: the user message of a chat request."""
    return f"{instruction}\n\nText:\n{text}"


def plain_prompt(instruction: str, text: str) -> str:
    """The request for a model without a chat template: it continues after the cue."""
    return f"{request_text(instruction, text)}\n\nRewritten text:\n"


def build_prompt(tokenizer, instruction: str | None, text: str) -> str:
    """The chat-formatted request (or a plain one when the tokenizer has no chat template);
    without an instruction, the text to continue, after the token that begins a document."""
    if instruction is None:
        return document_start(tokenizer) + text
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": request_text(instruction, text)}],
            tokenize=False,
            add_generation_prompt=True,
        )
    return plain_prompt(instruction, text)


def document_start(tokenizer) -> str:
    """What a model read before each document: its begin token, or for a model trained on
    documents each ended by end-of-text (a cdlaw run's), that token."""
    return getattr(tokenizer, "bos_token", None) or getattr(tokenizer, "eos_token", None) or ""


def split_text(tokenizer, text: str, max_tokens: int) -> list[str]:
    """Pieces of at most ~max_tokens tokens, cut at paragraph, then sentence, then word ends."""
    if len(tokenizer(text, add_special_tokens=False).input_ids) <= max_tokens:
        return [text]
    for pattern in (r"\n\s*\n", r"(?<=[.!?])\s+", r"\s+"):
        units = [u for u in re.split(pattern, text) if u.strip()]
        if len(units) > 1:
            break
    else:  # one unbreakable word: cut it by tokens
        ids = tokenizer(text, add_special_tokens=False).input_ids
        return [tokenizer.decode(ids[i : i + max_tokens]) for i in range(0, len(ids), max_tokens)]
    pieces, current = [], ""
    joiner = "\n\n" if pattern.startswith(r"\n") else " "
    for unit in units:
        candidate = f"{current}{joiner}{unit}" if current else unit
        if current and len(tokenizer(candidate, add_special_tokens=False).input_ids) > max_tokens:
            pieces.append(current)
            candidate = unit
        current = candidate
    pieces.append(current)
    return [q for p in pieces for q in split_text(tokenizer, p, max_tokens)]


@dataclass
class Item:
    """One (document, pass) to ask for: its row's style, its text cut to fit the context, and
    the instruction (None: continue the one piece, the document's opening)."""

    doc_id: str
    k: int
    style: str
    pieces: list[str]
    instruction: str | None = None


def join_pieces(outputs: Iterable[str]) -> str:
    """A document's paraphrase from its pieces' answers ("" when the model said nothing)."""
    return "\n\n".join(o.strip() for o in outputs if o.strip())


def answer_text(item: Item, outputs: list[str]) -> str:
    """The row's text: a rewrite's pieces' answers joined ("" when the model said nothing);
    a continuation's opening and what the model wrote after it, as one document."""
    if item.instruction is None:
        return item.pieces[0] + "".join(outputs).rstrip()
    return join_pieces(outputs)


def seed_of(seed: int, doc_id: str, k: int) -> int:
    """The sampling seed of (document, pass): the same on every run, in any order."""
    digest = hashlib.blake2b(f"{seed}:{doc_id}:{k}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


# A backend turns Items, in order, into chunks [(item, text), …] in the same order; the
# rows of a chunk are written and synced together. Both backends also have `tokens` (a
# tokenizer, or a stand-in that counts, for split_text) and `text_budget` (document
# tokens per request).
Chunks = Iterator[list[tuple[Item, str]]]


def context_too_short(
    model: str, context: int, overhead: int, max_new_tokens: int, option: str = "--model"
) -> BadInput:
    return BadInput(
        f"{option} {model!r} has a {context}-token context: too short for the "
        f"{overhead}-token instructions plus --max-new-tokens {max_new_tokens}; lower it"
    )
