"""The frames of a resident agent's channel (``--persist``): a header line of words, ``KIND WORD...``, and after
a sized kind's header (its last word a byte count) that many bytes. Read by both ends: the host's resident agent
(``../agent.py``: this text is put in front of it, as the pump's is) and the keeper
(``provision.transport.resident``, through ``provision.remote.host_library``). Builtins only, Python 3.6+.
"""

HEADER_MAX = 256  # bytes of a header line


def frames(buf, sized):
    """Each whole frame at the front of ``buf`` (a bytearray), taken out of it as it is yielded: ``(words,
    data)``, ``data`` the bytes after a sized header, else None. ``sized``: kind -> (words in its header, the most
    bytes it may carry), e.g. ``{b"d": (3, 1 << 20)}`` for ``d ID N``; a sized header must have that many words,
    all but the kind decimal. Stops at a frame not whole yet; skips empty lines. ValueError: a header longer than
    :data:`HEADER_MAX`, a malformed sized header, a size over its limit."""
    while True:
        end = buf.find(b"\n")
        if end > HEADER_MAX or (end < 0 and len(buf) > HEADER_MAX):
            raise ValueError("a frame header longer than the limit")
        if end < 0:
            return
        words = bytes(buf[:end]).split()
        if not words:
            del buf[: end + 1]
            continue
        shape = sized.get(words[0])
        if shape is None:
            del buf[: end + 1]
            yield words, None
            continue
        if len(words) != shape[0] or not all(word.isdigit() for word in words[1:]):
            raise ValueError("a malformed frame header")
        size = int(words[-1])
        if size > shape[1]:
            raise ValueError("a frame larger than the limit")
        if len(buf) < end + 1 + size:
            return
        data = bytes(buf[end + 1 : end + 1 + size])
        del buf[: end + 1 + size]
        yield words, data
