"""The grader's trust boundary (grading/fastgrade.py, grading/answers.py) against submissions that
attack it: each is caught, scores 0 for what it faked and says why in one line, while a genuine
run next to it gets full marks.  Also the weighting: a measured answer's points follow its
recomputation, type checks weigh nothing, and a notebook left unfilled scores 0."""

import csv
import json
import random
import shutil
import sys
from fractions import Fraction
from pathlib import Path

import pytest

pytest.importorskip("otter")
nbformat = pytest.importorskip("nbformat")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))
sys.path.insert(0, str(KIT / "notebooks"))

from grading import answers, fastgrade, fixtures, grade, points  # noqa: E402

FULL = 16.0          # lab 1's autograded points
MARKER = "_labkit" + "_check"      # in lab 1's hidden tests (a scan counts longer strings holding it)


@pytest.fixture(scope="module")
def dist(lab1_dist):
    return lab1_dist


def with_cells(src: Path, dest: Path, first: str | None = None, last: str | None = None,
               edits: dict | None = None) -> Path:
    """The notebook with a code cell put first (after the set-up cell) or last, and edits; without
    the cells of the master that hold hidden tests (a solved student notebook, as handed in)."""
    nb = nbformat.read(src, as_version=4)
    nb.cells = [c for c in nb.cells if MARKER not in c.source]
    for cell in nb.cells:
        for old, new in (edits or {}).items():
            if cell.cell_type == "code" and old in cell.source:
                cell.source = cell.source.replace(old, new)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if first:
        nb.cells.insert(code[0] + 1, nbformat.v4.new_code_cell(first))
    if last:
        nb.cells.append(nbformat.v4.new_code_cell(last))
    nbformat.write(nb, dest)
    return dest


def rows(out: Path) -> dict:
    with open(out / "gradebook.csv") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


FORGE = """
import json, os
_forged = {"status": "graded", "cell_errors": [], "tests": [
    {"name": q, "score": 100, "possible": 100, "why": "", "cases": []} for q in ("q1", "q2", "q3", "q5", "q7", "q8")]}
open("result.json", "w").write(json.dumps(_forged))
_blob = json.dumps(_forged).encode()
for _fd in range(3, 64):                   # the grade channel too, if this process could find it
    try:
        os.write(_fd, len(_blob).to_bytes(8, "big") + _blob)
    except OSError:
        pass
os._exit(0)
"""

SCAN_FN = """
def _scan(_m):
    import gc, inspect, sys
    def _holds(_v):
        return isinstance(_v, str) and _m in _v and len(_v) > len(_m)
    _hits = 0
    for _o in gc.get_objects():             # every container, and the tuples inside them
        for _r in gc.get_referents(_o):
            if _holds(_r):
                _hits += 1
            elif isinstance(_r, tuple):
                _hits += sum(1 for _v in _r if _holds(_v))
    for _f in sys._current_frames().values():
        for _fi in inspect.getouterframes(_f):
            _hits += sum(1 for _v in _fi.frame.f_locals.values() if _holds(_v))
    return _hits
"""

SCAN = SCAN_FN + """
open(OUT_PATH, "w").write(str(_scan("_labkit" + "_check")))
"""

REBIND = """
import builtins
builtins.abs = lambda x: 0.0          # every |a - b| is 0: any answer would be "close"
builtins.max = lambda *a, **k: 1e300
builtins.round = lambda *a, **k: 0
__builtins__["abs"] = builtins.abs if isinstance(__builtins__, dict) else None
"""

SWAP = """
from pathlib import Path
_src = Path("labkit.py").read_text()
Path("labkit.py").write_text(_src + "\\ndef close(*a, **k):\\n    return True\\n")
"""

WRONG = {"K = (w_max * (1 - 0.7) / 0.4) ** (1 / 3)": "K = 2 * (w_max * (1 - 0.7) / 0.4) ** (1 / 3)",
         "vegas_queue = float(": "vegas_queue = 1.0 + float("}


def scan_memory() -> int:
    ns = {}
    exec(SCAN_FN, ns)
    return ns["_scan"](MARKER)


def test_adversarial_submissions_score_zero_for_what_they_fake(dist, tmp_path):
    subs = tmp_path / "subs"
    m = dist["master"]
    fixtures.lab1_submission(subs / "genuine", m, real=1)
    # a forged result.json (and the same grade written to every descriptor), then os._exit
    fixtures.lab1_submission(subs / "forged", with_cells(m, tmp_path / "forged.ipynb", first=FORGE), real=2)
    # os._exit after every answer is computed: still no answers handed back
    fixtures.lab1_submission(subs / "exit-late", with_cells(m, tmp_path / "late.ipynb",
                                                            last="import os\nos._exit(0)"), real=3)
    # reading the hidden tests from memory: the scan's count goes to a file outside the folder
    found = tmp_path / "found.txt"
    fixtures.lab1_submission(subs / "scan", with_cells(
        m, tmp_path / "scan.ipynb", last=f"OUT_PATH = {str(found)!r}\n" + SCAN), real=4)
    # builtins rebound after two answers were made wrong: the comparisons must not see it
    fixtures.lab1_submission(subs / "rebind", with_cells(m, tmp_path / "rebind.ipynb",
                                                         last=REBIND, edits=WRONG), real=5)
    fixtures.lab1_submission(subs / "wrong", with_cells(m, tmp_path / "wrong.ipynb", edits=WRONG), real=6)
    # the hidden tests load labkit.py by its name: a notebook that rewrites its own copy into one
    # that finds every answer close must not change what they load
    fixtures.lab1_submission(subs / "swap", with_cells(m, tmp_path / "swap.ipynb", edits=WRONG, last=SWAP), real=7)
    # an answer that is not data (a function posing as the number), and a module it names
    fixtures.lab1_submission(subs / "posing", with_cells(
        m, tmp_path / "posing.ipynb", last="import os\nbbr_startup_s = lambda *a: 0.0\nlabkit = os"), real=8)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60)
    r = rows(out)
    fb = {s: (out / "feedback" / f"{s}.txt").read_text() for s in r}

    assert r["genuine"]["status"] == "graded" and float(r["genuine"]["score"]) == FULL, fb["genuine"]

    for s in ("forged", "exit-late"):
        assert float(r[s]["score"]) == 0 and r[s]["status"] == "error", r[s]
        assert all(float(r[s][q]) == 0 for q in ("q1", "q2", "q3", "q5", "q7", "q8"))
        assert r[s]["reason"] and "\n" not in r[s]["reason"]
    # the forged grade reached the only descriptor it had: the answers channel, which refuses it
    assert "something other than its answers" in r["forged"]["reason"], r["forged"]
    assert "ended before it handed back its answers" in r["exit-late"]["reason"]
    assert "os._exit" in r["exit-late"]["reason"]

    # the student process never held a hidden test; the same scan finds them where they are read
    assert found.read_text() == "0"
    assert float(r["scan"]["score"]) == FULL
    tests = fastgrade.load_tests(_unpacked_tests(dist["zip"], tmp_path / "ag"))
    assert scan_memory() > 0 and tests

    # rebinding builtins changes nothing in the comparisons: the wrong answers lose their points
    assert float(r["rebind"]["q5"]) == 0 and float(r["rebind"]["q7"]) == 0
    assert float(r["rebind"]["score"]) == float(r["wrong"]["score"]) == FULL - 3 - 3
    assert "q5: 0/3 -- the answer does not match its recomputation from the raw logs" in fb["rebind"]
    assert float(r["swap"]["score"]) == FULL - 3 - 3 and float(r["swap"]["q5"]) == 0

    # a function is called in the student's process, and it is not a number; a module the
    # autograder does not supply is refused
    assert float(r["posing"]["q8"]) == 0, fb["posing"]
    assert "q8: 0/2 --" in fb["posing"]
    assert float(r["posing"]["score"]) == FULL - 2


# The notebook's own module posing as labkit: a mapping (an object of a library class) whose
# attributes are labkit's functions, or ones that find every answer close.  The hidden tests call
# `labkit.<function>(...)`: were these proxies honoured, the calls would run in the student's
# process, on whatever data it holds there.
POSE_AS_LABKIT = """
import collections as _c
import labkit as _real
_fake = _c.UserDict()
for _n in dir(_real):
    if not _n.startswith("__") and callable(getattr(_real, _n)):
        setattr(_fake, _n, getattr(_real, _n))
labkit = _fake
LAB = "lab2"
"""
ALWAYS_CLOSE = POSE_AS_LABKIT + """
labkit.close = lambda *a, **k: True
labkit.frame_matches = lambda *a, **k: True
"""
# results handed in outside submission/ and put in place by the notebook: the grader's copy of
# the results (taken before any student code runs) then has none
UNSTASH = "import shutil\nshutil.copytree('stash', 'submission', dirs_exist_ok=True)"
# the frames the notebook was called from: in a fork of the grader they held every submission's
# folder, the course secret and the grades made so far
FRAMES = """
import sys as _sys
_f, _seen = _sys._getframe(), set()
while _f is not None:
    _seen |= set(_f.f_locals)
    _f = _f.f_back
raise RuntimeError("FRAMES " + ("the grader's" if {"jobs", "todo", "secret", "done"} & _seen else "its own"))
"""


def test_a_notebook_cannot_choose_what_the_hidden_tests_call(dist, tmp_path):
    subs = tmp_path / "subs"
    m = dist["master"]
    fixtures.lab1_submission(subs / "genuine", m, real=1)
    fixtures.lab1_submission(subs / "close", with_cells(m, tmp_path / "close.ipynb", edits=WRONG,
                                                        last=ALWAYS_CLOSE), real=2)
    hidden = fixtures.lab1_submission(subs / "hidden", with_cells(
        m, tmp_path / "hidden.ipynb", first=UNSTASH, last=POSE_AS_LABKIT), real=3)
    (hidden / "submission").rename(hidden / "stash")
    fixtures.lab1_submission(subs / "frames", with_cells(m, tmp_path / "frames.ipynb", last=FRAMES), real=4)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60)
    r = rows(out)
    fb = {s: (out / "feedback" / f"{s}.txt").read_text() for s in r}
    assert float(r["genuine"]["score"]) == FULL, fb["genuine"]
    # the notebook runs in an interpreter of its own: nothing of the grader's up its stack
    assert "FRAMES its own" in fb["frames"] and float(r["frames"]["score"]) == FULL, fb["frames"]
    # the grader's own labkit and LAB: the wrong answers lose their points as without the proxy
    assert float(r["close"]["q5"]) == 0 and float(r["close"]["q7"]) == 0, fb["close"]
    assert float(r["close"]["score"]) == FULL - 3 - 3
    # no results where the grader looks: a finding, and no measured answer earns points
    assert "no submission/lab1/ folder" in r["hidden"]["flags"], r["hidden"]
    for q in ("q1", "q2", "q3", "q5", "q7", "q8"):
        assert float(r["hidden"][q]) == 0, (q, fb["hidden"])


def test_the_autograder_names_what_the_grader_binds_itself(dist, tmp_path):
    ag = fastgrade.unpack_autograder(dist["zip"], tmp_path / "ag")
    t = fastgrade.read_trusted(ag)
    assert t["constants"] == {"LAB": "lab1"} and t["modules"]["labkit"] == ["labkit", ""]
    assert t["modules"]["pd"] == ["pandas", ""] and t["grader_only"] == []
    # only names the tests read, and never a placeholder the student fills in
    assert "STUDENT_ID" not in t["constants"] and "os" not in t["modules"]
    (ag / fastgrade.TRUSTED).write_text('{"modules": {"KM": "kmodlab"}}')
    with pytest.raises(ValueError, match="malformed"):
        fastgrade.read_trusted(ag)
    # lab 5's reference learner is the grading process's only
    from grading import build
    master = tmp_path / "lab5.ipynb"
    master.write_text((KIT / "notebooks" / "lab5.ipynb").read_text())
    mods, consts = build.master_bindings(master)
    assert mods["ts"] == ["tuner_support", ""] and consts["SEED"] == 5 and "K" not in consts
    files, work = tmp_path / "files", tmp_path / "work"
    (files / "__pycache__").mkdir(parents=True)
    for name in ("tuner_support.py", "lab5_reference.py", "__pycache__/lab5_reference.cpython-311.pyc",
                 "__pycache__/tuner_support.cpython-311.pyc"):
        (files / name).write_text("x = 1\n")
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "lab5.ipynb").write_text("{}")
    grade._prepare(entry, work, files, ("lab5_reference.py",))
    assert (work / "tuner_support.py").is_file() and not (work / "lab5_reference.py").exists()
    assert sorted(p.name for p in (work / "__pycache__").iterdir()) == ["tuner_support.cpython-311.pyc"]


def test_a_folder_entrys_links_and_devices_are_not_followed(dist, tmp_path, monkeypatch):
    """unzip restores symbolic links; the grader runs as root.  A link to a file outside (the
    course secret) must not bring it into the submission, one to /dev/zero must not stall the
    class, and a zip that unpacks to more than the limit is refused before it is written."""
    subs = tmp_path / "subs"
    secret = tmp_path / "course.secret"
    secret.write_text("THE-COURSE-SECRET\n")
    show = "raise ValueError(open('notes.txt').read())"
    e = fixtures.lab1_submission(subs / "links", with_cells(dist["master"], tmp_path / "l.ipynb",
                                                            last=show), real=1)
    (e / "notes.txt").symlink_to(secret)
    (e / "big.bin").symlink_to("/dev/zero")
    (e / "outside").symlink_to(tmp_path, target_is_directory=True)
    big = fixtures.lab1_submission(tmp_path / "big", dist["master"], real=2)
    shutil.make_archive(str(subs / "big"), "zip", root_dir=big)
    monkeypatch.setattr(grade, "MAX_UNPACKED", 1 << 16)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=1, timeout=60)
    r = rows(out)
    fb = (out / "feedback" / "links.txt").read_text()
    assert "THE-COURSE-SECRET" not in fb and "No such file" in fb, fb
    assert float(r["links"]["score"]) == FULL
    for name in ("big.bin", "notes.txt", "outside"):
        assert name in r["links"]["flags"], r["links"]["flags"]
    assert r["big"]["status"] == "error" and "unpacks to" in r["big"]["reason"], r["big"]


def _unpacked_tests(zip_path: Path, dest: Path) -> Path:
    fastgrade.unpack_autograder(zip_path, dest)
    return dest / "tests"


def test_weighting_measured_answers_follow_their_recomputation(dist, tmp_path):
    """Type checks weigh nothing: an unfilled notebook with a genuine run scores 0 (otter's even
    split gave it about 40 %), and so does a fabricated run whose answers match its numbers."""
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "unfilled", dist["student"], real=9)
    fixtures.lab1_submission(subs / "fabricated", dist["master"], tamper="edit", real=10)
    typed = with_cells(dist["master"], tmp_path / "typed.ipynb",
                       edits={"w_max = float(": "w_max = 1.5 * float("})
    fixtures.lab1_submission(subs / "typed", typed, real=11)
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=2, timeout=60)
    r = rows(out)
    assert r["unfilled"]["status"] == "graded" and float(r["unfilled"]["score"]) == 0
    assert float(r["fabricated"]["score"]) == 0
    fb = (out / "feedback" / "fabricated.txt").read_text()
    assert "q5: 0/3 -- the results fail the record check" in fb
    assert "changed after the run" in fb            # the public check says which file
    # one answer off: that question alone scores 0, its public check still passes
    assert float(r["typed"]["q5"]) == 0 and float(r["typed"]["score"]) == FULL - 3
    fbt = (out / "feedback" / "typed.txt").read_text()
    assert "q5: 0/3" in fbt and "passed: q5 - 1" in fbt
    unfilled = (out / "feedback" / "unfilled.txt").read_text()
    assert "is not defined" in unfilled or "does not match" in unfilled


def test_cell_errors_reach_the_feedback_as_one_short_line(dist, tmp_path):
    subs = tmp_path / "subs"
    noisy = with_cells(dist["master"], tmp_path / "noisy.ipynb",
                       first="raise ValueError('<script>x</script>' + 'A' * 500 + '\\nsecond line')",
                       last="display(q1_answer if 'q1_answer' in dir() else 1)   # a kernel's name")
    fixtures.lab1_submission(subs / "noisy", noisy, real=12)
    (subs / "broken.zip").write_bytes(b"PK\x03\x04 not a zip")
    import zipfile
    with zipfile.ZipFile(subs / "escape.zip", "w") as z:
        z.writestr("../../outside.txt", "x")
    out = tmp_path / "graded"
    grade.grade_all(subs, dist["zip"], out, jobs=1, timeout=60)
    for bad in ("broken", "escape"):
        row = rows(out)[bad]
        assert row["status"] == "error" and float(row["score"]) == 0
        assert row["reason"].startswith("could not unpack the submission") and "\n" not in row["reason"]
    fb = (out / "feedback" / "noisy.txt").read_text()
    line = next(l for l in fb.splitlines() if "ValueError" in l)
    assert len(line.strip()) <= 100 and "second line" not in fb and "A" * 200 not in fb
    assert "display" not in fb and "NameError" not in fb, fb      # display() runs as in a kernel
    assert float(rows(out)["noisy"]["score"]) == FULL


def test_answers_cross_as_data_only():
    funcs = []
    ix = pd.MultiIndex.from_tuples([("wired", "bbr"), ("wifi", "cubic")], names=["profile", "cca"])
    frame = pd.DataFrame({"alg": ["bbr", "cubic"], "n": np.array([1, 2], dtype="int64"),
                          "x": [0.5, float("nan")], "ok": [True, False]})
    rng = random.Random(4)
    value = {"s": pd.Series([1.5, 2.5], index=ix, name="mbps"), "f": frame, "q": Fraction(1, 3),
             "t": (1, "a", None), "k": {("a", 1): [np.float64(2.0), np.int64(3)]}, "r": rng,
             "fn": (lambda x: x), "a": np.arange(6).reshape(2, 3)}
    wire = json.loads(json.dumps(answers.encode(value, funcs)))
    back = answers.decode(wire, lambda m, q: None, call=lambda h: ("proxy", h))
    pd.testing.assert_series_equal(back["s"], value["s"])
    pd.testing.assert_frame_equal(back["f"], frame)
    assert back["q"] == Fraction(1, 3) and back["t"] == (1, "a", None)
    assert back["k"] == {("a", 1): [2.0, 3]} and isinstance(back["k"][("a", 1)][1], np.int64)
    assert back["r"].random() == rng.random() and back["fn"] == ("proxy", 0) and funcs[0] is value["fn"]
    assert (back["a"] == value["a"]).all()
    # strict: untagged objects and unknown tags are refused; names are resolved only by the side
    for bad in ({"x": 1}, {"$pickle": "gASV"}, {"$nd": ["<f8", [2], [1.0]]}, {"$nd": ["|O", [1], [1]]}):
        with pytest.raises(answers.DecodeError):
            answers.decode(bad, lambda m, q: None)
    refused = answers.decode({"$ref": ["os", "system"]}, lambda m, q: None)
    assert isinstance(refused, answers.Unreadable) and refused != 0 and not refused
    assert isinstance(answers.decode({"$path": "/etc/shadow"}, lambda m, q: None), answers.Unreadable)
    assert isinstance(answers.decode({"$func": 0}, lambda m, q: None), answers.Unreadable)
    # an object: of a class the side accepts for objects, and with data only in it
    class Box:
        pass
    ok = lambda m, q: Box if (m, q) == ("files", "Box") else None
    obj = {"$obj": ["files", "Box", {"$dict": [["f", {"$func": 0}], ["n", 3]]}]}
    back = answers.decode(obj, ok, call=lambda h: ("proxy", h))
    assert isinstance(back, Box) and back.n == 3 and isinstance(back.f, answers.Unreadable)
    refused = answers.decode(obj, ok, call=lambda h: ("proxy", h), classes=lambda m, q: None)
    assert isinstance(refused, answers.Unreadable)
    slotted = {"$obj": ["fractions", "Fraction", {"$dict": []}]}      # no attributes to set
    assert isinstance(answers.decode(slotted, lambda m, q: Fraction), answers.Unreadable)
    # nor a class or a module inside an object (its own methods would call them)
    for inner in ({"$ref": ["files", "Box"]}, {"$module": "numpy"}):
        o = answers.decode({"$obj": ["files", "Box", {"$dict": [["k", inner]]}]}, lambda m, q: Box if q else np)
        assert isinstance(o.k, answers.Unreadable)
    # after a call, a list keeps the grader's contents; a random state and a data class follow
    import dataclasses
    Cell = dataclasses.make_dataclass("Cell", ["v"])
    kept, r1, r2, c = [1, 2], random.Random(1), random.Random(2), Cell(1)
    answers.update_in_place(kept, [])
    answers.update_in_place(r1, r2)
    answers.update_in_place(c, Cell(5))
    assert kept == [1, 2] and r1.random() == random.Random(2).random() and c.v == 5


def test_the_grading_side_resolves_only_what_the_autograder_supplies(tmp_path):
    """Functions never resolve to the grader's own (os.kill named as an answer would be called
    with the test's arguments); modules and classes only from the numeric libraries and the
    autograder's files."""
    files = tmp_path / "files"
    files.mkdir()
    (files / "labkit.py").write_text("X = 1\n")
    mods = fastgrade.support_modules(files)
    assert mods == {"labkit"}
    assert "os" not in fastgrade.SAFE_MODULES and "subprocess" not in fastgrade.SAFE_MODULES
    assert fastgrade.free_names("import numpy as np\nx = np.mean(a)\nassert close(x, b)") == {"a", "b", "close"}


def test_point_table_is_printed_and_adds_up(capsys):
    assert points.main(["lab1"]) == 0
    out = capsys.readouterr().out
    assert "q5" in out and "recomputed" in out and "by hand" in out
    t = points.table("lab1")
    auto = sum(q["points"] for q in t if q["graded"] != "by hand")
    assert auto == FULL
    assert all(q["check_points"] == 0 for q in t)
    assert points.main(["lab9"]) == 2
    # each handout carries its lab's table, as the notebook gives it
    assert points.main(["--check"]) == 0
    for lab in points.LABS:
        assert points.handout_block(lab) in points.handout_path(lab).read_text()
    assert "| q5 | 3 | autograded |" in points.handout_block("lab1")
    assert "| q4 | 2 | by hand |" in points.handout_block("lab1")


def test_notebooks_start_from_the_zygote_or_else_an_interpreter_of_their_own(dist, tmp_path, monkeypatch, capsys):
    """The zygote forks each notebook's process (grade.py says nothing); when it cannot start,
    grade.py says so in one line and each notebook starts an interpreter of its own, graded the
    same."""
    subs = tmp_path / "subs"
    fixtures.lab1_submission(subs / "genuine", dist["master"], real=1)
    fixtures.lab1_submission(subs / "frames", with_cells(dist["master"], tmp_path / "frames.ipynb",
                                                         last=FRAMES), real=2)
    grade.grade_all(subs, dist["zip"], tmp_path / "warm", jobs=2, timeout=60)
    assert "warning" not in capsys.readouterr().err
    started = []

    class NoZygote:
        def __init__(self, engine, home):
            started.append(engine)
            raise RuntimeError("the zygote did not start")

    monkeypatch.setattr(fastgrade, "Zygote", NoZygote)
    grade.grade_all(subs, dist["zip"], tmp_path / "cold", jobs=2, timeout=60)
    err = capsys.readouterr().err
    assert started and "no zygote (RuntimeError: the zygote did not start)" in err, err
    for out in (tmp_path / "warm", tmp_path / "cold"):
        r = rows(out)
        fb = (out / "feedback" / "frames.txt").read_text()
        assert float(r["genuine"]["score"]) == FULL and float(r["frames"]["score"]) == FULL, fb
        assert "FRAMES its own" in fb
