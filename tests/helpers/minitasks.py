"""Two small downstream tasks in a real byte-level BPE's tokens (ids below 128, inside the
tiny runs' vocabulary): a multiple-choice quiz and a cloze, for the training tests."""

from cdlaw.data.tokens.tokenizer import ASCII, train_bpe
from cdlaw.tasks.files import Task, TaskItem, tokenise_tasks

WORDS = ["sky", "grass", "rose", "sea", "tree", "sun", "moon"]


def mini_bpe():
    return train_bpe(["The sky is blue. The grass is green. Roses are red."] * 50, 128, ASCII)


def mini_tasks(seq_len: int, n_quiz: int = len(WORDS)) -> list:
    """TaskTokens of a quiz ("The sky is" + blue | green | red) and a cloze task."""
    quiz = Task("mini_mc", "mc", tuple(
        TaskItem(f"The {w} is", (" blue", " green", " red"), i % 3)
        for i, w in enumerate(WORDS[:n_quiz])
    ), "test")  # fmt: skip
    cloze = Task("mini_cloze", "cloze", (
        TaskItem("Roses are", (" red",)), TaskItem("The grass is", (" green",)),
        TaskItem("The sky is blue. The sky is", (" blue",)),
    ), "test")  # fmt: skip
    return tokenise_tasks([quiz, cloze], mini_bpe(), eos_id=0, seq_len=seq_len)
