"""The forbidden-call tripwire: what a task's function may not call, by name and by operator.

Used by the notebooks' check cells around each case::

    with Tripwire(task) as wire:
        output = student_output(task, case, func)
    if wire.hit is not None:
        ...  # the case fails: forbidden_message(wire.hit)

and, sealed (:meth:`Tripwire.seal`), by the grader's isolated child for the whole of its life:
armed before the submission's first line runs, never disarmed (between two of its tasks, the
worker alone may switch it to the next task's, which forbids no more), a hit reported at once.

A task's ``forbidden`` entries are of two kinds.

**Dotted names** (``"torch.nn.functional.scaled_dot_product_attention"``, ``"coursepkg.rnn"``,
``"torch.nn.LSTM"``): a profile hook (``sys.setprofile``, and ``threading.setprofile`` for new
threads) sees every Python call and every call of a C function made from Python, aliases,
``getattr`` and saved references included. A name that is a prefix forbids a whole module, a
class all its methods. A call is a violation when the callee is forbidden and its caller is
neither forbidden code itself (a library's own calls are its business) nor the course's checker
(which builds the arguments and may use the package), recognised by its code objects
(:func:`trusted_codes`), so that code a submission compiles and runs with a checker module's
globals is not taken for the checker. The task's reference solution is always
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

Known limits, in the notebook (where nothing is sealed: a student who wants to fool their own
check cell can) and in the grader's child alike: a thread started from C code
(``map(_thread.start_new_thread, ...)``, which no profile hook sees) runs without the name hook,
though not without the operator trap. And the tripwire stops calls, not copies: the package's
source is installed with it, so a reference's code can be read and pasted.

Operator names are checked against the dispatcher when the tripwire is built: an entry that
names no operator of this torch raises ``ValueError`` (a typo must not disarm a task).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import struct
import sys
import threading
import types
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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
_TRUSTED_DOTTED = tuple(f"{name}." for name in _TRUSTED)
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
# What a hit on a task's reference solution is called (followed by the task's id).
_REFERENCE = "the course's reference solution of task"


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

    def __init__(self, task: Task, *more: Task) -> None:
        self.prefixes: list[str] = []
        # Code objects by identity: hashing a code object hashes its constants, every call.
        self.codes: dict[int, str] = {}
        self._kept: list[object] = []  # the code objects whose ids are keys above
        self.builtins: dict[int, str] = {}
        self.kernels: list[tuple[str, str, str]] = []
        self.hit: str | None = None
        self._hits: list[str] = []  # what the hook saw, in order (the first one is the hit)
        self._report = None  # set by seal()
        self._library = None
        self._modules: dict[str, str | None] = {}
        names = dict.fromkeys(name for each in (task, *more) for name in each.forbidden)
        for name in (*names, *_ALWAYS_FORBIDDEN):
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
        for each in (task, *more):
            self._add(f"{_REFERENCE} {each.id}", each.reference)
        self._references = [each.reference for each in (task, *more)]
        self._hook = None  # made on first use (seal() makes its own)
        self._data: dict[bool, tuple] = {}
        self._messages = None  # see _sealed_messages()

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

    def _hook_data(self, sealed: bool) -> tuple:
        """The hook's data (its default values but ``on_hit``), made once per tripwire: in a
        child of the grader's fork server, touching every loaded module to find the forbidden
        ones would cost thousands of copied pages (:func:`prepared`)."""
        if sealed not in self._data:
            pairs = tuple((prefix, prefix + ".") for prefix in self.prefixes)
            names, dotted = frozenset(self.prefixes), tuple(d for _, d in pairs)
            library_dicts = tuple(  # the forbidden modules loaded now: their calls are theirs
                vars(module) for name, module in list(sys.modules.items())
                if type(name) is str and (name in names or name.startswith(dotted))
                and isinstance(getattr(module, "__dict__", None), dict)
            )
            trusted_ids, trusted_kept = trusted_codes()
            builtins = dict(self.builtins)
            if sealed:  # a thread started from C would run without the hook
                builtins[id(_thread_start)] = _THREAD
            self._data[sealed] = (
                types.MappingProxyType(dict(self.codes)).get,
                types.MappingProxyType(builtins).get,
                names,
                dotted,
                pairs,
                trusted_ids,
                frozenset(map(id, library_dicts)),
                _OWN_CODE,
            ), (tuple(self._kept), library_dicts, trusted_kept)
        return self._data[sealed]

    def _sealed_messages(self):  # noqa: ANN202
        """The messages a sealed tripwire may send, by name, framed (a read-only mapping's
        ``get``): made once, so that a hit only writes bytes."""
        if self._messages is None:
            messages = {
                name: _framed({"kind": "forbidden", "name": name})
                for name in {*self.codes.values(), *self.builtins.values(), *self.prefixes,
                             *(_operator_label(q) for _, q, _ in self.kernels),
                             *_GUARDED.values(), _TRAP_REMOVED, _THREAD}
            }
            self._messages = types.MappingProxyType(messages).get
        return self._messages

    def _make_hook(self, on_hit, *, sealed: bool = False):
        """The profile hook (see :func:`_hook_template`), its data bound as default values."""
        data, keep = self._hook_data(sealed)
        data = (*data, on_hit, keep)
        return types.FunctionType(
            _hook_template.__code__, {"__builtins__": {}}, "tripwire", data + _HOOK_BUILTINS
        )

    # -- the operator trap ---------------------------------------------------------------------

    def _trap(self, qualified: str):
        label = _operator_label(qualified)

        on_hit = self._hits.append if self._report is None else self._report
        error = ForbiddenOperatorError(forbidden_message(label))

        def trap(*args, **kwargs):
            on_hit(label)
            raise error

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
        keys = _kernel_keys(self.kernels)
        intact = all(_trap_in_place(qualified, each) for qualified, each in keys.items())
        self._library._destroy()
        self._library = None
        return intact

    # -- the context manager -------------------------------------------------------------------

    def __enter__(self) -> Tripwire:
        self.hit = None
        self._hits.clear()
        if self._hook is None:
            self._hook = self._make_hook(self._hits.append)
        self._arm_operators()
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        hook = sys.getprofile()
        sys.setprofile(None)
        threading.setprofile(None)
        intact = self._disarm_operators()
        self.hit = self._hits[0] if self._hits else None
        if self.hit is None and hook is not self._hook:
            self.hit = "sys.setprofile"
        if self.hit is None and not intact:
            self.hit = _TRAP_REMOVED

    # -- sealed, for the grader's child -----------------------------------------------------

    def seal(self, fd: int, *later: Tripwire) -> tuple[Callable[[], None], Callable[[int], None]]:
        """Arm the tripwire for the rest of this process, before any student code runs in it.

        For the grader's disposable child (:mod:`coursepkg.grading.worker`): the hook is
        installed once and never removed, and a hit does not wait for the case to end: the
        hook (or the operator trap, or the audit hook below) writes one message,
        ``{"kind": "forbidden", "name": ...}``, on ``fd`` (the write end of the child's
        :func:`multiprocessing.Pipe`, framed as its ``send_bytes`` frames) and ends the process.
        Nothing the submission can reach afterwards decides anything:

        - the hook's data are its default values (immutable: frozensets, read-only mappings,
          tuples, the builtins it needs captured), so changing the ``Tripwire`` object, its
          class, this module or ``builtins`` changes nothing;
        - an audit hook (``sys.addaudithook``: it cannot be removed) ends the process on what
          would switch the hook off or reach into it: ``sys.setprofile`` and ``sys.settrace``
          from any route (``map``, ``iter``: calls made from C, which the hook does not see),
          setting ``__code__`` or ``__defaults__`` of the course's functions, ``gc``'s object
          walks, and ``ctypes``;
        - threads are forbidden (a thread started from C would run without the hook);
        - the caller the hook trusts is trusted by its code object, one of the course's
          checker's own (:func:`trusted_codes`), not by its module's name or globals.

        ``later``: the tripwires of the child's later tasks, each forbidding no more than the
        one before it (:meth:`covers`) and the same operators. ``advance(k)`` puts the hook of
        ``later[k - 1]`` in place of the current one; only the frame that called ``seal`` may
        call it (the worker's main, between two tasks): from anywhere else, it is a hit. Run
        strictest first, nothing the submission computed before a switch used what the later
        task forbids, and nothing after it can change what was sent back before.

        Returns ``(verify, advance)``: ``verify()`` after each case ends the process the same
        way when the forbidden operators' trap was removed meanwhile.
        """
        for each in later:
            if each.kernels != self.kernels:
                raise ValueError("a sealed tripwire's later stages must trap the same operators")
        hooks = [
            wire._make_hook(wire._report_to(fd), sealed=True) for wire in (self, *later)
        ]
        report = self._report = self._report_to(fd)
        self._arm_operators()
        dump = __import__("torch")._C._dispatch_dump if self.kernels else None
        verify = types.FunctionType(
            _verify_template.__code__, {"__builtins__": {}}, "verify",
            (tuple(_kernel_keys(self.kernels).items()), dump, __file__, report, _TRAP_REMOVED,
             self._library),
        )
        owner = sys._getframe(1)
        advance = types.FunctionType(
            _advance_template.__code__, {"__builtins__": {}}, "advance",
            (tuple(hooks), owner, sys._getframe, sys.setprofile, report),
        )
        guard = types.FunctionType(
            _guard_template.__code__, {"__builtins__": {}}, "guard",
            (types.MappingProxyType(dict(_GUARDED)).get, report,
             frozenset(map(id, (*hooks, report, verify, advance))), type,
             types.FunctionType, str, id, sys._getframe, advance.__code__, owner),
        )
        self._library = None  # kept by ``verify`` alone: nothing may disarm it now
        sys.setprofile(hooks[0])
        sys.addaudithook(guard)
        return verify, advance

    def _report_to(self, fd: int):  # noqa: ANN202
        """The sealed hit (see :func:`_report_template`) of this tripwire's messages."""
        return types.FunctionType(
            _report_template.__code__, {"__builtins__": {}}, "report",
            (self._sealed_messages(),
             _framed({"kind": "forbidden", "name": "forbidden code"}), os.write, os._exit, fd),
        )

    def covers(self, other: Tripwire) -> bool:
        """True when everything ``other`` forbids, this tripwire forbids too, and both trap the
        same operators: a child may run ``other``'s task after this one's (see :meth:`seal`)."""
        if self.kernels != other.kernels:
            return False
        if not all(self._module_hit(prefix) for prefix in other.prefixes):
            return False
        for where, mine in ((other.codes, self.codes), (other.builtins, self.builtins)):
            for key, label in where.items():
                if key not in mine and not label.startswith(_REFERENCE) \
                        and not self._module_hit(label):
                    return False
        return all(
            self.forbidden_callable(layer) is not None
            for reference in other._references for layer in _layers(reference)
        )


_TRAP_REMOVED = "torch.library (the forbidden operators' trap was removed)"
_THREAD = "_thread.start_new_thread (a thread: the grader runs your code on one thread)"
_thread_start = sys.modules["_thread"].start_new_thread
#: What the sealed tripwire's audit hook ends the process on, and the name its message gives.
_GUARDED = {
    "sys.setprofile": "sys.setprofile",
    "sys.settrace": "sys.settrace",
    "gc.get_objects": "gc.get_objects",
    "gc.get_referrers": "gc.get_referrers",
    "gc.get_referents": "gc.get_referents",
    "object.__setattr__": "object.__setattr__ (on the grader's own functions)",
    "object.__delattr__": "object.__delattr__ (on the grader's own functions)",
    "ctypes": "ctypes",
}


_prepared: dict[tuple[str, ...], Tripwire] = {}


def prepared(tasks: Sequence[Task]) -> Tripwire:
    """A tripwire for ``tasks`` with its data made (:meth:`Tripwire.seal` then costs little),
    made once per set of tasks: the grader's fork server prepares every group of tasks a child
    may run before it forks (:mod:`coursepkg.grading.frozen`), so that no child pays for it."""
    key = tuple(task.id for task in tasks)
    wire = _prepared.get(key)
    if wire is None or [t.reference for t in tasks] != wire._references:
        wire = _prepared[key] = Tripwire(*tasks)
        wire._hook_data(True)
        wire._sealed_messages()
    return wire


_trusted_cache: tuple[frozenset, frozenset[int], tuple] | None = None


def trusted_codes() -> tuple[frozenset[int], tuple]:
    """The code objects of the course's checker: every function, method, lambda and nested
    function of the loaded ``coursepkg.checks`` and ``coursepkg.grading`` modules, as a frozenset
    of ids, and the objects themselves (kept alive, so that no id is reused).

    A frame the tripwire trusts (it may call forbidden code: the checker building a task's
    arguments with the package) must run one of these, so that code compiled by a submission
    and run with a checker module's globals (``exec(code, vars(coursepkg.checks.core))``) is
    not taken for the checker. Found among the live functions (``gc.get_objects``: lambdas kept
    in a task's fields included) by their module; computed again, and added to, when another
    of those modules is loaded (the grader's fork server does it before it freezes its objects
    and forks: :mod:`coursepkg.grading.frozen`).
    """
    global _trusted_cache
    names = frozenset(
        name for name in list(sys.modules)
        if isinstance(name, str) and (name in _TRUSTED or name.startswith(_TRUSTED_DOTTED))
    )
    if _trusted_cache is not None and _trusted_cache[0] == names:
        return _trusted_cache[1], _trusted_cache[2]
    # What was found before stays (after gc.freeze(), as in a child of the fork server,
    # gc.get_objects() no longer lists the objects frozen then).
    found = {} if _trusted_cache is None else {id(c): c for c in _trusted_cache[2]}
    modules = [sys.modules[name] for name in names]
    dicts = {id(vars(module)) for module in modules if hasattr(module, "__dict__")}
    stack = [
        obj.__code__
        for obj in gc.get_objects()
        if type(obj) is types.FunctionType
        and (id(obj.__globals__) in dicts or obj.__module__ in names)
    ]
    while stack:  # with the code nested in them: inner functions, lambdas, comprehensions
        code = stack.pop()
        if id(code) not in found:
            found[id(code)] = code
            stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    codes = tuple(found.values())
    _trusted_cache = (names, frozenset(found), codes)
    return _trusted_cache[1], codes


def _nested(code: types.CodeType) -> list[types.CodeType]:
    """A code object and every code object nested in it (inner functions, lambdas)."""
    inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(each for c in inner for each in _nested(c))]


def _operator_label(qualified: str) -> str:
    return f"the torch operator {qualified.partition('.')[0]}"


def _kernel_keys(kernels: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """Qualified operator name -> the dispatch keys the trap holds for it."""
    keys: dict[str, list[str]] = {}
    for _, qualified, key in kernels:
        keys.setdefault(qualified, []).append(key)
    return keys


def _framed(message: dict) -> bytes:
    """``message`` as :meth:`multiprocessing.connection.Connection.send_bytes` frames it."""
    data = json.dumps(message).encode("utf-8")
    return struct.pack("!i", len(data)) + data


# The templates below become functions whose data are their default values
# (``types.FunctionType(template.__code__, {"__builtins__": {}}, name, defaults)``): they read
# no global name and no attribute of a mutable object of ours, so nothing the submission changes
# in this module, in ``builtins`` or in a ``Tripwire`` changes what they do.


def _hook_template(  # noqa: PLR0913 - its data are its defaults, see above
    frame, event, arg,  # noqa: ANN001 - the profiler's signature
    codes=None, builtins=None, prefixes=None, dotted=None, pairs=None, trusted=None,
    libraries=None, own=None, on_hit=None, keep=None,
    _id=None, _type=None, _str=None, _getattr=None, _get=None,
):
    """The profile hook: called for every call and return while the tripwire is armed.

    A call is a violation when the callee is forbidden (its code object, a builtin by identity,
    or its module under a forbidden prefix) and its caller is not trusted: trusted are the
    course's checker (by code object, :func:`trusted_codes`), forbidden code itself (a library's
    own calls are its business, by code object or by its module's real globals). The common case
    (nothing forbidden) is one or two lookups.
    """
    if event == "call":
        name = codes(_id(frame.f_code))
        if name is None:
            if _id(frame.f_code) in own:  # the tripwire's own methods and trap
                return
            name = _get(frame.f_globals, "__name__")
            if _type(name) is not _str or not (name in prefixes or name.startswith(dotted)):
                return
        caller = frame.f_back
    elif event == "c_call":
        name = builtins(_id(arg))
        if name is None:
            name = _getattr(arg, "__module__", None)
            if _type(name) is not _str or not (name in prefixes or name.startswith(dotted)):
                return
        caller = frame
    else:
        return
    if caller is None:
        return
    code = _id(caller.f_code)
    if code in trusted or codes(code) is not None or _id(caller.f_globals) in libraries:
        return
    for prefix, prefix_dot in pairs:  # a module's name is reported as its forbidden prefix
        if name == prefix or name.startswith(prefix_dot):
            name = prefix
            break
    on_hit(name)


_HOOK_BUILTINS = (id, type, str, getattr, dict.get)
# Calls into the tripwire's own methods (``__exit__``, the trap) are not calls to the checker.
_OWN_CODE = frozenset(
    id(code)
    for member in vars(Tripwire).values()
    if isinstance(member, types.FunctionType)
    for code in _nested(member.__code__)
)


def _report_template(name, messages=None, fallback=None, write=None, exit_=None, fd=None):
    """The sealed tripwire's hit: one framed message on the child's pipe, then the end."""
    try:
        write(fd, messages(name) or fallback)
    finally:
        exit_(0)


def _guard_template(event, args, guarded=None, report=None, protected=None, _type=None,
                    _function=None, _str=None, _id=None, getframe=None, switch=None, owner=None):
    """The sealed tripwire's audit hook (see :meth:`Tripwire.seal`)."""
    name = guarded(event)
    if name is None:
        if event[:7] == "ctypes.":
            report(guarded("ctypes"))
        return
    if event == "sys.setprofile":  # allowed to the switch alone, called by the worker's main
        frame = getframe(1)
        if frame.f_code is switch and frame.f_back is owner:
            return
    if event == "object.__setattr__" or event == "object.__delattr__":
        target = args[0]
        if _type(target) is not _function:
            return
        module = target.__module__
        ours = _type(module) is _str and module[:10] == "coursepkg."
        if not (ours or _id(target) in protected):
            return
    report(name)


def _advance_template(stage, hooks=None, owner=None, getframe=None, setprofile=None,
                      report=None):
    """The sealed tripwire's switch to the hook of a later stage (see :meth:`Tripwire.seal`):
    from any caller but the frame that sealed it, a hit."""
    if getframe(1) is not owner:
        report("sys.setprofile")
    setprofile(hooks[stage])


def _verify_template(keys=None, dump=None, own_file=None, report=None, removed=None, keep=None):
    """After each case in a sealed child: the end, when the operators' trap is not in place."""
    for qualified, held in keys:
        for line in dump(qualified).splitlines():
            key = line.split(":")[0]
            if "(inactive)" not in key and key.split("[")[0] in held and own_file not in line:
                report(removed)


def _trap_in_place(qualified: str, keys: list[str]) -> bool:
    """True when the active kernels of ``qualified`` for ``keys`` are still this module's trap
    (or when torch's dispatcher dump does not say)."""
    import torch

    for line in torch._C._dispatch_dump(qualified).splitlines():
        key = line.split(":")[0]
        if "(inactive)" not in key and key.split("[")[0] in keys and __file__ not in line:
            return False
    return True
