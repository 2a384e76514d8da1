#!/usr/bin/env bash
# The serving PD pair on a GPU machine through provision itself (scripts/gpu_validation.sh pd ...; issue 15).
#   scripts/gpu_validation_pd.sh FIND_LINKS_DIR OUT_DIR [INVENTORY]
set -uo pipefail
cd "$(dirname "$0")/.."
links=$(readlink -f "$1")
out=$(readlink -m "$2")
inventory=${3:-docs/gpu-validation/inventory-h200x1-pd.yml}
mkdir -p "$out"
py=${PROVISION_PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
house=$out/wheelhouse

step() {  # step NAME ARGS...: run provision, keep stdout/stderr, record exit code and seconds
  local name=$1
  shift
  local started
  started=$(date +%s.%N)
  "$py" -m provision "$@" >"$out/$name.out" 2>"$out/$name.log"
  local rc=$?
  local took
  took=$(awk "BEGIN{print $(date +%s.%N) - $started}")
  printf '%s rc=%s seconds=%.1f\n' "$name" "$rc" "$took" | tee -a "$out/steps.txt"
  return $rc
}

{
  echo "host: $(hostname)  date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  ldd --version | head -1
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

step facts facts -i "$inventory" --json
step wheelhouse wheelhouse -i "$inventory" -d "$house" --find-links "$links" --no-index
cat "$out/wheelhouse.out"
step install run install.yml -i "$inventory" -e wheelhouse="$house" --json || { tail -5 "$out/install.log"; }
step install-rerun run install.yml -i "$inventory" -e wheelhouse="$house" --json
step smoke run smoke.yml -i "$inventory" --json
step preflight run preflight.yml -i "$inventory" --json
started=$(date +%s.%N)
echo '{"dest": "/tmp/provision/llama-3.2-1b-random", "shape": "llama-3.2-1b"}' |
  /tmp/provision/venv/bin/python provision/remote/make_tiny_model.py make >"$out/model.out" 2>"$out/model.log"
rc=$?
printf 'model rc=%s seconds=%.1f\n' $rc "$(awk "BEGIN{print $(date +%s.%N) - $started}")" | tee -a "$out/steps.txt"
if [ $rc -ne 0 ]; then  # fall back to the tiny shape at the same path: the rest still runs
  tail -5 "$out/model.log"
  echo '{"dest": "/tmp/provision/llama-3.2-1b-random"}' |
    /tmp/provision/venv/bin/python provision/remote/make_tiny_model.py make >>"$out/model.out" 2>&1
fi
du -sh /tmp/provision/llama-3.2-1b-random >>"$out/model.out" 2>&1
step pd-up pd up -i "$inventory" || tail -30 "$out/pd-up.log" "$out/pd-up.out"
step pd-verify pd verify -i "$inventory" --json
prompt=$("$py" -c 'print(" ".join("w%d" % (i * 7919 % 128000) for i in range(4000)))')
step pd-verify-4k pd verify -i "$inventory" --prompt "$prompt" --max-new-tokens 32 --json
step pd-status pd status -i "$inventory" --json
step pd-up-rerun pd up -i "$inventory" --json
step pd-up-decode-flag pd up -i "$inventory" -e decode_more=--enable-metrics --json
step pd-status-after pd status -i "$inventory" --json
step pd-verify-after pd verify -i "$inventory" --json
step pd-logs pd logs -i "$inventory" -n 400
step pd-down pd down -i "$inventory" --json
step pd-status-down pd status -i "$inventory" --json
cp -r ~/.provision/pd/logs "$out/server-logs" 2>/dev/null
"$py" scripts/gpu_validation_summary.py "$out" >"$out/summary.json" 2>"$out/summary.err"
cat "$out/summary.json"
