"""`coursepkg similarity`: pairs of submissions whose code is alike, per task.

The class is synthesised for chapter 1 without grading it (the command reads the notebooks that
``log.jsonl`` lists): 50 students, each task's function drawn for each student from a pool of
implementations (the solution, the demo batch's planted mistakes, handwritten alternative
correct ones, the untouched stub), and three planted copies: a student writes a function no one
else writes, and another hands it in disguised (names changed, independent statements swapped,
dead code added, comments and docstring changed). Only the hidden-case evidence needs a graded
folder; a small one is graded once for this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.__main__ import main
from coursepkg.checks import tasks_for
from coursepkg.grading.demo import PLANTED, UNFIXED
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits
from coursepkg.grading.similarity import (
    THRESHOLD,
    build_csv,
    build_page,
    normalise,
    similarity,
)

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_ngrams"
STUB = "<the exercise's stub>"


def defining_cell(notebook: str, func_name: str) -> str:
    """The source of the code cell of ``notebook`` that defines ``func_name``."""
    nb = nbformat.read(ROOT / notebook, as_version=4)
    return next(c.source for c in nb.cells
                if c.cell_type == "code" and f"def {func_name}(" in c.source)


# ----------------------------------------------------------------------------- the class

# Alternative correct implementations, written independently of the solution.
ALTERNATIVES = {
    "count_ngrams": [
        '''from collections import Counter


def count_ngrams(sentences, n):
    counts = Counter()
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + list(sentence) + ["</s>"]
        counts.update(zip(*[padded[i:] for i in range(n)]))
    return dict(counts)
''',
        '''from collections import defaultdict


def count_ngrams(sentences, n):
    counts = defaultdict(int)
    for words in sentences:
        seq = ("<s>",) * (n - 1) + tuple(words) + ("</s>",)
        for start in range(len(seq) - n + 1):
            counts[seq[start:start + n]] += 1
    return dict(counts)
''',
        '''from collections import Counter


def count_ngrams(sentences, n):
    grams = [
        tuple(tokens[i:i + n])
        for tokens in (["<s>"] * (n - 1) + s + ["</s>"] for s in map(list, sentences))
        for i in range(len(tokens) - n + 1)
    ]
    return dict(Counter(grams))
''',
    ],
    "mle_prob": [
        '''def mle_prob(counts, word, context):
    context = tuple(context)
    numerator = 0
    denominator = 0
    for gram, c in counts.items():
        if gram[:-1] == context:
            denominator += c
            if gram[-1] == word:
                numerator += c
    return numerator / denominator if denominator else 0.0
''',
        '''def mle_prob(counts, word, context):
    following = {g[-1]: c for g, c in counts.items() if g[:-1] == tuple(context)}
    total = sum(following.values())
    return following.get(word, 0) / total if total > 0 else 0.0
''',
    ],
    "add_k_prob": [
        '''def add_k_prob(counts, vocab, word, context, k):
    history = tuple(context)
    seen = 0
    for gram, c in counts.items():
        if gram[:-1] == history:
            seen += c
    return (counts.get(history + (word,), 0) + k) / (seen + k * len(vocab))
''',
        '''def add_k_prob(counts, vocab, word, context, k):
    after = {g[-1]: c for g, c in counts.items() if tuple(g[:-1]) == tuple(context)}
    return (after.get(word, 0) + k) / (sum(after.values()) + len(vocab) * k)
''',
        '''from collections import Counter


def add_k_prob(counts, vocab, word, context, k):
    nexts = Counter()
    for gram, c in counts.items():
        if list(gram[:-1]) == list(context):
            nexts[gram[-1]] += c
    denominator = sum(nexts.values()) + k * len(vocab)
    return (nexts[word] + k) / denominator
''',
        '''def add_k_prob(counts, vocab, word, context, k):
    prefix = tuple(context)
    c_context = sum(v for key, v in counts.items() if key[: len(prefix)] == prefix)
    c_gram = counts[prefix + (word,)] if prefix + (word,) in counts else 0
    return (c_gram + k) / (c_context + k * len(vocab))
''',
    ],
    "perplexity": [
        '''def perplexity(model, sentences):
    vocab = set(model.vocab)
    n = model.n
    logs = []
    for sentence in sentences:
        tokens = ["<s>"] * (n - 1) + [w if w in vocab else "<unk>" for w in sentence] + ["</s>"]
        logs.extend(model.logprob(tokens[i], tuple(tokens[i - n + 1:i]))
                    for i in range(n - 1, len(tokens)))
    return math.exp(-sum(logs) / len(logs))
''',
    ],
    "train_bigram": [
        '''import torch
from torch import nn


def train_bigram(x, vocab_size, seed):
    torch.manual_seed(seed)
    logits = nn.Embedding(vocab_size, vocab_size)
    opt = torch.optim.SGD(logits.parameters(), lr=5.0)
    prev, nxt = x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(logits(prev), nxt).backward()
        opt.step()
    return logits
''',
    ],
}

# The planted copies: task -> (the original, no one else's, and its disguised copy).
PLANTED_COPIES = {
    "count_ngrams": (
        '''from collections import deque


def count_ngrams(sentences, n):
    """Count the n-grams with a sliding window over each padded sentence."""
    table = {}
    for sentence in sentences:
        window = deque(["<s>"] * (n - 1), maxlen=n)
        words = list(sentence) + ["</s>"]
        for word in words:
            window.append(word)
            if len(window) == n:
                key = tuple(window)
                table[key] = table.get(key, 0) + 1
    return table
''',
        '''from collections import deque


def count_ngrams(sentences, n):
    # a deque of the last n tokens; every full deque is one n-gram
    result = {}
    debug_total = 0
    for sent in sentences:
        tail = list(sent) + ["</s>"]  # the sentence, closed
        buf = deque(["<s>"] * (n - 1), maxlen=n)
        for tok in tail:
            buf.append(tok)
            if len(buf) == n:
                gram = tuple(buf)
                result[gram] = result.get(gram, 0) + 1
                pass
    if False:
        print("checking", debug_total)
    return result
    print("finished counting")
''',
    ),
    "mle_prob": (
        '''def mle_prob(counts, word, context):
    prefix = tuple(context)
    matching = [(gram[-1], count) for gram, count in sorted(counts.items())
                if gram[: len(prefix)] == prefix]
    if not matching:
        return 0.0
    hits = sum(count for last, count in matching if last == word)
    total = sum(count for _, count in matching)
    return hits / total
''',
        '''def mle_prob(counts, word, context):
    """P(word | context) by maximum likelihood (my own way)."""
    ctx = tuple(context)
    unused = len(counts)
    rows = [(g[-1], c) for g, c in sorted(counts.items())
            if g[: len(ctx)] == ctx]
    if not rows:
        return 0.0
    denominator = sum(c for _, c in rows)  # all continuations
    numerator = sum(c for w, c in rows if w == word)
    return numerator / denominator
''',
    ),
    "kneser_ney_prob": (
        '''def kneser_ney_prob(counts, word, context, discount):
    n = len(next(iter(counts)))
    history = tuple(context)

    def followers(order, hist):
        seen = {}
        if order == n:
            for gram, c in counts.items():
                if gram[:-1] == hist:
                    seen[gram[-1]] = seen.get(gram[-1], 0) + c
        else:
            for ending in {gram[n - order - 1:] for gram in counts}:
                if ending[1:-1] == hist:
                    seen[ending[-1]] = seen.get(ending[-1], 0) + 1
        return seen

    def prob(order):
        if order == 1:
            base = followers(1, ())
            return base.get(word, 0) / sum(base.values())
        lower = prob(order - 1)
        seen = followers(order, history[len(history) - order + 1:])
        if not seen:
            return lower
        total = sum(seen.values())
        return max(seen.get(word, 0) - discount, 0) / total + discount * len(seen) / total * lower

    return prob(n)
''',
        '''def kneser_ney_prob(counts, word, context, discount):
    # interpolated KN, computed top-down by recursion
    hist = tuple(context)
    order_n = len(next(iter(counts)))

    def nexts(m, h):
        table = {}
        if m != order_n:
            for suffix in {g[order_n - m - 1:] for g in counts}:
                if suffix[1:-1] == h:
                    table[suffix[-1]] = table.get(suffix[-1], 0) + 1
        else:
            for g, cnt in counts.items():
                if g[:-1] == h:
                    table[g[-1]] = table.get(g[-1], 0) + cnt
        return table

    def p(m):
        if m == 1:
            uni = nexts(1, ())
            return uni.get(word, 0) / sum(uni.values())
        table = nexts(m, hist[len(hist) - m + 1:])
        backoff = p(m - 1)
        if not table:
            return backoff
        z = sum(table.values())
        return max(table.get(word, 0) - discount, 0) / z + discount * len(table) / z * backoff

    return p(order_n)
''',
    ),
}
PAIRS = {"count_ngrams": ("kit", "lou"), "mle_prob": ("mo", "ned"),
         "kneser_ney_prob": ("ola", "pia")}
CLASS_SIZE = 50
SHORT_TASKS = ("mle_prob", "add_k_prob")


def pools() -> dict[str, list[str]]:
    """func_name -> the implementations students are given (the source of its cell): the
    solution, the demo batch's mistakes, the alternatives and the untouched stub."""
    out = {}
    for task in tasks_for(ASSIGNMENT):
        name = task.func_name
        demo = [source for func, source in PLANTED[ASSIGNMENT].values() if func == name]
        out[name] = ([defining_cell(f"solutions/{ASSIGNMENT}.ipynb", name)]
                     + [STUB if source == UNFIXED else source for source in demo]
                     + ALTERNATIVES.get(name, []) + [STUB])
    return out


def write_notebook(path: Path, functions: dict[str, str]) -> Path:
    """The exercise notebook with the cell of each function in ``functions`` replaced."""
    nb = nbformat.read(ROOT / "exercises" / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in nb.cells:
        for name, source in functions.items():
            if cell.cell_type == "code" and f"def {name}(" in cell.source and source != STUB:
                cell.source = source
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def write_class(folder: Path, students: dict[str, dict[str, str]]) -> Path:
    """Write each student's notebook into ``folder/submissions`` and a ``graded/log.jsonl``
    listing them, the way ``coursepkg grade`` logs them; returns the graded folder."""
    graded = folder / "graded"
    graded.mkdir(parents=True)
    with open(graded / "log.jsonl", "w", encoding="utf-8") as log:
        for student, functions in students.items():
            path = write_notebook(folder / "submissions" / f"{student}.ipynb", functions)
            log.write(json.dumps({"student": student, "file": str(path)}) + "\n")
    return graded


def synthetic_class() -> dict[str, dict[str, str]]:
    """50 students: for each task, the pool's implementations dealt out evenly in a shuffled
    order (so each is one of several students' way of writing it), and the planted copies."""
    rng = random.Random(25)
    names = [f"s{i:02d}" for i in range(CLASS_SIZE - 2 * len(PAIRS))]
    names = sorted(names + [who for pair in PAIRS.values() for who in pair])
    students: dict[str, dict[str, str]] = {name: {} for name in names}
    for func, sources in pools().items():
        dealt = [sources[i % len(sources)] for i in range(len(names))]
        rng.shuffle(dealt)
        for name, source in zip(names, dealt, strict=True):
            students[name][func] = source
    for func, (original, copy) in PLANTED_COPIES.items():
        first, second = PAIRS[func]
        students[first][func], students[second][func] = original, copy
    return students


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """The class's graded folder (log.jsonl only) and its similarity result."""
    folder = write_class(tmp_path_factory.mktemp("class"), synthetic_class())
    return folder, similarity(folder)


def task_of(result, func_name):
    return next(task for task in result.tasks if task.func_name == func_name)


def rank(task, a, b) -> int:
    """The 1-based rank of the pair (a, b) in a task (0 when it is not listed)."""
    key = tuple(sorted((a, b)))
    return next((i for i, p in enumerate(task.pairs, start=1) if (p.a, p.b) == key), 0)


# ----------------------------------------------------------------------------- the tests


def test_the_disguises_leave_the_normalised_function_unchanged():
    original, copy = PLANTED_COPIES["count_ngrams"]
    a, b = normalise(original, "count_ngrams"), normalise(copy, "count_ngrams")
    assert a.root == b.root and a.fingerprints == b.fingerprints
    original, copy = PLANTED_COPIES["mle_prob"]
    assert normalise(original, "mle_prob").root == normalise(copy, "mle_prob").root
    # a real change is not normalised away
    changed = original.replace("if last == word", "if last != word")
    assert normalise(changed, "mle_prob").root != normalise(original, "mle_prob").root


def test_a_helper_the_function_calls_counts_as_its_code_whatever_its_name():
    inline = "def f(xs):\n    return sorted(x * 2 for x in xs if x > 0)[::-1]\n"
    helper = ("def _double_positives(values):\n    return [v * 2 for v in values if v > 0]\n\n\n"
              "def f(xs):\n    return sorted(_double_positives(xs))[::-1]\n")
    renamed = helper.replace("_double_positives", "_prep")
    found = normalise(helper, "f")
    assert found.fingerprints == normalise(renamed, "f").fingerprints
    assert "_double_positives" in found.source and "def f(xs)" in found.source
    assert not found.fingerprints <= normalise(inline, "f").fingerprints


def test_planted_disguised_copies_rank_in_the_top_3_of_a_50_submission_class(synthetic):
    _, result = synthetic
    assert len(result.students) == CLASS_SIZE
    for func, (a, b) in PAIRS.items():
        task = task_of(result, func)
        place = rank(task, a, b)
        assert 1 <= place <= 3, f"{func}: the planted pair ranks {place}"
        pair = task.pairs[place - 1]
        assert pair.flagged and pair.exclusive > 0, pair


def test_stub_only_pairs_score_about_0(synthetic):
    _, result = synthetic
    for task in result.tasks:
        untouched = set(task.untouched)
        stub_pairs = [p for p in task.pairs if p.a in untouched or p.b in untouched]
        assert stub_pairs == [], task.id
    kneser_ney = task_of(result, "kneser_ney_prob")
    assert len(kneser_ney.untouched) >= 5  # the stub is in the pool: many left it
    # a debug task's starter code left as released is "untouched" too
    assert task_of(result, "perplexity").untouched


def test_independent_correct_solutions_to_a_short_task_are_not_flagged(synthetic):
    _, result = synthetic
    for func in SHORT_TASKS:
        task = task_of(result, func)
        planted = tuple(sorted(PAIRS.get(func, ())))
        others = [p for p in task.pairs if (p.a, p.b) != planted]
        assert others and others[0].score < THRESHOLD, others[:1]


def test_independent_correct_solutions_alone_in_a_small_class_stay_below_the_threshold(tmp_path):
    solutions = [defining_cell(f"solutions/{ASSIGNMENT}.ipynb", "add_k_prob"),
                 *ALTERNATIVES["add_k_prob"]]
    students = {f"st{i}": {"add_k_prob": source} for i, source in enumerate(solutions)}
    task = task_of(similarity(write_class(tmp_path, students)), "add_k_prob")
    assert len(task.written) == len(solutions)
    assert task.pairs and all(p.score < THRESHOLD for p in task.pairs), task.pairs[:1]
    # a one-line answer two students happen to write alike is too little code to flag
    one_liner = ("def uniform_perplexity():\n    return len(set(NGramLM(1).fit("
                 "sentences(shakespeare_plays()['Hamlet'])).vocab))\n")
    students.update({"q1": {"uniform_perplexity": one_liner},
                     "q2": {"uniform_perplexity": one_liner.replace("'Hamlet'", '"Hamlet"')}})
    question = task_of(similarity(write_class(tmp_path / "question", students)),
                       "uniform_perplexity")
    assert [(p.a, p.b) for p in question.pairs] == [("q1", "q2")]
    assert question.pairs[0].score < THRESHOLD, question.pairs[0]
    del students["q1"], students["q2"]
    # the same class with a renamed copy of the longest one: that pair comes first, flagged
    assert "nexts" in solutions[3]
    students["copier"] = {"add_k_prob": solutions[3].replace("nexts", "after_ctx")}
    task = task_of(similarity(write_class(tmp_path / "copy", students)), "add_k_prob")
    assert (task.pairs[0].a, task.pairs[0].b) == ("copier", "st3") and task.pairs[0].flagged


def test_submissions_equal_to_the_reference_or_to_the_book_s_code_are_flagged(tmp_path):
    solution = defining_cell(f"solutions/{ASSIGNMENT}.ipynb", "mle_prob")
    renamed = (solution.replace("total", "denominator").replace("gram", "g")
               .replace("    context = ", "    # my version\n    context = "))
    book = '''def count_ngrams(tokens, n):
    _check_order(n)
    tokens = list(tokens)
    return zip(*(tokens[i:] for i in range(n)), strict=False)
'''
    bigrams = defining_cell(f"solutions/{ASSIGNMENT}.ipynb", "distinct_bigrams")
    assert '"to die to sleep"' in bigrams
    students = {
        "amy": {"mle_prob": renamed, "count_ngrams": book, "distinct_bigrams": bigrams,
                "uniform_perplexity": defining_cell(f"solutions/{ASSIGNMENT}.ipynb",
                                                    "uniform_perplexity")},
        "bo": {"mle_prob": ALTERNATIVES["mle_prob"][0],
               "distinct_bigrams": bigrams.replace('"to die to sleep"', '"to die, to sleep"')},
    }
    result = similarity(write_class(tmp_path, students))
    flags = {(f.task, f.student): f.equal_to for f in result.flags}
    assert flags.pop(("1.2", "amy")).startswith("the reference solution (solutions/01_ngrams")
    assert flags.pop(("1.1", "amy")) == "coursepkg.ngram.ngrams, shown in book/01_ngrams.md"
    assert flags.pop(("1.8", "amy")).startswith("the reference solution")
    # not flagged: bo's own mle_prob, bo's answer with another constant, amy's one-line answer
    # (too short to tell anything), the untouched stubs
    assert flags == {}
    page = build_page(result)
    assert "coursepkg.ngram.ngrams, shown in book/01_ngrams.md" in page
    assert "1.2,amy,[reference],1.0000," in build_csv(result)


def test_the_page_and_the_csv_have_the_same_bytes_for_the_same_folder(synthetic, tmp_path):
    folder, result = synthetic
    outputs = []
    for seed in ("1", "2"):
        page, table = tmp_path / f"page{seed}.html", tmp_path / f"table{seed}.csv"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-m", "coursepkg", "similarity", str(folder), "--out", str(page),
             "--csv", str(table), "--top", "5"],
            env=env, capture_output=True, text=True, check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append((page.read_bytes(), table.read_bytes()))
    assert outputs[0] == outputs[1]
    page, table = outputs[0][0].decode(), outputs[0][1].decode()
    assert page == build_page(result, 5) and table == build_csv(result, 5)
    # offline: no script, no link to another host; the top pairs are shown side by side
    assert "<script" not in page and "http" not in page
    kit, lou = PAIRS["count_ngrams"]
    assert "buf = deque(" in page and "window = deque(" in page
    assert f"<strong>{kit}</strong>" in page and f"<strong>{lou}</strong>" in page
    lines = table.splitlines()
    assert lines[0] == "task,student_a,student_b,score,evidence"
    assert any(line.startswith(f"1.1,{kit},{lou},") for line in lines)


def test_a_folder_that_is_not_graded_or_whose_notebooks_moved_is_one_line_exit_2(
        tmp_path, capsys):
    assert main(["similarity", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a graded folder (no log.jsonl)" in err
    graded = write_class(tmp_path / "moved", {"amy": {}, "bo": {}})
    shutil.move(tmp_path / "moved" / "submissions", tmp_path / "elsewhere")
    assert main(["similarity", str(graded)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no submissions found: none of the 2 notebooks" in err
    assert main(["similarity", str(graded), "--top", "0"]) == 2
    assert "--top" in capsys.readouterr().err


def test_notebooks_logged_by_a_relative_path_are_found_from_another_folder(tmp_path, monkeypatch):
    """``coursepkg grade submissions/ --out graded/`` run in the class folder logs relative
    paths; the command finds them from anywhere, and only with the content graded."""
    graded = write_class(tmp_path / "class", {"amy": {}, "bo": {}})
    lines = [json.loads(line) for line in (graded / "log.jsonl").read_text().splitlines()]
    for line in lines:
        path = Path(line["file"])
        line["file"] = f"submissions/{path.name}"
        line["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    lines[1]["sha256"] = "0" * 64  # bo's notebook is not the one graded
    (graded / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.chdir(tmp_path)
    result = similarity(Path("class/graded"))
    assert result.students == ["amy"]
    assert any("left out: bo" in note for note in result.notes)


# ----------------------------------------------------------------------------- hidden cases

# Two students make the same mistake in add_k_prob (no k * |V| in the denominator), written in
# two ways; two others write it correctly, in two ways.
SAME_MISTAKE = {
    "cy": dict(PLANTED[ASSIGNMENT].values())["add_k_prob"],
    "dot": '''def add_k_prob(counts, vocab, word, context, k):
    after = {g[-1]: c for g, c in counts.items() if tuple(g[:-1]) == tuple(context)}
    return (after.get(word, 0) + k) / (sum(after.values()) + k)
''',
}


@pytest.fixture(scope="module")
def graded_small(tmp_path_factory):
    """A small class of chapter 1 graded with the tests' secret (so with hidden cases)."""
    folder = tmp_path_factory.mktemp("graded-small")
    students = dict(SAME_MISTAKE)
    students["al"] = defining_cell(f"solutions/{ASSIGNMENT}.ipynb", "add_k_prob")
    students["bea"] = ALTERNATIVES["add_k_prob"][0]
    for student, source in students.items():
        write_notebook(folder / "submissions" / f"{student}.ipynb", {"add_k_prob": source})
    write_notebook(folder / "submissions" / "ed.ipynb", {})
    grade(ASSIGNMENT, [folder / "submissions"], folder / "graded", jobs=2,
          limits=Limits(timeout=15.0, memory_mb=1024), secret=TEST_SECRET, progress=False)
    return folder / "graded"


def test_identical_failures_on_hidden_cases_raise_a_pair_s_rank(graded_small, tmp_path):
    with_results = task_of(similarity(graded_small), "add_k_prob")
    code_only_folder = tmp_path / "code-only"
    code_only_folder.mkdir()
    shutil.copy(graded_small / "log.jsonl", code_only_folder / "log.jsonl")
    code_only = task_of(similarity(code_only_folder), "add_k_prob")
    before, after = rank(code_only, "cy", "dot"), rank(with_results, "cy", "dot")
    assert after == 1 and before != 1, (before, after)
    pair = with_results.pairs[0]
    code_pair = code_only.pairs[before - 1] if before else None
    assert pair.failures == 1 and pair.same_failures  # every hidden failure the same
    assert all(name.startswith("hidden test") for name in pair.same_failures)
    assert "the same failure on hidden test" in pair.evidence
    assert pair.score > (code_pair.score if code_pair else 0)
    # a pair that passes every hidden case gains nothing from them
    assert all(p.failures == 0 for p in with_results.pairs if {p.a, p.b} == {"al", "bea"})
