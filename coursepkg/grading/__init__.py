"""The instructor's autograder (``coursepkg grade``).

- :mod:`.submission` reads a submitted notebook without trusting or executing it and keeps only
  its imports, definitions and constant assignments;
- :mod:`.sandbox` runs one task of one submission in a fresh, limited, isolated child process
  forked from a pre-started server (torch already imported);
- :mod:`.worker` is the child's side: it calls the student's function on each case and sends
  back plain JSON, watching for forbidden calls;
- :mod:`.grader` judges in the trusted process and writes grades.csv, results/, feedback/,
  log.jsonl, resumably and deterministically.
"""
