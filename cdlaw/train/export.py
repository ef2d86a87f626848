"""Make a finished run's model/ a whole Hugging Face folder (docs/files.md, "model/").

    complete_model_folder(folder, cfg, corpus, loss=…, train_loss=…, steps=…)

save_pretrained writes the weights and an Olmo3Config with no special tokens. This adds
what plain transformers needs to load and sample the model without cdlaw:

- the tokenizer the run's tokens came from (tokenizer.json + tokenizer_config.json), with
  the corpus's end-of-text token as its eos, bos and pad token, so AutoTokenizer loads it
  and encodes text exactly as cdlaw did;
- eos/bos ids in config.json and eos/bos/pad ids in generation_config.json, so `generate`
  stops at the end of a document;
- README.md, a model card (YAML front matter + the run's config, loss and sweep), so the
  folder can be pushed to the Hub as it is.

Why these choices. cdlaw's streams end every document with the end-of-text token and never
insert a begin token, so the token before a document's first token is always end-of-text:
it is the model's begin-of-document context, hence bos = eos. config.json keeps
pad_token_id null: transformers makes the pad id the input embedding's padding_idx, whose
row gets no gradient, which would freeze the end-of-text embedding in any fine-tuning;
generation only reads the pad id from generation_config.json. cdlaw encodes documents
without special tokens, so a given tokenizer's post-processor (one that adds a begin token,
say) is dropped from the copy, and the copy encodes text as the run saw it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cdlaw.config import RunConfig, to_dict
from cdlaw.data.tokens.cache import PreparedCorpus
from cdlaw.train.result import run_facts

# The tokenizer class written to tokenizer_config.json: the name transformers 4.x and 5.x
# both resolve to their fast tokenizer (5.x writes "TokenizersBackend", unknown to 4.x).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def complete_model_folder(
    folder: Path,
    cfg: RunConfig,
    corpus: PreparedCorpus,
    *,
    loss: float,
    train_loss: float,
    steps: int,
) -> None:
    """Add tokenizer, special-token ids and a model card to a saved model folder."""
    folder = Path(folder)
    tok = hf_tokenizer(corpus, cfg.model.seq_len)
    save_tokenizer(folder, tok)
    set_special_tokens(folder, corpus.eos_id)
    card = model_card(
        cfg, corpus.name, tok.eos_token, loss=loss, train_loss=train_loss, steps=steps
    )
    (folder / "README.md").write_text(card)


def hf_tokenizer(corpus: PreparedCorpus, seq_len: int):
    """The run's tokenizer as a transformers fast tokenizer, encoding as cdlaw does."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(Path(corpus.tokenizer_path).read_text())
    # cdlaw encodes with add_special_tokens=False and pads/truncates nothing itself.
    spec.update(post_processor=None, truncation=None, padding=None)
    tok = Tokenizer.from_str(json.dumps(spec))
    eos = tok.id_to_token(corpus.eos_id)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=eos,
        bos_token=eos,
        pad_token=eos,
        model_max_length=seq_len,
        clean_up_tokenization_spaces=False,  # decode gives back the text, spaces and all
    )


def save_tokenizer(folder: Path, tok) -> None:
    tok.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = TOKENIZER_CLASS
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def set_special_tokens(folder: Path, eos_id: int) -> None:
    """eos/bos ids in config.json, eos/bos/pad in generation_config.json; caching on."""
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(folder)
    config.eos_token_id = config.bos_token_id = eos_id
    config.use_cache = True  # off while training (nothing to reuse); on for sampling
    config.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        use_cache=True,
    ).save_pretrained(folder)


def model_card(
    cfg: RunConfig, corpus: str, eos: str, *, loss: float, train_loss: float, steps: int
) -> str:
    """README.md in the Hub's model card format: YAML front matter, then Markdown."""
    facts = run_facts(cfg)
    name = f"cdlaw-{cfg.sweep}-{cfg.run_id}"
    front = _front_matter(cfg, name, corpus, loss)
    table = _card_table(cfg, facts, corpus, loss=loss, train_loss=train_loss, steps=steps)
    config = json.dumps({**to_dict(cfg), "run_id": cfg.run_id}, indent=2)
    return f"""{front}
# {name}

An OLMo 3 language model trained by cdlaw: one run of the scaling-law sweep
`{cfg.sweep}`, {facts["n_params"]:,} non-embedding parameters trained on {cfg.fresh_tokens:,}
fresh tokens and {cfg.derived_tokens:,} derived ones (strategy `{cfg.strategy}`). It was
trained to measure one point of a scaling law, not to be useful on its own.

| | |
|---|---|
{table}

## Use

The tokenizer is the one the run's tokens came from. Every training document ended with
`{eos}` (the eos, bos and pad token), so `generate` stops there.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("path/to/this/folder")
model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")
ids = tok("The", return_tensors="pt").input_ids
out = model.generate(ids, max_new_tokens={cfg.model.seq_len - 2}, do_sample=False)
print(tok.decode(out[0]))
```

## Run config

```json
{config}
```
"""


def _front_matter(cfg: RunConfig, name: str, corpus: str, loss: float) -> str:
    """The card's YAML front matter: the Hub's tags and model-index (its validation loss)."""
    q = json.dumps  # a JSON string is a valid YAML scalar, whatever it holds
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags:
- cdlaw
- scaling-laws
- olmo3
- {q(f"sweep:{cfg.sweep}")}
- {q(f"strategy:{cfg.strategy}")}
model-index:
- name: {q(name)}
  results:
  - task:
      type: text-generation
    dataset:
      name: {q(corpus)}
      type: {q(cfg.data.corpus)}
      split: validation
    metrics:
    - name: validation loss
      type: loss
      value: {loss if math.isfinite(loss) else "null"}
---
"""


def _card_table(
    cfg: RunConfig, facts: dict, corpus: str, *, loss: float, train_loss: float, steps: int
) -> str:
    """The card's table of the run: its sweep, size, tokens, steps and losses."""
    rows = [
        ("sweep", f"`{cfg.sweep}`"),
        ("run id", f"`{cfg.run_id}`"),
        ("strategy", cfg.strategy),
        (
            "parameters N (non-embedding / all)",
            f"{facts['n_params']:,} / {facts['n_params_total']:,}",
        ),
        ("fresh tokens D", f"{cfg.fresh_tokens:,}"),
        ("derived tokens D′", f"{cfg.derived_tokens:,}"),
        ("tokens trained D + D′", f"{cfg.tokens_trained:,}"),
        ("steps", f"{steps:,}"),
        ("context length", f"{cfg.model.seq_len}"),
        ("corpus", f"`{corpus}`"),
        ("validation loss (nats/token)", f"{loss:.4f}"),
        ("final train loss (nats/token)", f"{train_loss:.4f}"),
    ]
    return "\n".join(f"| {k} | {v} |" for k, v in rows)
