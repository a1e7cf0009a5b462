"""What every chapter's tests of its checks share: the tests' instructor secret and the hidden
cases it makes, hostile stand-ins for student functions, the assertions every printed check must
satisfy, and :class:`Chapter`, the tables through which a chapter's test module hands its checks
to the generic tests in test_checks_common.py.

The generic tests know the kinds of task (``Task.kind``): a question has one public case and no
hidden one (``min_public`` and ``min_hidden`` do not apply; list it in ``scalar_inputs``), and its
tripwire must refuse its reference and the key it computes, not ``package`` nor
``forbidden_calls`` (a question may run the chapter's code to find its answer); a train
task is left out of the NaN test (``state_dict_plain`` refuses non-finite weights) and its check
reports are compared without their measured times; a debug task's stub is still ``stub`` (the
starter code is a wrong implementation like any other: put it in ``wrong``).
See tests/framework_examples.py for a worked example of each kind."""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

import torch
import torch.nn.functional as F

from coursepkg import checks
from coursepkg.checks.tensors import NO_ANSWER

#: The instructor's secret of the tests: the hidden cases of every task are made from it.
TEST_SECRET = b"course-tests-secret-0123456789"


@functools.cache
def run_task(task_id: str, func: Callable, hidden: bool = False) -> checks.TaskResult:
    """``checks.run_task`` on the public cases, and with ``hidden`` also on the hidden cases
    made from :data:`TEST_SECRET`; remembered (a function's results on a task never change:
    the inputs are seeded, and a sampling loop runs its model a hundred times per case). The
    task's own reference runs without the tripwire, which refuses it by design."""
    task = checks.get_task(task_id)
    return checks.run_task(task_id, func, secret=TEST_SECRET if hidden else None,
                           tripwire=func is not task.reference)


def all_cases(task: checks.Task) -> tuple[checks.Case, ...]:
    """Every case the grader runs with :data:`TEST_SECRET`: the public ones, then the hidden."""
    return checks.grading_cases(task, TEST_SECRET)


def hidden_cases(task: checks.Task) -> tuple[checks.Case, ...]:
    """The hidden cases :data:`TEST_SECRET` makes."""
    return tuple(case for case in all_cases(task) if case.hidden)


class AlwaysEqual:
    """A result that claims to equal anything: must never pass a check."""

    def __eq__(self, other):
        return True

    __hash__ = None


class LeakyError(Exception):
    pass


def leaky(*args):
    """A student function whose exception message would reveal a hidden case's inputs."""
    raise LeakyError(repr(args))


def strip_raised(message):
    """A hidden case's message without its "raised X. " prefix (X a built-in type's name only,
    never the exception's own message)."""
    if message.startswith("raised "):
        name, _, rest = message[len("raised ") :].partition(". ")
        assert name == "an exception" or name in dir(builtins), message
        return rest
    return message


def short_training(model, inputs, targets, steps, *, lr, batch, seed=0, zero_grad=True,
                   shuffled=False):
    """The reference's training loop of a classifier's train task
    (:func:`coursepkg.checks.tensors.fit_classifier`) with the faults a student's training
    may have, for the "trains too little or wrongly" stand-ins: few ``steps``, the gradients
    never cleared (``zero_grad=False``), or each minibatch's answers drawn apart from its
    inputs (``shuffled``). ``inputs``: one tensor or a tuple (the model's arguments);
    ``targets``: the answers, ``NO_ANSWER`` where there is none. Returns ``model``."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = torch.randint(0, len(targets), (batch,), generator=generator)
        answers = rows
        if shuffled:
            answers = torch.randint(0, len(targets), (batch,), generator=generator)
        logits = model(*(x[rows] for x in inputs))  # (batch, ..., C)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[answers].reshape(-1),
                               ignore_index=NO_ANSWER)
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def check_output(capsys, task_id, func):
    """What ``check`` prints: it returns None and prints clean ASCII lines, no object ids."""
    assert checks.check(task_id, func) is None
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.isascii()
    assert " at 0x" not in out
    assert all(line == line.rstrip() for line in out.splitlines())
    return out


@dataclass(frozen=True)
class Chapter:
    """One chapter's checks, as the generic tests of test_checks_common.py see them.

    Attributes:
        assignment: The exercise set, ``"02_rnn"``.
        tasks: Task id -> (function name, public points, all points), in order.
        hints: The chapter's checks module: its ``HINT_*`` strings name the known mistakes, and
            its ``HINT_*_GENERIC`` ones are what an unrecognised wrong answer gets.
        correct: Task id -> correct implementations (the reference first); all get full marks.
        wrong: Task id -> (wrong implementation, words its public feedback must hold).
        stub: The exercise's stub: raises NotImplementedError.
        min_public, min_hidden: The fewest public and hidden cases a task may have.
        public_points: The fewest and most points a task's public cases may be worth.
        forbidden: Dotted names every task forbids.
        package: A package every task's tripwire watches.
        not_finite_hint: Words of the feedback to a result holding NaN or infinite values.
        failure_reports: (task id, wrong implementation, the first line of its check report,
            lines the report must hold): ``check`` must print that, the same every time.
        allowed: Packages no task may forbid (an earlier chapter's exercises, called by this one's).
        typed: Tasks whose inputs are float32 in public cases and float32 and float64 in hidden
            ones; None: every task.
        seeded: Tasks whose cases draw their inputs from a seed; None: every task.
        scalar_inputs: Tasks whose arguments are all numbers (nothing a function could mutate).
        exact_results: Tasks whose results hold no floating-point number (counts, masks, ids).
        not_finite: The non-finite values ``not_finite_hint`` is given for: "nan", "inf", "-inf".
        more_hints: Messages a hidden case may give beyond ``HINT_*`` and the error hints (hints
            the chapter composes, e.g. "the step is wrong" followed by the step's mistake).
        more_hidden_funcs: Implementations whose hidden messages are checked beyond ``wrong``.
        crashes_excused: Whether a wrong implementation may crash in a public case (the error's
            hint, not its mistake's, is then what it gets).
        wrong_types: (task id, function, words the feedback of its wrong return type must hold).
        hidden_type_hints: Task id -> the feedback of a hidden case to a wrong return type
            (default: the task's "CheckError" hint).
        forged: Task id -> function of a right plain value, giving forged variants of it that
            the trusted half must fail (beyond the forgeries every task must fail).
        forbidden_calls: Callable -> the forbidden name the tripwire finds it is in every task
            (None: any name; a reference, for one, is named after its own task there).
        allowed_calls: Callables the tripwire lets every task call.
    """

    assignment: str
    tasks: Mapping[str, tuple[str, int, int]]
    hints: ModuleType
    correct: Mapping[str, list[Callable]]
    wrong: Mapping[str, list[tuple[Callable, str]]]
    stub: Callable
    min_public: int
    min_hidden: int
    public_points: tuple[int, int]
    forbidden: tuple[str, ...]
    package: str
    not_finite_hint: str
    failure_reports: tuple[tuple[str, Callable, str, tuple[str, ...]], ...]
    allowed: tuple[str, ...] = ()
    typed: tuple[str, ...] | None = None
    seeded: tuple[str, ...] | None = None
    scalar_inputs: tuple[str, ...] = ()
    exact_results: tuple[str, ...] = ()
    not_finite: tuple[str, ...] = ("nan", "inf", "-inf")
    more_hints: frozenset[str] = frozenset()
    more_hidden_funcs: tuple[Callable, ...] = ()
    crashes_excused: bool = False
    wrong_types: tuple[tuple[str, Callable, str], ...] = ()
    hidden_type_hints: Mapping[str, str] = field(default_factory=dict)
    forged: Mapping[str, Callable[[object], list]] = field(default_factory=dict)
    forbidden_calls: Mapping[Callable, str | None] = field(default_factory=dict)
    allowed_calls: tuple[Callable, ...] = ()

    def is_typed(self, task_id: str) -> bool:
        return self.typed is None or task_id in self.typed

    def is_seeded(self, task_id: str) -> bool:
        return self.seeded is None or task_id in self.seeded


def forged_pairs(pair, shape, size):
    """Forged variants of a right plain pair of tensors (a, b): one, three, swapped, ``a`` of
    another ``shape`` or with ``size`` strings for data, ``b`` with a dtype or a key that is not
    one."""
    a, b = pair
    return [[a], [a, b, b], [b, a], [{**a, "shape": shape}, b], [{**a, "data": ["1"] * size}, b],
            [a, {**b, "dtype": 3}], [a, {**b, "extra": 1}]]
