"""coursepkg: the tested code of the course "From n-grams to Transformers".

One module per concept, in the order the book teaches them (``data``, ``ngram``,
then later chapters). ``checks``, ``grading`` and ``authoring`` are tools around
the models; the models never import them.
"""

__version__ = "0.2.0"
