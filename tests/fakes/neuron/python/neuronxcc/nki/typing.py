"""FAKE neuronxcc.nki.typing: any name resolves (the simulator, not this module, runs the kernel)."""


class _Placeholder:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return _Placeholder(self.name)

    def __getattr__(self, name):
        return _Placeholder(f"{self.name}.{name}")


def __getattr__(name):
    return _Placeholder(name)
