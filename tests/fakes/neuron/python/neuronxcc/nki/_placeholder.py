"""FAKE NKI submodules' names: any name resolves to a placeholder (the simulator, not these modules, runs the
kernel)."""


class _Placeholder:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return _Placeholder(self.name)

    def __getattr__(self, name):
        return _Placeholder(f"{self.name}.{name}")


def resolve(name):
    """A module's ``__getattr__`` (PEP 562): every name it lacks is a placeholder."""
    return _Placeholder(name)
