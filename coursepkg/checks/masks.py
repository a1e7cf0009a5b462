"""Boolean masks for the cases of the attention tasks, as plain nested lists.

A case's ``args`` are JSON, so its mask is a nested list of bools (True = may attend), turned
into a tensor by :func:`as_tensor` when the arguments are built. The builders here do no tensor
work: the checks build their public cases when they are imported, and the grader forks its
workers from a process that imported them. The random ones draw from a hidden case's
generator (:class:`random.Random`), always leaving every query at least one key.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

__all__ = [
    "as_tensor",
    "causal",
    "lengths_of",
    "nested",
    "padding",
    "random_lengths",
    "random_rows",
    "rows",
]


def nested(value: list, depth: int) -> list:
    """``value`` inside ``depth`` more lists: ``depth`` leading dims of size 1."""
    for _ in range(depth):
        value = [value]
    return value


def rows(*patterns: str) -> list[list[bool]]:
    """``rows("110", "011")`` -> [[True, True, False], [False, True, True]]."""
    return [[ch == "1" for ch in pattern] for pattern in patterns]


def causal(T: int, ones: int = 0) -> list:
    """The causal mask (T, T), True where s <= t, inside ``ones`` leading dims of size 1."""
    return nested([[s <= t for s in range(T)] for t in range(T)], ones)


def padding(lengths: list[int], S: int, ones: int = 1) -> list:
    """A key-padding mask, True on the first ``lengths[b]`` keys of row b, with ``ones`` dims of
    size 1 between B and S: (B, 1, S) or (B, 1, 1, S); ``ones=0`` gives (B, S)."""
    return [nested([s < n for s in range(S)], ones) for n in lengths]


def lengths_of(mask: list) -> list[int]:
    """The number of True values of each row of a (B, S) mask."""
    return [sum(row) for row in mask]


def random_rows(rng: random.Random, T: int, S: int, *, per_row: int | None = None) -> list:
    """A (T, S) mask drawn from ``rng``: every row allows at least one key (exactly
    ``per_row`` keys when it is given), and, when there is more than one key, some key is
    masked somewhere."""
    while True:
        if per_row is not None:
            chosen = [set(rng.sample(range(S), per_row)) for _ in range(T)]
            mask = [[s in keep for s in range(S)] for keep in chosen]
        else:
            mask = [[rng.random() < 0.6 for _ in range(S)] for _ in range(T)]
        if all(any(row) for row in mask) and (S == 1 or not all(all(row) for row in mask)):
            return mask


def random_lengths(rng: random.Random, B: int, S: int, *, full: bool = True,
                   padded: bool = True, shortest: int = 1) -> list[int]:
    """B lengths from ``shortest`` to S drawn from ``rng``: with ``full`` one of them is S (a
    row without padding), with ``padded`` one of them is shorter than S (a padded row; for a
    batch of one, ``padded`` wins over ``full``)."""
    lengths = [rng.randint(shortest, S) for _ in range(B)]
    rows = list(range(B))
    if full:
        lengths[rows.pop(rng.randrange(B))] = S
    if padded and S > shortest and all(n == S for n in lengths):
        lengths[rng.choice(rows or [0])] = rng.randint(shortest, S - 1)
    return lengths


def as_tensor(mask: list | None) -> Tensor | None:
    """A plain mask -> a bool tensor of its shape (None stays None)."""
    return None if mask is None else torch.tensor(mask, dtype=torch.bool)
