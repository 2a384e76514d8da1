"""Unit tests for provision.inventory: real files (tests/unit/data/inventory and tmp_path), no mocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provision.errors import EXIT_INPUT, InventoryError
from provision.inventory import Host, Inventory, expand_hosts

DATA = Path(__file__).parent / "data" / "inventory"
YAML_INV = str(DATA / "yaml" / "hosts.yml")
INI_INV = str(DATA / "ini" / "hosts.ini")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load(tmp_path: Path, name: str, text: str, extra_vars: dict[str, Any] | None = None) -> Inventory:
    return Inventory.load([str(write(tmp_path / name, text))], extra_vars)


def names(hosts: list[Host]) -> list[str]:
    return [h.name for h in hosts]


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize("source", [YAML_INV, INI_INV])
def test_sample_inventory(source: str) -> None:
    inv = Inventory.load([source])
    assert list(inv.hosts) == ["bastion", "gpu01", "gpu02", "gpu03", "rt1"]
    assert inv.sources == [source]
    gpu02 = inv.hosts["gpu02"]
    assert gpu02.groups == ["all", "decode", "gpu"]
    assert gpu02.vars["ansible_port"] == 2222
    assert gpu02.vars["ports"] == [1, 2]
    assert gpu02.vars["tp"] == 8
    assert inv.hosts["rt1"].vars["greeting"] == "hello world"
    assert inv.hosts["rt1"].vars["ansible_user"] == "admin"
    assert inv.hosts["gpu01"].vars["ansible_user"] == "ops"
    assert inv.hosts["bastion"].groups == ["all", "ungrouped"]
    assert inv.hosts["gpu03"].vars["base_gpu_id"] == 4
    assert inv.hosts["gpu01"].vars["nixl_variant"] == "cu13"
    assert inv.hosts["gpu01"].vars["ucx_tls"] == "rc"
    assert inv.hosts["gpu01"].vars["level"] == "all-gv"
    assert inv.groups["gpu"].children == ["prefill", "decode"]
    assert inv.groups["prefill"].parents == ["gpu"]
    assert inv.groups["all"].children == ["ungrouped", "gpu", "router"]


def test_yaml_and_ini_are_equivalent() -> None:
    from_yaml, from_ini = Inventory.load([YAML_INV]), Inventory.load([INI_INV])
    assert from_yaml.hosts == from_ini.hosts
    assert from_yaml.groups == from_ini.groups
    assert from_yaml.graph() == from_ini.graph()


def test_extensionless_files_are_detected(tmp_path: Path) -> None:
    yaml_inv = load(tmp_path, "a", "web:\n  hosts:\n    w1:\n")
    ini_inv = load(tmp_path, "b", "[web]\nw1\n")
    plain = load(tmp_path, "c", "w1\nw2 x=1\n")
    assert yaml_inv.groups["web"].hosts == ini_inv.groups["web"].hosts == ["w1"]
    assert list(plain.hosts) == ["w1", "w2"]
    assert plain.hosts["w2"].groups == ["all", "ungrouped"]


def test_ini_values(tmp_path: Path) -> None:
    text = (
        "h1 a=1 b=2.5 c=true d=True e='[1, 2]' f=\"x y\" g=10.0.0.1 h='\"q\"'\n"
        '[all:vars]\nn = 42\ns = hello world\nq = "quoted"\n'
    )
    hv = load(tmp_path, "hosts", text).hosts["h1"].vars
    assert hv == {
        "n": 42,
        "s": "hello world",
        "q": "quoted",
        "a": 1,
        "b": 2.5,
        "c": "true",
        "d": True,
        "e": [1, 2],
        "f": "x y",
        "g": "10.0.0.1",
        "h": "q",
    }


def test_port_suffix(tmp_path: Path) -> None:
    inv = load(tmp_path, "hosts.yml", "all:\n  hosts:\n    db1:2222:\n    db2:\n    'fe80::1':\n")
    assert inv.hosts["db1"].vars == {"ansible_port": 2222}
    assert inv.hosts["db2"].vars == {}
    assert "fe80::1" in inv.hosts
    ini = load(tmp_path, "hosts.ini", "db[1:2]:2200 ansible_port=9\nweb:22\n")
    assert ini.hosts["db2"].vars == {"ansible_port": 9}
    assert ini.hosts["web"].vars == {"ansible_port": 22}


def test_directory_source_loads_every_file(tmp_path: Path) -> None:
    write(tmp_path / "inv" / "10-hosts.ini", "[web]\nw1\n")
    write(tmp_path / "inv" / "20-more.yml", "web:\n  hosts:\n    w2:\ndb:\n  hosts:\n    d1:\n")
    write(tmp_path / "inv" / "hosts.ini~", "[broken\n")
    write(tmp_path / "inv" / "group_vars" / "web.yml", "port: 80\n")
    write(tmp_path / "inv" / "host_vars" / "d1.yml", "port: 5432\n")
    inv = Inventory.load([str(tmp_path / "inv")])
    assert list(inv.hosts) == ["w1", "w2", "d1"]
    assert inv.groups["web"].hosts == ["w1", "w2"]
    assert inv.hosts["w2"].vars == {"port": 80}
    assert inv.hosts["d1"].vars == {"port": 5432}


def test_multiple_sources_merge(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "hosts.ini", "[web]\nw1\n[web:vars]\nx=1\n")
    b = write(tmp_path / "b" / "hosts.yml", "web:\n  hosts:\n    w2:\n  vars:\n    y: 2\n")
    write(tmp_path / "b" / "group_vars" / "web.yml", "z: 3\n")
    inv = Inventory.load([str(a), str(b)])
    assert inv.group_members("web") == ["w1", "w2"]
    assert inv.hosts["w1"].vars == {"x": 1, "y": 2, "z": 3}
    assert inv.sources == [str(a), str(b)]


def test_host_list_source() -> None:
    inv = Inventory.load(["h1,h2,"])
    assert list(inv.hosts) == ["h1", "h2"]
    assert inv.group_members("ungrouped") == ["h1", "h2"]


# ---------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[8:10]", ["gpu8", "gpu9", "gpu10"]),
        ("gpu[08:10]", ["gpu08", "gpu09", "gpu10"]),
        ("node[a:c]", ["nodea", "nodeb", "nodec"]),
        ("h[1:10:3].lab", ["h1.lab", "h4.lab", "h7.lab", "h10.lab"]),
        ("r[1:2]n[a:b]", ["r1na", "r1nb", "r2na", "r2nb"]),
        ("h[:2]", ["h0", "h1", "h2"]),
        ("plain-host.example.com", ["plain-host.example.com"]),
    ],
)
def test_expand_hosts(pattern: str, expected: list[str]) -> None:
    assert expand_hosts(pattern) == expected


@pytest.mark.parametrize("bad", ["h[1]", "h[3:1]", "h[01:100]", "h[a:3]", "h[1:3:0]", "h[1:3", "h]1["])
def test_expand_hosts_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="host"):
        expand_hosts(bad)


def test_bad_range_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as err:
        load(tmp_path, "hosts.ini", "[web]\nw1\nw[5:1]\n")
    assert f"{tmp_path / 'hosts.ini'}:3: bad host range" in str(err.value)
    with pytest.raises(InventoryError, match=r"hosts\.yml:4: bad host range"):
        load(tmp_path, "hosts.yml", "all:\n  hosts:\n    ok:\n    w[x:yy]:\n")


# ---------------------------------------------------------------- groups


def test_children_and_ungrouped(tmp_path: Path) -> None:
    text = "lone\n[gpu:children]\nprefill\ndecode\n[prefill]\np1\n[decode]\nd1\n[ungrouped]\np1\n[empty]\n"
    inv = load(tmp_path, "hosts", text)
    assert inv.hosts["p1"].groups == ["all", "gpu", "prefill"]
    assert inv.groups["ungrouped"].hosts == ["lone"]
    assert inv.groups["gpu"].hosts == []
    assert inv.group_members("gpu") == ["p1", "d1"]
    assert inv.group_members("empty") == []
    assert inv.group_members("nope") == []
    assert inv.groups_map() == {
        "all": ["lone", "p1", "d1"],
        "ungrouped": ["lone"],
        "gpu": ["p1", "d1"],
        "prefill": ["p1"],
        "decode": ["d1"],
        "empty": [],
    }


def test_cycle_is_an_error(tmp_path: Path) -> None:
    text = "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n"
    with pytest.raises(InventoryError, match=r"hosts:6: group cycle: a -> b -> c -> a") as err:
        load(tmp_path, "hosts", text)
    assert err.value.exit_code == EXIT_INPUT


def test_cycle_in_yaml_and_self_cycle(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"hosts\.yml:5: group cycle: a -> b -> a"):
        load(tmp_path, "hosts.yml", "a:\n  children:\n    b:\n      children:\n        a:\n")
    with pytest.raises(InventoryError, match=r"hosts:2: group cycle: a -> a"):
        load(tmp_path, "hosts", "[a:children]\na\n")


def test_all_cannot_be_a_child(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="'all' cannot be a child"):
        load(tmp_path, "hosts", "[web:children]\nall\n")


# ---------------------------------------------------------------- variables


def test_group_vars_forms(tmp_path: Path) -> None:
    write(tmp_path / "hosts.ini", "[web]\nw1\n[db]\nd1\n[cache]\nc1\n")
    write(tmp_path / "group_vars" / "web", "form: noext\n")
    write(tmp_path / "group_vars" / "db.json", '{"form": "json"}')
    write(tmp_path / "group_vars" / "cache" / "a.yml", "form: dir-a\nonly_a: 1\n")
    write(tmp_path / "group_vars" / "cache" / "sub" / "b.yaml", "form: dir-b\n")
    write(tmp_path / "group_vars" / "cache" / "notes.txt", "not: read\n")
    write(tmp_path / "group_vars" / "unknown.yml", "form: ignored\n")
    write(tmp_path / "host_vars" / "c1" / "x.yml", "host: c1\n")
    inv = Inventory.load([str(tmp_path / "hosts.ini")])
    assert inv.hosts["w1"].vars == {"form": "noext"}
    assert inv.hosts["d1"].vars == {"form": "json"}
    assert inv.hosts["c1"].vars == {"form": "dir-b", "only_a": 1, "host": "c1"}
    assert inv.groups["cache"].vars == {"form": "dir-b", "only_a": 1}
    assert "unknown" not in inv.groups


LEVELS = [
    ("all-inv", "hosts.yml"),
    ("all-gv", "group_vars/all.yml"),
    ("gpu-inv", "hosts.yml"),
    ("gpu-gv", "group_vars/gpu.yml"),
    ("prefill-inv", "hosts.yml"),
    ("prefill-gv", "group_vars/prefill/main.yml"),
    ("host-inv", "hosts.yml"),
    ("host-hv", "host_vars/g1.yml"),
    ("extra", None),
]


def _precedence_inventory(tmp_path: Path, upto: int) -> Inventory:
    present = {label for label, _ in LEVELS[:upto]}

    def v(label: str, indent: int) -> str:
        return f"\n{' ' * indent}vars: {{level: {label}}}" if label in present else ""

    text = (
        f"all:{v('all-inv', 2)}\n  children:\n    gpu:{v('gpu-inv', 6)}\n      children:\n"
        f"        prefill:{v('prefill-inv', 10)}\n          hosts:\n            g1:"
        + (" {level: host-inv}" if "host-inv" in present else "")
        + "\n        decode:\n          hosts:\n            g1:\n"
    )
    write(tmp_path / "hosts.yml", text)
    for label, path in LEVELS[:upto]:
        if path and path != "hosts.yml":
            write(tmp_path / path, f"level: {label}\n")
    extra = {"level": "extra"} if "extra" in present else None
    return Inventory.load([str(tmp_path / "hosts.yml")], extra_vars=extra)


@pytest.mark.parametrize("upto", range(1, len(LEVELS) + 1))
def test_precedence_chain(tmp_path: Path, upto: int) -> None:
    inv = _precedence_inventory(tmp_path, upto)
    assert inv.hosts["g1"].groups == ["all", "decode", "gpu", "prefill"]
    assert inv.hosts["g1"].vars["level"] == LEVELS[upto - 1][0]


def test_siblings_by_name_and_children_over_parents(tmp_path: Path) -> None:
    text = (
        "[zeta:children]\nalpha\n[zeta]\nh1\n[alpha]\nh1\n[beta]\nh1\n"
        "[zeta:vars]\nv=zeta\n[alpha:vars]\nv=alpha\n[beta:vars]\nv=beta\nw=beta\n[zeta:vars]\nw=zeta\n"
    )
    hv = load(tmp_path, "hosts", text).hosts["h1"].vars
    assert hv == {"v": "alpha", "w": "zeta"}


def test_merge_is_shallow_and_copies(tmp_path: Path) -> None:
    text = "all:\n  vars:\n    d: {a: 1, b: 2}\n  hosts:\n    h1:\n      d: {a: 9}\n    h2:\n"
    inv = load(tmp_path, "hosts.yml", text)
    assert inv.hosts["h1"].vars["d"] == {"a": 9}
    inv.hosts["h2"].vars["d"]["a"] = 5
    assert inv.groups["all"].vars["d"] == {"a": 1, "b": 2}
    assert type(inv.hosts["h2"].vars["d"]) is dict


def test_extra_vars_win_everywhere(tmp_path: Path) -> None:
    inv = load(tmp_path, "hosts", "h1 x=1\nh2\n", extra_vars={"x": "e", "y": [1]})
    assert [h.vars for h in inv.hosts.values()] == [{"x": "e", "y": [1]}, {"x": "e", "y": [1]}]


# ---------------------------------------------------------------- validation errors


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as err:
        load(tmp_path, "hosts.yml", "all:\n  hosts:\n    h1:\n   bad: [unclosed\n")
    assert str(err.value).startswith(f"{tmp_path / 'hosts.yml'}:")
    assert err.value.file == str(tmp_path / "hosts.yml")
    assert err.value.line == 4
    assert "invalid YAML" in str(err.value)
    assert isinstance(err.value.__cause__, Exception)


def test_malformed_group_vars_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "hosts", "[web]\nw1\n")
    write(tmp_path / "group_vars" / "web.yml", "a: 1\nb: : :\n")
    with pytest.raises(InventoryError, match=r"group_vars/web\.yml:2: invalid YAML"):
        Inventory.load([str(tmp_path / "hosts")])


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("web:\n  hosts:\n    - w1\n", 2, "group 'web': 'hosts' must be a mapping, not a list"),
        ("web:\n  vars: [1]\n", 2, "group 'web': 'vars' must be a mapping, not a list"),
        ("all:\n  children:\n    web:\n      host:\n", 4, "group 'web': unknown key 'host'"),
        ("all:\n  hosts:\n    w1: 3\n", 3, "host 'w1' in group 'all': vars must be a mapping, not a int"),
        ("web: [w1]\n", 1, "group 'web' must be a mapping"),
        ("- a\n- b\n", 1, "inventory must be a mapping of groups, not a list"),
    ],
)
def test_yaml_structure_errors(tmp_path: Path, text: str, line: int, message: str) -> None:
    with pytest.raises(InventoryError) as err:
        load(tmp_path, "hosts.yaml", text)
    assert err.value.line == line
    assert message in str(err.value)
    assert str(err.value).startswith(f"{tmp_path / 'hosts.yaml'}:{line}: ")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[web]\nw1 novalue\n", 2, "expected key=value after host 'w1', got 'novalue'"),
        ("[web]\nw1 x='unclosed\n", 2, "cannot parse host line"),
        ("[web:vars]\n\nnovalue\n", 3, "expected key=value, got 'novalue'"),
        ("[web:children]\na b\n", 2, "expected one group name per line"),
        ("[web:hostvars]\n", 1, "bad section header"),
        ("[web\n", 1, "bad section header"),
    ],
)
def test_ini_errors(tmp_path: Path, text: str, line: int, message: str) -> None:
    with pytest.raises(InventoryError) as err:
        load(tmp_path, "hosts.ini", text)
    assert (err.value.file, err.value.line) == (str(tmp_path / "hosts.ini"), line)
    assert message in str(err.value)


def test_vars_file_must_be_a_mapping(tmp_path: Path) -> None:
    write(tmp_path / "hosts", "w1\n")
    write(tmp_path / "host_vars" / "w1.yml", "- 1\n")
    with pytest.raises(InventoryError, match=r"host_vars/w1\.yml:1: vars file must hold a mapping"):
        Inventory.load([str(tmp_path / "hosts")])


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="inventory source not found"):
        Inventory.load([str(tmp_path / "nope.yml")])


# ---------------------------------------------------------------- limit patterns


@pytest.fixture
def inv() -> Inventory:
    return Inventory.load([YAML_INV])


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (None, ["bastion", "gpu01", "gpu02", "gpu03", "rt1"]),
        ("all", ["bastion", "gpu01", "gpu02", "gpu03", "rt1"]),
        ("*", ["bastion", "gpu01", "gpu02", "gpu03", "rt1"]),
        ("rt1", ["rt1"]),
        ("router,gpu01", ["gpu01", "rt1"]),
        ("gpu03:bastion", ["bastion", "gpu03"]),
        ("decode", ["gpu02"]),
        ("gpu", ["gpu01", "gpu02", "gpu03"]),
        ("gpu0*", ["gpu01", "gpu02", "gpu03"]),
        ("gpu0[13]", ["gpu01", "gpu03"]),
        ("*ill", ["gpu01"]),
        ("?t1", ["rt1"]),
        ("~gpu0[12]$", ["gpu01", "gpu02"]),
        ("~(pre|de)", ["gpu01", "gpu02"]),
        ("gpu,!decode", ["gpu01", "gpu03"]),
        ("gpu:!prefill:!gpu03", ["gpu02"]),
        ("!gpu", ["bastion", "rt1"]),
        ("gpu,&prefill", ["gpu01"]),
        ("&gpu,&gpu0[23]", ["gpu02", "gpu03"]),
        ("all,&gpu,!gpu02", ["gpu01", "gpu03"]),
        ("gpu,!gpu*", []),
        ("gpu,!nothere", ["gpu01", "gpu02", "gpu03"]),
        (" rt1 , bastion ", ["bastion", "rt1"]),
    ],
)
def test_select(inv: Inventory, pattern: str | None, expected: list[str]) -> None:
    assert names(inv.select(pattern)) == expected


@pytest.mark.parametrize("pattern", ["nothere", "gpu,nothere", "gpu,&nothere", "zz*", "~zz"])
def test_select_unknown_element(inv: Inventory, pattern: str) -> None:
    element = pattern.split(",")[-1]
    with pytest.raises(InventoryError) as err:
        inv.select(pattern)
    assert str(err.value) == f"host pattern {element!r} matches no host or group in {YAML_INV}"


def test_select_bad_regex(inv: Inventory) -> None:
    with pytest.raises(InventoryError, match="bad regular expression"):
        inv.select("~gpu(")


def test_select_limit_file(inv: Inventory, tmp_path: Path) -> None:
    retry = write(tmp_path / "run.retry", "# failed hosts\ngpu03\n\nrouter\nunknown-host\n")
    assert names(inv.select(f"@{retry}")) == ["gpu03", "rt1"]
    assert names(inv.select(f"gpu,!@{retry}")) == ["gpu01", "gpu02"]
    assert names(inv.select(f"all,&@{retry}")) == ["gpu03", "rt1"]


def test_select_limit_file_errors(inv: Inventory, tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="limit file not found"):
        inv.select(f"@{tmp_path / 'missing'}")
    absent = write(tmp_path / "absent", "ghost1\nghost2\n")
    with pytest.raises(InventoryError, match="matches no host or group"):
        inv.select(f"@{absent}")


# ---------------------------------------------------------------- output


def test_to_list_json(inv: Inventory) -> None:
    out = inv.to_list_json()
    json.dumps(out)
    assert out["all"] == {
        "children": ["ungrouped", "gpu", "router"],
        "vars": {"level": "all-gv", "ansible_user": "ops", "sglang_version": "0.4"},
    }
    assert "hosts" not in out["all"]
    assert out["ungrouped"] == {"hosts": ["bastion"]}
    assert out["gpu"]["hosts"] == ["gpu01", "gpu02", "gpu03"]
    assert out["gpu"]["children"] == ["prefill", "decode"]
    assert out["gpu"]["vars"] == {"tp": 8, "nixl_variant": "cu13", "ucx_tls": "rc"}
    assert out["decode"] == {"hosts": ["gpu02"]}
    assert out["router"] == {"hosts": ["rt1"]}
    assert set(out) == {"_meta", "all", "ungrouped", "gpu", "prefill", "decode", "router"}
    assert out["_meta"]["hostvars"]["gpu02"] == inv.hosts["gpu02"].vars
    assert list(out["_meta"]["hostvars"]) == list(inv.hosts)


def test_to_list_json_drops_empty_groups(tmp_path: Path) -> None:
    out = load(tmp_path, "hosts", "[web]\nw1\n[empty]\n").to_list_json()
    assert "empty" not in out
    assert "ungrouped" not in out
    assert out["all"] == {"children": ["ungrouped", "web", "empty"]}


def test_graph(inv: Inventory) -> None:
    assert inv.graph() == (
        "@all:\n"
        "  |--@gpu:\n"
        "  |  |--@decode:\n"
        "  |  |  |--gpu02\n"
        "  |  |--@prefill:\n"
        "  |  |  |--gpu01\n"
        "  |  |--gpu01\n"
        "  |  |--gpu02\n"
        "  |  |--gpu03\n"
        "  |--@router:\n"
        "  |  |--rt1\n"
        "  |--@ungrouped:\n"
        "  |  |--bastion"
    )


# ---------------------------------------------------------------- scale and bounds


def test_100k_hosts_load_with_right_counts(tmp_path: Path) -> None:
    """Loading is linear (benchmarks/inventory_load.py times it); here: 100k hosts load, counts are right."""
    groups = ("prefill", "decode", "router", "spare")
    n = 100_000
    yaml_lines = ["all:", "  vars: {ansible_user: ops}", "  children:", "    gpu:", "      children:"]
    ini_lines = ["[all:vars]", "ansible_user=ops", "[gpu:children]", *groups]
    for k, group in enumerate(groups):
        yaml_lines += [f"        {group}:", "          hosts:"]
        yaml_lines += [f"            n{i}: {{ansible_host: 10.0.0.1}}" for i in range(k, n, len(groups))]
        ini_lines += [f"[{group}]", *(f"n{i} ansible_host=10.0.0.1" for i in range(k, n, len(groups)))]
    write(tmp_path / "y" / "group_vars" / "decode.yml", "role: decode\n")
    write(tmp_path / "i" / "group_vars" / "decode.yml", "role: decode\n")
    for path in (write(tmp_path / "y" / "hosts.yml", "\n".join(yaml_lines)),
                 write(tmp_path / "i" / "hosts.ini", "\n".join(ini_lines))):  # fmt: skip
        inv = Inventory.load([str(path)])
        assert len(inv.hosts) == n
        assert len(inv.select("decode")) == n // 4 == len(inv.groups["decode"].hosts)
        assert len(inv.group_members("gpu")) == n
        assert inv.hosts["n1"].vars["role"] == "decode" and "role" not in inv.hosts["n0"].vars
        assert inv.hosts["n99999"].groups == ["all", "gpu", "spare"]
    retry = write(tmp_path / "limit.retry", "".join(f"n{i}\n" for i in range(0, n, 2)))
    assert len(inv.select(f"@{retry}")) == n // 2  # plain names are looked up, not matched against every host
    assert len(inv.select(",".join(f"n{i}" for i in range(1, n, 2)))) == n // 2


def test_range_past_the_bound_is_refused_before_expanding(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"expands to 100000000 hosts, more than the limit of 100000 per pattern"):
        expand_hosts("node[0:99999999]")
    with pytest.raises(ValueError, match=r"expands to 1000000 hosts"):
        expand_hosts("r[0:999]n[0:999]")  # ranges multiply
    assert len(expand_hosts("node[1:100000]")) == 100_000
    with pytest.raises(InventoryError, match=r"inv\.ini:2: host pattern 'node\[0:99999999\]' expands to"):
        load(tmp_path, "inv.ini", "[gpu]\nnode[0:99999999]\n")


def test_empty_inventory_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "inv" / "group_vars").mkdir(parents=True)
    (tmp_path / "inv" / ".hidden").write_text("x\n")
    with pytest.raises(InventoryError, match=r"inv: inventory directory holds no inventory file"):
        Inventory.load([str(tmp_path / "inv")])


@pytest.mark.parametrize("port", ["abc", "0", "65536", "-1", "'{{ p }}'", "[22]", "true", "2.5"])
def test_bad_ansible_port_names_host_and_var(tmp_path: Path, port: str) -> None:
    with pytest.raises(InventoryError, match=r"^host gpu1: ansible_port .* is not a port number \(1-65535\)$"):
        load(tmp_path, "inv.yml", f"all:\n  hosts:\n    gpu1:\n      ansible_port: {port}\n")


def test_bad_ansible_port_from_extra_vars(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"ansible_port 'x' \(from -e\)"):
        load(tmp_path, "inv.ini", "gpu1\n", {"ansible_port": "x"})
    assert load(tmp_path, "inv2.ini", "gpu1 ansible_port=2222\ngpu2:22\n").hosts["gpu2"].vars["ansible_port"] == 22
