"""Imported last by the grader's fork server, after everything it preloads.

``gc.freeze()`` moves every object the server has so far (torch, the checks, the package) to the
garbage collector's permanent generation. A child forked from the server shares those objects'
memory pages with it until it writes to them; without this, the child's first full collection
walks the whole inherited heap, touching (and so copying) every page: about 0.25 s a child,
more than the rest of a typical task.

Before that it prepares the tripwire of every group of tasks a child may run (:func:`~coursepkg.
checks.forbidden.prepared`), with the checker's code objects that tripwire trusts
(:func:`~coursepkg.checks.forbidden.trusted_codes`; a frozen object is no longer listed by
``gc.get_objects``): a child would otherwise spend 20 ms, in copied memory pages, finding the
forbidden modules among the loaded ones and its trusted code.
"""

import gc

from coursepkg.checks import tasks_for
from coursepkg.checks.forbidden import prepared, trusted_codes
from coursepkg.course import CHAPTERS
from coursepkg.grading.grader import task_groups

trusted_codes()
for _chapter in CHAPTERS:
    for _group in task_groups(tasks_for(_chapter.stem)):
        prepared(_group)
gc.freeze()
