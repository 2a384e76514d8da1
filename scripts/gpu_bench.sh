#!/usr/bin/env bash
# `provision pd bench` on one H200 with SGLang's fast paths on (issue 25; docs/gpu-validation/bench-h200x1.md),
# in steps that each fit one device call (a machine stays up between calls; what runs under provision's
# supervisor keeps running):
#   scripts/gpu_bench.sh install-a CARRY_A      # chunk1 wheels -> /tmp/site, the Rust router -> /tmp/site_router
#   scripts/gpu_bench.sh install-b CARRY_B OUT  # chunk2 + provision's own deps (/tmp/prov), the random model
#   scripts/gpu_bench.sh pd-up OUT              # pd up (PD pair on GPU0), its timings and serving path
#   scripts/gpu_bench.sh pd-bench OUT           # status --metrics, pd bench sweep, metrics after, targets, down
#   scripts/gpu_bench.sh colo-up OUT            # the colocated baseline: pd up
#   scripts/gpu_bench.sh colo-bench OUT         # pd bench --compare the PD run, down
#   scripts/gpu_bench.sh install-c CARRY_C      # matplotlib's wheels, where the image has none
#   scripts/gpu_bench.sh pd-bench OUT keep      # the PD sweep, the servers left up (for the SSH steps)
#   scripts/gpu_bench.sh ssh-setup CARRY OUT    # a carried Debian sshd on 127.0.0.1:2222 (dpkg -x), SSH inventories
#   scripts/gpu_bench.sh ssh-grow OUT           # over SSH: pd up (converged), status, verify; a second decode
#   scripts/gpu_bench.sh ssh-rollout OUT        # over SSH: pd rollout of the decodes under a client's load, down
#   scripts/gpu_bench.sh kill-decode OUT        # kill -9 the decode(s) (KILL: NAME[,NAME]) under a client's load; back by themselves; all pairs
#   scripts/gpu_bench.sh pd-sat OUT NAME        # pd bench at saturating concurrency (64, 256, 512; 1024 prompts)
# PD_INV / COLO_INV pick other inventories (the multi-GPU runbooks: docs/gpu-validation/runbook-h200x{2,4}.md);
# PD_EXTRA adds arguments to `pd up` (-e pd_transfer_timeout=30); KILL names the process kill-decode kills and
# KILL_LABEL its result files (docs/gpu-validation/serial-start-h100x1.md); GPU_LOAD_THREADS/GPU_LOAD_TIMEOUT
# set the client's threads and request timeout (scripts/gpu_rollout_load.py).
set -uo pipefail
cd "$(dirname "$0")/.."
step=$1
shift
PY=/opt/torch/.venv/bin/python3
export PYTHONPATH=$PWD:/tmp/prov PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
PD=${PD_INV:-docs/gpu-validation/inventory-h200x1-bench-pd.yml}
COLO=${COLO_INV:-docs/gpu-validation/inventory-h200x1-bench-colocated.yml}
SWEEP=(--input-len 512 --output-len 128 --num-prompts 64 --concurrency 1,8,32 --warmup 2)

timed() {  # timed NAME OUT CMD...: run, keep stdout/stderr, record exit code and seconds
  local name=$1 out=$2
  shift 2
  local started
  started=$(date +%s.%N)
  "$@" >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  printf '%s rc=%s seconds=%.1f\n' "$name" "$rc" "$(awk "BEGIN{print $(date +%s.%N) - $started}")" | tee -a "$out/steps.txt"
  return $rc
}
prov() { "$PY" -m provision "$@"; }
graphs() {  # the CUDA graph capture lines of each server's log (begin/end, seconds, memory)
  grep -h -E "Capture .*(begin|end)|Load weight end|KV Cache is allocated|NIXL KVManager|fired up|start gate|flashinfer.*(JIT|jit|compil)" \
    /tmp/provision/pd/logs/*.log 2>/dev/null | cut -c1-400
}

case $step in
  install-a)
    carry=$1
    mkdir -p /tmp/site /tmp/site_router
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$carry"/*.whl || exit 1
    "$PY" -c "import tarfile; tarfile.open('$carry/router.tar.xz').extractall('/tmp/site_router')" || exit 1
    du -sh /tmp/site /tmp/site_router; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    ;;
  install-b)
    carry=$1 out=$2
    mkdir -p "$out" /tmp/prov
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$carry"/*.whl || exit 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/prov "$carry"/prov/*.whl || exit 1
    {
      echo "host: $(hostname)  date: $(date -u +%FT%TZ)"
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
      "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
      PYTHONPATH=/tmp/site "$PY" -c 'import sglang, flashinfer; print("sglang", sglang.__version__, "flashinfer", flashinfer.__version__)'
    } >"$out/env.txt" 2>&1
    cat "$out/env.txt"
    # bench_serving imports `datasets` (HF) at module level, for datasets random-ids never loads
    mkdir -p /tmp/stubs/datasets
    echo 'def load_dataset(*a, **k): raise ImportError("datasets is not installed (offline bundle)")' \
      >/tmp/stubs/datasets/__init__.py
    printf '#!/bin/sh\nPYTHONPATH=/tmp/stubs${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$PY" >/tmp/stubs/python
    chmod +x /tmp/stubs/python
    echo '{"dest": "/tmp/provision/llama-3.2-1b-random", "shape": "llama-3.2-1b"}' >/tmp/provision-model-request.json
    timed model "$out" env PYTHONPATH=/tmp/site "$PY" provision/remote/make_tiny_model.py make </tmp/provision-model-request.json
    ;;
  install-c)  # the report's plotting stack (matplotlib and what it needs), where the image lacks it
    carry=$1
    "$PY" -c "import matplotlib, cryptography" 2>/dev/null && exit 0
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/prov "$carry"/prov/*.whl || exit 1
    ;;
  pd-up | colo-up)
    out=$1 inv=$PD name=pd
    [ "$step" = colo-up ] && inv=$COLO name=${COLO_NAME:-colo}
    mkdir -p "$out"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >"$out/$name-gpu-before.txt"
    # shellcheck disable=SC2086 # PD_EXTRA: words
    timed "$name-up" "$out" prov pd up -i "$inv" ${PD_EXTRA:-}
    tail -25 "$out/$name-up.out" "$out/$name-up.err"
    timed "$name-status" "$out" prov pd status -i "$inv"
    cat "$out/$name-status.out"
    timed "$name-verify" "$out" prov pd verify -i "$inv" --json
    graphs >"$out/$name-graphs.txt"; cat "$out/$name-graphs.txt" | tail -30
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >"$out/$name-gpu-after.txt"
    ;;
  pd-bench | colo-bench)
    out=$1 inv=$PD name=pd compare=() keep=${2:-}
    if [ "$step" = colo-bench ]; then  # COLO_NAME: the run's name (colo); COMPARE: the bench.json files beside it
      inv=$COLO name=${COLO_NAME:-colo}
      for c in ${COMPARE:-$out/pd/bench.json}; do compare+=(--compare "$c"); done
    fi
    timed "$name-metrics-before" "$out" prov pd status -i "$inv" --metrics
    timed "$name-bench" "$out" prov pd bench -i "$inv" "${SWEEP[@]}" -o "$out/$name" --label "$name-h200" \
      --slo ttft_p99=2s,itl_p99=50ms,failures=0 "${compare[@]}"
    cat "$out/$name-bench.out"; tail -20 "$out/$name-bench.err"
    timed "$name-metrics-after" "$out" prov pd status -i "$inv" --metrics
    cat "$out/$name-metrics-after.out"
    timed "$name-targets" "$out" prov pd targets -i "$inv"
    cp /tmp/provision/pd/logs/*.log "$out/" 2>/dev/null
    for f in "$out"/*.log; do tail -c 200000 "$f" >"$f.tail" && mv "$f.tail" "$f"; done
    [ "$keep" = keep ] && exit 0
    timed "$name-down" "$out" prov pd down -i "$inv"
    timed "$name-status-down" "$out" prov pd status -i "$inv"
    ;;
  kill-decode)
    out=$1 name=${KILL_LABEL:-kill-decode}
    timed "$name" "$out" "$PY" scripts/gpu_rollout_load.py "$out/$name-load.json" \
      "$PY" scripts/gpu_kill_wait.py "$PD" "${KILL:-h200-decode-decode}" "$out/$name.json"
    cat "$out/$name.json" "$out/$name-load.json"
    timed "$name-verify" "$out" prov pd verify -i "$PD" --all-pairs
    cat "$out/$name-verify.out"
    timed "$name-status" "$out" prov pd status -i "$PD"
    cat "$out/$name-status.out"
    ;;
  pd-sat)
    out=$1 name=$2
    timed "$name" "$out" prov pd bench -i "$PD" --input-len 512 --output-len 128 --num-prompts 1024 \
      --concurrency 64,256,512 --warmup 2 -o "$out/$name" --label "$name" --slo failures=0
    cat "$out/$name.out"; tail -20 "$out/$name.err"
    ;;
  ssh-setup)
    carry=$1 out=$2 S=/tmp/sshd
    mkdir -p "$out" "$S/root" && chmod 700 "$S"
    for d in "$carry"/debs/*.deb; do dpkg -x "$d" "$S/root" || exit 1; done
    LIBS=$S/root/lib/x86_64-linux-gnu:$S/root/usr/lib/x86_64-linux-gnu
    { id; grep PRETTY /etc/os-release; LD_LIBRARY_PATH=$LIBS ldd "$S/root/usr/sbin/sshd" | grep -E "not found|wrap|nsl|tirpc"; } | tee "$out/ssh-env.txt"
    me=$(id -un)
    PATH=$PATH:$S/root/usr/bin
    if [ "$(id -u)" = 0 ]; then
      id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd
      mkdir -p /run/sshd && chmod 755 /run/sshd
    fi
    [ -f "$S/host" ] || ssh-keygen -q -t ed25519 -N '' -f "$S/host"
    [ -f "$S/client" ] || ssh-keygen -q -t ed25519 -N '' -f "$S/client"
    cp "$S/client.pub" "$S/authorized_keys"
    printf '%s\n' "ListenAddress 127.0.0.1:2222" "HostKey $S/host" "PidFile $S/sshd.pid" \
      "AuthorizedKeysFile $S/authorized_keys" "StrictModes no" "AllowUsers $me" "PubkeyAuthentication yes" \
      "PasswordAuthentication no" "KbdInteractiveAuthentication no" "UsePAM no" "PermitRootLogin prohibit-password" \
      "MaxSessions 64" "LogLevel VERBOSE" "Subsystem sftp internal-sftp" >"$S/sshd_config"
    LD_LIBRARY_PATH=$LIBS "$S/root/usr/sbin/sshd" -t -f "$S/sshd_config" || exit 1
    LD_LIBRARY_PATH=$LIBS "$S/root/usr/sbin/sshd" -f "$S/sshd_config" -E "$S/sshd.log" || exit 1
    sleep 1
    echo "[127.0.0.1]:2222 $(cut -d' ' -f1-2 "$S/host.pub")" >"$S/known_hosts"
    printf '%s\n' "Host *" "  UserKnownHostsFile $S/known_hosts" "  IdentityFile $S/client" "  IdentitiesOnly yes" \
      "  StrictHostKeyChecking yes" >"$S/ssh_config"
    ssh -F "$S/ssh_config" -p 2222 "$me@127.0.0.1" 'echo ssh ok: $(id -un)@$(hostname)' | tee -a "$out/ssh-env.txt"
    "$PY" scripts/gpu_ssh_inventory.py "$PD" /tmp/inv "$me" "$S/client" || exit 1
    export PROVISION_SSH_CONFIG=$S/ssh_config
    timed ssh-facts "$out" prov facts -i /tmp/inv/ssh-pd.yml --json
    head -c 1500 "$out/ssh-facts.out"; tail -5 "$out/ssh-facts.err"
    ;;
  ssh-grow | ssh-rollout)
    out=$1
    export PROVISION_SSH_CONFIG=/tmp/sshd/ssh_config
    if [ "$step" = ssh-grow ]; then
      timed ssh-pd-up "$out" prov pd up -i /tmp/inv/ssh-pd.yml
      tail -8 "$out/ssh-pd-up.out"
      timed ssh-pd-status "$out" prov pd status -i /tmp/inv/ssh-pd.yml
      timed ssh-pd-verify "$out" prov pd verify -i /tmp/inv/ssh-pd.yml --json
      timed ssh-1p2d-up "$out" prov pd up -i /tmp/inv/ssh-1p2d.yml
      tail -12 "$out/ssh-1p2d-up.out"; tail -5 "$out/ssh-1p2d-up.err"
      timed ssh-1p2d-verify "$out" prov pd verify -i /tmp/inv/ssh-1p2d.yml --all-pairs
      cat "$out/ssh-1p2d-verify.out"
      graphs >"$out/ssh-1p2d-graphs.txt"
      exit 0
    fi
    timed ssh-rollout "$out" "$PY" scripts/gpu_rollout_load.py "$out/ssh-rollout.json" \
      "$PY" -m provision pd rollout -i /tmp/inv/ssh-1p2d-rolled.yml --batch 1 --json
    tail -30 "$out/ssh-rollout.out"; tail -5 "$out/ssh-rollout.err"
    graphs >"$out/ssh-rollout-graphs.txt"
    timed ssh-rolled-status "$out" prov pd status -i /tmp/inv/ssh-1p2d-rolled.yml
    cat "$out/ssh-rolled-status.out"
    timed ssh-rolled-up "$out" prov pd up -i /tmp/inv/ssh-1p2d-rolled.yml
    tail -4 "$out/ssh-rolled-up.out"
    cp /tmp/provision/pd/logs/*.log "$out/" 2>/dev/null
    for f in "$out"/*.log; do tail -c 200000 "$f" >"$f.tail" && mv "$f.tail" "$f"; done
    timed ssh-down "$out" prov pd down -i /tmp/inv/ssh-1p2d-rolled.yml
    cp /tmp/sshd/sshd.log "$out/" 2>/dev/null
    ;;
esac
