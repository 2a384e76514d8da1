"""``provision pd verify --all-pairs`` on four lab hosts in CPU mode: REAL SGLang servers, 2 prefill (lab0, lab1)
x 2 decode (lab2, lab3), the REAL router on lab0.

The tests run in order and share the deployment (four CPU servers: about 10 GB of RAM; run this file alone):
``pd up`` ends with the 4 pairs verified (its verify stage) → ``pd verify --all-pairs`` proves the 4 pairs again,
each with a TTFT and the same token ids, in parallel (the whole check takes less than its pairs one after the
other) → lab3's decode is restarted on a tiny model of another seed (same shapes and tokenizer, other
weights): ``--all-pairs`` names lab3-decode and its two pairs, exit 2, and ``pd up`` (nothing to restart)
fails at its verify stage the same way. The fixture's teardown runs ``pd down`` whatever happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import CliResult, lab_ssh_config, run_cli_in
from tests.stack_support import VENV, SglangStack, install_sglang_stack

pytestmark = pytest.mark.lab

SERVERS = {"lab0": "prefill", "lab1": "prefill", "lab2": "decode", "lab3": "decode"}
PAIRS = [f"lab{p}-prefill → lab{d}-decode" for p in (0, 1) for d in (2, 3)]
OTHER_MODEL = "~/other-seed-model"


class Deployment:
    def __init__(self, inventory: Path, workdir: Path) -> None:
        self.inventory, self.workdir = inventory, workdir

    def provision(self, *argv: str) -> CliResult:
        return run_cli_in(self.workdir, [*argv, "-i", str(self.inventory)])

    def pairs(self) -> tuple[CliResult, dict[str, Any], float]:
        started = time.monotonic()
        result = self.provision("pd", "verify", "--all-pairs", "--json")
        seconds = time.monotonic() - started
        try:
            return result, json.loads(result.out), seconds
        except ValueError:
            pytest.fail(f"pd verify --all-pairs printed no JSON (exit {result.code}): {result.out}{result.err[-3000:]}")

    def set_host_var(self, host: str, name: str, value: Any) -> None:
        inv = yaml.safe_load(self.inventory.read_text())
        inv["all"]["children"][SERVERS[host]]["hosts"][host][name] = value
        self.inventory.write_text(yaml.safe_dump(inv, sort_keys=False))


@pytest.fixture(scope="module")
def deployment(lab: Any, sglang_stack: SglangStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("pd-pairs")
    install_sglang_stack(lab, [1, 2, 3], workdir / "install")  # the other hosts' venvs, from the warm uv cache
    common = {"sglang_device": "cpu", "venv_path": VENV, "python": "/usr/bin/python3"}
    inventory = lab.write_inventory(
        workdir / "hosts.yml",
        extra_host_vars={name: common for name in SERVERS},
        groups={"prefill": ["lab0", "lab1"], "decode": ["lab2", "lab3"], "router": ["lab0"]},
    )
    deployed = Deployment(inventory, workdir)
    with lab_ssh_config(lab):
        made = deployed.provision("task", "sglang_tiny_model", "-a", f"path={OTHER_MODEL} venv={VENV} seed=1",
                                  "-l", "lab3")  # fmt: skip
        assert made.code == 0, made.out + made.err
        try:
            started = time.monotonic()
            result = deployed.provision("pd", "up")
            print(f"\npd up of 2 prefill + 2 decode + router: {time.monotonic() - started:.1f}s; its pairs (cold):")
            assert result.code == 0, result.out[-4000:] + result.err[-2000:]
            print("\n".join(line for line in (result.out + result.err).splitlines() if "→" in line or "pairs" in line))
            assert "4 of 4 prefill x decode pairs verified, the same token ids from each" in result.out + result.err
            yield deployed
        finally:
            deployed.provision("pd", "down")


def test_every_pair_is_verified_in_parallel(deployment: Deployment) -> None:
    started = time.monotonic()
    one = deployment.provision("pd", "verify", "--json")
    one_seconds = time.monotonic() - started
    assert one.code == 0, one.out + one.err
    result, doc, seconds = deployment.pairs()
    assert result.code == 0, json.dumps(doc, indent=1)
    pairs = doc["pairs"]
    print(f"\npd verify (through the router): {one_seconds:.1f}s, {json.loads(one.out)['lab0']['latency']}s on "
          f"the host; pd verify --all-pairs: {seconds:.1f}s, {doc['seconds']}s on the host ({doc['parallel']} at "
          f"once); per pair: {[(p['prefill'], p['decode'], p['ttft'], p['latency']) for p in pairs]}")  # fmt: skip
    assert doc["ok"] and doc["host"] == "lab0" and doc["parallel"] == 4
    assert [f"{p['prefill']} → {p['decode']}" for p in pairs] == PAIRS
    for p in pairs:
        assert p["state"] == "ok" and p["tokens"] >= 1 and 0 < p["ttft"] <= p["latency"], p
    ids = {tuple(p["output_ids"]) for p in pairs}
    assert len(ids) == 1 and len(next(iter(ids))) == pairs[0]["tokens"]  # greedy, the same weights: one answer
    assert doc["reference"] == pairs[0]["output_ids"] and doc["suspects"] == []
    assert doc["seconds"] < sum(p["latency"] for p in pairs)  # in parallel: not the sum of the pairs
    human = deployment.provision("pd", "verify", "--all-pairs")
    assert human.code == 0, human.out + human.err
    for name in PAIRS:
        assert any(line.startswith(name) and " ok " in line for line in human.out.splitlines()), human.out
    assert "4 of 4 prefill x decode pairs verified" in human.out


def test_a_decode_on_other_weights_is_named(deployment: Deployment) -> None:
    deployment.set_host_var("lab3", "pd_cpu_model_path", OTHER_MODEL)
    moved = deployment.provision("pd", "up", "-e", "pd_verify_all_pairs=false")  # restarts lab3's decode only
    assert moved.code == 0, moved.out[-4000:] + moved.err[-2000:]
    result, doc, _ = deployment.pairs()
    assert result.code == 2, json.dumps(doc, indent=1)
    states = {f"{p['prefill']} → {p['decode']}": p["state"] for p in doc["pairs"]}
    assert states == {PAIRS[0]: "ok", PAIRS[1]: "disagrees", PAIRS[2]: "ok", PAIRS[3]: "disagrees"}, states
    assert doc["suspects"] == ["lab3-decode"] and not doc["ok"]
    assert all(p["tokens"] >= 1 for p in doc["pairs"])  # every pair answered: other tokens, not an error
    human = deployment.provision("pd", "verify", "--all-pairs")
    assert human.code == 2
    line = "2 of 4 pairs not verified: lab0-prefill → lab3-decode disagrees; lab1-prefill → lab3-decode disagrees " \
           "(the servers in every bad pair: lab3-decode)"  # fmt: skip
    assert line in human.err, human.out + human.err
    up = deployment.provision("pd", "up")  # nothing to restart; its verify stage finds the same pairs
    assert up.code == 2, up.out[-3000:]
    assert line in up.out + up.err, up.out[-3000:] + up.err[-2000:]
