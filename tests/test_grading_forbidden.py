"""The forbidden-call tripwire (coursepkg.checks.forbidden): what sees a kernel, shown on torch.

The trap replaces a forbidden operator's kernel in torch's dispatcher while the tripwire is
armed. The first tests show why the other candidates would not do (a TorchDispatchMode never
sees the composite operators; a TorchFunctionMode is blind in other threads); the rest, that the
trap catches every route to the kernels the course forbids, with and without autograd, that
honest code passes, and that the kernels come back.
"""

from __future__ import annotations

import functools
import itertools
import threading
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from coursepkg.checks.forbidden import Tripwire, forbidden_message, operator_kernels

ATTENTION_OPS = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_native_multi_head_attention",
    "aten::_transformer_encoder_layer_fwd",
)
RNN_OPS = ("aten::lstm", "aten::lstm_cell")
NAMES = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    "torch.nn.LSTM",
)


def fake_task(forbidden=(*ATTENTION_OPS, *RNN_OPS, *NAMES)):
    return SimpleNamespace(id="0.0", reference=lambda *a: None, forbidden=tuple(forbidden))


def quietly(fn):
    """Call ``fn``, swallowing what it raises (the body of a student's thread)."""
    try:
        fn()
    except Exception:  # noqa: BLE001, S110 - the trap's error in a thread of its own
        pass


def student(source: str):
    """``f`` defined by student code (its own module name, as in the grader's child)."""
    gen = torch.Generator().manual_seed(0)
    namespace = {
        "__name__": "__submission__",
        "torch": torch,
        "F": F,
        "functools": functools,
        "threading": threading,
        "quietly": quietly,
        "q": torch.randn(2, 3, 4, 8, generator=gen),
        "x": torch.randn(2, 5, 4, generator=gen),
        "lstm": torch.nn.LSTM(4, 6, batch_first=True),
        "mha": torch.nn.MultiheadAttention(8, 2, batch_first=True),
        "layer": torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval(),
    }
    exec(compile(source, "<student>", "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace["f"]


LSTM_ARGS = "x, (torch.zeros(1, 2, 6), torch.zeros(1, 2, 6)), lstm._flat_weights, True, 1, 0.0, " \
    "False, False, True"
ROUTES = {
    "F.scaled_dot_product_attention": "F.scaled_dot_product_attention(q, q, q)",
    "private alias": "torch._scaled_dot_product_attention_math(q, q, q)",
    "torch._C._nn alias": "torch._C._nn.scaled_dot_product_attention(q, q, q)",
    "torch.ops.aten": "torch.ops.aten._scaled_dot_product_attention_math(q, q, q)",
    "through map": "list(map(torch._scaled_dot_product_attention_math, [q], [q], [q]))",
    "through partial": "functools.partial(torch._scaled_dot_product_attention_math, q)(q, q)",
    "in a thread": "(lambda t: (t.start(), t.join()))(threading.Thread(target=lambda: "
                   "quietly(lambda: torch._scaled_dot_product_attention_math(q, q, q))))",
    "nn.MultiheadAttention": "mha(q[0], q[0], q[0])",
    "F.multi_head_attention_forward": "F.multi_head_attention_forward(q[0], q[0], q[0], 8, 2, "
                                      "mha.in_proj_weight, mha.in_proj_bias, None, None, False, "
                                      "0.0, mha.out_proj.weight, mha.out_proj.bias)",
    "inside a fused layer": "layer(q[0])",
    "nn.LSTM": "lstm(x)",
    "torch.lstm": f"torch.lstm({LSTM_ARGS})",
    "torch._VF.lstm": f"torch._VF.lstm({LSTM_ARGS})",
    "torch.ops.aten.lstm": f"torch.ops.aten.lstm({LSTM_ARGS})",
}


def test_a_dispatch_mode_never_sees_the_composite_kernels():
    """Below autograd, aten::lstm and the math attention are already matmuls: a
    TorchDispatchMode cannot tell them from a student's own code."""
    seen = set()

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.name())
            return func(*args, **(kwargs or {}))

    with Watch():
        student(f"def f():\n    return {ROUTES['torch.lstm']}")()
        student(f"def f():\n    return {ROUTES['private alias']}")()
    assert not {"aten::lstm", "aten::_scaled_dot_product_attention_math"} & seen
    assert "aten::mm" in seen or "aten::bmm" in seen or "aten::addmm" in seen


def test_a_function_mode_is_blind_in_another_thread():
    """A TorchFunctionMode sees torch's functions by object, but only in the thread that
    pushed it: a call made from a new thread goes unseen."""
    seen = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    with Watch():
        student(f"def f():\n    return {ROUTES['in a thread']}")()
    assert "_scaled_dot_product_attention_math" not in seen
    with Watch():
        student(f"def f():\n    return {ROUTES['private alias']}")()
    assert "_scaled_dot_product_attention_math" in seen


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_to_a_forbidden_kernel_trips_the_wire(route, grad):
    func = student(f"def f():\n    return {ROUTES[route]}")
    wire = Tripwire(fake_task())
    with torch.set_grad_enabled(grad):
        try:
            with wire:
                func()
        except Exception:  # noqa: BLE001 - the trap raises in place of the kernel
            pass
    assert wire.hit is not None, route


def test_inference_mode_does_not_get_around_the_trap():
    func = student(f"def f():\n    return {ROUTES['private alias']}")
    wire = Tripwire(fake_task(ATTENTION_OPS))
    with torch.inference_mode(), pytest.raises(RuntimeError, match="forbidden: you called"):
        with wire:
            func()
    assert wire.hit == "the torch operator aten::_scaled_dot_product_attention_math"


def test_honest_attention_passes_and_the_kernels_come_back():
    func = student(
        "def f():\n    w = torch.softmax(q @ q.transpose(-2, -1) / 8 ** 0.5, dim=-1)\n"
        "    return w @ q, torch.tanh(x).sum()"
    )
    wire = Tripwire(fake_task())
    with wire:
        out, _ = func()
    assert wire.hit is None
    q = student("def f():\n    return q")()
    torch.testing.assert_close(F.scaled_dot_product_attention(q, q, q), out)
    assert lstm_works_again()


def lstm_works_again() -> bool:
    return student("def f():\n    return lstm(x)[0].shape")() == (2, 5, 6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # gc.get_objects touches torch.distributed
def test_switching_the_trap_off_is_itself_forbidden():
    """Removing the trap's registrations (found through the garbage collector) is seen."""
    func = student(
        "import gc\nimport torch.library\ndef f():\n"
        "    for obj in gc.get_objects():\n"
        "        if isinstance(obj, torch.library.Library) and obj.ns == 'aten':\n"
        "            obj._destroy()\n"
        "    return torch._scaled_dot_product_attention_math(q, q, q)"
    )
    wire = Tripwire(fake_task(ATTENTION_OPS))
    with wire:
        func()
    assert wire.hit is not None and "trap" in wire.hit


def test_a_borrowed_module_name_does_not_make_a_caller_trusted():
    """A function made with ``{"__name__": "coursepkg.checks"}`` as its globals is student code."""
    func = student(
        "import types\ndef g():\n    return F.scaled_dot_product_attention(q, q, q)\n"
        "f = types.FunctionType(g.__code__, {**globals(), '__name__': 'coursepkg.checks.x'})"
    )
    wire = Tripwire(fake_task(NAMES))
    with wire:
        func()
    assert wire.hit == "torch.nn.functional.scaled_dot_product_attention"


def test_operator_names_are_checked_against_torch():
    assert {k[1] for k in operator_kernels("aten::lstm")} == {"aten::lstm.input", "aten::lstm.data"}
    with pytest.raises(ValueError, match="aten::no_such_kernel"):
        Tripwire(fake_task(("aten::no_such_kernel",)))


def test_every_forbidden_operator_of_the_course_exists_in_this_torch():
    from coursepkg.checks import TASKS

    for task in TASKS.values():
        for name in task.forbidden:
            if name.startswith("aten::"):
                assert operator_kernels(name), (task.id, name)


def test_the_message_says_what_was_called_and_what_it_costs():
    message = forbidden_message("torch.nn.LSTM")
    assert message.startswith("forbidden: you called torch.nn.LSTM")
    assert message.endswith("the grader gives 0 for this.")


def test_the_tripwire_s_own_code_is_not_a_forbidden_call():
    """Every task forbids "coursepkg.checks" (where this module lives): entering and leaving
    the tripwire from outside the checker, or its trap firing, is not a call to it."""
    task = fake_task(("coursepkg.checks", *ATTENTION_OPS))
    wire = Tripwire(task)
    with wire:
        pass
    assert wire.hit is None
    func = student(f"def f():\n    return {ROUTES['private alias']}")
    with pytest.raises(RuntimeError), wire:
        func()
    assert wire.hit == "the torch operator aten::_scaled_dot_product_attention_math"


# ----------------------------------------------------------------------------- stages


def test_a_tripwire_covers_those_that_forbid_no_more():
    """Chapter 1: task 1.10 forbids what 1.1 forbids and more, 1.1 what 1.4 forbids (the
    package's n-gram module covers its perplexity method), 1.4 what 1.7 forbids (the
    checker's modules cover 1.7's reference); never the other way round. A tripwire that traps
    kernels and one that does not cover neither."""
    from coursepkg.checks import get_task

    wires = [Tripwire(get_task(i)) for i in ("1.10", "1.1", "1.4", "1.7")]
    for stricter, laxer in itertools.pairwise(wires):
        assert stricter.covers(laxer) and not laxer.covers(stricter)
    assert wires[0].covers(wires[-1])
    names = Tripwire(fake_task(NAMES))
    kernels = Tripwire(fake_task((*NAMES, *ATTENTION_OPS)))
    assert not kernels.covers(names) and not names.covers(kernels)


def test_a_task_s_reference_is_covered_only_where_it_is_forbidden():
    """Task 3.4 forbids attention but not the checker: a question's reference (3.5's) may be
    called under its tripwire, so a child may not run 3.5 after 3.4 (3.4 could keep 3.5's
    answer for it). The questions forbid nothing but their own references: one covers another
    only as their group (one tripwire for the three)."""
    from coursepkg.checks import get_task

    questions = [get_task(i) for i in ("3.5", "3.6", "3.7")]
    assert not Tripwire(get_task("3.4")).covers(Tripwire(questions[0]))
    assert not Tripwire(questions[0]).covers(Tripwire(questions[1]))  # each its own reference
    assert all(Tripwire(*questions).covers(Tripwire(q)) for q in questions)  # their group's


def test_every_chain_runs_strictest_first_and_every_task_once():
    from coursepkg.checks import tasks_for
    from coursepkg.course import CHAPTERS
    from coursepkg.grading.grader import private_paths, task_chains

    for chapter in CHAPTERS:
        tasks = tasks_for(chapter.stem)
        chains = task_chains(tasks)
        ran = [t.id for chain in chains for group in chain for t in group]
        assert sorted(ran) == sorted(t.id for t in tasks), chapter.stem
        for chain in chains:
            for before, after in itertools.pairwise(chain):
                assert Tripwire(*before).covers(Tripwire(*after)), (chapter.stem, chain)
                assert private_paths(before[0]) == private_paths(after[0])
    first = [[[t.id for t in group] for group in chain]
             for chain in task_chains(tasks_for("01_ngrams"))]
    assert first == [[["1.10"], ["1.1", "1.2", "1.3", "1.5", "1.6"], ["1.4"],
                      ["1.7", "1.8", "1.9"]]]
