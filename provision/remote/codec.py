"""THE JSON codec of the host programs: ``dumps`` and ``loads``, as ``json``'s (the same text both ways), for the
python agent (``agent.py``: its frames) and the host library (``hostlib.py``: the envelope).

Through ``json``'s own C accelerator (``_json``) without importing ``json``: ``json`` imports ``re``, and with
it ``enum``, ``functools`` and ``collections``, about 5 ms of CPU at the start of every agent and every shipped
script, on every host of a fresh run. Where there is no ``_json`` (not CPython), ``json`` itself. Builtins only,
Python 3.6+; put in front of the agent (a core, as the pump is) and shipped with the scripts (a host library).
"""


def _accelerated():
    """``(dumps, loads)`` through ``_json``; an exception where it is not there, or not the ``_json`` we know."""
    from _json import encode_basestring_ascii, make_encoder, make_scanner

    class Decoding:
        """What the C scanner reads of a ``json.JSONDecoder`` (its defaults)."""

        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__

    scan = make_scanner(Decoding())  # type: ignore[arg-type]  # it reads these attributes of any object
    space = " \t\n\r"

    def loads(text):
        """``json.loads(text)``: ``str``, or UTF-8 ``bytes``; ValueError when it is not one JSON document (json's
        own error: on that path only, json is imported, and says why; the C scanner alone cannot, before 3.12)."""
        if not isinstance(text, str):
            text = bytes(text).decode("utf-8")
        start = len(text) - len(text.lstrip(space))
        try:
            value, end = scan(text, start)
        except Exception:
            end = -1
        if end < 0 or text[end:].strip(space):
            import json

            return json.loads(text)
        return value

    def unencodable(value):
        raise TypeError("not JSON serializable: %s" % type(value).__name__)

    def dumps(value):
        """``json.dumps(value)`` (ASCII, ``", "`` and ``": "``, NaN allowed): one encoder per call, as json's."""
        encode = make_encoder({}, unencodable, encode_basestring_ascii, None, ": ", ", ", False, False, True)
        return "".join(encode(value, 0))

    if dumps({"a": [1, None]}) != '{"a": [1, null]}' or loads(' {"a": [1]} ') != {"a": [1]}:
        raise ImportError("not the _json this codec knows")
    return dumps, loads


try:
    dumps, loads = _accelerated()
except Exception:  # not CPython, or a _json of another shape: the json module is the codec
    pass
