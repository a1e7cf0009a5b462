"""The tests every chapter's checks must pass, run over the tables each chapter's test module
(test_checks_01.py ... test_checks_07.py) hands over in its ``CHAPTER``.

The checks are graded code too: every task must give full marks (public and hidden) to its
correct implementations, take points from the known wrong ones with the hint that names their
mistake, never leak hidden data, and not be fooled by whatever a student hands it; ``check``
must print and never raise. What only one chapter's checks do is tested in its own module.

The chapters are those of ``coursepkg.course.CHAPTERS``: a chapter listed there without its test
module ``test_checks_NN.py`` fails the collection of this file.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import json
import math
import re

import nbformat
import pytest
import torch
from checks_support import (
    TEST_SECRET,
    AlwaysEqual,
    all_cases,
    check_output,
    hidden_cases,
    leaky,
    run_task,
    strip_raised,
)
from torch import nn

from coursepkg import checks, course
from coursepkg.checks import core
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits

CHAPTERS = [importlib.import_module(f"test_checks_{chapter.number:02d}").CHAPTER
            for chapter in course.CHAPTERS]
#: Task id -> its chapter.
CHAPTER_OF = {task_id: chapter for chapter in CHAPTERS for task_id in chapter.tasks}
TASK_IDS = list(CHAPTER_OF)

each_chapter = pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.assignment)
each_task = pytest.mark.parametrize("task_id", TASK_IDS)

WRONG_PARAMS = [
    pytest.param(task_id, func, hint, id=f"{task_id}-{func.__name__}")
    for chapter in CHAPTERS
    for task_id, wrongs in chapter.wrong.items()
    for func, hint in wrongs
]

WRONG_TYPES = [
    pytest.param(task_id, func, expected, id=f"{task_id}-{n}")
    for chapter in CHAPTERS
    for n, (task_id, func, expected) in enumerate(chapter.wrong_types)
]

# torch warns about x.T on tensors of more than 2 dims, which some wrong implementations use
ignore_x_T = pytest.mark.filterwarnings("ignore:The use of `x.T`")


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def test_the_chapters_are_the_course_s():
    assert [chapter.assignment for chapter in CHAPTERS] == [ch.stem for ch in course.CHAPTERS]
    assert {task.assignment for task in checks.TASKS.values()} == {
        ch.stem for ch in course.CHAPTERS}


@each_chapter
def test_the_tasks_are_registered_in_order(chapter):
    tasks = checks.tasks_for(chapter.assignment)
    assert [task.id for task in tasks] == list(chapter.tasks)
    for task, (func_name, public, total) in zip(tasks, chapter.tasks.values(), strict=True):
        assert task.func_name == func_name
        assert checks.task_by_func_name(func_name, chapter.assignment) is task
        assert (task.max_points(public_only=True), task.max_points()) == (public, total), task.id
    assert checks.task_by_func_name("no_such_function") is None
    with pytest.raises(KeyError, match=re.escape(", ".join(chapter.tasks))):
        checks.get_task("9.9")


@each_task
def test_every_task_has_public_and_hidden_cases_worth_points(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    if task.kind == "question":  # one public case, no hidden one (checks.question)
        assert len(task.public_cases) == 1 and task.hidden == ()
    else:
        assert len(task.public_cases) >= chapter.min_public
        assert len(hidden_cases(task)) == len(task.hidden) >= chapter.min_hidden
    cases = all_cases(task)
    assert all(case.points > 0 for case in cases)
    low, high = chapter.public_points
    assert low <= task.max_points(public_only=True) <= high
    assert task.max_points() == sum(case.points for case in cases)
    assert len({case.name for case in cases}) == len(cases)
    assert all(case.name.startswith("hidden:") for case in hidden_cases(task))
    assert not any(case.hidden for case in task.cases)
    for name in chapter.forbidden:
        assert name in task.forbidden
    for package in chapter.allowed:
        assert not any(name.startswith(package) for name in task.forbidden)


@each_task
def test_every_case_args_are_plain_json(task_id):
    task = checks.get_task(task_id)
    for case in all_cases(task):
        assert checks.plain_problem(case.args) is None, case.name
        assert json.loads(json.dumps(case.args)) == case.args, case.name
        if task.expected is not None:  # a train task's held-out data, never sent anywhere
            continue
        expected = task.to_plain(task.reference(*task.build_args(core.student_args(case.args))))
        assert checks.plain_problem(expected) is None, case.name
        assert json.loads(json.dumps(expected)) == expected, case.name
        if isinstance(expected, float):
            assert math.isfinite(expected), case.name


@each_task
def test_hidden_cases_differ_from_the_public_ones(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    public = [case.args for case in task.public_cases]
    for case in hidden_cases(task):
        assert case.args not in public
        if chapter.is_seeded(task_id):
            assert case.args["seed"] not in {args["seed"] for args in public}
    if chapter.is_typed(task_id):
        assert {case.args["dtype"] for case in hidden_cases(task)} == {"float32", "float64"}
        assert all(case.args["dtype"] == "float32" for case in task.public_cases)


@each_task
def test_hidden_cases_come_from_the_secret_alone(task_id):
    """The package holds no hidden case: without the secret there are none, the same secret
    makes the same ones, and another secret other ones (same names and points)."""
    task = checks.get_task(task_id)
    assert checks.grading_cases(task, None) == task.public_cases
    if not task.hidden:  # a question: any secret makes no hidden case
        assert task.kind == "question"
        assert checks.grading_cases(task, TEST_SECRET) == task.public_cases
        assert checks.grading_cases(task, TEST_SECRET[::-1]) == task.public_cases
        return
    again = checks.grading_cases(task, TEST_SECRET)
    assert again == all_cases(task)
    other = [case for case in checks.grading_cases(task, TEST_SECRET[::-1]) if case.hidden]
    assert [(c.name, c.points) for c in other] == [(c.name, c.points) for c in hidden_cases(task)]
    assert [c.args for c in other] != [c.args for c in hidden_cases(task)]


def _listed(case):
    """The case's arguments that are lists (of tokens, lengths, positions...)."""
    return [value for value in case.args.values() if isinstance(value, list) and value]


@pytest.mark.parametrize(
    "task_id", [task_id for task_id in TASK_IDS
                if any(_listed(case) for case in hidden_cases(checks.get_task(task_id)))])
def test_hidden_case_names_do_not_show_data(task_id):
    for case in hidden_cases(checks.get_task(task_id)):
        for value in _listed(case):
            assert repr(value) not in case.name
            assert json.dumps(value) not in case.name


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


@each_task
def test_correct_implementations_get_full_marks(task_id):
    correct = CHAPTER_OF[task_id].correct[task_id]
    assert correct[0] is checks.get_task(task_id).reference
    for func in correct:
        result = run_task(task_id, func, hidden=True)
        assert result.status == "passed", (func.__name__, [c.message for c in result.cases])
        assert result.points == result.max_points == checks.get_task(task_id).max_points()
        assert all(case.message == "" for case in result.cases)


@each_task
def test_public_run_is_public_only(task_id):
    result = run_task(task_id, CHAPTER_OF[task_id].correct[task_id][0])
    assert not any(case.hidden for case in result.cases)
    assert result.max_points == checks.get_task(task_id).max_points(public_only=True)


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


@ignore_x_T
@pytest.mark.parametrize(("task_id", "func", "hint"), WRONG_PARAMS)
def test_wrong_implementation_loses_points_with_its_hint(task_id, func, hint):
    public = run_task(task_id, func)
    assert public.points < public.max_points
    assert public.status in ("partial", "failed")
    messages = [case.message for case in public.cases if case.status != "passed"]
    assert any(hint in message for message in messages), messages
    everything = run_task(task_id, func, hidden=True)
    assert everything.points < everything.max_points


@each_task
def test_at_least_three_wrong_implementations_per_task(task_id):
    wrong = CHAPTER_OF[task_id].wrong[task_id]
    assert len(wrong) >= 3
    assert len({hint for _, hint in wrong}) >= 3


@ignore_x_T
@each_task
def test_wrong_implementations_are_told_apart(task_id):
    """A failed public case names the function's own mistake, unless its output there is
    identical to that of another known mistake (e.g. no bias = one bias missing, when the other
    bias happens to be what the case tests), or, in the chapters that allow it, the case makes
    it crash (the error's hint then names the shapes)."""
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    wrong = chapter.wrong[task_id]

    def output(func, case):
        try:
            return json.dumps(checks.student_output(task, case, func))
        except Exception as exc:
            return type(exc).__name__

    for func, hint in wrong:
        for case, result in zip(task.public_cases, run_task(task_id, func).cases, strict=True):
            named = result.status == "passed" or hint in result.message
            excused = chapter.crashes_excused and result.status == "error"
            assert named or excused or any(
                other_hint in result.message and output(other, case) == output(func, case)
                for other, other_hint in wrong), (func.__name__, case.name, result.message)


@ignore_x_T
@each_task
def test_every_hidden_failure_of_a_wrong_implementation_names_a_mistake(task_id):
    """In hidden cases too a wrong implementation gets a hint naming a mistake (a twin's hint
    where the case cannot tell them apart), never the generic one."""
    chapter = CHAPTER_OF[task_id]
    generic = {value for name, value in vars(chapter.hints).items()
               if name.startswith("HINT_") and name.endswith("_GENERIC")}
    assert generic
    for func, _ in chapter.wrong[task_id]:
        for case in run_task(task_id, func, hidden=True).cases:
            assert case.status == "passed" or not any(
                case.message.startswith(g) for g in generic), (func.__name__, case.name)


# ---------------------------------------------------------------------------------------------
# Whatever the student hands over: errors, stubs, wrong types, odd values, mutated inputs
# ---------------------------------------------------------------------------------------------


@each_task
@pytest.mark.parametrize("exc", [SystemExit(3), RecursionError("deep"), MemoryError()])
def test_any_exception_from_student_code_is_an_error(task_id, exc):
    def raises(*args):
        raise exc

    result = run_task(task_id, raises, hidden=True)
    assert {case.status for case in result.cases} == {"error"}
    assert result.points == 0 and result.status == "failed"


@each_task
def test_stub_is_not_attempted(task_id):
    result = run_task(task_id, CHAPTER_OF[task_id].stub, hidden=True)
    assert result.status == "not attempted"
    assert result.points == 0
    assert {case.status for case in result.cases} == {"not attempted"}


@pytest.mark.parametrize(("task_id", "func", "expected"), WRONG_TYPES)
def test_wrong_types_fail_and_say_what_was_expected(task_id, func, expected):
    result = run_task(task_id, func)
    assert {case.status for case in result.cases} == {"failed"}
    assert result.points == 0
    assert expected in result.cases[0].message, result.cases[0].message


@each_task
def test_wrong_types_in_hidden_cases_get_the_tasks_hint(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    hint = chapter.hidden_type_hints.get(task_id) or task.error_hints.get(
        "CheckError", "The function returned a value of the wrong type (see the public tests).")
    result = run_task(task_id, lambda *a: None, hidden=True)
    if not task.hidden:  # a question: its one public case says what was expected, and the hint
        assert task.kind == "question" and task.error_hints.get("CheckError")
        (case,) = result.cases
        assert case.status == "failed" and case.message.endswith(" " + hint), case.message
        return
    assert {case.message for case in result.cases if case.hidden} == {hint}


def _float_parts(value, path=()):
    """The paths to the floating-point parts of a result (tensors, floats, in tuples)."""
    if isinstance(value, torch.Tensor):
        return [path] if value.is_floating_point() else []
    if isinstance(value, float):
        return [path]
    if isinstance(value, tuple | list):
        return [found for i, part in enumerate(value) for found in _float_parts(part, (*path, i))]
    return []


def _filled(value, path, fill):
    """``value`` with its part at ``path`` filled with ``fill``."""
    if not path:
        return torch.full_like(value, fill) if isinstance(value, torch.Tensor) else fill
    return type(value)(_filled(part, path[1:], fill) if i == path[0] else part
                       for i, part in enumerate(value))


@pytest.mark.parametrize(
    "task_id", [task_id for task_id in TASK_IDS
                if task_id not in CHAPTER_OF[task_id].exact_results
                and checks.get_task(task_id).kind != "train"])  # weights: state_dict_plain
def test_nan_and_inf_never_pass(task_id):
    """The right result with NaN or infinite values in place of any one of its parts never
    scores, and the feedback says what is wrong with it."""
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    reference = chapter.correct[task_id][0]
    for n, case in enumerate(all_cases(task)):
        right = reference(*task.build_args(case.args))
        parts = _float_parts(right)
        assert parts
        for path in parts:
            for value in ("nan", "inf", "-inf"):
                # what the student half sends for a function returning this
                plain = task.to_plain(_filled(right, path, float(value)))
                result = checks.grade_output(task, case, json.loads(json.dumps(plain)))
                assert result.points == 0, (case.name, path, value)
                if n == 0 and value in chapter.not_finite:
                    assert chapter.not_finite_hint in result.message, (path, value)


def _detached(value):
    """A copy of a result that later changes to the function's inputs cannot reach."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return type(value)(_detached(part) for part in value)
    return copy.deepcopy(value)


def _vandalise(value):
    """Change an argument in place, every element of it (numbers up by one, bools flipped, a
    module's parameters and buffers likewise, lists and dicts emptied, a generator reseeded);
    return how many objects changed."""
    if isinstance(value, torch.Tensor):
        with torch.no_grad():
            if value.dtype == torch.bool:
                value.logical_not_()
            else:
                value.add_(1)
        return 1
    if isinstance(value, nn.Module):
        return sum(_vandalise(tensor) for tensor in [*value.parameters(), *value.buffers()])
    if isinstance(value, torch.Generator):
        value.manual_seed(value.initial_seed() + 1)
        return 1
    if isinstance(value, list | dict):
        parts = list(value.values() if isinstance(value, dict) else value)
        value.clear()
        return 1 + sum(_vandalise(part) for part in parts)
    if isinstance(value, tuple):
        return sum(_vandalise(part) for part in value)
    return 0


@pytest.mark.parametrize(
    "task_id", [task_id for task_id in TASK_IDS
                if task_id not in CHAPTER_OF[task_id].scalar_inputs])
def test_a_function_that_changes_its_inputs_fails_and_cannot_change_the_expected_value(task_id):
    """Inputs are sacred: a function that changes them (here all of them, after computing the
    right answer) fails every case, the public ones naming an input by the function's own
    parameter name; and what it did to them never reaches the expected value."""
    task, correct = checks.get_task(task_id), CHAPTER_OF[task_id].correct[task_id][-1]
    reference = task.reference
    changed = []

    def mutating(*args):
        result = _detached(correct(*args))
        changed.append(sum(_vandalise(arg) for arg in args))
        return result

    result = run_task(task_id, mutating, hidden=True)
    assert all(changed) and result.points == 0
    assert {case.status for case in result.cases} == {"failed"}
    for case in result.cases:
        assert case.message.endswith("The grader gives 0 for this."), case.message
        if case.hidden:
            assert case.message == core._HIDDEN_INPUT_CHANGED
        else:
            assert case.message.startswith("Your function changed its input args["), case.message
    for case in all_cases(task):
        right = task.to_plain(reference(*task.build_args(case.args)))
        try:
            checks.student_output(task, case, mutating)
        except checks.InputChangedError:
            pass
        assert checks.grade_output(task, case, right).status == "passed", case.name


@each_task
def test_objects_that_claim_equality_do_not_pass(task_id):
    for claim in (AlwaysEqual(), *((AlwaysEqual(),) * n for n in (2, 3, 4))):
        result = run_task(task_id, lambda *args, claim=claim: claim, hidden=True)
        assert result.points == 0, claim


@each_task
def test_the_forbidden_calls_resolve_to_real_objects(task_id):
    """Every task forbids its reference. A question forbids the key its reference computes
    (``key`` in ``checks.question``, the reference's ``__wrapped__``), not the package: it
    asks about the chapter's experiments, and running the chapter's code to answer it is fair
    (a chapter may forbid more names in its questions, but need not)."""
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    tripwire = checks.tripwire_for(task)
    reference = f"the course's reference solution of task {task_id}"
    assert tripwire.forbidden_callable(task.reference) == reference
    for func in chapter.allowed_calls:
        assert tripwire.forbidden_callable(func) is None, func
    if task.kind == "question":
        assert tripwire.forbidden_callable(task.reference.__wrapped__) == reference
        return
    assert chapter.package in tripwire.prefixes
    for func, name in chapter.forbidden_calls.items():
        found = tripwire.forbidden_callable(func)
        assert found is not None if name is None else found == name, func


# ---------------------------------------------------------------------------------------------
# Hidden cases never leak their data
# ---------------------------------------------------------------------------------------------


def _allowed_hidden_messages(chapter, task):
    hints = {value for name, value in vars(chapter.hints).items() if name.startswith("HINT_")}
    hints |= chapter.more_hints
    hints |= set(task.error_hints.values()) | set(core._DEFAULT_ERROR_HINTS.values())
    hints.add(core._UNKNOWN_ERROR_HINT)
    hints |= {core.forbidden_result(task.cases[0], name).message for name in task.forbidden}
    hints |= {
        "The function still raises NotImplementedError.",
        "The function returned a value of the wrong type (see the public tests).",
        "The returned value does not have the expected form.",
        "The result is not the expected one: re-read the task's definition.",
    }
    return hints


@ignore_x_T
@each_task
def test_hidden_messages_are_hints_only(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    allowed = _allowed_hidden_messages(chapter, task)
    funcs = [func for func, _ in chapter.wrong[task_id]] + [chapter.stub, leaky]
    funcs += [lambda *a: AlwaysEqual(), lambda *a: [1, 2], lambda *a: None]
    funcs += chapter.more_hidden_funcs
    expected = {case.name: task.to_plain(task.reference(*task.build_args(case.args)))
                for case in hidden_cases(task)}
    for func in funcs:
        result = run_task(task_id, func, hidden=True)
        for case_result, case in zip(result.cases, all_cases(task), strict=True):
            if not case.hidden or case_result.status == "passed":
                continue
            message = case_result.message
            assert strip_raised(message) in allowed | {""}, (func, message)
            assert "expected" not in message.lower() or message in allowed
            assert json.dumps(case.args) not in message
            value = expected[case.name]
            if isinstance(value, float) and len(core.fmt_number(value)) > 3:
                assert core.fmt_number(value) not in message


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


@ignore_x_T
@each_task
def test_student_half_and_trusted_half_through_json_equal_evaluate_case(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    for func in [chapter.correct[task_id][-1]] + [func for func, _ in chapter.wrong[task_id][:4]]:
        # run_task evaluates each case with checks.evaluate_case
        for case, direct in zip(all_cases(task), run_task(task_id, func, hidden=True).cases,
                                strict=True):
            if direct.message.startswith("forbidden: "):
                continue  # the worker's tripwire decides that (test_grading_*.py)
            try:
                plain = checks.student_output(task, case, func)
            except Exception as exc:
                remote = checks.exception_result(task, case, checks.exception_name(exc), str(exc))
            else:
                remote = checks.grade_output(
                    task, case, json.loads(json.dumps(plain, allow_nan=True)))
            if direct.seconds is not None and direct.message.startswith("Over the time budget"):
                continue  # a train task's time: the grader measures it (test_grading_*.py)
            assert remote == dataclasses.replace(direct, seconds=None)


@each_task
def test_grade_output_rejects_forged_plain_values(task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    case = task.cases[0]
    good = checks.student_output(task, case, chapter.correct[task_id][0])
    forged = [None, 3.5, "text", [good], {"a": 1}]
    if task_id in chapter.forged:
        forged += chapter.forged[task_id](good)
    for value in forged:
        result = checks.grade_output(task, case, value)
        assert result.status == "failed" and result.points == 0, value
    assert checks.grade_output(task, case, good).status == "passed"


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


@each_task
def test_check_reports_full_marks_and_leaves_the_global_random_state_alone(capsys, task_id):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    func_name, public, _ = chapter.tasks[task_id]
    lines = [f"Task {task_id} {func_name}: {public}/{public} points"]
    lines += [f"  PASS  [{case.points:g}/{case.points:g}] {case.name}"
              for case in task.public_cases]
    if task.hidden:
        lines.append("  (The grader also runs hidden tests on this task.)")
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for func in chapter.correct[task_id][1:]:  # the checks build modules for some
        out = untimed(check_output(capsys, task_id, func))
        assert out == "\n".join(lines) + "\n", func
    assert torch.equal(torch.rand(3), expected)


@each_task
def test_check_refuses_the_course_s_own_reference_as_the_grader_does(capsys, task_id):
    """The reference solution is forbidden: the check cell fails it on every case and says that
    the grader gives 0 for it."""
    func_name, public, _ = CHAPTER_OF[task_id].tasks[task_id]
    task = checks.get_task(task_id)
    if task.kind == "question":
        task.reference()  # with its key cached: the cache is no way round the tripwire
    out = check_output(capsys, task_id, task.reference)
    assert out.startswith(f"Task {task_id} {func_name}: 0/{public} points\n")
    lines = out.splitlines()[1:]
    if task.hidden:
        assert lines.pop() == "  (The grader also runs hidden tests on this task.)"
    assert len(lines) == len(task.public_cases)
    assert all(line.startswith("  FAIL") and "forbidden: you called the course's reference "
               f"solution of task {task_id}" in line and "the grader gives 0" in line
               for line in lines), out


QUESTIONS = [task_id for task_id in TASK_IDS if checks.get_task(task_id).kind == "question"]


@pytest.mark.parametrize("task_id", QUESTIONS)
def test_a_question_s_key_is_refused_however_it_is_asked_for(task_id):
    """Handed over, wrapped, or called from the student's function, with its value cached or
    not, a question's reference and the key it computes score 0 and the case says why."""
    task = checks.get_task(task_id)
    key = task.reference.__wrapped__
    asked = [task.reference, key, functools.partial(key), lambda: task.reference(),
             lambda: key(), lambda: task.reference.__wrapped__()]
    for cached in (False, True):
        if cached:
            task.reference()
        else:
            task.reference.cache_clear()
        for func in asked:
            result = checks.run_task(task_id, func)
            assert result.points == 0 and result.status == "failed", (cached, func)
            assert result.cases[0].message.startswith("forbidden: you called "), (cached, func)


def test_the_grader_refuses_a_question_s_key_too(tmp_path):
    """In the grader's sandbox as in the check cell: a notebook whose questions return their
    reference's answer, or their key's, gets 0 for them, "forbidden". (The chapter whose
    questions forbid the fewest names: the framework's own refusal is what is tested.)"""
    fewest = min(QUESTIONS, key=lambda task_id: len(checks.get_task(task_id).forbidden))
    assignment = checks.get_task(fewest).assignment
    questions = [task for task in checks.tasks_for(assignment) if task.kind == "question"]
    asks = ("checks.get_task({id!r}).reference()",
            "checks.get_task({id!r}).reference.__wrapped__()")
    source = "from coursepkg import checks\n" + "".join(
        f"\ndef {task.func_name}():\n    return {asks[n % 2].format(id=task.id)}\n"
        for n, task in enumerate(questions))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source)]
    (tmp_path / "subs").mkdir()
    nbformat.write(notebook, tmp_path / "subs" / "ada.ipynb")
    rows = grade(assignment, [tmp_path / "subs"], tmp_path / "out", jobs=1, progress=False,
                 limits=Limits(timeout=30))
    graded = {task["id"]: task for task in rows[0][1]["tasks"]}
    for task in questions:
        assert graded[task.id]["points"] == 0, graded[task.id]
        assert graded[task.id]["status"] == "forbidden", graded[task.id]


@each_chapter
def test_check_is_deterministic(capsys, chapter):
    """check() prints the report of the result run_task found on a run of its own: the same
    cases, points and messages every time."""
    for task_id, func, _, _ in chapter.failure_reports:
        task = checks.get_task(task_id)
        report = core.format_task_result(run_task(task_id, func), has_hidden=bool(task.hidden),
                                         time_limit=task.time_limit)
        assert untimed(check_output(capsys, task_id, func)) == untimed(report + "\n"), func

#: A train task's measured time in a check report (the one part that varies from run to run).
TIMED = re.compile(r" \(\d+\.\d s of [\d.]+ s budget\)")


def untimed(report: str) -> str:
    """A check report without the measured times of a train task's cases."""
    return TIMED.sub("", report)


@each_chapter
def test_check_reports_failures_with_hints(capsys, chapter):
    assert chapter.failure_reports
    for task_id, func, first_line, lines in chapter.failure_reports:
        out = check_output(capsys, task_id, func)
        assert out.startswith(first_line + "\n"), out
        for line in lines:
            assert line in out, (func.__name__, line)


@each_task
def test_check_stub(capsys, task_id):
    func_name, public, _ = CHAPTER_OF[task_id].tasks[task_id]
    out = check_output(capsys, task_id, CHAPTER_OF[task_id].stub)
    assert out == (
        f"Task {task_id} {func_name}: not attempted (0/{public} points): the function still "
        "raises NotImplementedError. Replace the stub with your code.\n"
    )


@each_task
@pytest.mark.parametrize("kind", ["None", "an int", "a str"])
def test_check_non_functions(capsys, task_id, kind):
    func_name, public, _ = CHAPTER_OF[task_id].tasks[task_id]
    func, expected = {"None": (None, "got None."), "an int": (42, "got an int, not a function."),
                      "a str": (func_name, "got a str")}[kind]
    out = check_output(capsys, task_id, func)
    assert out.startswith(f"Task {task_id} {func_name}: not attempted (0/{public} points): ")
    assert expected in out


@each_task
def test_check_an_object_that_claims_equality(capsys, task_id):
    func_name, public, _ = CHAPTER_OF[task_id].tasks[task_id]
    out = check_output(capsys, task_id, lambda *args: AlwaysEqual())
    assert out.startswith(f"Task {task_id} {func_name}: 0/{public} points\n")
    # "got AlwaysEqual" (the tensor tasks' wording) or "got an AlwaysEqual" (checks.a_type's)
    assert re.search(r"got (an )?AlwaysEqual\b", out), out


@each_task
def test_check_lets_keyboard_interrupt_through(task_id):
    def interrupted(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checks.check(task_id, interrupted)
