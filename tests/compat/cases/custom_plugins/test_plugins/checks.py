"""The playbook's own tests."""


class TestModule:
    def tests(self):
        return {"port_number": lambda v: isinstance(v, int) and 0 < v < 65536, "shouted": lambda v: v == v.upper()}
