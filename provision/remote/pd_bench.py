"""One load point against a serving endpoint, measured by the INSTALLED SGLang's own ``bench_serving``, run ON
the router's host (the deployment's network path; nothing is installed on the controller).

Usage: ``python3 - bench`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``):
``python`` (the interpreter that has SGLang), ``env`` (extra environment for it: the deployment's ``pd_env``),
``url`` (the router or the colocated server), ``tokenizer`` (the model's directory on this host: the dataset is
random token ids of the asked lengths made from ITS vocabulary, offline), ``input_len``, ``output_len``,
``num_prompts``, ``concurrency`` (or null), ``request_rate`` (or null: closed loop), ``warmup`` (requests before
the measured ones), ``timeout`` (s), ``seed``, ``pd`` (``--pd-separated``), ``servers`` (URLs whose
``/server_info`` is read: what each server really runs) and ``dir`` (a private scratch directory for the result
file). ``python3 - server_info`` with ``{"servers": [...], "timeout"}`` reads the servers' ``/server_info`` and
nothing else.

Runs ``PYTHON -m sglang.bench_serving --backend sglang --dataset-name random-ids --random-range-ratio 1 ...
--output-file FILE`` (HF_HUB_OFFLINE=1: no hub), reads the JSON line it appends and answers
``{"ok", "argv", "seconds", "rc", "result", "versions", "server_info", "tail", "msg"}`` (``ok`` false, and
``msg`` says why, when there is no result). ``result`` is the
tool's own document, reduced to its numbers; ``versions`` SGLang's and NIXL's as that interpreter sees them.
Stdlib only (Python 3.6+).
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import hostlib

VERSIONS = (
    "import json\n"
    "from importlib import metadata\n"
    "out = {}\n"
    "for name in ('sglang', 'nixl', 'nixl-cu12', 'nixl-cu13', 'sglang-router', 'flashinfer-python', 'torch'):\n"
    "    try:\n"
    "        out[name] = metadata.version(name)\n"
    "    except Exception:\n"
    "        pass\n"
    "print(json.dumps(out))\n"
)
KEEP_INFO = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "sampling_backend",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "cuda_graph_backend_prefill",
    "disable_radix_cache",
    "skip_server_warmup",
    "quantization",
    "dtype",
    "kv_cache_dtype",
    "device",
    "mem_fraction_static",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "tp_size",
    "dp_size",
    "enable_metrics",
    "chunked_prefill_size",
    "max_total_num_tokens",
    "max_running_requests",
    "page_size",
    "grammar_backend",
    "version",
    "model_path",
    "disable_piecewise_cuda_graph",
    "enable_piecewise_cuda_graph",
    "cuda_graph_bs",
    "enable_torch_compile",
    "mm_attention_backend",
)


def server_info(url, timeout=10):
    """The server's own /server_info (or /get_server_info), reduced to what says which paths it runs."""
    for path in ("/server_info", "/get_server_info"):
        status, doc, error = hostlib.http_json("GET", url.rstrip("/") + path, timeout=timeout)
        if status != 200 or isinstance(doc, str):
            error = error or ("HTTP %s" % status if status != 200 else "not JSON")
            continue
        if not isinstance(doc, dict):
            return {"error": "not a JSON object"}
        out = {k: doc[k] for k in KEEP_INFO if k in doc and isinstance(doc[k], (str, int, float, bool, type(None)))}
        states = doc.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            for k in ("attention_backend", "cuda_graph", "last_gen_throughput", "avg_spec_accept_length"):
                if k in states[0] and isinstance(states[0][k], (str, int, float, bool)):
                    out["state_" + k] = states[0][k]
        return out
    return {"error": error}


def finite(value):
    """JSON has no Infinity/NaN (bench_serving writes ``"request_rate": Infinity``; the controller's strict
    parser refuses it): a non-finite number becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def numbers(doc):
    return {k: finite(v) for k, v in doc.items() if isinstance(v, (int, float, str, bool, type(None)))}


def servers_info(req):
    """`pd up` / `pd status --serving-path`: each server's /server_info only."""
    return finite({"server_info": {u: server_info(u, float(req.get("timeout", 10))) for u in req["servers"]}})


def bench(req):
    python, url, tokenizer = req["python"], req["url"], req["tokenizer"]
    n, warmup = int(req["num_prompts"]), int(req.get("warmup", 1))
    timeout = float(req.get("timeout", 1800))
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    out = {"ok": False}  # type: dict
    try:
        _, found, _ = hostlib.run([python, "-c", VERSIONS], timeout=120, env=env)
        out["versions"] = json.loads(found.strip().splitlines()[-1])
    except Exception as exc:
        out["versions"] = {"error": str(exc)[:300]}
    if req.get("servers"):
        out["server_info"] = {u: server_info(u) for u in req["servers"]}
    scratch = tempfile.mkdtemp(prefix="pd-bench-", dir=req.get("dir") or None)
    result_file = os.path.join(scratch, "point.jsonl")
    argv = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
            "--dataset-name", "random-ids", "--tokenizer", tokenizer, "--model", tokenizer,
            "--random-input-len", str(int(req["input_len"])), "--random-output-len", str(int(req["output_len"])),
            "--random-range-ratio", "1", "--num-prompts", str(n), "--seed", str(int(req.get("seed", 1))),
            "--warmup-requests", str(warmup), "--disable-tqdm", "--output-file", result_file]  # fmt: skip
    if req.get("concurrency") is not None:
        argv += ["--max-concurrency", str(int(req["concurrency"]))]
    argv += ["--request-rate", "inf" if req.get("request_rate") is None else str(float(req["request_rate"]))]
    if req.get("pd"):
        argv.append("--pd-separated")
    out["argv"] = argv
    started = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              cwd=scratch)  # fmt: skip
        out["rc"] = done.returncode
        text = done.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        out["rc"] = None
        text = (exc.stdout or b"").decode("utf-8", "replace")
        out["error"] = "bench_serving did not finish within %gs" % timeout
    except OSError as exc:
        out["rc"] = None
        text = ""
        out["error"] = "could not run %s: %s" % (python, exc)
    out["seconds"] = round(time.monotonic() - started, 3)
    out["tail"] = text.splitlines()[-40:]
    try:
        with open(result_file) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        out["result"] = numbers(json.loads(lines[-1]))
    except (OSError, ValueError, IndexError):
        out.setdefault("error", "bench_serving wrote no result (exit %s)" % out["rc"])
    finally:
        try:
            os.unlink(result_file)
        except OSError:
            pass
        try:
            os.rmdir(scratch)
        except OSError:
            pass
    out["ok"] = "result" in out
    if not out["ok"] and any("ModuleNotFoundError" in line for line in out["tail"]):
        missing = [line for line in out["tail"] if "ModuleNotFoundError" in line][-1].strip()
        out["error"] = "%s: the installed SGLang's bench_serving cannot import (%s)" % (out.get("error"), missing)
    if not out["ok"]:
        out["msg"] = out.pop("error", None) or "no result"
    return finite(out)


ACTIONS = {"bench": bench, "server_info": servers_info}

if __name__ == "__main__":
    sys.exit(hostlib.serve(ACTIONS))
