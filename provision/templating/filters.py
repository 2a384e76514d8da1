"""Ansible's ``ansible.builtin`` filters and tests that provision's templates know, beyond Jinja2's own.

Written from Ansible's documented behaviour (ansible-core 2.19), checked by the differential cases
``tests/compat/cases/filters_sets``, ``filters_paths`` and ``tests_jinja``. :mod:`provision.templating`
registers :data:`FILTERS` and :data:`TESTS` in its environments, each also under its ``ansible.builtin.``
name, so the static planner (which asks the environment) knows every one of them.

Controller side, as in Ansible: the path filters and tests (``realpath``, ``expanduser``, ``fileglob``,
``is file``, ``is directory``, ...) look at the controller's file system, not the managed host's.

Refused by name before the run, with the reason (:data:`REFUSED`): the Windows path filters (``win_basename``,
...: provision manages POSIX hosts).
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import itertools
import math
import os
import random as _random
import re
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote_plus, urlsplit

import jinja2

from ..errors import TemplateError
from .sizes import human_readable, human_to_bytes

_UUID_NAMESPACE = uuid.UUID("361E6D51-FAEC-444A-9079-341386DA8E2E")  # Ansible's documented to_uuid namespace


def _impure(fn: Any) -> Any:
    """A filter or test whose result is not a function of its arguments alone (random draws, the clock, the
    controller's files and environment): Jinja2 must not fold it into a constant when it compiles a template
    (a compiled template is cached, so ``100 | random`` would draw once per process)."""

    @jinja2.pass_context
    def call(_ctx: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", "impure")
    return call


# ------------------------------------------------------------------------------------------- types
def type_debug(value: Any) -> str:
    """The name of the value's plain Python type (a loader's line-numbered mapping is a ``dict``)."""
    for cls in type(value).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__
    return type(value).__name__


# --------------------------------------------------------------------------------------------- sets
def _unique(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _set_op(name: str, op: Any, fallback: Any) -> Any:
    """Ansible's set filters: Python set semantics when the items are hashable (order not promised), else the
    list-preserving version of the same operation."""

    def apply(a: Any, b: Any) -> list[Any]:
        a, b = list(a), list(b)
        try:
            return list(op(set(a), set(b)))
        except TypeError:
            return fallback(a, b)

    apply.__name__ = name
    return apply


def _intersect_list(a: list[Any], b: list[Any]) -> list[Any]:
    return _unique(x for x in a if x in b)


def _union_list(a: list[Any], b: list[Any]) -> list[Any]:
    return _unique(a + b)


FILTER_SETS = {
    "union": _set_op("union", lambda a, b: a | b, _union_list),
    "intersect": _set_op("intersect", lambda a, b: a & b, _intersect_list),
    "difference": _set_op("difference", lambda a, b: a - b, lambda a, b: _unique(x for x in a if x not in b)),
    "symmetric_difference": _set_op(
        "symmetric_difference",
        lambda a, b: a ^ b,
        lambda a, b: [x for x in _union_list(a, b) if x not in _intersect_list(a, b)],
    ),
}


def flatten(items: Any, levels: int | None = None, skip_nulls: bool = True) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if skip_nulls and item in (None, "None", "null"):
            continue
        if isinstance(item, (list, tuple)) and (levels is None or int(levels) >= 1):
            out += flatten(item, None if levels is None else int(levels) - 1, skip_nulls)
        else:
            out.append(item)
    return out


def subelements(obj: Any, path: Any, skip_missing: bool = False) -> list[list[Any]]:
    """Each element paired with each item of its list at ``path`` (a dotted string or a list of keys)."""
    if isinstance(obj, Mapping):
        elements = list(obj.values())
    elif isinstance(obj, list):
        elements = list(obj)
    else:
        raise TemplateError("subelements: expects a list of mappings or a mapping of them")
    keys = path.split(".") if isinstance(path, str) else list(path) if isinstance(path, list) else None
    if keys is None:
        raise TemplateError("subelements: the key must be a string or a list")
    out: list[list[Any]] = []
    for element in elements:
        values = element
        for key in keys:
            if isinstance(values, Mapping) and key in values:
                values = values[key]
            elif skip_missing and isinstance(values, Mapping):
                values = []
                break
            else:
                raise TemplateError(f"subelements: could not find {key!r} key in iterated item {values!r}")
        if not isinstance(values, list):
            raise TemplateError(f"subelements: the key {path!r} should point to a list, got {values!r}")
        out += [[element, v] for v in values]
    return out


def _listed(fn: Any) -> Any:
    """An itertools function whose result is a list of lists (Ansible shows tuples as lists)."""

    def apply(*args: Any, **kwargs: Any) -> list[Any]:
        return [list(t) for t in fn(*args, **kwargs)]

    apply.__name__ = fn.__name__
    return apply


def extract(item: Any, container: Any, morekeys: Any = None) -> Any:
    keys = [item] + (morekeys if isinstance(morekeys, list) else [] if morekeys is None else [morekeys])
    value = container
    for key in keys:
        value = value[key]
    return value


def random_filter(end: Any, start: Any = None, step: Any = None, seed: Any = None) -> Any:
    """``random``: an int below ``end`` (from ``start`` by ``step``) or an item of a sequence; repeatable with
    ``seed`` (Python's ``random.Random(seed)``, as Ansible)."""
    rng = _random.SystemRandom() if seed is None else _random.Random(seed)
    if isinstance(end, int) and not isinstance(end, bool):
        return rng.randrange(start or 0, end, step or 1)
    if isinstance(end, (list, tuple, str)):
        if start or step:
            raise TemplateError("random: start and step can only be used with integer values")
        return rng.choice(end)
    raise TemplateError("random: can only be used on sequences and integers")


def shuffle(items: Any, seed: Any = None) -> list[Any]:
    out = list(items)
    if seed:
        _random.Random(seed).shuffle(out)
    else:
        _random.SystemRandom().shuffle(out)
    return out


# ------------------------------------------------------------------------------------------ strings
def regex_findall(value: Any, pattern: str, multiline: bool = False, ignorecase: bool = False) -> list[Any]:
    flags = (re.MULTILINE if multiline else 0) | (re.IGNORECASE if ignorecase else 0)
    return [list(m) if isinstance(m, tuple) else m for m in re.findall(pattern, str(value), flags)]


def regex_escape(value: Any, re_type: str = "python") -> str:
    if re_type == "python":
        return re.escape(str(value))
    if re_type == "posix_basic":
        return re.sub(r"([].[^$*\\])", r"\\\1", str(value))
    raise TemplateError(f"regex_escape: regex type {re_type!r} is not supported (python, posix_basic)")


def split(value: Any, sep: str | None = None, maxsplit: int = -1) -> list[str]:
    return str(value).split(sep, maxsplit)


def get_hash(value: Any, hashtype: str = "sha1") -> str:
    try:
        h = hashlib.new(hashtype)
    except ValueError:
        raise TemplateError(f"hash: unknown hash type {hashtype!r}") from None
    h.update(str(value).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


_CRYPT_IDS = {"md5": "1", "md5_crypt": "1", "sha256": "5", "sha256_crypt": "5", "sha512": "6", "sha512_crypt": "6"}


def password_hash(password: Any, hashtype: str = "sha512", salt: str | None = None, rounds: int | None = None,
                  **_: Any) -> str:  # fmt: skip
    """A crypt(3) hash (sha512, sha256, md5) by the controller's libc. Without ``salt`` a random one is drawn,
    so the hash changes on every run (as in Ansible): give a ``salt`` for a repeatable value."""
    ident = _CRYPT_IDS.get(hashtype)
    if ident is None:
        raise TemplateError(f"password_hash: hash type {hashtype!r} is not supported ({', '.join(_CRYPT_IDS)})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            raise TemplateError("password_hash needs Python's crypt module (Python < 3.13)") from None
    if salt is None:
        alphabet = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        salt = "".join(_random.SystemRandom().choice(alphabet) for _ in range(8 if ident == "1" else 16))
    setting = f"${ident}${'' if rounds is None or ident == '1' else f'rounds={int(rounds)}$'}{salt}"
    result = crypt.crypt(str(password), setting)
    if not result or result.startswith("*"):
        raise TemplateError(f"password_hash: the controller's crypt(3) cannot make a {hashtype} hash")
    return str(result)


def comment(text: Any, style: str = "plain", **kw: Any) -> str:
    """``comment``: text as a comment block of ``style`` (plain, erlang, c, cblock, xml)."""
    styles = {
        "plain": {"decoration": "# "},
        "erlang": {"decoration": "% "},
        "c": {"decoration": "// "},
        "cblock": {"beginning": "/*", "decoration": " * ", "end": " */"},
        "xml": {"beginning": "<!--", "decoration": " - ", "end": "-->"},
    }
    if style not in styles:
        raise TemplateError(f"comment: invalid style {style!r} (one of {', '.join(styles)})")
    deco = kw.get("decoration", styles[style]["decoration"])
    p = {"newline": "\n", "beginning": "", "prefix": deco.rstrip(), "prefix_count": 1, "decoration": "",
         "postfix": deco.rstrip(), "postfix_count": 1, "end": "", **styles[style], **kw}  # fmt: skip
    nl, deco = p["newline"], p["decoration"]
    head = f"{p['beginning']}{nl}" if p["beginning"] else ""
    if p["prefix"]:
        head += (nl if p["prefix"] == nl else f"{p['prefix']}{nl}") * int(p["prefix_count"])
    body = (deco + str(text).replace(nl, nl + deco)).replace(deco + nl, deco.rstrip() + nl)
    tail = nl.join([""] + [p["postfix"]] * int(p["postfix_count"]))
    end = f"{nl}{p['end']}" if p["end"] else ""
    return head + body + tail + end


# -------------------------------------------------------------------------------------- paths, time
def path_join(paths: Any) -> str:
    if isinstance(paths, str):
        return paths
    if isinstance(paths, (list, tuple)):
        return os.path.join(*[str(p) for p in paths]) if paths else ""
    raise TemplateError(f"path_join: expects a string or a list of strings, got {type(paths).__name__}")


def fileglob(pattern: Any) -> list[str]:
    return [p for p in glob.glob(str(pattern)) if os.path.isfile(p)]


def strftime(fmt: str, second: Any = None, utc: bool = False) -> str:
    when = None if second is None else float(second)
    return time.strftime(fmt, time.gmtime(when) if utc else time.localtime(when))


def to_datetime(value: Any, fmt: str = "%Y-%m-%d %H:%M:%S") -> datetime.datetime:
    return datetime.datetime.strptime(str(value), fmt)


def urlsplit_filter(value: Any, query: str = "") -> Any:
    parts = urlsplit(str(value))
    fields = {k: getattr(parts, k) for k in ("fragment", "hostname", "netloc", "password", "path", "port", "query",
                                             "scheme", "username")}  # fmt: skip
    if query:
        if query not in fields:
            raise TemplateError(f"urlsplit: unknown URL component {query!r}")
        return fields[query]
    return fields


def _vault_filter(data: Any, secret: Any, salt: Any = None, vault_id: str = "filter_default",
                  wrap_object: bool = False, vaultid: str | None = None) -> str:  # fmt: skip
    """ansible-core's ``vault`` filter: ``data`` encrypted with the password ``secret`` (a vault envelope; with
    ``salt`` the same text every time)."""
    from .. import vault

    label = vaultid or vault_id
    password = str(secret).encode("utf-8")
    return vault.encrypt(str(data), vault.VaultSecret(label, password), salt=str(salt).encode() if salt else None)


def _unvault_filter(data: Any, secret: Any, vault_id: str = "filter_default", vaultid: str | None = None) -> str:
    """ansible-core's ``unvault`` filter: the plaintext of a vault envelope opened with the password ``secret``
    (registered as a secret: masked in every output)."""
    from .. import vault
    from ..commands import MASKER

    label = vaultid or vault_id
    try:
        plaintext, _ = vault.decrypt(str(data), secrets=[vault.VaultSecret(label, str(secret).encode("utf-8"))])
    except vault.VaultError as exc:
        raise TemplateError(f"unvault: {exc.msg}") from None
    text = plaintext.decode("utf-8", "surrogateescape")
    MASKER.add(text)
    return text


_NO_WIN = "Windows paths are not supported (provision manages POSIX hosts)"

FILTERS: dict[str, Any] = {
    **FILTER_SETS,
    "type_debug": type_debug,
    "realpath": _impure(os.path.realpath),
    "expanduser": _impure(os.path.expanduser),
    "expandvars": _impure(os.path.expandvars),
    "normpath": os.path.normpath,
    "relpath": _impure(os.path.relpath),
    "splitext": lambda p: list(os.path.splitext(p)),
    "commonpath": lambda paths: os.path.commonpath(list(paths)),
    "path_join": path_join,
    "fileglob": _impure(fileglob),
    "flatten": flatten,
    "subelements": subelements,
    "product": _listed(itertools.product),
    "permutations": _listed(itertools.permutations),
    "combinations": _listed(itertools.combinations),
    "zip": _listed(zip),
    "zip_longest": _listed(itertools.zip_longest),
    "extract": extract,
    "random": _impure(random_filter),
    "shuffle": _impure(shuffle),
    "regex_findall": regex_findall,
    "regex_escape": regex_escape,
    "split": split,
    "hash": get_hash,
    "checksum": lambda v: get_hash(v, "sha1"),
    "sha1": lambda v: get_hash(v, "sha1"),
    "md5": lambda v: get_hash(v, "md5"),
    "password_hash": _impure(password_hash),
    "to_uuid": lambda v, namespace=_UUID_NAMESPACE: str(uuid.uuid5(uuid.UUID(str(namespace)), str(v))),
    "comment": comment,
    "human_readable": human_readable,
    "human_to_bytes": human_to_bytes,
    "strftime": _impure(strftime),
    "to_datetime": to_datetime,
    "urlsplit": urlsplit_filter,
    "urldecode": lambda v: unquote_plus(str(v)),
    "log": lambda x, base=math.e: math.log(x, base),
    "pow": math.pow,
    "root": lambda x, base=2: math.sqrt(x) if base == 2 else math.pow(x, 1.0 / float(base)),
    "vault": _vault_filter,
    "unvault": _unvault_filter,
}

# Ansible filters provision refuses by name, before the run (the planner says why)
REFUSED = {"win_basename": _NO_WIN, "win_dirname": _NO_WIN, "win_splitdrive": _NO_WIN}
