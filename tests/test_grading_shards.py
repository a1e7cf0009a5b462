"""Grading a class in shards (`coursepkg grade --shard I/N|auto`), merging them (`coursepkg
merge`), and the cluster recipes that run them (coursepkg/grading/recipes/).

Every chapter's demo batch is graded as two shards, each a separate `coursepkg grade` process
(one started as a Kubernetes Indexed Job's pod would be, one as a Slurm array task), and merged.
The shards and the unsharded run they are compared with take the records from the cache of the
demo batch's grading (tests/conftest.py's demo_gradings, checked by test_grading_demo.py): a
fresh grading would give the same points but other times in the feedback of train tasks
("(0.8 s)"), so two fresh runs are never byte-identical, sharded or not. The shard killed mid-run
grades for real (chapter 1's whole batch, from an empty folder).
"""

import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from checks_support import TEST_SECRET

from coursepkg import __version__
from coursepkg.__main__ import main
from coursepkg.grading.demo import PLANTED, write_demo
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits
from coursepkg.grading.shards import MergeError, Shard, ShardError, merge, shard_of

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "coursepkg" / "grading" / "recipes"
CHAPTERS = sorted(PLANTED)
SCHEDULER_VARIABLES = ("JOB_COMPLETION_INDEX", "COURSEPKG_SHARDS", "SLURM_ARRAY_TASK_ID",
                       "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP")
# How each of the two shards learns its index: as a pod of an Indexed Job, as a Slurm task.
AUTO = {1: {"JOB_COMPLETION_INDEX": "0", "COURSEPKG_SHARDS": "2"},
        2: {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "2"}}
GRADEBOOK = ("grades.csv", "results", "feedback", "log.jsonl", "manual")


def scheduler_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARIABLES}
    return {**env, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", **extra}


def grade_command(assignment: str, subs: Path, out: Path, secret: Path, shard: str) -> list[str]:
    return [sys.executable, "-m", "coursepkg", "grade", assignment, str(subs), "--out", str(out),
            "--shard", shard, "--jobs", "1", "--secret", str(secret)]


def files(folder: Path) -> dict[str, bytes]:
    """The gradebook files of a graded folder, by relative path."""
    found = {}
    for name in GRADEBOOK:
        path = folder / name
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.is_file():
                found[str(file.relative_to(folder))] = file.read_bytes()
    return found


def without_cached(log: bytes) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "cached"}
            for line in log.decode().splitlines()]


@pytest.fixture(scope="module")
def work(tmp_path_factory, demo_gradings):
    folder = tmp_path_factory.mktemp("shards")
    (folder / "secret").write_text(TEST_SECRET.hex() + "\n")
    return {"folder": folder, "graded": {}, "demo": demo_gradings}


def sharded(work: dict, assignment: str) -> dict:
    """The chapter's whole demo batch graded as two shards (separate processes, at the same
    time, with --shard auto) and unsharded, from the demo grading's cache; made once."""
    if assignment in work["graded"]:
        return work["graded"][assignment]
    root = work["folder"] / assignment
    subs, secret = root / "subs", work["folder"] / "secret"
    write_demo(assignment, ROOT, subs)
    shards = {i: root / f"shard-{i}" for i in (1, 2)}
    # The demo batch's records, graded once by test_grading_demo's fixture (the same notebooks,
    # secret and grader): each shard process partitions, caches and writes as it would after
    # grading, without training chapter 7's capstone again.
    demo = work["demo"](assignment)
    for folder in shards.values():
        shutil.copytree(demo.out / "cache", folder / "cache")
    runs = [subprocess.Popen(grade_command(assignment, subs, shards[i], secret, "auto"),
                             env=scheduler_env(AUTO[i]), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT) for i in (1, 2)]
    for run in runs:
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-2000:]
    unsharded = root / "unsharded"
    for folder in shards.values():
        shutil.copytree(folder / "cache", unsharded / "cache", dirs_exist_ok=True)
    rows = grade(assignment, [subs], unsharded, jobs=2, limits=Limits(timeout=20),
                 progress=False, secret=TEST_SECRET)
    for folder in (*shards.values(), unsharded):
        log = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
        assert all(line["cached"] for line in log), (
            f"{folder.name} graded other cases than the demo grading (was the package edited "
            "while the test ran?)")
    work["graded"][assignment] = {"assignment": assignment, "root": root, "subs": subs,
                                  "secret": secret, "shards": shards, "unsharded": unsharded,
                                  "students": [found.student for found, _ in rows]}
    return work["graded"][assignment]


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_merged_shards_are_byte_identical_to_an_unsharded_run(assignment, work):
    graded = sharded(work, assignment)
    shards, unsharded = graded["shards"], graded["unsharded"]
    manifests = {i: json.loads((shards[i] / "shard.json").read_text()) for i in shards}
    owned = {i: manifests[i]["students"] for i in shards}
    assert sorted(owned[1] + owned[2]) == sorted(graded["students"])  # a partition of the class
    assert all(shard_of(s, 2) == i for i in shards for s in owned[i])
    assert all(m["finished"] and m["assignment"] == assignment and m["shards"] == 2
               for m in manifests.values())
    assert owned[1] and owned[2], "the demo batch should fill both shards"

    first = graded["root"] / "merged-fresh"
    merged = merge([shards[2], shards[1]], first)  # any order
    assert merged.students == sorted(graded["students"])
    expected, got = files(unsharded), files(first)
    assert set(got) == set(expected)
    for name in expected:
        if name != "log.jsonl":
            assert got[name] == expected[name], name
    # the shards and the unsharded run took the same records from the cache
    assert without_cached(got["log.jsonl"]) == without_cached(expected["log.jsonl"])

    # Run each shard again (nothing runs: the cache) and merge: now the logs agree too.
    before = {i: files(shards[i]) for i in shards}
    for i in shards:
        grade(assignment, [graded["subs"]], shards[i], jobs=2, limits=Limits(timeout=20),
              progress=False, secret=TEST_SECRET, shard=Shard(i, 2))
        after = files(shards[i])
        assert {k: v for k, v in after.items() if k != "log.jsonl"} == {
            k: v for k, v in before[i].items() if k != "log.jsonl"}
    again = graded["root"] / "merged-again"
    merge([shards[1], shards[2]], again)
    assert files(again) == expected
    assert set(os.listdir(again / "cache")) == set(os.listdir(unsharded / "cache"))


def test_a_run_sorts_its_log_by_student(work):
    log = (sharded(work, "01_ngrams")["unsharded"] / "log.jsonl").read_text().splitlines()
    students = [json.loads(line)["student"] for line in log]
    assert students == sorted(students)


def test_a_shard_killed_mid_run_and_run_again_changes_nothing_else(work, short_tmpdir):
    graded = sharded(work, "01_ngrams")
    out, other = graded["root"] / "killed-1", graded["shards"][2]
    command = grade_command("01_ngrams", graded["subs"], out, graded["secret"], "1/2")
    # a grader killed with SIGKILL cannot remove its temporary folder: give it one of its own
    scratch = short_tmpdir
    env = scheduler_env({"TMPDIR": str(scratch)})
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list((out / "results").glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    done = {p.name: p.read_bytes() for p in (out / "results").glob("*.json")}
    manifest = json.loads((out / "shard.json").read_text())
    assert 2 <= len(done) < len(manifest["students"]), "killed too late to test a resume"
    assert not manifest["finished"]
    with pytest.raises(MergeError, match="unfinished shard"):
        merge([out, other], graded["root"] / "merged-too-early")
    other_before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}

    left = sorted(scratch.iterdir())
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=ROOT)
    assert sorted(scratch.iterdir()) == left  # the run to the end removes its own folder
    assert json.loads((out / "shard.json").read_text())["finished"]
    for name, data in done.items():  # graded before the kill: served from the cache, unchanged
        assert (out / "results" / name).read_bytes() == data, name
    last_run = (out / "log.jsonl").read_text().splitlines()[-len(manifest["students"]):]
    cached = {json.loads(line)["student"] for line in last_run if json.loads(line)["cached"]}
    assert {Path(name).stem for name in done} <= cached
    # the same points as the shard that was never interrupted, and the other shard untouched
    assert (out / "grades.csv").read_bytes() == (graded["shards"][1] / "grades.csv").read_bytes()
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == other_before
    merged = graded["root"] / "merged-after-kill"
    merge([out, other], merged)
    assert (merged / "grades.csv").read_bytes() == (
        graded["unsharded"] / "grades.csv").read_bytes()


def copy_shard(folder: Path, target: Path, **changes) -> Path:
    shutil.copytree(folder, target)
    manifest = json.loads((target / "shard.json").read_text())
    manifest.update(changes)
    (target / "shard.json").write_text(json.dumps(manifest))
    return target


def test_merge_refuses_what_is_not_one_whole_grading(work, tmp_path):
    graded = sharded(work, "01_ngrams")
    one, two = graded["shards"][1], graded["shards"][2]
    first_student = json.loads((one / "shard.json").read_text())["students"][0]
    cases = [
        ([graded["unsharded"], two], f"{graded['unsharded']} is not a shard"),
        ([one], "missing shard 2 of 2"),
        ([one, copy_shard(one, tmp_path / "again")], "overlapping shards: .* both shard 1/2"),
        ([one, copy_shard(two, tmp_path / "more", students=json.loads(
            (two / "shard.json").read_text())["students"] + [first_student])],
         f"overlapping shards: .* both graded '{first_student}'"),
        ([one, copy_shard(two, tmp_path / "rnn", assignment="02_rnn")], "mixed assignments"),
        ([one, copy_shard(two, tmp_path / "old", grader=1)], "mixed grader versions"),
        ([one, copy_shard(two, tmp_path / "v", package="0.1.0")], "mixed grader versions"),
        ([one, copy_shard(two, tmp_path / "key", cases="0" * 16)], "mixed tests"),
        ([one, copy_shard(two, tmp_path / "of3", shards=3)], "mixed shard counts"),
    ]
    for folders, message in cases:
        with pytest.raises(MergeError, match=message):
            merge(folders, tmp_path / "out")
        assert not (tmp_path / "out").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(MergeError, match="not empty"):
        merge([one, two], tmp_path / "busy")
    with pytest.raises(MergeError, match="is one of the shards"):
        merge([one, two], one)


def test_merge_command_exits_2_with_one_line(work, tmp_path, capsys):
    graded = sharded(work, "01_ngrams")
    one = graded["shards"][1]
    assert main(["merge", str(one), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing shard 2 of 2" in err
    assert main(["merge", str(one), str(graded["shards"][2]), "--out", str(tmp_path / "m")]) == 0
    assert "merged 2 shards of 01_ngrams" in capsys.readouterr().out
    assert (tmp_path / "m" / "grades.csv").read_bytes() == (
        graded["unsharded"] / "grades.csv").read_bytes()
    # merging again into the same folder rewrites it
    assert main(["merge", str(one), str(graded["shards"][2]), "--out", str(tmp_path / "m")]) == 0


def test_a_student_s_shard_is_a_stable_hash_of_the_id():
    ids = [f"student-{i:04d}" for i in range(400)]
    for n in (1, 2, 3, 8):
        shards = {s: shard_of(s, n) for s in ids}
        assert set(shards.values()) == set(range(1, n + 1))
        for s in ids:
            assert shards[s] == int(hashlib.sha256(s.encode()).hexdigest(), 16) % n + 1
    # a late submission moves nobody else: the shard is a function of the id alone
    assert [shard_of(s, 8) for s in ids] == [shard_of(s, 8) for s in ids + ["late"]][:-1]
    counts = [list(map(lambda s: shard_of(s, 4), ids)).count(i) for i in range(1, 5)]
    assert min(counts) > 60  # about 100 each


def test_shard_values_and_the_scheduler_s_variables():
    assert Shard.parse("1/4", {}) == Shard(1, 4) and Shard.parse("4/4", {}) == Shard(4, 4)
    for bad in ("0/4", "5/4", "1/0", "a/b", "4", "1/-2", ""):
        with pytest.raises(ShardError):
            Shard.parse(bad, {})
    assert Shard.parse("auto", {"JOB_COMPLETION_INDEX": "0", "COURSEPKG_SHARDS": "3"}) == Shard(
        1, 3)
    assert Shard.parse("auto", {"JOB_COMPLETION_INDEX": "2", "COURSEPKG_SHARDS": "3"}) == Shard(
        3, 3)
    slurm = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "0",
             "SLURM_ARRAY_TASK_COUNT": "8"}
    assert Shard.parse("auto", slurm) == Shard(6, 8)
    assert Shard.parse("auto", {**slurm, "SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1",
                                "SLURM_ARRAY_TASK_COUNT": "4"}) == Shard(4, 4)
    for env, message in [
        ({}, "neither JOB_COMPLETION_INDEX .* nor SLURM_ARRAY_TASK_ID"),
        ({"JOB_COMPLETION_INDEX": "0"}, "COURSEPKG_SHARDS is not"),
        ({"JOB_COMPLETION_INDEX": "3", "COURSEPKG_SHARDS": "3"}, "shard 4 .* of 3"),
        ({"SLURM_ARRAY_TASK_ID": "0"}, "how many shards"),
        ({**slurm, "SLURM_ARRAY_TASK_STEP": "2"}, "step 1"),
        ({"JOB_COMPLETION_INDEX": "x", "COURSEPKG_SHARDS": "3"}, "not a whole number"),
    ]:
        with pytest.raises(ShardError, match=message):
            Shard.parse("auto", env)


def test_grade_shard_auto_outside_a_scheduler_is_a_one_line_error(work, monkeypatch, capsys):
    graded = sharded(work, "01_ngrams")
    for name in SCHEDULER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    code = main(["grade", "01_ngrams", str(graded["subs"]), "--out",
                 str(graded["root"] / "nowhere"), "--shard", "auto"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "give --shard I/N" in err
    assert main(["grade", "01_ngrams", "--gradescope", "--gradescope-submission",
                 str(graded["subs"]), "--shard", "1/2"]) == 2
    assert "cannot be combined" in capsys.readouterr().err
    assert not (graded["root"] / "nowhere").exists()


# ----------------------------------------------------------------------------- the recipes

K8S_JOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "batch/v1"},
        "kind": {"const": "Job"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string",
                                             "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}},
        "spec": {
            "type": "object",
            "required": ["completions", "parallelism", "template"],
            "properties": {
                "completionMode": {"enum": ["Indexed", "NonIndexed"]},
                "completions": {"type": "integer", "minimum": 1},
                "parallelism": {"type": "integer", "minimum": 1},
                "backoffLimit": {"type": "integer", "minimum": 0},
                "backoffLimitPerIndex": {"type": "integer", "minimum": 0},
                "maxFailedIndexes": {"type": "integer", "minimum": 0},
                "template": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["restartPolicy", "containers", "volumes"],
                        "properties": {
                            "restartPolicy": {"enum": ["Never", "OnFailure"]},
                            "containers": {"type": "array", "minItems": 1, "items": {
                                "type": "object",
                                "required": ["name", "image", "command", "args"],
                                "properties": {
                                    "image": {"type": "string"},
                                    "command": {"type": "array", "items": {"type": "string"}},
                                    "args": {"type": "array", "items": {"type": "string"}},
                                    "env": {"type": "array", "items": {
                                        "type": "object", "required": ["name", "value"],
                                        "properties": {"value": {"type": "string"}}}},
                                    "volumeMounts": {"type": "array", "items": {
                                        "type": "object", "required": ["name", "mountPath"]}},
                                },
                            }},
                            "volumes": {"type": "array", "items": {
                                "type": "object", "required": ["name"]}},
                        },
                    }},
                },
            },
        },
    },
}


def job_parts(job: dict) -> tuple[dict, dict, str, dict]:
    """A Job's pod spec, its first container, that container's shell line and its env."""
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    return pod, container, " ".join(container["args"]), env


def test_the_kubernetes_recipe_is_an_indexed_job_and_a_merge():
    jsonschema = pytest.importorskip("jsonschema")
    grade_job, merge_job = yaml.safe_load_all((RECIPES / "grade-indexed-job.yaml").read_text())
    for job in (grade_job, merge_job):
        jsonschema.validate(job, K8S_JOB)
        pod, container, _, _ = job_parts(job)
        volumes = {v["name"] for v in pod["volumes"]}
        assert {m["name"] for m in container["volumeMounts"]} <= volumes
        assert container["image"].endswith(f":{__version__}")  # the course image of this version
    spec = grade_job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] <= spec["completions"]
    pod, container, line, env = job_parts(grade_job)
    assert env["COURSEPKG_SHARDS"] == str(spec["completions"])
    assert re.search(r"coursepkg grade \S+ \S+ --out \S+\$JOB_COMPLETION_INDEX --shard auto", line)
    assert "--secret /secret/" in line
    assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
    assert container["securityContext"]["runAsUser"] == 0
    _, merger, merge_line, merge_env = job_parts(merge_job)
    assert merge_env["COURSEPKG_SHARDS"] == str(spec["completions"])
    assert "coursepkg merge shard-* --out" in merge_line
    claims = [{v["persistentVolumeClaim"]["claimName"] for v in job_parts(job)[0]["volumes"]
               if "persistentVolumeClaim" in v} for job in (grade_job, merge_job)]
    assert claims[0] == claims[1] and len(claims[0]) == 1  # the shards and the merge share it
    out = re.search(r"--out (\S+)/shard-", line)[1]
    assert merge_line.startswith(f"cd {out} ")


def test_the_slurm_recipe_is_a_job_array_of_shards():
    text = (RECIPES / "grade-array.sbatch").read_text()
    assert text.startswith("#!/bin/bash\n")
    options = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))
    first, last = map(int, re.fullmatch(r"(\d+)-(\d+)", options["array"]).groups())
    assert first == 0 and last >= 1 and int(options["cpus-per-task"]) >= 1
    assert re.search(r'coursepkg" grade "\$ASSIGNMENT" .*\n'
                     r'.*--out "[^"]*shard-\$SLURM_ARRAY_TASK_ID"\s*\\\n\s*--shard auto', text)
    assert "--dependency=afterok:$jid" in text and "merge shard-* --out all" in text
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(RECIPES / "grade-array.sbatch")], check=True)


def test_the_image_installs_the_lock():
    text = (RECIPES / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r requirements.lock" in text
    assert "COPY coursepkg/ coursepkg/" in text and "solutions" not in text.split("FROM")[1]


def test_the_readme_shows_the_recipes_as_they_are():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:yaml|sh|dockerfile)\n(.*?)```", readme, re.S)
    for name in ("grade-indexed-job.yaml", "grade-array.sbatch", "Dockerfile"):
        assert (RECIPES / name).read_text() in blocks, name


def test_merged_grades_keep_the_gradebook_format(work):
    """What `coursepkg report` and `export` read: the merged grades.csv has the unsharded
    header, starts student,total,max (API.md) and one row per student, sorted."""
    graded = sharded(work, "01_ngrams")
    merged = graded["root"] / "merged-fresh"
    if not merged.is_dir():
        merge(list(graded["shards"].values()), merged)
    rows = list(csv.reader(io.StringIO((merged / "grades.csv").read_text())))
    assert rows[0][:4] == ["student", "total", "max", "file"]
    assert [r[0] for r in rows[1:]] == sorted(graded["students"])
