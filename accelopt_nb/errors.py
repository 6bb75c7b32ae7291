"""The named exception hierarchy of accelopt_nb.

Every error a user can trigger derives from :class:`AccelOptError`, so notebooks and
the CLI can catch one type. Kernel errors carry the kernel file, line, API and the
hardware or language rule that was broken, because that is what a person (or an
LLM executor) needs to fix the kernel.
"""
from __future__ import annotations


class AccelOptError(Exception):
    """Base class of every accelopt_nb error."""


class ConfigError(AccelOptError):
    """A configuration value, preset or command-line option is invalid."""


class KernelError(AccelOptError):
    """A kernel failed: raised with the location and the rule that was broken."""

    rule: str = "kernel error"

    def __init__(self, message: str, *, api: str | None = None, file: str | None = None,
                 line: int | None = None, rule: str | None = None) -> None:
        self.message = message
        self.api = api
        self.file = file
        self.line = line
        if rule is not None:
            self.rule = rule
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.file is not None or self.line is not None:
            where = f"{self.file or '<kernel>'}:{self.line if self.line is not None else '?'}: "
        api = f"{self.api}: " if self.api else ""
        return f"{where}{api}{self.message} [rule: {self.rule}]"

    def locate(self, file: str | None, line: int | None) -> "KernelError":
        """Attach a kernel location if none is known yet; returns self for chaining."""
        if self.file is None and self.line is None:
            self.file, self.line = file, line
            self.args = (self._format(),)
        return self

    def to_dict(self) -> dict:
        return {"type": type(self).__name__, "message": self.message, "api": self.api,
                "file": self.file, "line": self.line, "rule": self.rule}


class KernelLoadError(KernelError):
    """The kernel source could not be loaded (syntax error, missing `kernel` function)."""

    rule = "kernel module must parse and define the kernel function"


class NKIRuleError(KernelError):
    """A Trainium hardware or NKI language rule was violated (shape limits, buffers, engines)."""


class TargetError(NKIRuleError):
    """The kernel used an API (or a mode of one) that the docs give to other NeuronCore generations than the
    simulated target's (``SimOptions.hw``)."""

    rule = "an API documented for other NeuronCore generations than the target"


class OpaqueTensorError(KernelError):
    """The kernel tried to read tensor data behind the NKI API (e.g. np.asarray on a tile)."""

    rule = "HBM tensors and tiles are opaque inside a kernel; use nl.load/nl.store and NKI compute APIs"


class UninitializedReadError(KernelError):
    """The kernel read on-chip memory that was never written."""

    rule = "on-chip memory must be written before it is read"


class LoopCarriedDependencyError(KernelError):
    """Different iterations of an affine_range wrote the same location with plain assignment."""

    rule = ("affine_range iterations must write distinct locations (use sequential_range for a "
            "loop-carried dependency, or += for an accumulation)")


class UnsupportedAPIError(KernelError):
    """The kernel used an NKI API the simulator does not implement."""

    rule = "API not supported by the accelopt_nb simulator"


class SimulatorBugError(KernelError):
    """The simulator's own code failed (an internal IndexError, ValueError, ...) while running a kernel.

    Not the kernel's fault: file and line are the kernel line that triggered it, ``internal`` names
    the simulator exception and where it was raised. It is a KernelError so every caller that
    reports kernel failures reports it too, with that location.
    """

    rule = "internal simulator error: a bug in accelopt_nb's simulator, not in the kernel (please report it)"

    def __init__(self, message: str, *, internal: str = "", **kwargs) -> None:
        self.internal = internal
        super().__init__(message, **kwargs)

    def _format(self) -> str:
        return f"simulator bug: {super()._format()}"

    def to_dict(self) -> dict:
        return {**super().to_dict(), "internal": self.internal}


class KernelRejectedError(KernelError):
    """The static check refused the kernel source before running it (forbidden import or builtin)."""

    rule = ("kernels may use only NumPy, math and NKI: no I/O, processes, sockets, reflection or "
            "import machinery")


class KernelRuntimeError(KernelError):
    """The kernel built but failed while running on the device (runtime error or device fault)."""

    rule = "a kernel must run to completion on the device"


class ProblemError(AccelOptError):
    """An NKIBench problem or task module is malformed or unknown."""


class EvaluationError(AccelOptError):
    """The evaluation service could not evaluate a kernel (infrastructure, not the kernel)."""


class BackendUnavailableError(EvaluationError):
    """The requested backend (e.g. real Neuron hardware) is not available on this machine."""


class LLMError(AccelOptError):
    """An LLM call failed after its retries, or returned unusable output."""


class BudgetExceededError(LLMError):
    """The spending cap of the cost ledger was reached; no new calls are made."""


class ReplayMissError(LLMError):
    """Replay mode found no recorded response for a request."""


class StoreError(AccelOptError):
    """The run store is missing, corrupt, or was asked for something it does not hold."""


class UnusableOutputError(LLMError):
    """A model response had no usable content (no code block, unparsable plan).

    Raised by a caller's ``validate`` function to make the LLM client retry the request; the
    client counts each such response in the ledger (bounded, never silent).
    """


class LLMEndpointError(LLMError):
    """The LLM endpoint refused the request in a way every call would repeat (bad API key,
    unknown model or URL), so retrying or continuing the step is pointless."""


class EndpointUnreachableError(LLMError):
    """The LLM endpoint did not answer the preflight check (server down, wrong URL); nothing was
    started. The message names the URL and the reason."""


class SessionBusyError(AccelOptError):
    """Another thread is running a step of this session (one writer at a time: the panel, a magic, a script)."""


class StepFailedError(AccelOptError):
    """Every LLM call of a search step failed; the step is not marked done, so a resume retries it."""


class ServingUnavailableError(LLMError):
    """A model server (vLLM) was asked to start but is not installed on this machine."""
