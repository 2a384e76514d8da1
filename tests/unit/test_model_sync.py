"""The model sync's pieces without a host: the host-side ops in-process on a temp directory (plan, recv, commit,
the manifest cache, refused paths), the manifests' comparison for pd up, ``--src`` resolution (hub cache) and
the bad input ``api.model_sync`` refuses before any host is contacted (exit 5)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from provision import api
from provision.errors import InputError
from provision.model.modules import compare
from provision.model.source import SourceError, resolve, resolve_hub
from provision.remote import model_sync as ms


def manifest(files: dict[str, bytes]) -> dict[str, list[Any]]:
    return {rel: [len(data), hashlib.sha256(data).hexdigest()] for rel, data in files.items()}


def push(dest: Path, files: dict[str, bytes], want: dict[str, list[Any]], todo: dict[str, int]) -> list[str]:
    bad = []
    for rel, offset in todo.items():
        req = {"dir": str(dest), "path": rel, "offset": offset, "size": want[rel][0], "sha256": want[rel][1]}
        bad += ms.op_recv(req, files[rel][offset:])["bad"]
    return bad


FILES = {"model-1.safetensors": os.urandom(5000), "sub/tok.json": b'{"a": 1}', "config.json": b"{}"}


def test_plan_recv_commit_then_synced_and_a_partial_file_resumes(tmp_path: Path) -> None:
    dest, want = tmp_path / "models" / "m", manifest(FILES)
    plan = ms.op_plan({"dir": str(dest), "want": want, "create": True})
    assert plan["state"] == "transfer" and plan["todo"] == dict.fromkeys(want, 0) and plan["need"] == 5010
    first = "model-1.safetensors"
    ms.op_recv({"dir": str(dest), "path": first, "offset": 0, "size": 5000, "sha256": want[first][1]},
               FILES[first][:1234])  # fmt: skip
    again = ms.op_plan({"dir": str(dest), "want": want, "create": True})
    assert again["todo"][first] == 1234 and again["need"] == 5010 - 1234  # continues where it stopped
    assert push(dest, FILES, want, again["todo"]) == []
    assert not dest.exists()  # complete or not at all
    ms.op_commit({"dir": str(dest), "want": want})
    assert ms.op_manifest({"dir": str(dest)})["files"] == want
    assert ms.op_plan({"dir": str(dest), "want": want, "create": True}) == {"state": "synced"}
    cache = json.loads((tmp_path / "models" / ".m.provision-manifest.json").read_text())["files"]
    assert sorted(cache) == sorted(want)  # the next manifest reads the cache, not the files


def test_a_new_model_over_an_old_one_links_the_same_files_and_swaps_in_one_rename(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    old = manifest(FILES)
    push(dest, FILES, old, ms.op_plan({"dir": str(dest), "want": old, "create": True})["todo"])
    ms.op_commit({"dir": str(dest), "want": old})
    newer = dict(FILES, **{"model-1.safetensors": os.urandom(4000)})
    want = manifest(newer)
    plan = ms.op_plan({"dir": str(dest), "want": want, "create": True})
    assert plan["todo"] == {"model-1.safetensors": 0}  # the others are hard links of the old copy
    push(dest, newer, want, plan["todo"])
    ms.op_commit({"dir": str(dest), "want": want})
    assert ms.op_manifest({"dir": str(dest)})["files"] == want
    assert sorted(os.listdir(tmp_path)) == [".m.provision-manifest.json", "m"]  # the old copy is gone


def test_damaged_bytes_are_removed_and_reported(tmp_path: Path) -> None:
    dest, want = tmp_path / "m", manifest(FILES)
    ms.op_plan({"dir": str(dest), "want": want, "create": True})
    rel = "config.json"
    answer = ms.op_recv({"dir": str(dest), "path": rel, "offset": 0, "size": 2, "sha256": want[rel][1]}, b"{]")
    assert answer["bad"] == [rel] and not (tmp_path / ".m.provision-partial" / rel).exists()
    with pytest.raises(ms.hostlib.Failed, match="holds 0 bytes, not 1"):
        ms.op_recv({"dir": str(dest), "path": rel, "offset": 1, "size": 2, "sha256": want[rel][1]}, b"}")
    with pytest.raises(ms.hostlib.Failed, match="not complete"):
        ms.op_commit({"dir": str(dest), "want": want})


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "a/../../b", ".hidden", "a//b", "", "sub/.git/x"])
def test_request_paths_must_be_plain_relative_paths(tmp_path: Path, rel: str) -> None:
    with pytest.raises(ms.hostlib.Failed, match="bad file path"):
        ms.op_plan({"dir": str(tmp_path / "m"), "want": {rel: [1, "0" * 64]}, "create": True})


def test_writes_never_go_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "m").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ms.hostlib.Failed, match="is a symbolic link"):
        ms.op_plan({"dir": str(tmp_path / "m"), "want": manifest(FILES), "create": True})
    dest = tmp_path / "n"
    ms.op_plan({"dir": str(dest), "want": manifest(FILES), "create": True})
    (tmp_path / ".n.provision-partial" / "sub").symlink_to(tmp_path / "elsewhere")  # planted under the stage
    with pytest.raises(OSError):
        ms.op_recv({"dir": str(dest), "path": "sub/tok.json", "offset": 0, "size": 8, "sha256": "0" * 64}, b"x")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_not_enough_free_disk_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    free = ms.free_bytes(str(tmp_path))
    answer = ms.op_plan({"dir": str(tmp_path / "m"), "want": manifest(FILES), "create": True, "reserve": free})
    assert answer["state"] == "short" and answer["shortfall"] == answer["need"] == 5010 and answer["free"] == 0
    assert os.listdir(tmp_path) == []


def m(host: str, files: dict[str, list[Any]] | None = None, exists: bool = True) -> dict[str, Any]:
    files = files or {}
    return {"host": host, "path": "/m", "exists": exists, "files": files, "digest": ms.digest_of(files)}


def test_compare_names_the_hosts_and_the_first_differing_file() -> None:
    a = {"a.json": [2, "aa"], "b.safetensors": [10, "bb"], "c.safetensors": [10, "cc"]}
    b = dict(a, **{"b.safetensors": [10, "xx"], "c.safetensors": [11, "cc"]})
    same, msg = compare([m("p0", a), m("d0", a), m("d1", b), {"skipped": True}])
    assert not same and "d1 vs p0: first difference b.safetensors (sha256 bb vs xx)" in msg
    assert compare([m("p0", a), m("d0", a)]) == (True, "2 servers hold the same model (3 files, manifest "
                                                       f"{ms.digest_of(a)[:12]})")  # fmt: skip
    same, msg = compare([m("p0", a), m("d0", exists=False)])
    assert not same and "missing on d0 (/m)" in msg
    same, msg = compare([m("p0", a), m("d0", {k: v for k, v in a.items() if k != "a.json"})])
    assert "first difference a.json (only on p0)" in msg


def test_src_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve("h1:~/m", ["h1"]).host == "h1"
    assert resolve(str(tmp_path), ["h1"]).path == str(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(SourceError, match="not in the controller's Hugging Face cache"):
        resolve("org/model@v1", [])
    (tmp_path / "hub" / "models--org--model" / "refs").mkdir(parents=True)
    with pytest.raises(SourceError, match="no such revision"):
        resolve_hub("org/model", "v1")
    with pytest.raises(SourceError, match="no such directory"):
        resolve("./nope", [])
    with pytest.raises(SourceError, match="is not an inventory host"):
        resolve("h9:/m", ["h1"])


def test_bad_input_is_refused_before_any_host(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    prefill: {hosts: {p0: {ansible_host: 192.0.2.1}}}\n"
                   "    decode: {hosts: {d0: {ansible_host: 192.0.2.2, model_path: org/model}}}\n")  # fmt: skip
    with pytest.raises(InputError) as err:
        api.model_sync(str(inv), str(tmp_path))
    assert err.value.exit_code == 5
    assert "p0: model_path is not set" in err.value.msg
    assert "d0: model_path org/model is not a directory" in err.value.msg


def test_an_empty_source_fails_every_host_in_one_line(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    decode: {hosts: {d0: {ansible_connection: local, model_path: /no/m}}}\n")
    (tmp_path / "empty").mkdir()
    result = api.model_sync(str(inv), str(tmp_path / "empty"))
    assert result.exit_code == 2 and result.hosts["d0"].msg == f"the source: {tmp_path / 'empty'} holds no model files"
