"""Make the tiny random-weight Llama that CPU mode serves, ON the host, with the SGLang venv's Python.

Usage: ``VENV_PYTHON - DEST [SHAPE [SEED]]`` (transformers + tokenizers come with SGLang; no hub access is
needed). SEED (default 0) seeds the weights: another seed, the same shapes and tokenizer, other tokens out
(``pd verify --all-pairs`` tells such a server from the others).
The model (per ``/work/shared/reference/sglang-cpu-mode.md``): a ``LlamaConfig`` with hidden size 64, 2 layers,
4 heads, 4 KV heads, intermediate size 128, vocab 1024, bf16, untied embeddings, random weights (seeded, so
every host makes the same model), plus a byte-level BPE tokenizer trained in-process on a few lines of text,
saved with ``save_pretrained``. It is for testing and trying provision, not for serving.

SHAPE ``llama-3.2-1b``: the shapes of Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 KV heads, head dim
64, intermediate 8192, vocab 128256, tied embeddings, rope theta 500000): 1.24 B random bf16 parameters
(2.5 GB of safetensors), so a KV transfer carries what that model's would (32 KiB of KV per token). Its
tokenizer is a word-level one over 128256 words ``w0``, ``w1``, ... (every id the model can emit decodes to
text; a prompt of N such words is N tokens). Built on the GPU when there is one (seconds), else the CPU.

Idempotent: a marker file holding the spec is written last; when it is there and matches, nothing is done.
The model is built in a temp directory beside DEST and renamed into place, under a lock (two inventory names
of one machine make it at the same time). Prints one JSON line:
``{"changed": bool, "path": DEST, "seconds": s}``; on failure ``{"changed": false, "error": ...}``, exit 1.
"""

import fcntl
import json
import os
import shutil
import sys
import time
import uuid

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


def main(argv):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    if not (2 <= len(argv) <= 4 and (len(argv) < 3 or argv[2] in SHAPES) and (len(argv) < 4 or argv[3].isdigit())):
        usage = "usage: make_tiny_model.py DEST [%s [SEED]]" % "|".join(SHAPES)
        print(json.dumps({"changed": False, "error": usage}))
        return 2
    spec = SHAPES[argv[2] if len(argv) >= 3 else "tiny"]
    if len(argv) == 4:
        spec = dict(spec, seed=int(argv[3]))
    dest = os.path.abspath(os.path.expanduser(argv[1]))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    # two inventory names of one machine (prefill and decode) make the same model at once: one builds it
    with open(os.path.join(os.path.dirname(dest), ".%s.lock" % os.path.basename(dest)), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return make(dest, spec)


def make(dest, spec=SPEC):
    marker = os.path.join(dest, MARKER)
    try:
        with open(marker) as fh:
            if json.load(fh) == spec:
                print(json.dumps({"changed": False, "path": dest, "seconds": 0}))
                return 0
    except (OSError, ValueError):
        pass
    started = time.monotonic()
    parent = os.path.dirname(dest)
    tmp = os.path.join(parent, ".%s.tmp-%s" % (os.path.basename(dest), uuid.uuid4().hex[:8]))
    try:
        words = spec.get("tokenizer") == "word-level"
        tokenizer = build_word_tokenizer(tmp, spec) if words else build_tokenizer(tmp)
        build_model(tmp, tokenizer, spec)
        with open(os.path.join(tmp, MARKER), "w") as fh:
            json.dump(spec, fh)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps({"changed": False, "path": dest, "error": "%s: %s" % (type(exc).__name__, exc)}))
        return 1
    print(json.dumps({"changed": True, "path": dest, "seconds": round(time.monotonic() - started, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
