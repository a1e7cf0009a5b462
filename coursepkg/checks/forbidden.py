"""The forbidden-call tripwire: what a task's function may not call, by name and by operator.

Used by the grader's isolated worker and by the notebooks' check cells, around each case::

    with Tripwire(task) as wire:
        output = student_output(task, case, func)
    if wire.hit is not None:
        ...  # the case fails: forbidden_message(wire.hit)

A task's ``forbidden`` entries are of two kinds.

**Dotted names** (``"torch.nn.functional.scaled_dot_product_attention"``, ``"coursepkg.rnn"``,
``"torch.nn.LSTM"``): a profile hook (``sys.setprofile``, and ``threading.setprofile`` for new
threads) sees every Python call and every call of a C function made from Python, aliases,
``getattr`` and saved references included. A name that is a prefix forbids a whole module, a
class all its methods. A call is a violation when the callee is forbidden and its caller is
neither forbidden code itself (a library's own calls are its business) nor the course's checker
(which builds the arguments and may use the package). The task's reference solution is always
forbidden, with every callable it wraps (``__wrapped__``, a partial's ``func``: a question's
cached reference and the key it computes), and so is switching the hook off.

**Operators** (``"aten::lstm"``, ``"aten::_scaled_dot_product_attention_math"``): the kernels
themselves, whatever Python name led there. While the tripwire is armed, each forbidden
operator's kernel in torch's dispatcher is replaced by a trap that records the hit and raises,
so the trap fires for ``F.scaled_dot_product_attention``, its private aliases
(``torch._scaled_dot_product_attention_math``, ``torch._C._nn...``, ``torch.ops.aten...``),
``nn.LSTM``, ``torch.lstm`` and ``torch._VF.lstm`` alike, with or without autograd, under
``no_grad`` or ``inference_mode``, called through ``map`` or ``functools.partial``, from another
thread, or from inside another torch kernel (the fast path of ``nn.TransformerEncoderLayer``).
The original kernels come back when the tripwire is disarmed. Why the dispatcher and not a mode:
a ``TorchDispatchMode`` sits below autograd, where composite operators (``aten::lstm`` on CPU,
the math attention) are already decomposed into matmuls and never seen; a
``TorchFunctionMode`` sees only torch's Python-level functions, in the thread that pushed it,
and is blind inside a kernel; the profiler sees every operator but costs tens of microseconds
per operation of the whole run. The trap costs nothing per operation: arming and disarming it
takes about a millisecond per case (ten kernels). ``tests/test_grading_forbidden.py`` shows the
modes' blind spots and the trap's reach; the trap's own removal is seen too.

A known limit of the name tripwire: trust is decided by the caller's module (its real globals,
so a borrowed ``__name__`` is not enough), so student code run with a trusted module's own
globals dict would pass for the checker; the operator trap has no such exemption.

Operator names are checked against the dispatcher when the tripwire is built: an entry that
names no operator of this torch raises ``ValueError`` (a typo must not disarm a task).
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coursepkg.checks.core import Task

__all__ = [
    "ATTENTION_KERNELS",
    "FUSED_LAYER_KERNELS",
    "ForbiddenOperatorError",
    "RECURRENT_KERNELS",
    "Tripwire",
    "forbidden_message",
    "operator_kernels",
]

#: torch's recurrent kernels: what ``nn.RNN``, ``nn.LSTM``, ``nn.GRU``, their cells and every
#: alias of ``torch.lstm`` compute with.
RECURRENT_KERNELS = (
    "aten::rnn_tanh",
    "aten::rnn_relu",
    "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell",
    "aten::lstm",
    "aten::lstm_cell",
    "aten::gru",
    "aten::gru_cell",
)
#: torch's fused encoder layer (the fast path of ``nn.TransformerEncoderLayer``).
FUSED_LAYER_KERNELS = ("aten::_transformer_encoder_layer_fwd",)
#: torch's attention kernels: what ``F.scaled_dot_product_attention`` (and its private aliases)
#: and the fast paths of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` compute with.
ATTENTION_KERNELS = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_native_multi_head_attention",
    *FUSED_LAYER_KERNELS,
)

# Calls that would let a submission switch the tripwire off.
_ALWAYS_FORBIDDEN = ("sys.setprofile", "threading.setprofile", "sys.settrace")
# The checker's own modules: they call the student's function and build its arguments.
_TRUSTED = ("coursepkg.checks", "coursepkg.grading")
# Where a forbidden operator's kernel can live, in the order the trap replaces them: a composite
# kernel serves every backend (and autograd); otherwise each CPU-side backend kernel.
_TRAP_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutograd",
    "CPU",
    "NestedTensorCPU",
    "SparseCPU",
    "QuantizedCPU",
)
OPERATOR_PREFIX = "aten::"


def forbidden_message(name: str) -> str:
    """The one line a case shows when the function called ``name``, in the notebook and in the
    grader's feedback alike."""
    return (
        f"forbidden: you called {name}, which this task does not allow; "
        "the grader gives 0 for this."
    )


class ForbiddenOperatorError(RuntimeError):
    """Raised by the trap in place of a forbidden operator's kernel."""


def _resolve(dotted: str) -> object | None:
    """The object a dotted name points at (``torch.nn.functional.softmax``), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def operator_kernels(name: str) -> list[tuple[str, str, str]]:
    """The kernels of a forbidden operator: ``(overload name, qualified name, dispatch key)``.

    ``"aten::lstm"`` means every overload (``lstm.input``, ``lstm.data``); ``"aten::lstm.data"``
    one of them. A composite kernel is trapped alone (it serves every backend); otherwise each
    CPU-side backend kernel. Raises ValueError when torch has no such operator.
    """
    import torch

    base, _, overload = name.removeprefix(OPERATOR_PREFIX).partition(".")
    packet = getattr(torch.ops.aten, base, None) if name.startswith(OPERATOR_PREFIX) else None
    overloads = [] if packet is None else packet.overloads()
    if overload:
        overloads = [o for o in overloads if o == overload]
    if not overloads:
        raise ValueError(f"forbidden operator {name!r}: torch {torch.__version__} has none")
    kernels = []
    for each in overloads:
        op_name = base if each == "default" else f"{base}.{each}"
        qualified = f"aten::{op_name}"
        has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
        keys = [key for key in _TRAP_KEYS if has_kernel(qualified, key)]
        if "CompositeImplicitAutograd" in keys:
            keys = ["CompositeImplicitAutograd"]
        kernels.extend((op_name, qualified, key) for key in keys)
    return kernels


def _layers(obj: object) -> list[object]:
    """``obj`` and the callables it wraps, outermost first: a partial's ``func``, a bound
    method's ``__func__``, a wrapper's ``__wrapped__`` (``functools.wraps``, ``functools.cache``,
    a question's cached key)."""
    layers = [obj]
    for _ in range(20):
        inner = None
        for attribute in ("func", "__func__", "__wrapped__"):
            try:
                inner = getattr(obj, attribute, None)
            except Exception:  # noqa: BLE001 - an object's own __getattr__ may raise anything
                inner = None
            if inner is not None:
                break
        if inner is None or inner is obj or not callable(inner):
            break
        obj = inner
        layers.append(obj)
    return layers


class Tripwire:
    """Notices calls to forbidden code while the student's function runs (see the module's text).

    Attributes:
        hit: after the ``with`` block, the first forbidden thing called (a dotted name, the
            reference solution, ``"sys.setprofile"`` for a switched-off hook, or
            ``"the torch operator aten::..."``), or None.
    """

    def __init__(self, task: Task) -> None:
        self.prefixes: list[str] = []
        # Code objects by identity: hashing a code object hashes its constants, every call.
        self.codes: dict[int, str] = {}
        self._kept: list[object] = []  # the code objects whose ids are keys above
        self.builtins: dict[int, str] = {}
        self.kernels: list[tuple[str, str, str]] = []
        self.hit: str | None = None
        self._library = None
        self._modules: dict[str, str | None] = {}
        for name in (*task.forbidden, *_ALWAYS_FORBIDDEN):
            if name.startswith(OPERATOR_PREFIX):
                self.kernels.extend(operator_kernels(name))
                continue
            # A library that is not loaded yet is not imported here (nltk costs 0.25 s a task):
            # the submission can only reach it by importing it, which the prefix check sees.
            loaded = name.split(".")[0] in sys.modules
            obj = _resolve(name) if loaded else None
            if obj is None or isinstance(obj, types.ModuleType):
                self.prefixes.append(name)
            else:
                self._add(name, obj)
        self._add(f"the course's reference solution of task {task.id}", task.reference)

    def _add(self, name: str, obj: object) -> None:
        if obj is None:
            return
        if isinstance(obj, type):
            for member in vars(obj).values():
                self._add(name, getattr(member, "__func__", member))
            return
        # Every layer of a wrapped callable, as forbidden_callable sees them: a cached
        # reference (functools.cache) and the function it wraps are both forbidden.
        for layer in _layers(obj):
            code = getattr(layer, "__code__", None)
            if code is not None:
                self.codes[id(code)] = name
                self._kept.append(code)
            elif callable(layer):
                self.builtins[id(layer)] = name

    def forbidden_callable(self, obj: object) -> str | None:
        """The forbidden name ``obj`` is (seen through partials, bound methods and wrappers:
        any layer of it that is forbidden makes it forbidden)."""
        layers = _layers(obj)
        for layer in layers:
            code = getattr(layer, "__code__", None)
            if code is not None and id(code) in self.codes:
                return self.codes[id(code)]
            if id(layer) in self.builtins:
                return self.builtins[id(layer)]
        obj = layers[-1]
        globals_ = getattr(obj, "__globals__", None)
        module = globals_.get("__name__") if isinstance(globals_, dict) else None
        return self._module_hit(module) or self._module_hit(getattr(obj, "__module__", None))

    def _module_hit(self, module: object) -> str | None:
        """The forbidden prefix module ``module`` falls under, or None (remembered per name:
        the profile hook asks for every call)."""
        if not isinstance(module, str):
            return None
        try:
            return self._modules[module]
        except KeyError:
            pass
        hit = next(
            (p for p in self.prefixes if module == p or module.startswith(p + ".")), None
        )
        self._modules[module] = hit
        return hit

    def _forbidden_python(self, frame) -> str | None:  # noqa: ANN001
        return self.codes.get(id(frame.f_code)) or self._module_hit(
            frame.f_globals.get("__name__")
        )

    def _trusted_caller(self, caller) -> bool:  # noqa: ANN001
        """The caller is the checker or forbidden code: by its module's own globals, so a
        function made with a borrowed ``__name__`` (``{"__name__": "coursepkg.checks"}``) is not
        taken for either."""
        if caller is None:
            return True
        if id(caller.f_code) in self.codes:
            return True
        module = caller.f_globals.get("__name__", "")
        if not isinstance(module, str):
            return False
        if not (module.startswith(_TRUSTED) or self._module_hit(module) is not None):
            return False
        real = sys.modules.get(module)
        return real is not None and getattr(real, "__dict__", None) is caller.f_globals

    def _hook(self, frame, event, arg):  # noqa: ANN001 - the profiler's signature
        # Called for every call and return of the run: the common case (nothing forbidden)
        # is a few dictionary lookups.
        if event == "call":
            name = self._forbidden_python(frame)
            if (
                name is not None
                and self.hit is None
                and id(frame.f_code) not in _OWN_CODE  # the tripwire's own methods and trap
                and not self._trusted_caller(frame.f_back)
            ):
                self.hit = name
        elif event == "c_call":
            name = self.builtins.get(id(arg)) or self._module_hit(getattr(arg, "__module__", None))
            if (
                name is not None
                and self.hit is None
                and frame.f_code is not _EXIT_CODE
                and not self._trusted_caller(frame)
            ):
                self.hit = name

    # -- the operator trap ---------------------------------------------------------------------

    def _trap(self, qualified: str):
        label = f"the torch operator {qualified.partition('.')[0]}"

        def trap(*args, **kwargs):
            if self.hit is None:
                self.hit = label
            raise ForbiddenOperatorError(forbidden_message(label))

        return trap

    def _arm_operators(self) -> None:
        if not self.kernels:
            return
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            self._library = torch.library.Library("aten", "IMPL")
            for op_name, qualified, key in self.kernels:
                self._library.impl(op_name, self._trap(qualified), key)

    def _disarm_operators(self) -> bool:
        """Restore the kernels; False when the trap had been removed or replaced meanwhile."""
        if self._library is None:
            return True
        keys: dict[str, list[str]] = {}
        for _, qualified, key in self.kernels:
            keys.setdefault(qualified, []).append(key)
        intact = all(_trap_in_place(qualified, each) for qualified, each in keys.items())
        self._library._destroy()
        self._library = None
        return intact

    # -- the context manager -------------------------------------------------------------------

    def __enter__(self) -> Tripwire:
        self.hit = None
        self._arm_operators()
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        hook = sys.getprofile()
        sys.setprofile(None)
        threading.setprofile(None)
        intact = self._disarm_operators()
        if self.hit is None and getattr(hook, "__self__", None) is not self:
            self.hit = "sys.setprofile"
        if self.hit is None and not intact:
            self.hit = "torch.library (the forbidden operators' trap was removed)"


_EXIT_CODE = Tripwire.__exit__.__code__  # the tripwire's own setprofile(None) is no violation


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """A code object and every code object nested in it (inner functions, lambdas)."""
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(inner for c in nested for inner in _codes(c))]


# Calls into the tripwire's own code (``__exit__``, the trap) are not calls to the checker.
_OWN_CODE = frozenset(
    id(inner)
    for member in vars(Tripwire).values()
    if isinstance(member, types.FunctionType)
    for inner in _codes(member.__code__)
)


def _trap_in_place(qualified: str, keys: list[str]) -> bool:
    """True when the active kernels of ``qualified`` for ``keys`` are still this module's trap
    (or when torch's dispatcher dump does not say)."""
    import torch

    for line in torch._C._dispatch_dump(qualified).splitlines():
        key = line.split(":")[0]
        if "(inactive)" not in key and key.split("[")[0] in keys and __file__ not in line:
            return False
    return True
