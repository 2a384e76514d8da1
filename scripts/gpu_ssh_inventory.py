"""Write the SSH variants of the H200 bench inventory (issue 25, docs/gpu-validation/bench-h200x1.md).

``python scripts/gpu_ssh_inventory.py SRC DEST_DIR USER KEY``: from the local-connection PD inventory SRC,
``DEST_DIR/ssh-pd.yml`` (the same hosts reached over provision's SSH transport: a carried sshd on
127.0.0.1:2222), ``ssh-1p2d.yml`` (a second decode, ``h200-decode2``, on the same GPU) and
``ssh-1p2d-rolled.yml`` (the decodes' ``pd_env`` changed: what ``pd rollout`` rolls). Plain PyYAML, no
provision import: it runs before provision is on the path.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml


def main() -> None:
    src, dest, user, key = sys.argv[1:5]
    doc = yaml.safe_load(Path(src).read_text())
    gpu = doc["all"]["children"]["gpu"]
    gpu["vars"].pop("ansible_connection")
    gpu["vars"].update(
        {"ansible_host": "127.0.0.1", "ansible_port": 2222, "ansible_user": user, "ansible_ssh_private_key_file": key}
    )
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ssh-pd.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    two = copy.deepcopy(doc)
    decodes = two["all"]["children"]["gpu"]["children"]["decode"]["hosts"]
    decodes["h200-decode2"] = {"server_port": 30020, "sglang_extra_args": "{{ fast_args }} --mem-fraction-static 0.2"}
    (out / "ssh-1p2d.yml").write_text(yaml.safe_dump(two, sort_keys=False))
    rolled = copy.deepcopy(two)
    env = {**rolled["all"]["children"]["gpu"]["vars"]["pd_env"], "PROVISION_GPU_ROLLOUT_MARK": "2"}
    for host in rolled["all"]["children"]["gpu"]["children"]["decode"]["hosts"].values():
        host["pd_env"] = env
    (out / "ssh-1p2d-rolled.yml").write_text(yaml.safe_dump(rolled, sort_keys=False))


if __name__ == "__main__":
    main()
