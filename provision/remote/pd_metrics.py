"""Read SGLang's Prometheus ``/metrics`` of the servers on THIS host (``provision pd status --metrics``).

Usage: ``python3 - read`` with a JSON request on stdin (the host library's envelope, ``hostlib.serve``): ``urls``
(each server's ``http://host:port``), ``timeout``. Answers ``{"ok", "servers": {url: {"metrics": {name: value},
"error"}}}``: every ``sglang:`` sample summed over its labels (histograms: their ``_sum`` and ``_count``), the
values as numbers. Nothing the host returns is evaluated: the text is parsed line by line, a bad line skipped.
Stdlib only (Python 3.6+)."""

import math
import sys
import urllib.request

MAX_BYTES = 8 << 20


def parse(text):
    out = {}  # type: dict
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head = line.split(" ", 1)[0]
        if "{" in head:  # name{labels} value [timestamp]: the labels are not read
            if "}" not in line:
                continue
            name, rest = line[: line.index("{")], line[line.rindex("}") + 1 :]
        else:
            name, _, rest = line.partition(" ")
        name = name.strip()
        if not name.startswith("sglang") or name.endswith("_bucket"):
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
    return out


def read(req):
    urls, timeout = list(req["urls"]), float(req.get("timeout", 10))
    servers = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as resp:
                text = resp.read(MAX_BYTES).decode("utf-8", "replace")
            servers[url] = {"metrics": parse(text)}
        except Exception as exc:
            servers[url] = {"error": str(getattr(exc, "reason", exc))[:300]}
    return {"servers": servers}


ACTIONS = {"read": read}

if __name__ == "__main__":
    import hostlib  # here: the tests load the parser alone

    sys.exit(hostlib.serve(ACTIONS))
