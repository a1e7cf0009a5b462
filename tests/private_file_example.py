"""A test-only task whose grader hides a file from its children (Task.private_files).

Task 0.8 ``private_size`` asks for the number of characters of :data:`PRIVATE` (a file beside
this module, written by the test). The trusted process reads the file for its expected answer;
a child that could read it too would pass. Importing this module registers the task in the
assignment :data:`ASSIGNMENT`; the grader's worker imports it itself (the task is not one of
``coursepkg.checks``'s), and the test takes the task out of the registry when it is done.
"""

from __future__ import annotations

import os
from pathlib import Path

from coursepkg.checks.core import Case, Task, Verdict, register

ASSIGNMENT = "00_private_files"
#: The private file: its path comes from the test (the worker inherits the environment).
PRIVATE = Path(os.environ.get("COURSE_PRIVATE_EXAMPLE", "/nonexistent/private.txt"))


def private_size() -> int:
    """The reference: the private file's length in characters, as the trusted process reads it."""
    return len(PRIVATE.read_text(encoding="utf-8"))


TASK = register(Task(
    id="0.8",
    assignment=ASSIGNMENT,
    func_name="private_size",
    title="How many characters does the private file hold?",
    cases=(Case("the answer", 1, {}),),
    build_args=lambda args: (),
    reference=private_size,
    to_plain=lambda value: value,
    judge=lambda got, expected, args: Verdict(got == expected, "Read the file again."),
    kind="question",
    private_files=(str(PRIVATE),),
))
