"""The SGLang release table (provision/stack/releases.py): each row against the releases' own METADATA (the
committed snapshot; scripts/refresh_sglang_releases.py --check compares it with the registry), and the
choice ``sglang_version: auto`` makes for a host's torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from provision.data import defaults
from provision.stack.releases import BY_VERSION, DEFAULT, RELEASES, TorchMismatch, choose, requirements

SNAPSHOT = json.loads((Path(__file__).parent.parent / "fixtures" / "sglang_releases_metadata.json").read_text())
COLUMNS = {
    "torch": "torch",
    "sglang-kernel": "kernel",
    "flashinfer-python": "flashinfer",
    "transformers": "transformers",
    "xgrammar": "xgrammar",
    "apache-tvm-ffi": "tvm_ffi",
}


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.sglang)
def test_row_matches_the_release_metadata(release):
    meta = SNAPSHOT["sglang"][release.sglang]
    for name, column in COLUMNS.items():
        assert getattr(release, column) in SpecifierSet(meta[name]), (release.sglang, name, meta[name])
    assert release.torch == meta["torch"].removeprefix("==")  # the torch pin is exact: what auto matches on
    tokenizers = meta.get("tokenizers") or SNAPSHOT["transformers"][release.transformers]["tokenizers"]
    assert release.tokenizers in SpecifierSet(tokenizers), (release.sglang, tokenizers)


def test_table_is_newest_first_and_covers_the_snapshot():
    key = [tuple(int(p) for p in r.sglang.split(".")) for r in RELEASES]
    assert key == sorted(key, reverse=True)
    assert set(SNAPSHOT["sglang"]) == set(BY_VERSION)
    assert defaults()["sglang_version"] == DEFAULT and DEFAULT in BY_VERSION


@pytest.mark.parametrize(
    ("torch", "want"),
    [("2.11.0+cu130", "0.5.17"), ("2.11.0", "0.5.17"), ("2.13.0+cu128", "0.5.21"), ("2.14.1", "0.5.23"),
     ("2.9.1+cu126", "0.5.10"), (None, DEFAULT)],
)  # fmt: skip
def test_auto_picks_the_newest_release_pinning_the_hosts_torch(torch, want):
    assert choose("auto", torch).version == want


def test_auto_without_a_matching_release_is_refused_unless_allowed():
    with pytest.raises(TorchMismatch, match=r"no SGLang release .* pins torch 2\.12\.0"):
        choose("auto", "2.12.0+cu130")
    assert choose("auto", "2.12.0", allow_torch_change=True).version == DEFAULT


def test_a_set_version_that_would_replace_the_hosts_torch_is_refused_in_one_line():
    with pytest.raises(TorchMismatch) as exc:
        choose("0.5.23", "2.11.0+cu130")
    line = str(exc.value)
    assert "\n" not in line
    assert "pins torch==2.14.1" in line and "2.11.0+cu130" in line and "sglang_version=auto (-> 0.5.17)" in line
    assert choose("0.5.23", "2.11.0+cu130", allow_torch_change=True).version == "0.5.23"
    assert choose("0.5.15", "2.11.0").version == "0.5.15"  # a set version that fits is kept
    assert choose("0.5.23", None).version == "0.5.23"  # no host torch: the venv gets SGLang's own


def test_requirements_carry_the_release_companions():
    reqs = requirements(choose("auto", "2.11.0"))
    assert "sglang==0.5.17" in reqs and "sglang-kernel==0.4.5" in reqs and "flashinfer-python==0.6.15.post1" in reqs
    assert "transformers==5.12.1" in reqs and "tokenizers==0.22.2" in reqs and "sglang-router==0.3.2" in reqs
    assert requirements(choose("9.9.9", None)) == ["sglang==9.9.9", "sglang-router==0.3.2"]
