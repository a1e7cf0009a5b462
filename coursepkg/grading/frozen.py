"""Imported last by the grader's fork server, after everything it preloads.

``gc.freeze()`` moves every object the server has so far (torch, the checks, the package) to the
garbage collector's permanent generation. A child forked from the server shares those objects'
memory pages with it until it writes to them; without this, the child's first full collection
walks the whole inherited heap, touching (and so copying) every page: about 0.25 s a child,
more than the rest of a typical task.
"""

import gc

gc.freeze()
