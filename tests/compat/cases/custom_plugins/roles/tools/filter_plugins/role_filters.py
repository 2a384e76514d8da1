class FilterModule:
    def filters(self):
        return {"wrap": lambda v, left="[", right="]": f"{left}{v}{right}"}
