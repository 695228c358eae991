"""What a hidden test may grade.  A question's points follow what the student computed: every
assertion of a hidden case reads the student's answers (directly, or through values derived from
them in the case), or checks that the results are a real run (the record check), or that the runs
are the lab's conditions (tagged with fastgrade.SETUP, reported as such).  Which way an experiment
came out (which algorithm added less delay, whether a shorter window exited earlier) is never an
assertion of its own: on a shared machine a real run can come out the other way, and the free-text
questions are where a student discusses it."""

import ast
import json
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(KIT))

from grading import fastgrade  # noqa: E402

RECORD = "not the results of a real run"


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _statements(body):
    for st in body:
        yield st
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(st, field, None) or [])


def _reads_submission(node) -> bool:
    """A path into the folder the student handed in (lab 5's hidden cases open
    submission/lab5/live.csv by that literal path, not by the notebook's SUB)."""
    return any(isinstance(n, ast.Constant) and n.value == "submission" for n in ast.walk(node))


def _bound(tree) -> set[str]:
    out = set()
    for st in tree.body:
        if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            out |= {n for t in targets for n in _names(t)}
        elif isinstance(st, (ast.FunctionDef, ast.ClassDef)):
            out.add(st.name)
    return out


def outcome_only_asserts(nb: dict) -> list[str]:
    """Assertions of hidden cases that read nothing the student made and carry neither tag.  The
    student's state: every name the notebook binds from its first question on (its answers,
    functions, the logs it loaded; the submission folder, as SUB or a path from "submission"),
    and in a case whatever is assigned from them or passed to a student function."""
    student, found, started = set(), [], False
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "raw" and src.startswith("# BEGIN QUESTION"):
            started = True
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(src)
        if not src.startswith("# HIDDEN"):
            if started:
                student |= {n for n in _bound(tree) if not n.startswith("_")}
            continue
        taint = set(student) | {"SUB"}      # lab 5: the live log the student's learner wrote
        for st in _statements(tree.body):
            if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                value = st.iter if isinstance(st, ast.For) else st.value
                hit = bool(_names(value) & taint) or _reads_submission(value) or (
                    isinstance(st, ast.AugAssign) and bool(_names(st.target) & taint))
                for n in {n for t in targets for n in _names(t)}:
                    (taint.add if hit else taint.discard)(n)
            if isinstance(st, (ast.Assign, ast.Expr)):
                for call in (c for c in ast.walk(st) if isinstance(c, ast.Call)):
                    if _names(call.func) & taint:        # a student function may change its arguments
                        taint |= {n for a in call.args for n in _names(a)}
            if isinstance(st, ast.Assert):
                msg = ast.unparse(st.msg) if st.msg else ""
                if _names(st.test) & taint or fastgrade.SETUP in msg or RECORD in msg:
                    continue
                if "verify" in ast.unparse(st.test):
                    continue
                found.append(f"cell {i}: {ast.unparse(st)[:120]}")
    return found


@pytest.mark.parametrize("lab", ["lab1", "lab2", "lab3", "lab4", "lab5"])
def test_hidden_cases_grade_answers_not_outcomes(lab):
    nb = json.loads((KIT / "notebooks" / f"{lab}.ipynb").read_text())
    assert outcome_only_asserts(nb) == []


def test_the_check_finds_an_outcome_assertion():
    cells = [{"cell_type": "raw", "source": ["# BEGIN QUESTION\n"]},
             {"cell_type": "code", "source": ["gap = measured_gap()\n"]},
             {"cell_type": "code", "source": [
                 "# HIDDEN\n_d = _lk.added_delay('lab1')\n",
                 "assert abs(gap - (_d['cubic'] - _d['vegas'])) < 0.1\n",
                 "assert _d['vegas'] < _d['cubic'], 'Vegas adds less delay'\n",
                 f"assert _d['cubic'] > 0, \"{fastgrade.SETUP}no queue at all\"\n"]}]
    found = outcome_only_asserts({"cells": cells})
    assert len(found) == 1 and "Vegas adds less delay" in found[0], found


def test_a_setup_failure_is_reported_as_such():
    """score_file's reason names the run's conditions, not the answer, when a setup check fails."""
    class Case:
        hidden = True

    class Result:
        test_case, passed = Case(), False
        message = ("AssertionError: " + fastgrade.SETUP
                   + "the lossy path's connections show no loss\nmore lines")

    class File:
        test_case_results, possible = [Result()], 3

    points, why = fastgrade.score_file(File())
    assert points == 0
    assert why == "the runs are not this lab's setup (the lossy path's connections show no loss)"
