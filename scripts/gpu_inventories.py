"""Write the multi-GPU inventories of issues 31 (2xH200) and 32 (4xH200) from the 1xH200 bench inventories.

``python scripts/gpu_inventories.py`` (re)writes ``docs/gpu-validation/inventory-h200x{2,4}-*.yml``: the same
image, bundle, model, fast-path flags and waits as ``inventory-h200x1-bench-{pd,colocated}.yml`` (the run that
served on one H200), with only the layout changed; each file says what it is in its first lines. The runbooks
(``docs/gpu-validation/runbook-h200x2.md``, ``runbook-h200x4.md``) say how each is run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent.parent / "docs" / "gpu-validation"
FAST = "{{ fast_args }}"


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((HERE / name).read_text())
    return doc


def _server(mem: float, **more: Any) -> dict[str, Any]:
    return {"sglang_extra_args": f"{FAST} --mem-fraction-static {mem}", **more}


def _layout(base: dict[str, Any], children: dict[str, Any], **group_vars: Any) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    gpu = doc["all"]["children"]["gpu"]
    gpu["vars"].update(group_vars)
    gpu["children"] = children
    return doc


def _pd(prefill: dict[str, Any], decodes: dict[str, Any]) -> dict[str, Any]:
    first = next(iter(prefill))
    return {"prefill": {"hosts": prefill}, "decode": {"hosts": decodes}, "router": {"hosts": {first: None}}}


def inventories() -> dict[str, tuple[str, dict[str, Any]]]:
    pd, colo = _load("inventory-h200x1-bench-pd.yml"), _load("inventory-h200x1-bench-colocated.yml")
    proto = {"UCX_PROTO_INFO": "y"}  # UCX logs each transfer's protocol: cuda_ipc over NVLink is confirmed there
    env = {**pd["all"]["children"]["gpu"]["vars"]["pd_env"], **proto}
    # prefill TP 2, decode TP 1 on a GQA model (Llama): SGLang regroups the KV through its staging buffer
    staged = {**env, "SGLANG_DISAGG_STAGING_BUFFER": "1"}
    return {
        "inventory-h200x2-bench-pd.yml": (
            "issue 31 run 1: prefill on GPU0, decode on GPU1 (each 0.6 of its GPU), KV over NVLink (cuda_ipc)",
            _layout(pd, _pd({"h200-prefill": _server(0.6)},
                            {"h200-decode": _server(0.6, server_port=30010, base_gpu_id=1)}),
                    pd_env=env, pd_serial_start=False),
        ),
        "inventory-h200x2-bench-colo-tp2.yml": (
            "issue 31 run 1: the colocated TP2 baseline, one plain server over GPU0 and GPU1 (0.6 of each)",
            _layout(colo, {"serve": {"hosts": {"h200-serve": _server(0.6, tp=2)}}}),
        ),
        "inventory-h200x2-instance.yml": (
            "issue 31 run 3: a TP2 prefill formed by two inventory names on GPU0 and GPU1 as two nodes (--nnodes 2, "
            "dist-init over loopback, pd_instance_one_machine), a decode sharing GPU1 through the memory split",
            _layout(pd, _pd({"h200-p0": _server(0.4, tp=2, pd_instance="prefill0", pd_instance_one_machine=True),
                             "h200-p1": _server(0.4, tp=2, pd_instance="prefill0", pd_instance_one_machine=True,
                                                base_gpu_id=1, server_port=30001)},
                            {"h200-decode": _server(0.3, server_port=30010, base_gpu_id=1)}),
                    pd_env=staged, pd_serial_start=True),
        ),
        "inventory-h200x4-tp2-pd.yml": (
            "issue 32 runs 1-2: a TP2 prefill on GPUs 0-1 and a TP2 decode on GPUs 2-3 (the seed's shape at half "
            "size), KV over NVLink between the pairs",
            _layout(pd, _pd({"h200-prefill": _server(0.6, tp=2)},
                            {"h200-decode": _server(0.6, tp=2, server_port=30010, base_gpu_id=2)}),
                    pd_env=env, pd_serial_start=False),
        ),
        "inventory-h200x4-colo-tp4.yml": (
            "issue 32 run 2: the colocated TP4 baseline on the same four GPUs",
            _layout(colo, {"serve": {"hosts": {"h200-serve": _server(0.6, tp=4)}}}),
        ),
        "inventory-h200x4-rollout.yml": (
            "issue 32 run 3: the TP2 prefill on GPUs 0-1 and two TP1 decodes on GPUs 2 and 3 (a rollout keeps one "
            "decode serving); the rollout's change is -e decode_more=... (a decode flag)",
            _layout(pd, _pd({"h200-prefill": _server(0.6, tp=2)},
                            {"h200-decode": {**_server(0.6, server_port=30010, base_gpu_id=2),
                                             "sglang_extra_args": f"{FAST} --mem-fraction-static 0.6 "
                                                                  "{{ decode_more | default('') }}"},
                             "h200-decode2": {**_server(0.6, server_port=30020, base_gpu_id=3),
                                              "sglang_extra_args": f"{FAST} --mem-fraction-static 0.6 "
                                                                   "{{ decode_more | default('') }}"}}),
                    pd_env=staged, pd_serial_start=False),
        ),
    }  # fmt: skip


def main() -> None:
    for name, (what, doc) in inventories().items():
        head = (f"# {what}.\n# Generated by scripts/gpu_inventories.py from inventory-h200x1-bench-*.yml (same image, "
                "bundle, model, fast-path flags); only the layout differs.\n")  # fmt: skip
        (HERE / name).write_text(head + yaml.safe_dump(doc, sort_keys=False, width=120))
        print(HERE / name)


if __name__ == "__main__":
    main()
