"""Refresh (or check) the snapshot of SGLang's release metadata that tests/unit/test_releases.py reads.

    python scripts/refresh_sglang_releases.py [--check] [--cache DIR]

For every release in provision/stack/releases.py it downloads the sglang wheel (``pip download --no-deps``,
CPython 3.12 on x86-64 Linux: only the METADATA is read) and, for each transformers version the table
names, the transformers wheel (for its tokenizers range), then writes the Requires-Dist lines that matter
to tests/fixtures/sglang_releases_metadata.json. ``--check`` writes nothing and exits 1 when the registry's
metadata differs from the committed snapshot (a release re-uploaded, a table row added without a refresh).
Needs pip and a package index; CI reads the committed snapshot offline.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from provision.stack.releases import RELEASES  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "sglang_releases_metadata.json"
NAMES = ("torch", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers", "tokenizers", "xgrammar",
         "apache-tvm-ffi")  # fmt: skip
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (39, 35, 34, 31, 28, 27, 24, 17)] + ["manylinux2014_x86_64", "any"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download(spec: str, cache: Path) -> Path:
    name, version = spec.split("==")
    pattern = f"{canonical(name).replace('-', '_')}-{version}-*.whl"
    found = glob.glob(str(cache / pattern))
    if not found:
        plats = [a for p in PLATFORMS for a in ("--platform", p)]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", *plats, "-d", str(cache), spec]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=900)
        found = glob.glob(str(cache / pattern))
    if not found:
        raise SystemExit(f"pip downloaded no wheel for {spec} into {cache}")
    return Path(sorted(found)[0])


def requires(wheel: Path) -> dict[str, str]:
    """name -> specifier of the unconditional Requires-Dist lines of interest (extras dropped)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    out = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if ";" in req and "extra ==" in req.split(";", 1)[1]:
            continue
        m = re.match(r"([A-Za-z0-9_.-]+)\s*(\[[^\]]*\])?\s*(.*)", req.split(";", 1)[0])
        if m and canonical(m.group(1)) in NAMES:
            out[canonical(m.group(1))] = m.group(3).strip().strip("()")
    return out


def fetch(cache: Path) -> dict[str, dict[str, dict[str, str]]]:
    cache.mkdir(parents=True, exist_ok=True)
    sglang = {r.sglang: requires(download(f"sglang=={r.sglang}", cache)) for r in RELEASES}
    transformers = sorted({r.transformers for r in RELEASES})
    tf = {v: requires(download(f"transformers=={v}", cache)) for v in transformers}
    return {"sglang": sglang, "transformers": {v: {"tokenizers": d.get("tokenizers", "")} for v, d in tf.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the snapshot, write nothing")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/provision/sglang-metadata"))
    args = parser.parse_args()
    fresh = fetch(Path(args.cache))
    if args.check:
        old = json.loads(SNAPSHOT.read_text())
        if old != fresh:
            for kind in fresh:
                for key in sorted(set(fresh[kind]) | set(old.get(kind, {}))):
                    if fresh[kind].get(key) != old.get(kind, {}).get(key):
                        print(f"{kind} {key}: snapshot {old.get(kind, {}).get(key)} != registry {fresh[kind].get(key)}")
            return 1
        print(f"{SNAPSHOT.name} matches the registry ({len(fresh['sglang'])} releases)")
        return 0
    SNAPSHOT.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
