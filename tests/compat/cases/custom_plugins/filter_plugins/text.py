"""The playbook's own filters (loaded by both tools from filter_plugins/ beside the playbook)."""


def shout(value, suffix="!"):
    return str(value).upper() + suffix


def kv_lines(mapping, sep="="):
    return "\n".join(f"{k}{sep}{v}" for k, v in sorted(mapping.items()))


class FilterModule:
    def filters(self):
        return {"shout": shout, "kv_lines": kv_lines, "evens": lambda xs: (x for x in xs if x % 2 == 0)}
