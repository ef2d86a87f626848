"""A finished run's model/ is a whole Hugging Face folder: plain transformers loads its
tokenizer and model, encodes as cdlaw did, and `generate` stops at end-of-text; its
README.md is a model card the Hub's own parser reads (cdlaw.train.export)."""

import dataclasses
import itertools
import json
import re

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessor,
    LogitsProcessorList,
)

from cdlaw.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.sweep.handoffs import Outcome, RunTask
from cdlaw.sweep.worker import execute_run
from cdlaw.train.export import hf_tokenizer

torch.set_num_threads(1)

DATA = DataConfig(vocab_size=512, val_tokens=2048)
MODEL = ModelConfig(d_model=32, n_layers=2, n_heads=2, mlp_hidden=96, vocab_size=512, seq_len=32)
CFG = RunConfig(
    sweep="export-test",
    strategy="repetition",
    fresh_tokens=1024,
    derived_tokens=1024,
    model=MODEL,
    data=DATA,
    train=TrainConfig(batch_size=8, eval_every=4, log_every=1),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_thread):
    """One tiny run trained through the sweep's worker (8 steps): (run_dir, corpus, result)."""
    root = tmp_path_factory.mktemp("export")
    task = RunTask(CFG, root / "sweep", root / ".cache", one_thread, retry_failed=False)
    outcome = execute_run(task)
    assert outcome.kind is Outcome.DONE
    corpus = prepare_corpus(DATA, root / ".cache", CFG.fresh_tokens)  # cached: no work
    return root / "sweep" / CFG.run_id, corpus, outcome.result


def corpus_texts(corpus, n: int = 6) -> list[str]:
    """The first n validation documents as text (EOS dropped): real corpus text."""
    tok = Tokenizer.from_file(str(corpus.tokenizer_path))
    tokens = np.asarray(corpus.val_tokens)
    cuts = np.flatnonzero(tokens == corpus.eos_id)[: n + 1]
    return [tok.decode(tokens[a + 1 : b].tolist()) for a, b in itertools.pairwise(cuts)]


def test_auto_tokenizer_encodes_and_decodes_as_cdlaw(run):
    run_dir, corpus, _ = run
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    ours = Tokenizer.from_file(str(corpus.tokenizer_path))
    assert tok.is_fast
    # A class name transformers 4.x knows too (5.x writes its own "TokenizersBackend").
    config = json.loads((run_dir / "model" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["clean_up_tokenization_spaces"] is False  # 4.x would eat " ." and " ,"
    assert tok.eos_token == "<|endoftext|>" == ours.id_to_token(corpus.eos_id)
    assert tok.eos_token_id == tok.bos_token_id == tok.pad_token_id == corpus.eos_id
    assert len(tok) == corpus.vocab_size == MODEL.vocab_size
    odd = "  Two spaces , new lines\n\n and ~ odd | chars {} . Don 't ."
    texts = [*corpus_texts(corpus), odd]
    assert all(texts)
    for text in texts:
        ids = tok(text).input_ids  # the default call: no begin token added
        assert ids == ours.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    # A stretch of the stream, documents and their EOS tokens, reads back the same.
    stretch = np.asarray(corpus.val_tokens[:300]).tolist()
    assert tok.decode(stretch) == ours.decode(stretch, skip_special_tokens=False)
    # Padding works without setting anything (the pad token is end-of-text).
    batch = tok(texts[:2], padding=True, return_tensors="pt")
    assert batch.input_ids.shape[0] == 2


def test_config_and_generation_config_carry_the_special_token_ids(run):
    run_dir, corpus, _ = run
    config = json.loads((run_dir / "model" / "config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == corpus.eos_id
    # Left null on purpose: transformers would freeze the EOS embedding as padding_idx.
    assert config["pad_token_id"] is None
    generation = json.loads((run_dir / "model" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == generation["bos_token_id"] == corpus.eos_id
    assert generation["pad_token_id"] == corpus.eos_id
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    assert model.model.embed_tokens.padding_idx is None


class EndAfter(LogitsProcessor):
    """Greedy decoding picks `eos` once `n` tokens have been generated, not before."""

    def __init__(self, prompt_len: int, n: int, eos: int):
        self.stop_at, self.eos = prompt_len + n, eos

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        if input_ids.shape[1] >= self.stop_at:
            scores[:, self.eos] = scores.max() + 1
        else:
            scores[:, self.eos] = -torch.inf
        return scores


def test_generate_stops_at_end_of_text(run):
    run_dir, corpus, _ = run
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    prompt = tok(corpus_texts(corpus, 1)[0][:20], return_tensors="pt").input_ids
    n = prompt.shape[1]
    force = LogitsProcessorList([EndAfter(n, 3, corpus.eos_id)])
    out = model.generate(prompt, max_new_tokens=20, do_sample=False, logits_processor=force)
    # Three tokens, then end-of-text, then nothing: generate knew which token ends a text.
    assert out.shape == (1, n + 4)
    assert out[0, -1].item() == corpus.eos_id
    assert corpus.eos_id not in out[0, n:-1].tolist()


def test_model_card_is_a_hub_model_card(run):
    from huggingface_hub import ModelCard

    run_dir, corpus, result = run
    card = ModelCard.load(run_dir / "model" / "README.md")
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-generation"
    assert {"cdlaw", "sweep:export-test", "strategy:repetition"} <= set(card.data.tags)
    (score,) = card.data.eval_results
    assert score.metric_value == pytest.approx(result["loss"], rel=1e-12)
    assert score.dataset_name == corpus.name
    text = card.text
    assert f"`{CFG.run_id}`" in text and "`export-test`" in text
    assert f"{result['loss']:.4f}" in text
    config = json.loads(re.search(r"```json\n(.*?)\n```", text, re.S).group(1))
    saved = json.loads((run_dir / "config.json").read_text())
    assert config == {k: saved[k] for k in config}


def test_a_given_tokenizer_is_copied_without_its_begin_token(run, tmp_path):
    """A tokenizer whose post-processor adds a begin token encodes, once exported, as cdlaw
    encoded the run's documents: without it."""
    from tokenizers.processors import TemplateProcessing

    _, corpus, _ = run
    tok = Tokenizer.from_file(str(corpus.tokenizer_path))
    eos = tok.id_to_token(corpus.eos_id)
    tok.post_processor = TemplateProcessing(
        single=f"{eos} $A", special_tokens=[(eos, corpus.eos_id)]
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    given = dataclasses.replace(corpus, tokenizer_path=tmp_path / "tokenizer.json")
    text = corpus_texts(corpus, 1)[0]
    assert tok.encode(text).ids[0] == corpus.eos_id  # the given one adds it
    exported = hf_tokenizer(given, MODEL.seq_len)
    assert exported(text).input_ids == tok.encode(text, add_special_tokens=False).ids
