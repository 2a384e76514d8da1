"""The controller-side lookup plugins that read files, run commands or read variables (env, file, unvault, pipe,
lines, template, first_found, fileglob, vars, ini, csvfile, inventory_hostnames, varnames, password) and
:class:`LookupEnv`, what each gets; registered in :data:`provision.templating.lookups.PLUGINS`.
"""

from __future__ import annotations

import configparser
import csv
import fnmatch
import glob
import os
import random
import re
import shlex
import string
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TemplateError
from ..localfiles import replace_file


@dataclass
class LookupEnv:
    """What a lookup may use: the variables of the task, where its files are, how to render a template file."""

    variables: Mapping[str, Any]
    search_dirs: list[str]  # role dir first (when the task is a role's), then the playbook's dir
    render_file: Callable[[str, Mapping[str, Any], dict[str, Any], dict[str, Any]], str]
    loop_module: str | None = None  # the task's module when the lookup runs as its with_<lookup> loop


def _find(env: LookupEnv, subdir: str | None, name: str) -> str | None:
    if os.path.isabs(name):
        return name if os.path.exists(name) else None
    for base in env.search_dirs:
        for candidate in ([os.path.join(base, subdir, name)] if subdir else []) + [os.path.join(base, name)]:
            if os.path.exists(candidate):
                return candidate
    return None


def _strings(name: str, terms: list[Any]) -> list[str]:
    for term in terms:
        if not isinstance(term, str):
            raise TemplateError(f"lookup {name!r}: expects strings, got {type(term).__name__} {term!r}")
    return terms


def _env(terms: list[Any], env: LookupEnv, default: Any = "", **_: Any) -> list[Any]:
    return [os.environ.get(t, default) for t in _strings("env", terms)]


def _file(terms: list[Any], env: LookupEnv, lstrip: bool = False, rstrip: bool = True, **_: Any) -> list[str]:
    out = []
    for term in _strings("file", terms):
        path = _find(env, "files", term)
        if path is None or not os.path.isfile(path):
            raise TemplateError(f"lookup 'file': could not find or access {term!r} (searched {_where(env, 'files')})")
        text = _vault_open(path).decode("utf-8", errors="surrogateescape")  # a vaulted file is decrypted, as Ansible's
        text = text.lstrip() if lstrip else text
        out.append(text.rstrip() if rstrip else text)
    return out


def _vault_open(path: str) -> bytes:
    """A controller file's bytes, decrypted when vaulted (a VaultError is the lookup's TemplateError)."""
    from .. import vault

    try:
        return vault.reveal(Path(path).read_bytes(), path)
    except vault.VaultError as exc:
        raise TemplateError(str(exc)) from None


def _unvault(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    """``unvault``: a vaulted (or plain) file's text, decrypted on the controller, as is (Ansible's)."""
    out = []
    for term in _strings("unvault", terms):
        path = _find(env, "files", term)
        if path is None or not os.path.isfile(path):
            raise TemplateError(
                f"lookup 'unvault': unable to find file matching {term!r} (searched {_where(env, 'files')})"
            )
        out.append(_vault_open(path).decode("utf-8", errors="surrogateescape"))
    return out


def _where(env: LookupEnv, subdir: str) -> str:
    return ", ".join(f"{d}/{subdir}, {d}" for d in env.search_dirs) or "nowhere"


def _run(name: str, command: str, env: LookupEnv) -> str:
    cwd = env.search_dirs[-1] if env.search_dirs else None
    proc = subprocess.run(["/bin/sh", "-c", command], cwd=cwd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise TemplateError(f"lookup {name!r}: the command {command!r} failed (rc={proc.returncode})")
    return proc.stdout


def _pipe(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    return [_run("pipe", t, env).rstrip() for t in _strings("pipe", terms)]


def _lines(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    return [line for t in _strings("lines", terms) for line in _run("lines", t, env).splitlines()]


# the template lookup's environment options, as ansible-core 2.19's lookup takes them
TEMPLATE_OPTIONS = ("variable_start_string", "variable_end_string", "comment_start_string", "comment_end_string",
                    "trim_blocks")  # fmt: skip


def _template(terms: list[Any], env: LookupEnv, template_vars: Mapping[str, Any] | None = None,
              **kw: Any) -> list[str]:  # fmt: skip
    options = {name: kw[name] for name in TEMPLATE_OPTIONS if kw.get(name) is not None}
    if "trim_blocks" in options:
        options["trim_blocks"] = bool(options["trim_blocks"])
    out = []
    for term in _strings("template", terms):
        path = _find(env, "templates", term)
        if path is None or not os.path.isfile(path):
            raise TemplateError(f"lookup 'template': could not find {term!r} (searched {_where(env, 'templates')})")
        source = _vault_open(path).decode("utf-8")
        found = os.path.abspath(path)  # its includes are found beside it too; template_vars win, as in ansible-core
        extra = {"template_path": found, "template_fullpath": found, **dict(template_vars or {})}
        out.append(env.render_file(source, env.variables, extra, options))
    return out


def _first_found(terms: list[Any], env: LookupEnv, files: Any = None, paths: Any = None, skip: bool = False,
                 **_: Any) -> list[str]:  # fmt: skip
    """The first file that exists among the terms (names, or mappings of ``files``/``paths``/``skip``)."""
    candidates: list[str] = []
    skip_all = bool(skip)

    def split(value: Any, separators: str = ",;") -> list[str]:
        items = value if isinstance(value, list) else [value]
        return [part for item in items for part in re.split(f"[{separators}]", str(item)) if part]

    def add(names: Any, dirs: Any) -> None:
        for name in split(names):
            if dirs:
                candidates.extend(os.path.join(d, name) for d in split(dirs, ",:;"))
            else:
                candidates.append(name)

    if files is not None:
        add(files, paths)
    for term in terms:
        if isinstance(term, Mapping):
            skip_all = skip_all or bool(term.get("skip", False))
            add(term.get("files", []), term.get("paths"))
        elif isinstance(term, list):
            for t in term:
                add(t, paths)
        else:
            add(term, paths)
    # as lookup(): beside the playbook (or role) only; as with_first_found: in the subdir the task's module
    # reads from (templates/ for template, vars/ for include_vars, files/ otherwise), as Ansible looks
    subdir = None
    if env.loop_module is not None:
        module = env.loop_module
        subdir = "templates" if "template" in module else "vars" if "var" in module else "files"
    for candidate in candidates:
        path = _find(env, subdir, candidate)
        if path is not None:
            return [os.path.abspath(path)]
    if skip_all:
        return []
    raise TemplateError("lookup 'first_found': no file was found among " + ", ".join(map(repr, candidates)))


def _fileglob(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    out: list[str] = []
    for term in _strings("fileglob", terms):
        if os.path.isabs(term):
            out += [p for p in glob.glob(term) if os.path.isfile(p)]
            continue
        dirname, pattern = os.path.split(term)
        for base in env.search_dirs:
            for where in (os.path.join(base, "files", dirname), os.path.join(base, dirname)):
                found = [p for p in glob.glob(os.path.join(where, pattern)) if os.path.isfile(p)]  # the dir's order
                if found:
                    return out + found
    return out


def _vars(terms: list[Any], env: LookupEnv, default: Any = None, **kw: Any) -> list[Any]:
    out = []
    for term in _strings("vars", terms):
        if term in env.variables:
            out.append(env.variables[term])
        elif "default" in kw or default is not None:
            out.append(default)
        else:
            raise TemplateError(f"lookup 'vars': no variable named {term!r}")
    return out


_INI_DEFAULTS = {
    "section": "global", "file": "ansible.ini", "re": False, "default": "", "type": "ini", "encoding": "utf-8",
    "case_sensitive": False, "allow_no_value": False, "interpolation": True,
}  # fmt: skip


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _ini(terms: list[Any], env: LookupEnv, **kw: Any) -> list[Any]:
    """``ini``: the value of a key in a section of an INI (or java ``type=properties``) file of the controller;
    options as keywords or inline (``'user section=db file=app.ini'``); ``re=true``: the values of every key
    matching the regex."""
    out: list[Any] = []
    for term in _strings("ini", terms):
        opts = {**_INI_DEFAULTS, **kw}
        key = term
        if "=" in term or " " in term.strip():
            key, current = "", "key"
            for word in term.split():
                name = next((k for k in _INI_DEFAULTS if word.startswith(f"{k}=")), None)
                if name is not None:
                    current, opts[name] = name, word.split("=", 1)[1]
                elif "=" in word:
                    raise TemplateError(f"lookup 'ini': {word.split('=', 1)[0]!r} is not a valid option")
                elif current == "key" and not key:
                    key = word
                elif current == "key":
                    key += " " + word
                else:
                    opts[current] = f"{opts[current]} {word}"
            if not key:
                raise TemplateError(f"lookup 'ini': no key to look up in {term!r}")
        path = _find(env, "files", str(opts["file"]))
        if path is None or not os.path.isfile(path):
            raise TemplateError(f"lookup 'ini': could not find {opts['file']!r} (searched {_where(env, 'files')})")
        text = Path(path).read_text(encoding=str(opts["encoding"]))
        section = str(opts["section"])
        if opts["type"] == "properties":
            section, text = "java_properties", "[java_properties]\n" + text
        parser = configparser.ConfigParser(
            allow_no_value=_flag(opts["allow_no_value"]),
            interpolation=configparser.BasicInterpolation() if _flag(opts["interpolation"]) else None,
        )
        if _flag(opts["case_sensitive"]):
            parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read_string(text, source=path)
            if not parser.has_section(section):
                raise TemplateError(f"lookup 'ini': no section {section!r} in {opts['file']!r}")
            if _flag(opts["re"]):
                out += [v for k, v in parser.items(section) if re.match(key, k)]
            elif parser.has_option(section, key):
                out.append(parser.get(section, key))
            else:
                out.append(opts["default"])
        except configparser.Error as exc:
            raise TemplateError(f"lookup 'ini': {opts['file']}: {str(exc).splitlines()[0]}") from None
    return out


_CSV_DEFAULTS = {"col": 1, "keycol": 0, "default": None, "delimiter": "TAB", "file": "ansible.csv", "encoding": "utf-8"}


def _csvfile(terms: list[Any], env: LookupEnv, **kw: Any) -> list[Any]:
    """``csvfile``: column ``col`` of the first row whose column ``keycol`` is the key, in a TAB-separated file
    (``delimiter=,`` for CSV); options as keywords or inline (``'alice file=people.csv delimiter=,'``)."""
    out: list[Any] = []
    for term in _strings("csvfile", terms):
        opts = {**_CSV_DEFAULTS, **kw}
        words = []
        for word in shlex.split(term):
            name, sep, value = word.partition("=")
            if sep and name in _CSV_DEFAULTS:
                opts[name] = value
            elif sep:
                raise TemplateError(f"lookup 'csvfile': {name!r} is not a valid option")
            else:
                words.append(word)
        if not words:
            raise TemplateError(f"lookup 'csvfile': no search key in {term!r}")
        key = " ".join(words)
        delimiter = "\t" if opts["delimiter"] in ("TAB", "\\t") else str(opts["delimiter"])
        path = _find(env, "files", str(opts["file"]))
        if path is None or not os.path.isfile(path):
            raise TemplateError(f"lookup 'csvfile': could not find {opts['file']!r} (searched {_where(env, 'files')})")
        try:
            col, keycol = int(opts["col"]), int(opts["keycol"])
            with open(path, encoding=str(opts["encoding"]), newline="") as fh:
                value = next((row[col] for row in csv.reader(fh, delimiter=delimiter) if row and row[keycol] == key),
                             opts["default"])  # fmt: skip
        except (ValueError, IndexError, csv.Error) as exc:
            raise TemplateError(f"lookup 'csvfile': {opts['file']}: {exc}") from None
        if value is not None:
            out.append(value)
    return out


def _inventory_hostnames(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    """``inventory_hostnames``: the inventory's hosts a pattern names, in inventory order, from the ``groups``
    magic variable: groups or hosts (``*`` wildcards), joined by ``:`` or ``,``, ``&`` intersects, ``!``
    excludes."""
    groups = env.variables.get("groups")
    if not isinstance(groups, Mapping):
        raise TemplateError("lookup 'inventory_hostnames': the 'groups' magic variable is not available here")
    everyone = list(groups.get("all", []))
    selected: list[str] = []
    for term in _strings("inventory_hostnames", terms):
        for part in [p.strip() for p in re.split(r"[:,]", term) if p.strip()]:
            kind, name = (part[0], part[1:]) if part[0] in "&!" else ("", part)
            if name in groups:
                hosts = list(groups[name])
            else:
                matched = [g for g in groups if fnmatch.fnmatchcase(g, name)] if any(c in name for c in "*?[") else []
                hosts = [h for g in matched for h in groups[g]] + [h for h in everyone if fnmatch.fnmatchcase(h, name)]
            if kind == "&":
                selected = [h for h in selected if h in hosts]
            elif kind == "!":
                selected = [h for h in selected if h not in hosts]
            else:
                selected += [h for h in hosts if h not in selected]
    return [h for h in everyone if h in selected]


def _varnames(terms: list[Any], env: LookupEnv, **_: Any) -> list[str]:
    out: list[str] = []
    for term in _strings("varnames", terms):
        try:
            pattern = re.compile(term)
        except re.error as exc:
            raise TemplateError(f"lookup 'varnames': bad regex {term!r}: {exc}") from None
        out += [name for name in env.variables if isinstance(name, str) and pattern.search(name)]
    return out


_PASSWORD_PARAMS = {"length", "chars", "seed"}
_PASSWORD_REFUSED = {"encrypt", "ident"}
_password_lock = threading.Lock()  # one password file is read-or-created by one host at a time: all agree


def _password_chars(spec: Any) -> str:
    """Ansible's ``chars``: names of :mod:`string` sets (``ascii_letters``, ``digits``, ...) or literal text,
    comma separated (``,,`` is a comma); quotes are never used."""
    if isinstance(spec, str):
        parts = ([","] if ",," in spec else []) + [c for c in spec.replace(",,", ",").split(",") if c]
    else:
        parts = [str(c) for c in spec]
    text = "".join(str(getattr(string, part, part)) for part in parts)
    return text.replace('"', "").replace("'", "")


def _password(terms: list[Any], env: LookupEnv, **kw: Any) -> list[str]:
    """``password``: a random password, kept in a controller file (``PATH``, relative to the playbook's dir,
    written 0600 in a 0700 dir) so later runs get the same one; ``/dev/null`` keeps nothing. Options
    ``length`` (20), ``chars`` (ascii_letters,digits,.,:-_), ``seed`` (repeatable). ``encrypt`` is refused:
    hash the result with ``password_hash`` instead."""
    out = []
    for term in _strings("password", terms):
        path_text, _, rest = term.strip().partition(" ")
        params: dict[str, Any] = {"length": 20, "chars": ["ascii_letters", "digits", ".,:-_"], "seed": None, **kw}
        for word in shlex.split(rest):
            key, sep, value = word.partition("=")
            if not sep:
                raise TemplateError(f"lookup 'password': unrecognized value {word!r} after the path in {term!r}")
            params[key] = value
        refused = sorted(set(params) & _PASSWORD_REFUSED)
        if refused:
            raise TemplateError(f"lookup 'password': {refused[0]}= is not supported (hash with password_hash)")
        unknown = sorted(set(params) - _PASSWORD_PARAMS)
        if unknown:
            raise TemplateError(f"lookup 'password': unrecognized parameter {unknown[0]!r}")
        try:
            length = int(params["length"])
        except (TypeError, ValueError):
            raise TemplateError(f"lookup 'password': length {params['length']!r} is not a number") from None
        chars = _password_chars(params["chars"])
        if not chars:
            raise TemplateError("lookup 'password': chars gives no characters")
        seed = params["seed"]
        rng = random.SystemRandom() if seed is None else random.Random(seed)
        path = os.path.join(env.search_dirs[-1], path_text) if env.search_dirs else path_text
        if os.path.abspath(path) == os.devnull:
            out.append("".join(rng.choice(chars) for _ in range(length)))
            continue
        with _password_lock:
            if os.path.exists(path):
                content = Path(path).read_text(encoding="utf-8").rstrip()
                out.append(content.rsplit(" salt=", 1)[0] if " salt=" in content else content)
                continue
            password = "".join(rng.choice(chars) for _ in range(length))
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
            replace_file(path, password + "\n", mode=0o600)
            out.append(password)
    return out
