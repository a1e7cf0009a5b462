"""The instructor's autograder (``coursepkg grade``).

Trusted side (the grader's own process):

- :mod:`.submission` reads a submitted notebook without trusting or executing it and keeps only
  its imports, definitions and constant assignments;
- :mod:`.sandbox` runs one task of one submission in fresh, limited children forked from a
  pre-started server (torch already imported), with a time limit per case: it forks, times and
  kills, and knows nothing of what a child does;
- :mod:`.judging` turns what a child sent back into the task's graded record, comparing with
  the reference in this process (hidden cases are made here, from the instructor's secret);
- :mod:`.reporting` writes grades.csv, Gradescope's results.json, the feedback pages and the
  terminal summary from the records;
- :mod:`.grader` runs a batch: finding notebooks, the cache, the log, the parallel slots.

Untrusted side (inside each child):

- :mod:`.isolation` is the child's first act: namespaces, a private /tmp, its own user, limits;
- :mod:`.worker` is the child's main: it calls the student's function on each case inside the
  forbidden-call tripwire (:mod:`coursepkg.checks.forbidden`) and sends back plain JSON.

``sandbox`` and ``worker`` do not import each other: the grader hands the worker's entry point
to the sandbox. :mod:`.preload` and :mod:`.frozen` are the fork server's first and last imports
(torch on one thread; the server's heap frozen, so that children do not copy it).

Around the grader (the instructor's week): :mod:`.validate` (``coursepkg validate``: one
notebook through :func:`.grader.grade` on the public cases, for the student before handing in);
:mod:`.graded` reads a graded folder back from its published files, for :mod:`.report` (the
class report page) and :mod:`.export` (Canvas's and Moodle's gradebook import files).

At scale: :mod:`.shards` (``--shard I/N|auto``: a stable part of the class per process, for a
Kubernetes Indexed Job or a Slurm array, whose recipes are in ``recipes/``; ``coursepkg merge``)
and :mod:`.late` (``--deadline --late-policy``: penalties, extensions, pooled slip days).
"""
