"""Imported by the grader's fork server after the checks: warms what tasks hide from children.

A task may declare files its worker must not read (:attr:`coursepkg.checks.core.Task.
private_files`: a corpus's test split) while its ``build_args`` still needs data from the same
place (the training split). Its :attr:`~coursepkg.checks.core.Task.warm` hook loads and caches
that data; the fork server calls every hook here, once, before it forks, so each child inherits
the cached data and never opens the hidden files. It also takes one optimiser step
(:func:`~coursepkg.checks.core.warm_training`), so that no child's training pays for the
imports of torch's first step. A hook that fails is skipped: the child then
tries to load the data itself and, where the files are hidden, its cases fail.
"""

import contextlib

from coursepkg.checks import TASKS
from coursepkg.checks.core import warm_training

if any(task.time_limit is not None for task in TASKS.values()):
    warm_training()  # a train task's first optimiser step would otherwise cost a child seconds
for _task in TASKS.values():
    if _task.warm is not None:
        with contextlib.suppress(Exception):
            _task.warm()
