"""``coursepkg report GRADED_DIR``: one self-contained HTML page about a graded class.

The page is read from the grader's outputs (:mod:`.graded`: ``grades.csv``, ``results/``,
``feedback/``, ``log.jsonl``), so it can be made again at any time, and it works offline: the
plots are inline SVG drawn by matplotlib (text drawn as paths, so no font is needed), the style is
one inline ``<style>`` element, and there is no script and no link to another host. What it shows:

- the number of submissions, the tests they were graded on, the mean, median and range of totals
  (with a late policy, of the raw and of the final totals both, and the late submissions: how
  late, slip days, penalty, raw and final score);
- the status counts: of the submissions (passed, partial, failed, not attempted, unreadable), and
  per task (passed, partial, failed, error, timeout, memory, crashed, forbidden, missing, not
  attempted, unreadable: the grader's words), with public and hidden pass rates per task;
- histograms of the total and of each task's points;
- the pass rate of every case, public and hidden;
- the most common failure messages per task (by their first sentence, which names the mistake;
  what follows is one case's data), with how many students got each;
- the capstone leaderboard, when the results carry Gradescope's ``leaderboard`` entries (a task
  that records a metric puts ``{"name", "value", "order"}`` there; ``order`` "asc" ranks the
  smallest first, anything else the largest). Without such entries the section is absent.

Same folder, same bytes: the SVG ids come from a fixed salt (``svg.hashsalt``), the SVG metadata
has no date, matplotlib's default style is used whatever the user's, and every list is sorted.
Student ids, case names and messages (which can hold what a student's code raised) are escaped.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

from coursepkg.grading.graded import Graded, GradedError, StudentRow, read_graded
from coursepkg.grading.reporting import atomic_write, html_page

__all__ = ["STATUS_ORDER", "build_report", "first_sentence", "write_report"]

#: The order statuses are listed in (any other status the grader reports comes after, sorted).
STATUS_ORDER = (
    "passed", "partial", "failed", "error", "timeout", "memory", "crashed", "forbidden",
    "missing", "not attempted", "unreadable",
)
TOP_MESSAGES = 5
_SALT = "coursepkg-report"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 62rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1b1b; background: #fff; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.92rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left;
         vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { background: #e8e8e8; width: 8rem; height: 0.8rem; display: inline-block; }
.bar span { background: #2a7ab0; height: 100%; display: block; }
.hidden { color: #6a4c93; } .muted { color: #666; }
svg { max-width: 100%; height: auto; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(x: float) -> str:
    return f"{x:g}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _ordered(statuses) -> list[str]:
    known = [s for s in STATUS_ORDER if s in statuses]
    return known + sorted(set(statuses) - set(STATUS_ORDER))


# ----------------------------------------------------------------------------- plots


def _svg(fig) -> str:
    """The figure as an inline ``<svg>`` element, the same bytes for the same figure."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": _SALT, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "coursepkg report"})
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def _bins(most: float) -> list[float]:
    """Histogram edges over [0, most]: half-points up to 5 points, else ten equal bins."""
    count = 10 if most > 5 else max(1, round(most * 2))
    return [most * i / count for i in range(count + 1)]


def _histogram(ax, values: list[float], most: float, title: str) -> None:
    edges = _bins(most) if most > 0 else [0.0, 1.0]
    ax.hist(values, bins=edges, color="#2a7ab0", edgecolor="white")
    ax.set_title(title, fontsize=9)
    ax.set_xlim(0, edges[-1])
    ax.set_xlabel("points", fontsize=8)
    ax.set_ylabel("students", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.yaxis.get_major_locator().set_params(integer=True)


def _histograms(graded: Graded) -> tuple[str, str]:
    """(the total's histogram, the tasks' histograms) as inline SVG."""
    import matplotlib.style
    from matplotlib.figure import Figure

    students = graded.students
    with matplotlib.style.context("default"):
        fig = Figure(figsize=(6.0, 2.6))
        most = max(row.max for row in students)
        _histogram(fig.add_subplot(), [row.total for row in students], most,
                   f"total (out of {_num(most)})")
        fig.tight_layout()
        total_svg = _svg(fig)

        n = len(graded.tasks)
        if n == 0:
            return total_svg, ""
        cols = min(3, n)
        rows = math.ceil(n / cols)
        fig = Figure(figsize=(3.2 * cols, 2.3 * rows))
        for i, (task_id, func) in enumerate(graded.tasks):
            most = graded.task_max(task_id)
            values = [row.points[task_id] for row in students]
            _histogram(fig.add_subplot(rows, cols, i + 1), values, most,
                       f"{task_id} {func} (out of {_num(most)})")
        fig.tight_layout()
        tasks_svg = _svg(fig)
    return total_svg, tasks_svg


# ----------------------------------------------------------------------------- sections


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """An HTML table; ``rows`` hold HTML already escaped; columns in ``numeric`` align right."""
    cls = [' class="n"' if i in numeric else "" for i in range(len(head))]
    cells = "".join(f"<th{c}>{h}</th>" for c, h in zip(cls, head, strict=True))
    lines = ["<table>", f"<tr>{cells}</tr>"]
    for row in rows:
        cells = "".join(f"<td{c}>{v}</td>" for c, v in zip(cls, row, strict=True))
        lines.append(f"<tr>{cells}</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _bar(part: int, whole: int) -> str:
    width = 100 * part / whole if whole else 0
    return f'<span class="bar"><span style="width:{width:.1f}%"></span></span>'


def _tests_run(folder: Path) -> str:
    """What the last grading run said it ran (log.jsonl's "tests"), or ""."""
    try:
        lines = (folder / "log.jsonl").read_text(encoding="utf-8").splitlines()
        return str(json.loads(lines[-1]).get("tests", "")) if lines else ""
    except (OSError, ValueError, AttributeError):
        return ""


def _assignment(graded: Graded) -> str:
    """The assignment the tasks belong to (the course's task bank), else the folder's name."""
    from coursepkg.checks import TASKS

    found = {TASKS[t].assignment for t, _ in graded.tasks if t in TASKS}
    return found.pop() if len(found) == 1 else graded.folder.name


def _stats(values: list[float], rows: list[StudentRow]) -> list[str]:
    return [f"{statistics.fmean(values):.2f}", _num(statistics.median(values)),
            _num(min(values)), _num(max(values)),
            str(sum(v >= row.max for v, row in zip(values, rows, strict=True)))]


def _summary(graded: Graded) -> str:
    totals = [row.total for row in graded.students]
    most = max(row.max for row in graded.students)
    tests = _tests_run(graded.folder)
    late = any(row.late for row in graded.students)
    head = ["mean", "median", "lowest", "highest", "full marks"]
    if late:  # the raw totals and the final ones (after the late penalties), both
        table = _table(["", *head], [
            ["raw", *_stats(totals, graded.students)],
            ["after late penalties", *_stats([row.final for row in graded.students],
                                             graded.students)],
        ], numeric={1, 2, 3, 4, 5})
    else:
        table = _table(head, [_stats(totals, graded.students)], numeric={0, 1, 2, 3, 4})
    lines = [
        f"<p>{len(totals)} submission{'s' * (len(totals) != 1)} in <code>{_esc(graded.folder)}"
        f"</code>, out of {_num(most)} points"
        + (f"; tests: {_esc(tests)}" if tests else "") + ".</p>",
        table,
    ]
    return "\n".join(lines)


def _late(graded: Graded) -> str:
    """The late submissions (raw and final scores); "" without a late policy."""
    from coursepkg.grading.late import duration

    if not any(row.late for row in graded.students):
        return ""
    rows = []
    for row in graded.students:
        minutes = int(row.late.get("late_minutes") or 0)
        if minutes <= 0:
            continue
        rows.append([_esc(row.student), _esc(duration(minutes)),
                     _esc(row.late.get("slip_days", "")),
                     _esc(row.late.get("penalty_percent", "")) + "%", _num(row.total),
                     _num(row.final)])
    parts = ["<h2>Late submissions</h2>"]
    if not rows:
        parts.append("<p>Every submission was on time.</p>")
    else:
        parts.append(_table(["student", "late by", "slip days", "penalty", "raw", "final"],
                            rows, {2, 3, 4, 5}))
    return "\n".join(parts)


def _status_counts(graded: Graded) -> str:
    overall = Counter(row.status for row in graded.students)
    parts = ["<p>Submissions: " + ", ".join(
        f"{overall[s]} {_esc(s)}" for s in _ordered(overall)) + ".</p>"]
    per_task = {t: Counter(row.task_status.get(t, "?") for row in graded.students)
                for t, _ in graded.tasks}
    statuses = _ordered({s for counts in per_task.values() for s in counts})
    rows = []
    for task_id, func in graded.tasks:
        public = [c for row in graded.students for c in row.cases if c.task == task_id]
        hidden = [c for c in public if c.hidden]
        public = [c for c in public if not c.hidden]
        rate = [_pct(sum(c.status == "passed" for c in group), len(group))
                for group in (public, hidden)]
        rows.append([_esc(task_id), f"<code>{_esc(func)}</code>", _num(graded.task_max(task_id))]
                    + [str(per_task[task_id][s] or "") for s in statuses] + rate)
    head = ["task", "function", "max"] + [_esc(s) for s in statuses] + [
        "public cases passed", "hidden cases passed"]
    numeric = set(range(2, len(head)))
    parts.append(_table(head, rows, numeric))
    return "\n".join(parts)


def _case_rates(graded: Graded) -> str:
    seen: dict[tuple[str, str], tuple[bool, list[str]]] = {}
    for row in graded.students:
        for case in row.cases:
            seen.setdefault((case.task, case.name), (case.hidden, []))[1].append(case.status)
    order = {t: i for i, (t, _) in enumerate(graded.tasks)}
    rows = []
    for (task_id, name), (hidden, statuses) in sorted(
        seen.items(), key=lambda item: order[item[0][0]]
    ):
        passed = statuses.count("passed")
        label = '<span class="hidden">hidden</span>' if hidden else "public"
        rows.append([_esc(task_id), _esc(name), label, f"{passed} / {len(statuses)}",
                     _pct(passed, len(statuses)), _bar(passed, len(statuses))])
    return _table(["task", "case", "", "passed", "rate", ""], rows, {3, 4})


def first_sentence(message: str) -> str:
    """A message's first sentence: what the mistake is, without the data of one case (the
    grader's messages go on with "weights[0, 3]: expected 0.08, got 0.65 ...")."""
    return _SENTENCE_END.split(message.strip(), maxsplit=1)[0]


def _failures(graded: Graded) -> str:
    parts = []
    for task_id, func in graded.tasks:
        students: dict[tuple[str, str], set[str]] = {}
        for row in graded.students:
            for case in row.cases:
                if case.task == task_id and case.status != "passed" and case.message:
                    key = (case.status, first_sentence(case.message))
                    students.setdefault(key, set()).add(row.student)
        if not students:
            continue
        common = sorted(students.items(), key=lambda item: (-len(item[1]), item[0]))
        rows = [[str(len(who)), _esc(status), _esc(message)]
                for (status, message), who in common[:TOP_MESSAGES]]
        more = len(common) - TOP_MESSAGES
        parts.append(f"<h3>{_esc(task_id)} <code>{_esc(func)}</code></h3>")
        parts.append(_table(["students", "status", "message"], rows, {0}))
        if more > 0:
            parts.append(f'<p class="muted">and {more} other message{"s" * (more > 1)}.</p>')
    return "\n".join(parts) or "<p>No case failed.</p>"


def _leaderboard(students: list[StudentRow]) -> str:
    """The capstone leaderboard, one table per metric; "" when no result carries a metric."""
    metrics: dict[str, list[tuple[float, str]]] = {}
    ascending: dict[str, bool] = {}
    for row in students:
        for entry in row.leaderboard:
            metrics.setdefault(entry["name"], []).append((float(entry["value"]), row.student))
            ascending.setdefault(entry["name"], entry.get("order") == "asc")
    if not metrics:
        return ""
    parts = ["<h2>Leaderboard</h2>"]
    for name in sorted(metrics):
        sign = 1 if ascending[name] else -1
        ranked = sorted(metrics[name], key=lambda item: (sign * item[0], item[1]))
        best = "lowest" if ascending[name] else "highest"
        parts.append(f"<h3>{_esc(name)} ({best} first)</h3>")
        parts.append(_table(
            ["rank", "student", _esc(name)],
            [[str(i), _esc(student), f"{value:.6g}"]
             for i, (value, student) in enumerate(ranked, start=1)],
            {0, 2},
        ))
    return "\n".join(parts)


def build_report(graded: Graded) -> str:
    """The report page (HTML text) of a graded folder read with details."""
    if not graded.students:
        raise GradedError(
            f"{graded.folder}/grades.csv has no submissions: nothing to report (grade some first)"
        )
    total_svg, tasks_svg = _histograms(graded)
    title = f"Class report: {_assignment(graded)}"
    body = [
        f"<h1>{_esc(title)}</h1>",
        _summary(graded),
        _late(graded),
        "<h2>Status counts</h2>",
        _status_counts(graded),
        "<h2>Scores</h2>",
        f'<figure role="img" aria-label="histogram of the total points">{total_svg}</figure>',
        tasks_svg and (
            f'<figure role="img" aria-label="histograms of each task\'s points">{tasks_svg}'
            "</figure>"
        ),
        "<h2>Pass rate per case</h2>",
        _case_rates(graded),
        "<h2>Most common failure messages</h2>",
        _failures(graded),
        _leaderboard(graded.students),
    ]
    return html_page(title, _STYLE, body)


def write_report(folder: Path, out: Path | None = None) -> Path:
    """Read a graded folder and write its report (default ``folder/report.html``); returns the
    path written. Raises :class:`~coursepkg.grading.graded.GradedError` for a bad folder."""
    graded = read_graded(Path(folder))
    target = Path(out) if out is not None else Path(folder) / "report.html"
    atomic_write(target, build_report(graded))
    return target
