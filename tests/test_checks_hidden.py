"""Hidden cases that students cannot see: the package keeps only their generators, and the
instructor's secret makes their inputs at grading time; an instructor's own extra cases come
from a private file.

What is tested here: the secret's file (made, read, refused), the cases a secret makes (the same
for the same secret, others for another, none without one), the extra cases' file (loaded,
validated), and, as a property over a few secrets, that every hidden case a generator makes
gives full marks to the reference and to a second correct implementation while the known wrong
implementations still lose points on the hidden cases as a whole.
"""

from __future__ import annotations

import importlib
import json
import os
import stat
import textwrap

import pytest
from checks_support import TEST_SECRET, hidden_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coursepkg import checks, course
from coursepkg.checks import core

CHAPTERS = [importlib.import_module(f"test_checks_{chapter.number:02d}").CHAPTER
            for chapter in course.CHAPTERS]
CHAPTER_OF = {task_id: chapter for chapter in CHAPTERS for task_id in chapter.tasks}

#: Known wrong implementations that are right on every hidden case by design: their mistake
#: needs inputs only a public case has (scores far below -1e4 for a finite mask fill; a padded
#: row for "last" pooling, whose one hidden case has a single time step).
RIGHT_ON_HIDDEN_CASES = {"sdpa_mask_minus_1e9", "sdpa_mask_minus_1e4", "pool_last_at_t_minus_1"}


# ---------------------------------------------------------------------------------------------
# The secret
# ---------------------------------------------------------------------------------------------


def test_a_new_secret_is_written_for_its_owner_only_and_read_back(tmp_path):
    path = tmp_path / "course.secret"
    secret = checks.write_secret(path)
    assert len(secret) == 32 and secret != checks.new_secret()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == checks.secret_text(secret) == secret.hex() + "\n"
    assert checks.load_secret(path) == secret
    with pytest.raises(ValueError, match="exists already"):
        checks.write_secret(path)
    assert checks.load_secret(path) == secret  # untouched


@pytest.mark.parametrize(("content", "message"), [
    (None, "no secret file"),
    ("", "is empty"),
    ("  \n", "is empty"),
    ("not hex at all\n", "one line of hex"),
    ("ab" * 15 + "\n", "too short: 15 bytes, at least 16"),
])
def test_a_bad_secret_file_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "course.secret"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        checks.load_secret(path)
    assert "\n" not in str(error.value)


def test_a_secret_file_that_is_a_folder_or_binary_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot read the secret file"):
        checks.load_secret(tmp_path)
    path = tmp_path / "binary"
    path.write_bytes(b"\xff\xfe" * 20)
    with pytest.raises(ValueError, match="cannot read the secret file"):
        checks.load_secret(path)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        checks.write_secret(tmp_path / "short", b"too short")


def test_the_digest_names_a_secret_without_giving_it_away():
    digest = checks.secret_digest(TEST_SECRET)
    assert digest == checks.secret_digest(TEST_SECRET) != checks.secret_digest(TEST_SECRET[1:])
    assert TEST_SECRET.hex() not in digest and len(digest) == 64


# ---------------------------------------------------------------------------------------------
# The cases a secret makes
# ---------------------------------------------------------------------------------------------


def test_without_a_secret_only_the_public_and_extra_cases_run():
    task = checks.get_task("4.2")
    extra = (checks.Case("mine", 2, task.cases[0].args, hidden=True),)
    assert checks.grading_cases(task, None) == task.cases
    assert checks.grading_cases(task, None, extra) == (*task.cases, *extra)
    with_secret = checks.grading_cases(task, TEST_SECRET, extra)
    assert with_secret[: len(task.cases)] == task.cases and with_secret[-1] == extra[0]
    assert [case.name for case in with_secret[len(task.cases):-1]] == [
        generator.name for generator in task.hidden]
    assert checks.run_task("4.2", None, secret=TEST_SECRET).max_points == task.max_points()


def test_each_hidden_case_has_its_own_seed_from_the_secret():
    """Every case of every task draws from its own generator: two tasks, or two cases of one
    task, with the same generator would still get other inputs."""
    task = checks.get_task("4.3")
    seeds = {core._case_seed(TEST_SECRET, task, index) for index in range(len(task.hidden))}
    assert len(seeds) == len(task.hidden)
    other = checks.get_task("4.1")
    assert core._case_seed(TEST_SECRET, task, 0) != core._case_seed(TEST_SECRET, other, 0)
    assert core._case_seed(TEST_SECRET, task, 0) == core._case_seed(TEST_SECRET, task, 0)


def test_a_generator_that_makes_no_plain_json_is_a_checker_bug():
    task = checks.get_task("4.3")
    broken = core.Task(**{**vars(task), "hidden": (
        checks.HiddenCase("hidden: broken", 1, lambda rng: {"T": {1, 2}}),)})
    with pytest.raises(checks.CheckerBug, match="not plain JSON"):
        checks.grading_cases(broken, TEST_SECRET)


def test_the_package_holds_no_hidden_inputs():
    """Hidden cases are generators: nothing of their inputs is in the tasks' data. Every task
    has some, but a question: one public case, no hidden one (``checks.question``)."""
    for task in checks.TASKS.values():
        if task.kind == "question":
            assert task.hidden == () and len(task.cases) == 1, task.id
        else:
            assert task.hidden, task.id
        assert all(isinstance(case, checks.HiddenCase) for case in task.hidden)
        assert not any(case.hidden for case in task.cases)
        for case in hidden_cases(task):
            assert case.args not in [public.args for public in task.cases]


def test_a_hidden_case_name_must_say_so_and_names_are_unique():
    task = checks.get_task("4.3")
    for hidden in ((checks.HiddenCase("not marked", 1, lambda rng: {"T": 3}),),
                   (task.hidden[0], task.hidden[0])):
        with pytest.raises(ValueError):
            core.register(core.Task(**{**vars(task), "id": "9.9", "func_name": "other",
                                       "hidden": hidden}))
    with pytest.raises(ValueError, match="generators"):
        core.register(core.Task(**{**vars(task), "id": "9.9", "func_name": "other",
                                   "cases": (checks.Case("x", 1, {"T": 3}, hidden=True),)}))
    assert "9.9" not in checks.TASKS


# ---------------------------------------------------------------------------------------------
# The instructor's extra cases
# ---------------------------------------------------------------------------------------------


def _tests_file(tmp_path, body):
    path = tmp_path / "extra_tests.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_extra_cases_are_loaded_hidden_and_graded(tmp_path):
    path = _tests_file(tmp_path, """\
        from coursepkg.checks import Case

        CASES = {
            "4.2": [Case("a window of 5 over 30", 2, {"keep": [[True] * 30], "window": 5})],
            "1.2": [Case("P(b | a)", 1, {"counts": [[["a", "b"], 3], [["a", "c"], 1]],
                                            "word": "b", "context": ["a"]})],
        }
        """)
    extra = checks.load_extra_cases(path)
    assert list(extra) == ["4.2", "1.2"]
    (case,) = extra["4.2"]
    assert case == checks.Case("a window of 5 over 30", 2.0,
                               {"keep": [[True] * 30], "window": 5}, hidden=True)
    correct = CHAPTER_OF["4.2"].correct["4.2"][1]
    result = checks.run_task("4.2", correct, secret=TEST_SECRET, extra=extra["4.2"])
    assert result.status == "passed" and result.cases[-1].name == "a window of 5 over 30"
    assert result.max_points == checks.get_task("4.2").max_points() + 2
    wrong = checks.run_task("4.2", lambda keep, window: correct(keep, window).mT,
                            extra=extra["4.2"])
    assert wrong.cases[-1].status == "failed" and wrong.cases[-1].hidden
    assert "mask[" not in wrong.cases[-1].message  # a hidden case's details stay hidden


def test_extra_cases_may_be_visible(tmp_path):
    path = _tests_file(tmp_path, """\
        from coursepkg.checks import Case
        HIDDEN = False
        CASES = {"4.2": (Case("a window of 5 over 30", 1, {"keep": [[True] * 30], "window": 5}),)}
        """)
    assert not checks.load_extra_cases(path)["4.2"][0].hidden


#: Good arguments of task 4.2 (local_mask), for the entries that are wrong in another way.
ARGS = "{'keep': [[True, True, False]], 'window': 2}"


@pytest.mark.parametrize(("body", "message"), [
    ("CASES = {'4.2': [}", "does not run: SyntaxError"),
    ("raise SystemExit(3)", "does not run: SystemExit"),
    ("X = 1", "must define CASES"),
    ("CASES = [1]", "must define CASES"),
    ("CASES = {}\nHIDDEN = 'yes'", "HIDDEN must be True or False"),
    ("CASES = {'9.9': []}", "there is no task '9.9'"),
    ("CASES = {'4.2': Case('x', 1, {'window': 3})}", r"CASES\['4.2'\] must be a list of Case"),
    ("CASES = {'4.2': [{'window': 3}]}", r"CASES\['4.2'\]\[0\] is a dict, not a Case"),
    (f"CASES = {{'4.2': [Case('right padding (lengths 6 and 4), a window of 2', 1, {ARGS})]}}",
     "is empty or taken"),
    (f"CASES = {{'4.2': [Case('hidden: a window of 1', 1, {ARGS})]}}", "is empty or taken"),
    (f"CASES = {{'4.2': [Case('a', 1, {ARGS}), Case('a', 1, {ARGS})]}}", "taken in task 4.2"),
    (f"CASES = {{'4.2': [Case('a', 0, {ARGS})]}}", "points must be a positive number"),
    (f"CASES = {{'4.2': [Case('a', float('nan'), {ARGS})]}}", "points must be a positive"),
    ("CASES = {'4.2': [Case('a', 1, {'keep': [[True]], 'window': (5,)})]}",
     "plain JSON data, got a tuple"),
    ("CASES = {'4.2': [Case('a', 1, [5])]}", "plain JSON data, got a list"),
    ("CASES = {'4.2': [Case('a', 1, {'keep': [[True]], 'window': float('nan')})]}",
     "do not survive JSON"),
    ("CASES = {'4.2': [Case('a', 1, {'N': 5})]}", "task 4.2 cannot use these args"),
    ("CASES = {'4.1': [Case('a', 1, {'seed': 1})]}", "cannot use these args .KeyError"),
])
def test_a_bad_tests_file_is_a_one_line_error(tmp_path, body, message):
    path = _tests_file(tmp_path, "from coursepkg.checks import Case\n" + body + "\n")
    with pytest.raises(ValueError, match=message) as error:
        checks.load_extra_cases(path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_a_missing_tests_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="no tests file"):
        checks.load_extra_cases(tmp_path / "nothing.py")


# ---------------------------------------------------------------------------------------------
# Every generator, for any secret: right for the right, wrong for the wrong
# ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The use of `x.T`")  # a wrong implementation uses k.T
@pytest.mark.parametrize("task_id", [task_id for task_id in CHAPTER_OF  # not the questions:
                                     if checks.get_task(task_id).hidden])  # (test above)
@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(secret=st.binary(min_size=16, max_size=32))
def test_every_hidden_case_of_any_secret_is_right_for_the_right_and_wrong_for_the_wrong(
        task_id, secret):
    chapter, task = CHAPTER_OF[task_id], checks.get_task(task_id)
    hidden = [case for case in checks.grading_cases(task, secret) if case.hidden]
    assert [case.name for case in hidden] == [generator.name for generator in task.hidden]
    for case in hidden:
        assert json.loads(json.dumps(case.args)) == case.args
        assert checks.evaluate_case(task, case, task.reference).status == "passed", case
        second = checks.evaluate_case(task, case, chapter.correct[task_id][1],
                                      tripwire=checks.tripwire_for(task))
        assert second.status == "passed", (case, second.message)
    for func, _ in chapter.wrong[task_id]:
        if func.__name__ in RIGHT_ON_HIDDEN_CASES:
            continue
        wire = checks.tripwire_for(task)
        assert any(checks.evaluate_case(task, case, func, tripwire=wire).status != "passed"
                   for case in hidden), (func.__name__, [case.args for case in hidden])
