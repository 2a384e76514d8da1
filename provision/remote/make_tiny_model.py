"""Make the tiny random-weight Llama that CPU mode serves, ON the host, with the SGLang venv's Python.

Usage: ``VENV_PYTHON make_tiny_model.py make`` with a JSON request on stdin (the host library's envelope,
``hostlib.serve``): ``dest`` (the model's directory), ``shape`` (``tiny``, the default, or ``llama-3.2-1b``),
``seed`` (default 0). transformers + tokenizers come with SGLang; no hub access is needed. The seed seeds the
weights: another seed, the same shapes and tokenizer, other tokens out (``pd verify --all-pairs`` tells such a
server from the others).
The model (per ``/work/shared/reference/sglang-cpu-mode.md``): a ``LlamaConfig`` with hidden size 64, 2 layers,
4 heads, 4 KV heads, intermediate size 128, vocab 1024, bf16, untied embeddings, random weights (seeded, so
every host makes the same model), plus a byte-level BPE tokenizer trained in-process on a few lines of text,
saved with ``save_pretrained``. It is for testing and trying provision, not for serving.

Shape ``llama-3.2-1b``: the shapes of Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 KV heads, head dim
64, intermediate 8192, vocab 128256, tied embeddings, rope theta 500000): 1.24 B random bf16 parameters
(2.5 GB of safetensors), so a KV transfer carries what that model's would (32 KiB of KV per token). Its
tokenizer is a word-level one over 128256 words ``w0``, ``w1``, ... (every id the model can emit decodes to
text; a prompt of N such words is N tokens). Built on the GPU when there is one (seconds), else the CPU.

Idempotent: a marker file holding the spec is written last; when it is there and matches, nothing is done.
The model is built in a temp directory beside ``dest`` and renamed into place (a directory: not
``hostlib.atomic_write``'s job), under a lock (two inventory names of one machine make it at the same time).
Answers ``{"changed", "path", "seconds"}``; a failure is a failure answer with ``error`` (its ``msg`` too) and
``changed: false``, exit 1.
"""

import fcntl
import json
import os
import shutil
import sys
import time

import hostlib

SPEC = {
    "architecture": "LlamaForCausalLM",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 1024,
    "dtype": "bfloat16",
    "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
    "seed": 0,
}
SHAPES = {
    "tiny": SPEC,
    "llama-3.2-1b": {
        "architecture": "LlamaForCausalLM",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "dtype": "bfloat16",
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "tokenizer": "word-level",
        "seed": 0,
    },
}
MARKER = ".provision-tiny-model.json"
CORPUS = [
    "Hello world, this is a tiny model made by provision for testing prefill and decode.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "SGLang serves language models; NIXL moves the KV cache between prefill and decode over UCX.",
    "A little text is enough to train a byte-level BPE tokenizer with a small vocabulary.",
    "Once upon a time there was a cluster of GPU hosts reachable over SSH.",
]
SPECIALS = ["<s>", "</s>", "<unk>", "<pad>"]


def corpus():
    """The fixed lines plus deterministic pseudo-words: enough pairs for BPE to fill the vocabulary."""
    lines = list(CORPUS) * 4
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    state = 12345
    for _ in range(400):
        words = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (1 << 31)
            length = 2 + state % 6
            word = ""
            for _ in range(length):
                state = (state * 1103515245 + 12345) % (1 << 31)
                word += letters[(state >> 8) % 13 if state % 3 else (state >> 8) % 26]
            words.append(word)
        lines.append(" ".join(words))
    return lines


def build_tokenizer(dest):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SPEC["vocab_size"],
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    missing = SPEC["vocab_size"] - tok.get_vocab_size()
    if missing > 0:  # every id the model can emit must decode to text (a None token decodes to "")
        tok.add_tokens(["w%d" % i for i in range(missing)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.save_pretrained(dest)
    return fast


def build_word_tokenizer(dest, spec):
    """Word-level: ids 0-3 the specials, then w0, w1, ... up to the model's vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {name: i for i, name in enumerate(SPECIALS)}
    for i in range(spec["vocab_size"] - len(SPECIALS)):
        vocab["w%d" % i] = len(SPECIALS) + i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.save_pretrained(dest)
    return fast


def build_model(dest, tokenizer, spec=SPEC):
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec["seed"])
    extra = {k: spec[k] for k in ("head_dim", "rope_theta") if k in spec}
    config = LlamaConfig(
        hidden_size=spec["hidden_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"],
        intermediate_size=spec["intermediate_size"],
        vocab_size=spec["vocab_size"],
        max_position_embeddings=spec["max_position_embeddings"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )
    if int(transformers.__version__.split(".")[0]) >= 5:
        config.dtype = torch.bfloat16
    else:
        config.torch_dtype = torch.bfloat16
    big = spec["hidden_size"] >= 1024
    device = "cuda" if big and torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.to("cpu").save_pretrained(dest)  # safetensors


def make_action(req):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    shape = req.get("shape", "tiny")
    if shape not in SHAPES:
        raise ValueError("shape %r is not one of %s" % (shape, ", ".join(sorted(SHAPES))))
    seed = req.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError("seed %r is not a whole number >= 0" % (seed,))
    spec = SHAPES[shape] if seed is None else dict(SHAPES[shape], seed=seed)
    dest = os.path.abspath(os.path.expanduser(req["dest"]))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    # two inventory names of one machine (prefill and decode) make the same model at once: one builds it
    lock_path = os.path.join(os.path.dirname(dest), ".%s.lock" % os.path.basename(dest))
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(lock_path, flags, 0o644)  # never through a planted link
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return make(dest, spec)
    finally:
        os.close(fd)


def make(dest, spec=SPEC):
    marker = os.path.join(dest, MARKER)
    try:
        with open(marker) as fh:
            if json.load(fh) == spec:
                return {"changed": False, "path": dest, "seconds": 0}
    except (OSError, ValueError):
        pass
    started = time.monotonic()
    tmp = os.path.join(os.path.dirname(dest), ".%s.tmp-%s" % (os.path.basename(dest), os.urandom(4).hex()))
    try:
        words = spec.get("tokenizer") == "word-level"
        tokenizer = build_word_tokenizer(tmp, spec) if words else build_tokenizer(tmp)
        build_model(tmp, tokenizer, spec)
        hostlib.atomic_write(os.path.join(tmp, MARKER), json.dumps(spec).encode("utf-8"), 0o644)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(tmp, dest)  # the directory into place (the guard counts it: test_hostlib.BY_DESIGN says why)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        error = "%s: %s" % (type(exc).__name__, exc)
        return {"ok": False, "failed": True, "msg": error, "changed": False, "path": dest, "error": error}
    return {"changed": True, "path": dest, "seconds": round(time.monotonic() - started, 2)}


ACTIONS = {"make": make_action}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
