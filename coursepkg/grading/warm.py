"""Imported by the grader's fork server after the checks: warms what children would each pay for.

A task may declare files its worker must not read (:attr:`coursepkg.checks.core.Task.
private_files`: a corpus's test split) while its ``build_args`` still needs data from the same
place (the training split). Its :attr:`~coursepkg.checks.core.Task.warm` hook loads and caches
that data; the fork server calls every hook here, once, before it forks, so each child inherits
the cached data and never opens the hidden files. It also takes one optimiser step
(:func:`~coursepkg.checks.core.warm_training`), so that no child's training pays for the
imports of torch's first step. A hook that fails is skipped: the child then
tries to load the data itself and, where the files are hidden, its cases fail.

Then it runs the checker's half of each task's first two public cases once, with the course's
reference in the student's place (tasks with a time limit, which train, only build their
arguments): the checker's code, its cached data and torch's first calls are then warm in every
child, which inherits them (a child of chapter 1 otherwise spent 0.1 s, in thousands of
copied memory pages, on what the server had never run). Random generators are restored
afterwards, so the children start from the server's seeds as before.
"""

import contextlib
import random

import numpy as np
import torch

from coursepkg.checks import TASKS
from coursepkg.checks.core import Case, student_args, student_output, warm_training

if any(task.time_limit is not None for task in TASKS.values()):
    warm_training()  # a train task's first optimiser step would otherwise cost a child seconds
for _task in TASKS.values():
    if _task.warm is not None:
        with contextlib.suppress(Exception):
            _task.warm()


def _warm_checker() -> None:
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        for task in TASKS.values():
            for case in task.cases[:2]:
                args = Case(case.name, case.points, student_args(case.args))
                with contextlib.suppress(Exception):
                    if task.time_limit is None:
                        student_output(task, args, task.reference)
                    else:
                        task.build_args(student_args(case.args))
    random.setstate(python_state)
    np.random.set_state(numpy_state)


_warm_checker()
