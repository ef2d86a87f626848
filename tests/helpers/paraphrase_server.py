"""A tiny chat model made here, and a small OpenAI-compatible server on loopback that runs
it with transformers' real `generate` — what `vllm serve` answers, in miniature, for the
tests of `cdlaw paraphrase --endpoint`.

The server answers GET /v1/models, POST /v1/chat/completions and /v1/completions, and can
be told to misbehave: answer 503 to its first POSTs, 500 to every request whose text holds
a given string, or 400 to chat requests (as vLLM does for a model without a chat template).
It counts requests and the most that were in flight at once.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def save_tiny_chat_model(path: Path, chat_template: bool = True) -> Path:
    """A 2-layer Llama with a 300-token BPE (and a minimal chat template), saved locally."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["The river runs to the sea through the old city."] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.set_num_threads(1)  # a shared machine: threads only contend
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


class TinyServer:
    """`with TinyServer(folder, name) as s:` serves the model at s.url (…/v1)."""

    def __init__(self, folder: Path, name: str = "tiny", chat: bool = True, api_key=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.lm = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.name, self.chat, self.api_key = name, chat, api_key
        self.fail_first = 0  # answer 503 to this many POSTs first
        self.fail_texts: set[str] = set()  # answer 500 to requests whose text holds one
        self.posts: list[tuple[str, dict, int]] = []  # (path, body, status)
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()  # counters
        self.generating = threading.Lock()  # one generate at a time: seeds stay exact
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                owner.handle(self, "GET")

            def do_POST(self):
                owner.handle(self, "POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> TinyServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            status, body, headers = self.answer(request, method)
        finally:
            with self.lock:
                self.in_flight -= 1
        data = json.dumps(body).encode()
        request.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def answer(self, request, method: str) -> tuple[int, dict, dict]:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "invalid api key"}}, {}
        if method == "GET":
            if request.path != "/v1/models":
                return 404, {"error": {"message": f"no route {request.path}"}}, {}
            card = {"id": self.name, "object": "model", "max_model_len": 512}
            return 200, {"object": "list", "data": [card]}, {}
        body = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
        status, reply, headers = self.complete(request.path, body)
        with self.lock:
            self.posts.append((request.path, body, status))
        return status, reply, headers

    def complete(self, path: str, body: dict) -> tuple[int, dict, dict]:
        chat = path == "/v1/chat/completions"
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return 404, {"error": {"message": f"no route {path}"}}, {}
        if body.get("model") != self.name:
            return (
                404,
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}},
                {},
            )
        with self.lock:
            if self.fail_first > 0:
                self.fail_first -= 1
                return 503, {"error": {"message": "server busy"}}, {}
        if chat and not self.chat:
            return 400, {"error": {"message": "this model has no chat template"}}, {}
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        if any(t in text for t in self.fail_texts):
            return 500, {"error": {"message": "internal error"}}, {"Retry-After": "0"}
        out = self.generate(text, chat, body)
        choice = {"index": 0, "message": {"role": "assistant", "content": out}} if chat else {
            "index": 0, "text": out}  # fmt: skip
        return 200, {"object": "chat.completion" if chat else "text_completion",
                     "choices": [choice]}, {}  # fmt: skip

    def generate(self, text: str, chat: bool, body: dict) -> str:
        import torch

        if chat:  # the server applies the model's chat template, as vLLM does
            messages = [{"role": "user", "content": text}]
            text = self.tok.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        enc = self.tok([text], return_tensors="pt", add_special_tokens=not chat)
        temperature = float(body.get("temperature", 1.0))
        sample = temperature > 0
        with self.generating, torch.no_grad():
            if "seed" in body:
                torch.manual_seed(int(body["seed"]))
            out = self.lm.generate(
                **enc,
                max_new_tokens=int(body["max_tokens"]),
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=float(body.get("top_p", 1.0)) if sample else None,
                pad_token_id=self.tok.pad_token_id,
            )
        return self.tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
