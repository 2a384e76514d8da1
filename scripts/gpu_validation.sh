#!/usr/bin/env bash
# GPU validation (docs/gpu-validation.md): provision run ON a GPU machine against itself
# (ansible_connection: local), air-gapped: NIXL from a wheel directory (pip_find_links + pip_no_index).
#
#   scripts/gpu_validation.sh WHEEL_DIR OUT_DIR [INVENTORY]
#   scripts/gpu_validation.sh pd FIND_LINKS_DIR OUT_DIR [INVENTORY]   # the serving PD pair (issue 15)
#
# `pd`: facts, `provision wheelhouse` (resolved for this host from FIND_LINKS_DIR, no index), install.yml from
# the wheelhouse (twice), smoke, VRAM preflight, the Llama-3.2-1B-shaped random model, `pd up`, `pd verify`,
# a 4000-token prompt through the router (TTFT; UCX's transport from the servers' UCX_PROTO_INFO lines),
# `pd status`, one changed decode flag (only the decode restarts), `pd down`: results in OUT_DIR/summary.json.
#
# Records raw nvidia-smi outputs (parser fixtures), facts, install (twice), smoke and preflight JSON, the
# preflight with UCX_TLS lacking cuda_ipc (refused before running, then measured anyway), and a summary.
# Machines with one GPU skip the transfer preflight (a same-host pair needs two GPUs).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = pd ]; then
  shift
  exec bash scripts/gpu_validation_pd.sh "$@"
fi
wheels=$(readlink -f "$1")
out=$2
inventory=${3:-inventory/h200.yml}
mkdir -p "$out"
py=${PROVISION_PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

step() {  # step NAME ARGS...: run provision, keep its JSON and its exit code
  local name=$1
  shift
  local started=$SECONDS
  "$py" -m provision "$@" --json >"$out/$name.json" 2>"$out/$name.log"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
}

{
  echo "host: $(hostname)  date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$out/summary.txt" 2>&1

nvidia-smi >"$out/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id,compute_cap \
  --format=csv >"$out/nvidia-smi-query-gpu.csv" 2>&1
nvidia-smi topo -m >"$out/nvidia-smi-topo-m.txt" 2>&1

step facts facts -i "$inventory"
step install run playbooks/install.yml -i "$inventory" -e "pip_find_links=$wheels"
step install-rerun run playbooks/install.yml -i "$inventory" -e "pip_find_links=$wheels"
step smoke run playbooks/smoke.yml -i "$inventory"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [ "$gpus" -ge 2 ]; then
  step preflight run playbooks/preflight.yml -i "$inventory"
  step preflight-no-cuda-ipc-refused run playbooks/preflight.yml -i "$inventory" -e ucx_tls=cuda_copy,tcp
  step preflight-no-cuda-ipc-measured run playbooks/preflight.yml -i "$inventory" \
    -e ucx_tls=cuda_copy,tcp -e nixl_ucx_env_check=false -e nixl_preflight_size_mb=256 -e nixl_preflight_iters=2
fi
"$py" - "$out" <<'PY' >>"$out/summary.txt" 2>&1
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for name in ("smoke", "preflight", "preflight-no-cuda-ipc-refused", "preflight-no-cuda-ipc-measured"):
    path = out / f"{name}.json"
    if not path.exists():
        continue
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        print(f"{name}: no JSON")
        continue
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                for r in res.get("results", [res]):
                    print(f"{name}: {host}: {'FAILED' if r.get('failed') else 'ok'}: {r.get('msg')}")
PY
cat "$out/summary.txt"
