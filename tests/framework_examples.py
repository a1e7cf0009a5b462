"""Worked examples of the new kinds of task, for the chapters' checks modules to copy.

They live with the tests (``coursepkg.checks`` does not import this module, so the course's
registry of tasks stays the chapters' own); importing it registers them in the assignment
:data:`ASSIGNMENT`. The grader's worker imports this module itself when it runs one of them
(:func:`coursepkg.grading.grader.task_module`); the tests import it in a fixture that takes
its tasks out of the registry again (:data:`REGISTERED`).

- 0.1 ``train_classifier`` (kind "train"): fit a linear classifier of 2-D points within 5 s.
  The student's function gets the training split and a seed and returns the trained
  ``nn.Linear(2, 2)`` (or its ``state_dict``). The held-out split is drawn from the case's
  ``"_heldout"`` seed, which the student's function never sees (keys starting with "_" are
  held back); the ``expected`` hook draws it in the trusted process, and the judge scores the
  returned weights on it, in bands (:func:`coursepkg.checks.banded`). Declared with
  :func:`coursepkg.checks.tensors.train_task`, which puts those pieces together.
- 0.2 ``normalise_rows`` (kind "debug"): the exercise shows a buggy body (a starter block in
  the solution notebook, see :mod:`coursepkg.authoring`); judged on behaviour like any task.
- 0.3 ``sine_at_one`` (kind "question"): a number whose key is computed from the package at
  check time (:func:`coursepkg.checks.question`).
"""

from __future__ import annotations

import math
import random
import time

import torch
from torch import nn

from coursepkg import positional
from coursepkg.checks.core import (
    Case,
    HiddenCase,
    Task,
    draw_seed,
    question,
    register,
)
from coursepkg.checks.tensors import (
    generator,
    tensor_judge,
    tensor_plain,
    train_task,
    with_weights,
)

ASSIGNMENT = "00_framework_examples"
#: The tasks this module registers (a test removes them from the registry when it is done, so
#: that the course's registry is the chapters' own again).
REGISTERED: list[Task] = []


def _register(task: Task) -> Task:
    REGISTERED.append(register(task))
    return task


# --------------------------------------------------------------------------------------------
# 0.1: a train task
# --------------------------------------------------------------------------------------------

#: The course model whose weights the student returns, and its state_dict's names and shapes.
MODEL = lambda: nn.Linear(2, 2)  # noqa: E731 - the model class of the task, without arguments
SHAPES = {"weight": (2, 2), "bias": (2,)}
#: Full marks from 0.95 held-out accuracy, half from 0.85, a quarter from 0.7.
BANDS = ((0.95, 1.0), (0.85, 0.5), (0.7, 0.25))
TIME_LIMIT = 5.0
HELD_OUT = 2000
HINT_TRAIN = (
    "The held-out accuracy is below the target: train on the points given (not on data of "
    "your own), with a loss that separates the two classes, until the training accuracy is high."
)


def direction(seed: int) -> float:
    """The angle of the set's separating line: each training seed has its own."""
    return random.Random(seed).uniform(0, 2 * math.pi)


def points(seed: int, n: int, angle: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` standard normal 2-D points and their labels: 1 on the side of ``angle``."""
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(seed))
    y = (x @ torch.tensor([math.cos(angle), math.sin(angle)]) > 0).long()
    return x, y


def train_args(args: dict) -> tuple:
    """The student's arguments: the training split and a seed (never the held-out seed)."""
    x, y = points(args["seed"], args["n"], direction(args["seed"]))
    return x, y, args["seed"]


def held_out(args: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``expected`` hook: the held-out split, same direction, other points."""
    return points(args["_heldout"], HELD_OUT, direction(args["seed"]))


def accuracy(state: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    """The held-out accuracy of the course model holding ``state`` (for the tests)."""
    return score(with_weights(MODEL, torch.float32, state), (x, y))


def score(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The measure the judge bands: the model's accuracy on the held-out data."""
    x, y = data
    return (model(x).argmax(dim=-1) == y).float().mean().item()


def fit(x, y, seed, steps=100):
    """Full-batch Adam on the cross-entropy (100 steps: 0.1 s on one thread)."""
    torch.manual_seed(seed)
    model = MODEL()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


def train_classifier(x, y, seed):
    """The reference (the grader's tripwire refuses a student's call of it: the wrong
    implementations below call :func:`fit`)."""
    return fit(x, y, seed)


_register(train_task(
    "0.1", ASSIGNMENT, "train_classifier", "Train a linear classifier of 2-D points",
    cases=(Case("200 points", 2, {"seed": 11, "n": 200, "_heldout": 911}),),
    hidden=(HiddenCase("hidden: another set of 200 points", 2, lambda rng: {
        "seed": draw_seed(rng), "n": 200, "_heldout": draw_seed(rng)}),),
    build_args=train_args,
    reference=train_classifier,
    model=MODEL,
    held_out=held_out,
    score=score,
    bands=BANDS,
    time_limit=TIME_LIMIT,
    metric="held-out accuracy",
    hint=HINT_TRAIN,
))


def train_by_means(x, y, seed):
    """Correct, written differently: the line between the two classes' means, no training."""
    w = x[y == 1].mean(dim=0) - x[y == 0].mean(dim=0)
    return {"weight": torch.stack([-w, w]), "bias": torch.zeros(2)}


def untrained(x, y, seed):
    """Wrong: the model as initialised."""
    torch.manual_seed(seed)
    return MODEL()


def trained_on_other_data(x, y, seed):
    """Wrong: trained on points labelled along another line (0.6 radians off)."""
    other = points(seed + 1, len(x), direction(seed) + 0.6)
    return fit(*other, seed)


def too_slow(x, y, seed):
    """Right, but over the budget."""
    time.sleep(TIME_LIMIT + 0.5)
    return fit(x, y, seed)


# --------------------------------------------------------------------------------------------
# 0.2: a debug task
# --------------------------------------------------------------------------------------------

HINT_ROWS = (
    "Each row should sum to 1: divide every value by the total of its own row (the sum over "
    "the last dimension, kept as a column so that it broadcasts along the row)."
)


def normalise_rows(x):
    """The reference (fixed): each row divided by its sum."""
    return x / x.sum(dim=-1, keepdim=True)


def normalise_rows_buggy(x):
    """The starter code the exercise shows: it divides by the column sums."""
    return x / x.sum(dim=0, keepdim=True)


def rows_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    return (torch.rand(args["B"], args["T"], generator=gen, dtype=torch.float64).to(dtype) + 0.1,)


_register(Task(
    id="0.2",
    assignment=ASSIGNMENT,
    func_name="normalise_rows",
    title="Fix the row normalisation",
    cases=(Case("3 rows of 5", 1, {"seed": 3, "B": 3, "T": 5, "dtype": "float64"}),
           Case("5 rows of 3", 1, {"seed": 4, "B": 5, "T": 3, "dtype": "float64"})),
    build_args=rows_args,
    reference=normalise_rows,
    to_plain=lambda value: tensor_plain(value, "the normalised rows"),
    judge=tensor_judge(
        rows_args, ("the normalised rows",),
        lambda inputs: [(HINT_ROWS, lambda: (normalise_rows_buggy(*inputs),), "")],
        lambda got, expected, index: "Return one value per input value: the same shape as x.",
        HINT_ROWS,
    ),
    kind="debug",
))


# --------------------------------------------------------------------------------------------
# 0.3: a question
# --------------------------------------------------------------------------------------------


def sine_key() -> float:
    """The key: the sinusoidal table's value at position 1, column 0, from the package."""
    return positional.sinusoidal_encoding(2, 4, dtype=torch.float64)[1, 0].item()


_register(question(
    "0.3", ASSIGNMENT, "sine_at_one",
    "What is the sinusoidal encoding's value at position 1, column 0?",
    sine_key, points=1, kind_of_answer="number",
    hint="Look at the table's formula for an even column at position 1.",
))

_register(question(
    "0.4", ASSIGNMENT, "which_column_is_cosine",
    "Which columns of the sinusoidal table hold cosines?",
    lambda: "odd" if positional.sinusoidal_encoding(2, 2)[0, 1].item() == 1.0 else "even",
    points=1, kind_of_answer="choice", choices=("even", "odd"),
    hint="A cosine is 1 at position 0.",
))

