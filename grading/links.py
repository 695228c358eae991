"""Per-student links: the course secret, each student's link code, and the grader's check that a
submission's runs were made on its student's own link.

    python3 KIT/grading/links.py secret course.secret              # once per course (mode 0600)
    python3 KIT/grading/links.py codes --secret course.secret --roster roster.csv > codes.csv

codes.csv (student, code) goes to the students through the LMS, one code each; the secret stays
with the instructor.  A student enrols once in a notebook's first cell (labkit.enrol) and every run
of labs 1, 3 and 4 is then made on the lab's link with the rate and delay scaled by the factors
the code gives (labkit.link_factors, public).  A code is the HMAC-SHA256 of the student's ID
under the secret, nine base32 characters, and a check character over the ID and those nine
(labkit.code_check) that catches a typing mistake in the notebook.

grade.py --secret FILE runs `problems` on the grading process's own copy of each submission.
A run fails the check when its manifest has no student (made before enrolling, or by the kit's
own tests), another student's ID, a code that is not the student's, factors that are not the
code's, or a link (each direction's rate and delay) that is not the lab's scaled by them.  What
the manifest says is then held against what the run measured by grading/integrity.py's
cross-checks (no flow faster than the link, no RTT shorter than the path's): a classmate's run
relabelled with one's own code and link carries the classmate's link in its raw logs.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import hmac
import os
import secrets
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
MIN_SECRET_BYTES = 16
RATE_TOLERANCE = 0.005          # a recorded rate or delay may differ this much (rounding)


def _labkit():
    for d in (KIT / "notebooks", Path(__file__).resolve().parent):
        if (d / "labkit.py").is_file() and str(d) not in sys.path:
            sys.path.insert(0, str(d))
    import labkit
    return labkit


def read_secret(path) -> bytes:
    """The course secret in `path` (one line of hex, as `secret` writes it)."""
    p = Path(path)
    try:
        text = p.read_text().strip()
        key = bytes.fromhex(text)
    except OSError as e:
        raise SystemExit(f"links: secret {p}: {e.strerror or e}")
    except ValueError:
        raise SystemExit(f"links: secret {p}: not hex (make one with grading/links.py secret FILE)")
    if len(key) < MIN_SECRET_BYTES:
        raise SystemExit(f"links: secret {p}: {len(key)} bytes, at least {MIN_SECRET_BYTES} needed")
    return key


def write_secret(path) -> Path:
    """A new course secret in `path`, readable by its owner only; an existing file is kept."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SystemExit(f"links: {p} exists: a course keeps its secret (codes made from it "
                         f"are out); delete it yourself to start again")
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return p


def code_for(secret: bytes, student_id: str) -> str:
    """The link code of a student: XXXXX-XXXXX."""
    lk = _labkit()
    mac = hmac.new(secret, f"cclab-link:{student_id}".encode(), hashlib.sha256).digest()
    body = base64.b32encode(mac).decode()[:9]
    body += lk.code_check(student_id, body)
    return f"{body[:5]}-{body[5:]}"


@functools.lru_cache(maxsize=None)
def _base_links(lab: str, mode: str) -> dict[str, object]:
    """{experiment name: its link as the lab's file makes it} (empty without the kit's files):
    read once per grading process, not once per submission."""
    lk = _labkit()
    try:
        files = lk.experiment_files(lab, mode)
    except RuntimeError:
        return {}
    out = {}
    for path in files:
        exp = lk._load_experiment(path)
        out[exp.name] = exp.link
        out[exp.name].own_link = bool((exp.given.get("lab") or {}).get("own_link"))
    return out


def _close(a, b) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return abs(a - b) <= RATE_TOLERANCE * max(abs(b), 1e-9)


def problems(submission, lab: str, student_id: str, secret: bytes) -> list[str]:
    """One line per run of submission/<lab>/ not made on this student's link ([] when every run
    is, or when the lab keeps its link for everyone)."""
    import json
    lk = _labkit()
    if lab not in lk.LINK_LABS:
        return []
    code = code_for(secret, student_id)
    want = lk.link_factors(lab, code)
    rec = lk.read_record(lab, submission) or {}
    bases = _base_links(lab, rec.get("mode") or "quick")
    bad = []
    for rel in rec.get("runs") or {}:
        d = Path(submission) / lab / rel
        try:
            m = json.loads((d / "manifest.json").read_text())
            st = ((m.get("spec") or {}).get("lab") or {}).get("student")
        except (OSError, ValueError):
            continue                                  # integrity.problems says so
        except AttributeError:
            bad.append(f"{rel}: its manifest is not the engine's (no spec table)")
            continue
        if not isinstance(st, dict):
            bad.append(f"{rel}: made without your link: enrol with your ID and link code in the "
                       f"notebook's first cell, then run the lab again")
            continue
        if str(st.get("id")) != student_id:
            bad.append(f"{rel}: made by another student (the ID on record is not yours)")
            continue
        if st.get("code") != code:
            bad.append(f"{rel}: made with link code {st.get('code')}, which is not yours")
            continue
        if not (_close(st.get("rate"), want["rate"]) and _close(st.get("delay"), want["delay"])):
            bad.append(f"{rel}: the link factors on record are not your code's")
            continue
        if not bases:
            continue                                  # the kit's lab files are not here
        base = bases.get(m.get("experiment"))
        if base is None:
            bad.append(f"{rel}: experiment {m.get('experiment')!r} is not one of {lab}'s")
            continue
        if bool(st.get("own_link")) != base.own_link:
            made, asked = (("the lab's link", "yours") if st.get("own_link")
                           else ("your link", "the lab's own"))
            bad.append(f"{rel}: made on {made}; the lab's file {m.get('experiment')!r} asks "
                       f"for {asked}")
            continue
        if base.dynamics is not None:
            continue
        k = {"rate": 1.0, "delay": 1.0} if base.own_link else want
        prof = m.get("profile") if isinstance(m.get("profile"), dict) else {}
        for name, dirn in base.directions().items():
            got = prof.get(name) if isinstance(prof.get(name), dict) else {}
            rate, delay = dirn.rate * k["rate"], dirn.delay * k["delay"]
            if not (_close(got.get("rate"), rate) and _close(got.get("delay"), delay)):
                bad.append(f"{rel}: its {name} link ran at {_mbit(got.get('rate'))} and "
                           f"{_ms(got.get('delay'))}; yours is {rate / 1e6:g} Mbit/s and "
                           f"{delay * 1e3:g} ms")
                break
    return bad


def _mbit(v) -> str:
    try:
        return f"{float(v) / 1e6:g} Mbit/s"
    except (TypeError, ValueError):
        return "an unknown rate"


def _ms(v) -> str:
    try:
        return f"{float(v) * 1e3:g} ms"
    except (TypeError, ValueError):
        return "an unknown delay"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="links.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("secret", help="make a new course secret in FILE (kept from students)")
    s.add_argument("file")
    c = sub.add_parser("codes", help="each roster student's link code, as CSV (student,code)")
    c.add_argument("--secret", required=True)
    c.add_argument("--roster", required=True, help="the grader's roster CSV (a student column)")
    a = ap.parse_args(argv)
    if a.what == "secret":
        print(f"links: a new course secret in {write_secret(a.file)}: keep it, and keep it from "
              f"students", file=sys.stderr)
        return 0
    if str(KIT) not in sys.path:              # run as a script (python3 KIT/grading/links.py)
        sys.path.insert(0, str(KIT))
    from grading import grade
    key = read_secret(a.secret)
    roster = grade.read_roster(Path(a.roster))
    lk = _labkit()
    print("student,code")
    for sid in roster:
        if not lk.STUDENT_ID.match(sid):
            raise SystemExit(f"links: roster student {sid!r} cannot enrol: IDs are letters, digits "
                             f"and . _ @ - (at most 64)")
        print(f"{sid},{code_for(key, sid)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
