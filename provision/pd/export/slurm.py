"""The deployment as a Slurm job: ``pd.sbatch`` and one launcher per node (``node-K.sh``) that ``srun`` starts.

Why srun the rendered commands and not provision inside the allocation: a Slurm cluster starts, tracks and
ends a job's processes itself (``srun`` steps, cgroups, ``scancel``, the end of the time limit); provision
inside the job would need sshd and keys on the compute nodes, its own supervisor beside Slurm's, and the
venv on every node either way. So the export renders, from the same plan as ``pd up``, what ``pd up``
would run on each host, and Slurm runs it: one step per node, all at once.

Nodes: one per machine of the inventory (``ansible_host`` + ``ansible_port``: what provision would connect
to; inventory names that share it share a node, ``inventory/single-host-4p4.yml``). Node K's address is known
only in the job: ``pd.sbatch`` reads the node list (``scontrol show hostnames``), resolves each name and
exports ``PD_NODE_K``; every address of the plan (a server's ``--host``, ``SGLANG_HOST_IP``, the router's
worker URLs) is written as ``${PD_NODE_K}``. Paths under ``~`` stay under ``$HOME`` (a shared home, as Slurm
clusters have; install.yml made the venv there). ``node-K.sh`` prepares CPU mode as ``pd up`` does (the
compatibility files ship in the export directory; the tiny model is made when absent), starts its servers,
and, on the router's node, waits for every worker's ``/health`` (bounded) before it starts the router; then
waits: a process that exits ends the step, and ``--kill-on-bad-exit`` the job. ``pd.sbatch`` then runs the
end-to-end generation ``pd up`` ends with (``pd_verify.py``) on the router's node and fails the job when it
fails. Secrets are read from the environment sbatch is submitted from (Slurm passes it on), never written.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...commands import quote
from ...sglang.cpu_compat import SHIPPED, SHIPPED_DIR
from ..flags import PlanError
from ..spec import Deployment, HostPlan, Proc
from .common import Export, ExportOptions, gpus_per_pod, has_hf_token, nnodes, shipped, split_env


def node_of(d: Deployment) -> tuple[dict[str, int], list[list[str]]]:
    """host → node index, and each node's hosts (inventory order)."""
    keys: dict[str, int] = {}
    out: dict[str, int] = {}
    nodes: list[list[str]] = []
    for host in d.hosts:
        v = d.variables[host]
        if str(v.get("ansible_connection") or "ssh") == "local":
            key = "local"
        else:
            key = f"{v.get('ansible_host') or host}:{v.get('ansible_port') or 22}"
        if key not in keys:
            keys[key] = len(nodes)
            nodes.append([])
        out[host] = keys[key]
        nodes[keys[key]].append(host)
    return out, nodes


def node_var(k: int) -> str:
    return "${PD_NODE_" + str(k) + "}"


def sh_word(word: str, subst: Mapping[str, str]) -> str:
    """One word for the script: a plan value quoted; a word of ``subst`` (an address or URL of the plan, whole
    words only) → its shell expression; a leading ``~/`` left for the shell to expand."""
    if word in subst:
        return subst[word]
    if word == "~" or word.startswith("~/"):
        return '"$HOME"' + (quote(word[1:]) if word[1:] else "")
    return quote(word)


WAIT_HTTP = """wait_http() {  # URL SECONDS: until it answers 200, at most SECONDS
  python3 - "$1" "$2" <<'EOF'
import sys, time, urllib.request
url, limit = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + limit
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            if answer.status == 200:
                sys.exit(0)
    except Exception:
        pass
    if time.monotonic() > end:
        sys.exit("%s: not ready after %gs" % (url, limit))
    time.sleep(2)
EOF
}
"""


def _proc_function(d: Deployment, p: Proc, k: int, urls: Mapping[str, str], here_compat: str) -> list[str]:
    plan = d.hosts[p.host]
    subst = {**urls, p.address: f'"{node_var(k)}"'}
    env = split_env(plan)
    lines = [f"run_{_fn(p)}() {{"]
    for name, value in env.plain.items():
        if plan.device == "cpu" and name == "PYTHONPATH" and value == plan.compat_dir:
            lines.append(f"  export PYTHONPATH={here_compat}")
        else:
            lines.append(f"  export {name}={sh_word(value, subst)}")
    if env.host_ip:
        lines.append(f'  export SGLANG_HOST_IP="{node_var(k)}"')
    lines.append(f"  exec {' '.join(sh_word(w, subst) for w in p.command)} \\")
    flags = [" ".join(sh_word(w, subst) for w in line) for line in p.flags]
    lines += [f"    {f} \\" for f in flags[:-1]] + [f"    {flags[-1]}" if flags else "    "]
    lines.append("}")
    return lines


def _node_script(d: Deployment, k: int, hosts: list[str], node: dict[str, int], urls: Mapping[str, str],
                 options: ExportOptions) -> str:  # fmt: skip
    plans = [d.hosts[h] for h in hosts]
    n_nodes = max(node.values()) + 1
    lines = [
        "#!/bin/bash",
        "# shellcheck disable=SC2317  # the run_* functions and stop_all run through start and the traps",
        f"# Node {k} of the PD job {options.name}: {', '.join(hosts)} (provision pd export --to slurm;",
        "# docs/export.md). pd.sbatch starts it with srun on its node; it needs PD_NODE_0.. (the nodes' addresses).",
        "set -euo pipefail",
        *[
            f': "${{PD_NODE_{i}:?PD_NODE_{i} is not set (the address of node {i}: pd.sbatch sets it)}}"'
            for i in range(n_nodes)
        ],
        'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        "run_dir=${PD_RUN_DIR:-$here/run}",
        'mkdir -p "$run_dir"',
        f'echo "$$" > "$run_dir/node-{k}.pid"',
    ]
    secrets = sorted({name for p in plans for name in split_env(p).secret})
    if any(p.server for p in plans) and has_hf_token(d):
        lines += ['if [ -n "${PD_HF_TOKEN_FILE:-}" ]; then HF_TOKEN=$(cat "$PD_HF_TOKEN_FILE"); export HF_TOKEN; fi']
        secrets.append("HF_TOKEN")
    lines += [f': "${{{s}:?{s} is a secret: export it (or PD_HF_TOKEN_FILE) where sbatch is submitted}}"'
              for s in secrets]  # fmt: skip
    stop = max(int(p.restart.get("stop_timeout", 20)) for p in plans)
    lines += [
        "pids=()",
        "stop_all() {  # TERM every process of this node, KILL what is left after pd_stop_timeout",
        '  [ "${#pids[@]}" -gt 0 ] || return 0',
        '  kill -TERM "${pids[@]}" 2>/dev/null || true',
        f"  for _ in $(seq {stop}); do",
        '    alive=0; for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done',
        '    [ "$alive" = 1 ] || return 0; sleep 1',
        "  done",
        '  kill -KILL "${pids[@]}" 2>/dev/null || true',
        "}",
        "trap stop_all EXIT",
        "trap 'exit 143' TERM INT",
        "start() {  # NAME FUNCTION: in the background, its output to run_dir/NAME.log",
        '  "$2" >>"$run_dir/$1.log" 2>&1 &',
        '  pids+=("$!")',
        '  echo "$1: pid $! (log: $run_dir/$1.log)"',
        "}",
        WAIT_HTTP.rstrip("\n"),
    ]
    compat = '"$here"/cpu_compat'
    made: set[str] = set()
    for plan in plans:
        if plan.server and plan.device == "cpu" and plan.tiny_model and plan.model_path not in made:
            made.add(plan.model_path)
            model, python = sh_word(plan.model_path, {}), sh_word(plan.python, {})
            lines += [
                f"if [ ! -f {model}/.provision-tiny-model.json ]; then  # CPU mode: the tiny model, as pd up makes it",
                f"  {python} -c 'import json, sys; print(json.dumps({{\"dest\": sys.argv[1]}}))' {model} |",
                f'    {python} "$here/make_tiny_model.py" make  # its answer; exit 1 (the node fails) when it fails',
                "fi",
            ]
    servers = [p.server for p in plans if p.server]
    routers = [p.router for p in plans if p.router]
    for p in sorted(servers, key=lambda p: p.role != "prefill") + routers:
        lines += _proc_function(d, p, k, urls, compat)
    for p in sorted(servers, key=lambda p: p.role != "prefill"):
        lines.append(f"start {quote(p.name)} run_{_fn(p)}")
    if routers:
        lines.append("# the router starts when every worker answers /health (pd up: at most its pd_server_timeout)")
        for w in d.servers:
            timeout = int(d.hosts[w.host].server_timeout)
            lines.append(f'wait_http "http://{node_var(node[w.host])}:{w.port}/health" {timeout}')
        for p in routers:
            lines.append(f"start {quote(p.name)} run_{_fn(p)}")
    lines += [
        "# one process exits: this step ends with its status (pd.sbatch's --kill-on-bad-exit ends the job)",
        "set +e",
        "wait -n",
        "rc=$?",
        'echo "a process of node ' + str(k) + ' exited (rc=$rc): stopping the others" >&2',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def _fn(p: Proc) -> str:
    return p.name.replace("-", "_").replace(".", "_").replace("@", "_")


def _gpus_of_node(d: Deployment, hosts: list[str]) -> int:
    total = 0
    for h in hosts:
        plan: HostPlan = d.hosts[h]
        if plan.server:
            total += gpus_per_pod(plan.server, plan)
    return total


def _sbatch(d: Deployment, nodes: list[list[str]], node: dict[str, int], options: ExportOptions) -> str:
    router = d.routers[0]
    r = node[router.host]
    gpus = max(_gpus_of_node(d, hosts) for hosts in nodes)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={options.name}",
        f"#SBATCH --nodes={len(nodes)}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        f"#SBATCH --output={options.name}-%j.out",
    ]
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    lines += [
        f"# The PD deployment {options.name} as one Slurm job (provision pd export --to slurm; docs/export.md).",
        "# Submit from this directory (or set PD_EXPORT_DIR): sbatch pd.sbatch",
        *[f"#   node {k}: {', '.join(hosts)}" for k, hosts in enumerate(nodes)],
        "set -euo pipefail",
        "export_dir=${PD_EXPORT_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}",
        'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        f'if [ "${{#nodes[@]}}" -lt {len(nodes)} ]; then',
        f'  echo "this job needs {len(nodes)} nodes, it has ${{#nodes[@]}}" >&2',
        "  exit 1",
        "fi",
        "address() {  # a node name resolved to its first IPv4 address (the name when it does not resolve)",
        "  local a",
        "  a=$(getent ahostsv4 \"$1\" | awk 'NR == 1 {print $1}') || true",
        '  echo "${a:-$1}"',
        "}",
    ]
    for k in range(len(nodes)):
        lines.append(f'PD_NODE_{k}=$(address "${{nodes[{k}]}}"); export PD_NODE_{k}')
    lines += [
        "export PD_RUN_DIR=${PD_RUN_DIR:-$export_dir/run-${SLURM_JOB_ID:-0}}",
        "steps=()",
    ]
    for k in range(len(nodes)):
        lines += [
            f'srun --nodes=1 --ntasks=1 --nodelist="${{nodes[{k}]}}" --kill-on-bad-exit=1 \\',
            f'  bash "$export_dir/node-{k}.sh" &',
            'steps+=("$!")',
        ]
    lines += [
        "# the end-to-end generation pd up ends with, through the router, from the router's node",
        f'srun --overlap --nodes=1 --ntasks=1 --nodelist="${{nodes[{r}]}}" bash "$export_dir/verify.sh"',
        'echo "verified; serving until the job ends (scancel $SLURM_JOB_ID)"',
        "set +e",
        'wait -n "${steps[@]}"',
        "rc=$?",
        'echo "a node step ended (rc=$rc): the job ends" >&2',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def _verify(d: Deployment, node: dict[str, int], options: ExportOptions) -> str:
    router = d.routers[0]
    url = f"http://{node_var(node[router.host])}:{router.port}"
    workers = max(int(d.hosts[w.host].server_timeout) for w in d.servers)  # their waits for /health, at most
    return "\n".join([
        "#!/bin/bash",
        "# One real generation through the router (pd_verify.py, what pd up ends with); exit 1 when it fails.",
        "set -euo pipefail",
        'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        f'url="{url}"',
        WAIT_HTTP.rstrip("\n"),
        f'wait_http "$url/readiness" {workers + 120}  # the workers first',
        "request=$(python3 -c 'import json, sys; print(json.dumps({\"url\": sys.argv[1], \"prompt\": sys.argv[2], "
        "\"max_new_tokens\": int(sys.argv[3]), \"timeout\": float(sys.argv[4]), \"interval\": 5, \"stream\": True}))' "
        f'"$url" {quote(options.prompt)} {options.max_new_tokens} {options.verify_timeout:g})',
        '# its answer (one JSON line) is printed; its exit code is the script\'s: 0 when ok, 1 when not',
        'python3 "$here/pd_verify.py" verify <<<"$request"',
    ]) + "\n"  # fmt: skip


def slurm_export(d: Deployment, options: ExportOptions) -> Export:
    node, nodes = node_of(d)
    if not d.routers:
        raise PlanError("no host in group 'router'")
    urls = {p.url: f'"http://{node_var(node[p.host])}:{p.port}"' for p in d.servers}
    for p in d.servers:  # a multi-host server's ranks (pd_instance: one node each) dial the leader's node
        if p.instance is not None and p.dist_init_port:
            urls[f"{p.address}:{p.dist_init_port}"] = f'"{node_var(node[p.host])}:{p.dist_init_port}"'
    for p in d.servers:
        if nnodes(p) > 1 and p.instance is None:
            raise PlanError(
                f"{p.host}: --nnodes {nnodes(p)}: one inventory host is one Slurm node (use --to rbg or lws, or give "
                "each node an inventory host with pd_instance)"
            )
        if p.address.startswith("[") or ":" in p.address:
            raise PlanError(f"{p.host}: IPv6 address {p.address}: the Slurm export writes IPv4 node addresses")
    out = Export("slurm")
    out.files["pd.sbatch"] = _sbatch(d, nodes, node, options)
    for k, hosts in enumerate(nodes):
        out.files[f"node-{k}.sh"] = _node_script(d, k, hosts, node, urls, options)
    out.files["verify.sh"] = _verify(d, node, options)
    out.files.update(shipped("pd_verify.py"))
    if any(plan.device == "cpu" and plan.server for plan in d.hosts.values()):
        out.files.update(shipped("make_tiny_model.py"))
        for name in SHIPPED:
            out.files[f"cpu_compat/{name}"] = (SHIPPED_DIR / name).read_text(encoding="utf-8")
    for name in out.files:
        if name.endswith((".sh", ".sbatch")):
            out.modes[name] = 0o755
    return out
