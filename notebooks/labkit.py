"""Helpers shared by the lab notebooks and their autograder tests.

A lab notebook calls `run_lab(lab)` once.  In the lab VM (as root) that runs the lab's experiment
files through the engine (`cclab.runner`), adds the fidelity verdict beside every run's manifest,
turns the loss-event capture into a small time-sequence table, and writes a record of every result
file's SHA-256 (`submission/<lab>/record.json`).  Everything lands in `submission/<lab>/`, which
goes into the student's submission.

When the results are already there (a re-run of the notebook) or the environment says
CCLAB_REPLAY=1 (the grader, the host tests), nothing is run: the saved results are loaded.

The autograder tests do not trust the numbers a student typed: `verify()` checks that the saved
files are what the run wrote (hashes, manifest, congestion control, fidelity, iperf3's own JSON
against the tables) and the `recompute_*` functions derive every graded number from the raw
tables again.  Tolerance bands come from reference runs (`labs/<lab>/reference.csv`).

Modes: CCLAB_MODE=quick|full (or CCLAB_QUICK=1).  Quick: short flows, one repetition, the whole
notebook in a few minutes in the software-emulated VM.  Full: the source studies' durations.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
SUBMISSION = Path("submission")
RECORD = "record.json"
HASHED_SUFFIXES = (".csv", ".json")


# ---------------------------------------------------------------- where things are

def kit_root() -> Path | None:
    """The kit checkout (the folder holding cclab/), or None when grading without it."""
    cands = [os.environ.get("CCLAB_KIT"), HERE.parent, Path.cwd(), Path.cwd().parent, "/kit"]
    for c in cands:
        if c and (Path(c) / "cclab" / "__init__.py").is_file():
            return Path(c).resolve()
    return None


def mode() -> str:
    """quick unless CCLAB_MODE=full asks for the source studies' durations (hours for lab 2)."""
    m = os.environ.get("CCLAB_MODE")
    if m in ("quick", "full"):
        return m
    if m:
        raise ValueError(f"CCLAB_MODE must be quick or full, not {m!r}")
    return "quick"


def replaying() -> bool:
    return os.environ.get("CCLAB_REPLAY") == "1"


def lab_dir(lab: str, root=None) -> Path:
    return Path(root or SUBMISSION) / lab


def _labs_dir() -> Path | None:
    """labs/ of the kit, or the copies bundled next to this file (autograder, student folder)."""
    k = kit_root()
    if k and (k / "labs").is_dir():
        return k / "labs"
    return None


def reference(lab: str) -> pd.DataFrame:
    """Tolerance bands from the lab's reference runs: mode, metric, key, lo, hi, n, source."""
    for p in (HERE / f"reference-{lab}.csv",
              (_labs_dir() or HERE) / lab / "reference.csv"):
        if p.is_file():
            return pd.read_csv(p, comment="#")
    raise FileNotFoundError(f"no reference bands for {lab}")


def band(lab: str, run_mode: str, metric: str, key: str) -> tuple[float, float] | None:
    ref = reference(lab)
    row = ref[(ref["mode"] == run_mode) & (ref["metric"] == metric) & (ref["key"] == key)]
    if row.empty:
        return None
    return float(row["lo"].iloc[0]), float(row["hi"].iloc[0])


# ---------------------------------------------------------------- the student's own link
#
# In a course, every student runs labs 1, 3 and 4 on a link of their own: the lab's link with its
# rate and its delay scaled by factors drawn from the student's link code.  The instructor makes
# each code from the student's ID and a course secret (grading/links.py) and hands it out; the
# notebook's first cell enrols the student once (`enrol`), every run applies the link, and the
# manifest records who ran it on which link.  The grader makes the codes again from its roster
# and the secret, so a classmate's results, or an answer key made on the lab's own link, do not
# pass as someone else's.  The factors keep each lab's lesson: rates at 70-100 % of the lab's
# (the software-emulated VM holds the lab's rates within a few percent, and not much more),
# delays at 80-120 %.  Lab 4 keeps its delays: a GEO path's 600 ms is the orbit's, and Wi-Fi's
# few ms are the radio's.  Labs 2 and 5 keep their links: lab 2 reproduces the figures of one
# published Starlink-like path (its graded throughputs at P=1 follow that path's RTT and loss),
# and lab 5's two fixed paths are the plugin's test, which its answers compare by name.
# Without an enrolment (self-study, the kit's own tests) a run uses the lab's link as written.

STUDENT_FILE = "student.json"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
LINK_CODE = re.compile(r"^[A-Z2-7]{5}-[A-Z2-7]{5}$")
CODE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"          # base32: no 0/O or 1/I to confuse
RATE_FACTORS = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00)
DELAY_FACTORS = (0.80, 0.90, 1.00, 1.10, 1.20)
LINK_LABS = {"lab1": (RATE_FACTORS, DELAY_FACTORS),
             "lab3": (RATE_FACTORS, DELAY_FACTORS),
             "lab4": (RATE_FACTORS, (1.00,))}


class EnrolError(ValueError):
    """A student ID or link code that cannot be right (str() is one line)."""


def code_check(student_id: str, body: str) -> str:
    """The code's last character: a checksum over the student's ID and the code's first nine,
    so that a mistyped code or ID is refused at once (it proves nothing: the grader makes the
    codes again from its secret)."""
    d = hashlib.sha256(f"cclab-link-check:{student_id}:{body}".encode()).digest()
    return CODE_ALPHABET[d[0] % 32]


def _check_enrolment(student_id, code) -> tuple[str, str]:
    sid = str(student_id or "").strip()
    c = str(code or "").strip().upper().replace(" ", "")
    if len(c) == 10 and "-" not in c:
        c = f"{c[:5]}-{c[5:]}"
    if not STUDENT_ID.match(sid):
        raise EnrolError(f"student ID {sid!r}: use the ID on your course roster (letters, digits, "
                         f". _ @ -; at most 64 characters)")
    if not LINK_CODE.match(c):
        raise EnrolError(f"link code {code!r}: expected ten letters and digits 2-7, like ABCDE-FGH2J")
    body = c.replace("-", "")
    if code_check(sid, body[:9]) != body[9]:
        raise EnrolError(f"link code {c} does not belong to student ID {sid}: check both against "
                         f"what your instructor sent")
    return sid, c


def student(root=None) -> dict | None:
    """The enrolment in ROOT/student.json: {"id", "code"}, or None (self-study)."""
    p = Path(root or SUBMISSION) / STUDENT_FILE
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
        sid, code = _check_enrolment(d.get("id"), d.get("code"))
    except (ValueError, AttributeError) as e:
        raise EnrolError(f"{p}: {e if isinstance(e, EnrolError) else 'not an enrolment file'} "
                         f"(delete it and enrol again)") from None
    return {"id": sid, "code": code}


def enrol(student_id, code, root=None) -> dict:
    """Enrol once: keep the student's ID and link code in ROOT/student.json, which goes into the
    submission.  Enrolling again with the same pair changes nothing; another pair is refused,
    because the results already made are on the first one's link."""
    sid, c = _check_enrolment(student_id, code)
    now = student(root)
    if now is not None and now != {"id": sid, "code": c}:
        raise EnrolError(f"already enrolled as {now['id']} (code {now['code']}) in "
                         f"{Path(root or SUBMISSION) / STUDENT_FILE}: to change it, delete that file")
    if now is None:
        base = Path(root or SUBMISSION)
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / (STUDENT_FILE + ".tmp")
        tmp.write_text(json.dumps({"id": sid, "code": c}) + "\n")
        os.replace(tmp, base / STUDENT_FILE)
    return {"id": sid, "code": c}


def link_factors(lab: str, code: str) -> dict | None:
    """{"rate": f, "delay": g}: the factors a link code gives a lab (None: the lab keeps its
    link).  Public on purpose: anyone may work out a code's link; only the instructor can say
    whose code it is."""
    if lab not in LINK_LABS:
        return None
    rates, delays = LINK_LABS[lab]
    d = hashlib.sha256(f"cclab-link:{lab}:{code}".encode()).digest()
    return {"rate": rates[int.from_bytes(d[:4], "big") % len(rates)],
            "delay": delays[int.from_bytes(d[4:8], "big") % len(delays)]}


def student_link(lab: str, who: dict | None) -> dict | None:
    """What a run records of its student (manifest: spec.lab.student): id, code and the lab's
    factors; None when nobody is enrolled or the lab keeps its link."""
    if not who:
        return None
    f = link_factors(lab, who["code"])
    return None if f is None else {"id": who["id"], "code": who["code"], "lab": lab, **f}


def linked_table(table: dict, link: dict | None, profile) -> dict:
    """An experiment file's table with the student's link applied: each shaped direction's rate
    and delay (of `profile`, the experiment's link as the file makes it) scaled, as overrides;
    buffers given in BDPs follow.  A profile whose rate follows dynamics is left as it is, and so
    is a file whose [lab] table sets own_link (a reason): its runs record the student with
    own_link = true."""
    if not link or profile.dynamics is not None:
        return table
    if (table.get("lab") or {}).get("own_link"):
        # a file that keeps its link for everyone (it says why): the run still records whose it is
        return {**table, "lab": dict(table["lab"], student=dict(link, own_link=True))}
    over = dict(table.get("override") or {})
    for name, d in profile.directions().items():
        over[name] = dict(over.get(name) or {}, rate=round(d.rate * link["rate"]),
                          delay=round(d.delay * link["delay"], 6))
    lab = dict(table.get("lab") or {}, student=link)
    return {**table, "override": over, "lab": lab}


def describe_link(lab: str, root=None) -> str:
    """One line for the notebook: the student's link for this lab, or why it is the lab's own."""
    who = student(root)
    if who is None:
        return (f"{lab}: no student enrolled: your runs use the lab's own link (self-study). In a "
                f"course, enrol first with the ID and link code your instructor sent.")
    f = link_factors(lab, who["code"])
    if f is None:
        return f"{lab}: {who['id']}: this lab runs on its own link for everyone."
    return (f"{lab}: {who['id']}: your link is the lab's with {f['rate']:.0%} of its rate and "
            f"{f['delay']:.0%} of its delay; every run records it, and plot titles show it.")


# ---------------------------------------------------------------- hashing

def sha256(path) -> str:
    """A file's SHA-256 (the records' digests).  labkit's own, not cclab.files.sha256: the
    student versions of labs 1 and 2 ship labkit without the engine, and verify() runs there."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hashed_files(run_dir: Path) -> list[Path]:
    """The files of a run whose hashes the record keeps: tables, manifest, tsg, iperf3 JSON."""
    run_dir = Path(run_dir)
    out = [p for p in sorted(run_dir.iterdir()) if p.is_file() and p.suffix in HASHED_SUFFIXES]
    raw = run_dir / "raw"
    if raw.is_dir():
        out += sorted(raw.glob("iperf-*.json"))
    return out


def write_record(lab: str, run_mode: str, run_dirs, root=None, extra: dict | None = None) -> Path:
    """Record which runs make up the submission and the SHA-256 of each of their files."""
    base = lab_dir(lab, root)
    runs = {}
    for d in run_dirs:
        d = Path(d)
        runs[str(d.relative_to(base))] = {
            str(p.relative_to(d)): sha256(p) for p in hashed_files(d)}
    rec = {"lab": lab, "mode": run_mode, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "runs": runs, **(extra or {})}
    path = base / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_record(lab: str, root=None) -> dict | None:
    p = lab_dir(lab, root) / RECORD
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


# ---------------------------------------------------------------- running

def experiment_files(lab: str, run_mode: str) -> list[Path]:
    labs = _labs_dir()
    if labs is None:
        raise RuntimeError("the kit (cclab/, labs/) is not here: experiments run in the lab VM")
    files = sorted((labs / lab / run_mode).glob("*.toml"))
    if not files:
        raise RuntimeError(f"no experiment files in {labs / lab / run_mode}")
    return files


MODULES_DIR = Path("/lib/modules")


def offered_ccas(candidates) -> list[str]:
    """Congestion controls the kernel offers, after trying to load each candidate module.  Not
    as root, a candidate whose module the running kernel has counts too: the lab command loads
    it, as root, when the run needs it (the engine's ensure_ccas)."""
    have = set(_available())
    for c in candidates:
        if c not in have and os.geteuid() == 0:
            subprocess.run(["modprobe", f"tcp_{c}"], capture_output=True)
    have = set(_available())
    if os.geteuid() != 0:
        have |= {c for c in candidates if _has_module(f"tcp_{c}")}
    return [c for c in candidates if c in have]


def _has_module(name: str) -> bool:
    """Whether the running kernel has module `name`, built in or loadable (modules.dep)."""
    d = MODULES_DIR / os.uname().release
    for index in ("modules.builtin", "modules.dep"):
        try:
            lines = (d / index).read_text().splitlines()
        except OSError:
            continue
        if any(line.split(":", 1)[0].rsplit("/", 1)[-1].split(".ko", 1)[0] == name for line in lines):
            return True
    return False


def _available() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


class NoFlowSelected(ValueError):
    """An experiment file none of whose flows uses the congestion controls a run was limited to."""


def load_experiment(path: Path, only_ccas=None, link: dict | None = None):
    """(Experiment, its [lab] table) of a lab's experiment file, with only the flows of
    `only_ccas` (when given) and on the student's link (student_link: None keeps the file's).
    The engine validates the whole file, [lab] included (cclab.schema.LabModel), and runs it
    without [lab]."""
    kit = kit_root()
    if str(kit) not in sys.path:
        sys.path.insert(0, str(kit))
    from cclab import profiles, spec
    table = profiles.load_toml(path, "experiment")
    if only_ccas is not None:
        flows = table.get("flow", [])
        kept = [i for i, f in enumerate(flows) if f["cca"] in only_ccas]
        if flows and not kept:
            raise NoFlowSelected(f"{path.name} runs only {', '.join(sorted({f['cca'] for f in flows}))}, "
                                 f"none of {', '.join(only_ccas) or 'nothing'}")
        over = table.get("override") or {}
        if over.get("pairs") == len(flows) and kept:      # one pair per flow: no idle pairs
            table["override"] = dict(over, pairs=len(kept))
        table["flow"] = [dict(flows[i], start=s) for i, s in zip(kept, close_gaps(flows, kept))]
    exp = spec.from_dict(table, path.stem, path.parent)
    if link:
        table = linked_table(table, link, exp.link)
        exp = spec.from_dict(table, path.stem, path.parent)
    exp.given = table
    return exp, table.get("lab") or {}


def _load_experiment(path: Path, only_ccas=None, link: dict | None = None):
    """The Experiment of load_experiment, without its [lab] table."""
    return load_experiment(path, only_ccas, link)[0]


def close_gaps(flows: list[dict], kept: list[int]) -> list:
    """The starts of the flows `kept` (indices into an experiment file's `flows`) once the others
    are left out.  When the file's flows run one after the other (each starts once the one before
    it has ended), the time of the left-out flows is taken out: each kept flow starts as long
    after the kept flow before it as the file had it start after its own predecessor, and the
    first kept flow starts when the file's first flow does.  Otherwise
    (overlapping flows share the link on purpose; size-limited ones have no planned end) every
    kept flow keeps its start."""
    from cclab import units
    given = [f.get("start", "0s") for f in flows]
    if any("duration" not in f for f in flows):
        return [given[i] for i in kept]
    start = [units.duration(f.get("start", 0), "start") for f in flows]
    end = [a + units.duration(f["duration"], "duration") for a, f in zip(start, flows)]
    if any(start[i] < end[i - 1] for i in range(1, len(flows))):
        return [given[i] for i in kept]
    out, t = [], None
    for i in kept:
        at = start[0] if t is None else t + start[i] - end[i - 1]
        out.append(given[i] if at == start[i] else f"{at:g}s")
        t = at + (end[i] - start[i])
    return out


def _tsg(run_dir: Path) -> None:
    """Turn a run's packet capture into tsg.csv (time-sequence graph data) with tshark."""
    caps = sorted((run_dir / "raw").glob("capture-*.pcap"))
    if not caps or shutil.which("tshark") is None:
        return
    from cclab.analysis import tshark
    start = json.loads((run_dir / "manifest.json").read_text())["start_epoch"]
    tshark.time_sequence(caps[0], start).to_csv(run_dir / "tsg.csv", index=False)
    for c in caps:                      # the capture stays in the VM; its digest goes on record
        (run_dir / "raw" / (c.name + ".sha256")).write_text(sha256(c) + "\n")
        c.unlink()


# The lab's fidelity thresholds.  The labs run in a software-emulated (TCG) guest that may share
# its host with other work: the defaults of cclab.analysis.fidelity.Thresholds (95 % of the rate
# while backlogged, 90 % link use, idle RTT within 2 ms, queue within 5 % of the buffer) fail
# runs there by a few percent, by the first ping's ARP and cold-path delay (the idle RTT is often
# judged from one or two pings before the first flow: 30-70 ms measured on a 20 ms link), or by
# a few packets of sampling noise in the queue.  The rate checks stay close to the defaults; the
# verdict records the thresholds it used.  A verdict the engine already wrote is kept as it is.
LAB_THRESHOLDS = {"backlog_min_frac": 0.88, "link_limited_min": 0.85, "idle_rtt_abs_ms": 80.0,
                  "idle_rtt_rel": 0.25, "queue_rel": 0.25, "rtt_queue_rel": 0.5,
                  "queue_slack_pkts": 8.0, "queue_slack_ms": 10.0}


def run_thresholds(profile: dict) -> dict:
    """LAB_THRESHOLDS for one run's link profile: how many packets beyond netem's delay line make
    the bottleneck count as backlogged for the rate checks (backlog_min_pkts).

    The checks take the delay line as the departure rate times the delay.  But netem holds every
    packet for its delay before the shaper sees it, so while a sender outpaces the link (slow
    start doubles its rate each RTT) the delay line holds up to twice that, and those packets are
    not waiting for the link; netem with jitter holds a packet until its own random delay has
    passed, and an aggregation slot stays closed for up to slot.max after its last packet.  The
    link runs at its rate only once the queue covers these.  So a run counts as backlogged only
    beyond rate x (delay + jitter + slot.max) packets (the highest rate and delay the profile's
    dynamics may draw).  Measured in the lab VM, bottleneck departures at the deepest queues
    against the configured rate: wifi (50 Mbit/s, 2 ms jitter, slots 0.8-10 ms) 241.8 us per
    packet with >= 120 packets queued, ideal 241.9, but 1.6 ms with < 15 queued; starlink-seed
    (tbf 10 Mbit/s behind 50 ms of netem) 9.8-9.9 Mbit/s with >= 60 queued, 1.7 Mbit/s with
    < 20 (P=1 flows at 2 % loss, never queueing); leo 87.6 of 88.8 Mbit/s with 100-200 queued.
    With the default of 2 packets those runs failed rate_backlogged (56-89 %) although the
    guest's CPUs were 70 % idle."""
    from cclab.schema import WIRE_PACKET
    th = dict(LAB_THRESHOLDS)
    dyn = (profile or {}).get("dynamics") or {}
    for d in ("down", "up"):
        link = (profile or {}).get(d) or {}
        rate = max([float(link.get("rate") or 0)] + [float(x) for x in dyn.get(f"{d}_rate") or []])
        delay = max([float(link.get("delay") or 0)] + [float(x) for x in dyn.get("delay") or []])
        hold = float(link.get("jitter") or 0) + float((link.get("slot") or {}).get("max") or 0)
        # the delay line's extra packets when the sender outpaces the link (slow start: twice)
        hold += delay
        if hold > 0 and rate:
            pkts = math.ceil(rate * hold / 8 / WIRE_PACKET)
            th["backlog_min_pkts"] = max(th.get("backlog_min_pkts", 2.0), float(pkts))
    return th


def _fidelity(run_dir: Path) -> None:
    m = read_manifest(run_dir)
    if "fidelity" in m:
        return
    try:
        from cclab.analysis import fidelity
    except ImportError:
        return
    fidelity.write_verdict(run_dir, fidelity.Thresholds(**run_thresholds(m.get("profile") or {})))


def untrusted(run_dir: Path) -> str | None:
    """Why a run's fidelity verdict does not trust it, or None: the lab commands hand this to
    runner.run, which makes such a run again (a starved emulator is not the student's doing)."""
    _fidelity(run_dir)
    fid = read_manifest(run_dir).get("fidelity")
    if not fid or fid.get("ok"):
        return None
    return "fidelity verdict: " + ", ".join(
        f"{c['name']}" + (f" ({c['direction']})" if c.get("direction") else "")
        for c in fid.get("checks") or [] if c.get("ok") is False) or "fidelity verdict not OK"


class LabHooks:
    """What a lab adds around the engine when run_lab runs its experiments.  These defaults are
    labs 1 and 2's (the flows of the chosen congestion controls, a time-sequence graph where a
    run captured its packets); kmodlab.ModuleParams is labs 3 and 4's (module parameters set
    before each experiment and put back after it)."""

    takes_ccas = True                   # the lab's record names the congestion controls chosen

    def load(self, path: Path, ccas, link):
        """(Experiment, its [lab] table) of one experiment file."""
        return load_experiment(Path(path), ccas, link)

    def begin(self) -> None:
        """Before the lab's first experiment."""

    def describe(self, extra: dict) -> str:
        """What the progress line adds about one experiment."""
        return ""

    @contextmanager
    def around(self, exp, extra: dict):
        """Held while the engine runs one experiment (all its repetitions); yields what
        after() is given for each of its runs."""
        yield None

    def after(self, run_dir: Path, extra: dict, held) -> None:
        """Once per run folder the engine made."""
        _tsg(run_dir)
        _fidelity(run_dir)


def run_lab(lab: str, run_mode: str | None = None, root=None, ccas=None, progress=print,
            who: dict | None = None, hooks: LabHooks | None = None) -> Path:
    """Run (or, when results exist or CCLAB_REPLAY=1, load) every experiment of a lab, on the
    link of the student enrolled in root (or `who`, {"id", "code"}: the lab command's caller).
    `hooks` (LabHooks by default) adds what the lab needs around the engine's runs."""
    hooks = hooks or LabHooks()
    who = who or student(root)
    link = student_link(lab, who)

    def experiments(out: Path) -> list[Path]:
        from cclab import runner
        hooks.begin()
        dirs = []
        with runner.keep_network():         # the lab's experiments on one link share it
            for path in experiment_files(lab, run_mode):
                try:
                    exp, extra = hooks.load(path, ccas, link)
                except NoFlowSelected as e:     # a run limited to some algorithms: not this file
                    if progress:
                        progress(f"{lab}: skipped: {e}")
                    continue
                if progress:
                    progress(f"{lab}: {exp.name}: {len(exp.flows)} flow(s), {exp.repetitions} "
                             f"repetition(s)" + hooks.describe(extra))
                t = time.monotonic()
                with hooks.around(exp, extra) as held:
                    made = runner.run(exp, out=out, progress=progress, judge=untrusted)
                if progress:
                    progress(f"{lab}: {exp.name} took {time.monotonic() - t:.0f} s")
                for d in made:
                    hooks.after(d, extra, held)
                    dirs.append(d)
        if not dirs:
            raise NoFlowSelected(f"{lab}: no {run_mode}-mode experiment runs any of "
                                 f"{', '.join(ccas or []) or 'the algorithms asked for'}")
        return dirs

    run_mode = run_mode or mode()
    record = {"student": who if link else None}
    if hooks.takes_ccas:
        record = {"ccas": ccas, **record}
    return run_staged(lab, run_mode, root, experiments, progress, record)


# ---------------------------------------------------------------- results kept safe
#
# A run never writes into the results a notebook already has.  It writes into a new folder
# beside them (ROOT/.LAB.partial-*), and only a run that finished is moved into place as
# ROOT/LAB.  The results it replaces are kept, not deleted: as ROOT/LAB-MODE (the newest
# complete results of the other mode, so quick and full sit side by side and switching back
# costs nothing), and an older keeper of that mode moves on to ROOT/LAB-MODE-<time>.  An
# interrupted or failed run leaves only its own partial folder behind, and removes that.
#
# The notebook kernel runs as the unprivileged lab user.  Experiments need root (namespaces,
# qdiscs, module parameters), so as any other user a run goes through the one privileged
# command the VM allows the lab user (sudoers names it): HELPER LAB MODE DEST.  It runs the lab
# as root in a private folder, hands the files to the caller, and moves them into DEST as the
# caller, so the kernel's own permission checks decide where it may write.

HELPER = "/usr/local/sbin/cclab-lab-run"
ENV_HELPER = "CCLAB_LAB_HELPER"          # tests: another path to the same command


def kept_dir(lab: str, run_mode: str, root=None) -> Path:
    return Path(root or SUBMISSION) / f"{lab}-{run_mode}"


def _mode_of(d: Path) -> str | None:
    try:
        return json.loads((d / RECORD).read_text()).get("mode")
    except (OSError, ValueError, AttributeError):
        return None


def _put_aside(d: Path, root) -> None:
    """Move the complete results in d out of the way, keeping them (never deleting)."""
    m = _mode_of(d) or "unrecorded"
    lab = d.name
    dest = kept_dir(lab, m, root)
    if dest.exists():
        dest.rename(dest.with_name(f"{dest.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"))
    d.rename(dest)


def install_results(lab: str, new: Path, root=None) -> Path:
    """Make the finished results in `new` the lab's results (ROOT/LAB), keeping what was there."""
    base = lab_dir(lab, root)
    if base.exists():
        _put_aside(base, root)
    new.rename(base)
    return base


def _made_for(rec: dict | None, who: dict | None) -> bool:
    """Whether saved results (their record) were made for the enrolment `who` (None: on the
    lab's own link)."""
    return ((rec or {}).get("student") or None) == (who or None)


def swap_in_kept(lab: str, run_mode: str, root=None, progress=print, who: dict | None = None) -> bool:
    """Bring back the kept complete results of run_mode (ROOT/LAB-MODE), if there are any and
    they were made on the link of the student enrolled now (`who`)."""
    kept = kept_dir(lab, run_mode, root)
    if _mode_of(kept) != run_mode:
        return False
    try:
        if not _made_for(json.loads((kept / RECORD).read_text()), who):
            return False
    except (OSError, ValueError):
        return False
    install_results(lab, kept, root)
    if progress:
        progress(f"{lab}: using the {run_mode} results kept in {lab_dir(lab, root)}")
    return True


def flow_seconds(lab: str, run_mode: str, ccas=None) -> float:
    """The time the flows of a lab's runs take end to end (each run's last flow end, summed),
    with only the flows of `ccas` when a run is limited to some algorithms (load_experiment)."""
    total = 0.0
    for path in experiment_files(lab, run_mode):
        try:
            exp = _load_experiment(path, ccas)
        except NoFlowSelected:                  # a limited run skips this file
            continue
        span = max((f.start + (f.duration or 0) for f in exp.flows), default=0.0)
        total += span * exp.repetitions
    return total


def _estimate(lab: str, run_mode: str, root, ccas=None) -> str:
    """How long a run of run_mode will take: its flows, and on this machine, when a quick-mode
    run here gives the ratio of a run's wall time to its flows."""
    flows = flow_seconds(lab, run_mode, ccas)
    ratio = None
    for d in (lab_dir(lab, root), kept_dir(lab, "quick", root)):
        rec = _mode_of(d) == "quick" and json.loads((d / RECORD).read_text())
        if rec and rec.get("seconds"):
            ratio = rec["seconds"] / max(flow_seconds(lab, "quick", rec.get("ccas")), 1.0)
            break
    limited = f" ({', '.join(ccas)} only)" if ccas else ""
    if ratio is None:
        return (f"{flows / 60:.0f} min of flows{limited} (run quick mode first for an estimate "
                f"on this machine)")
    return f"{flows / 60:.0f} min of flows{limited}, about {flows * ratio / 60:.0f} min on this machine"


def run_staged(lab: str, run_mode: str, root, experiments, progress=print, extra=None) -> Path:
    """Run a lab's experiments (experiments(out) -> run folders) into a new folder and put it in
    place once complete; reuse saved results of the same mode (or CCLAB_REPLAY=1)."""
    if run_mode not in ("quick", "full"):
        raise ValueError(f"mode must be quick or full, not {run_mode!r}")
    base = lab_dir(lab, root)
    rec = read_record(lab, root)
    who = (extra or {}).get("student")
    if replaying() or (rec and rec.get("mode") == run_mode and _made_for(rec, who)):
        if progress:
            progress(f"{lab}: using the saved {rec.get('mode') if rec else run_mode} results in {base}"
                     if rec else f"{lab}: no saved results in {base}")
        return base
    if rec and rec.get("mode") == run_mode and progress:
        progress(f"{lab}: the saved {run_mode} results in {base} were made on "
                 + (f"{rec['student']['id']}'s link" if isinstance(rec.get("student"), dict)
                    else "the lab's own link")
                 + (f", not {who['id']}'s: running again (they are kept)" if who
                    else ": running again on the lab's own link (they are kept)"))
    if swap_in_kept(lab, run_mode, root, progress, who):
        return base
    if progress and run_mode == "full":
        progress(f"{lab}: full mode: {_estimate(lab, run_mode, root, (extra or {}).get('ccas'))}")
    if os.geteuid() != 0:
        return _run_through_helper(lab, run_mode, root, (extra or {}).get("ccas"), progress,
                                   (extra or {}).get("student"))
    kit = kit_root()
    if str(kit) not in sys.path:
        sys.path.insert(0, str(kit))
    parent = Path(root or SUBMISSION)
    parent.mkdir(parents=True, exist_ok=True)
    import tempfile
    partial = Path(tempfile.mkdtemp(prefix=f".{lab}.partial-", dir=parent))
    try:
        out = lab_dir(lab, partial)
        out.mkdir()
        began = time.monotonic()
        dirs = experiments(out)
        write_record(lab, run_mode, dirs, partial,
                     {**(extra or {}), "seconds": round(time.monotonic() - began, 1)})
        install_results(lab, out, root)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    if progress:
        progress(f"{lab}: {len(dirs)} run(s) in {time.monotonic() - began:.0f} s, saved in {base}")
    return base


class RunFailed(RuntimeError):
    """The privileged lab run did not finish (its last line says why)."""


def _run_through_helper(lab: str, run_mode: str, root, ccas, progress, who=None) -> Path:
    """Run the lab through the lab user's privileged command, relaying its progress lines.
    Interrupting the notebook (KeyboardInterrupt) closes the command's input, which stops the
    run; the command cleans up and keeps nothing of it."""
    import signal
    dest = Path(root or SUBMISSION).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    cmd = ["sudo", "-n", os.environ.get(ENV_HELPER, HELPER), lab, run_mode, str(dest)]
    if ccas is not None:
        cmd += ["--ccas", ",".join(ccas)]
    if who:
        cmd += ["--student", who["id"], "--code", who["code"]]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, bufsize=1)
    last, said = "", None                   # said: the command's own error line
    trace, reading = [], False               # the crashed thread's frames (faulthandler's dump)
    try:
        for line in p.stdout:
            line = line.rstrip("\n")
            if line:
                last = line
                if line.startswith(PROG_PREFIX):
                    said = line[len(PROG_PREFIX):]
                elif line.startswith("Current thread "):
                    trace, reading = [], True
                elif reading and line.startswith("  File "):
                    trace.append(line.strip())
                else:
                    reading = False
                if progress:
                    progress(line)
        rc = p.wait()
    except KeyboardInterrupt:
        p.stdin.close()                          # the command stops the run when its input ends
        try:
            p.send_signal(signal.SIGINT)
        except OSError:
            pass
        for line in p.stdout:                    # its clean-up lines
            if progress and line.strip():
                progress(line.rstrip("\n"))
        p.wait()
        raise
    if rc != 0:
        if "a password is required" in last or "not allowed to execute" in last:
            raise RunFailed(f"{lab}: this user may not run experiments ({last}); the lab VM "
                            f"allows its lab user to run {HELPER} through sudo")
        raise RunFailed(f"{lab}: the run failed: {_helper_failure(rc, said, trace, last)}")
    return lab_dir(lab, root)


PROG_PREFIX = Path(HELPER).name + ": "      # the lab command's error lines begin with its name


def _crash_site(frames: list[str]) -> str:
    """Where a crashed lab command was, from faulthandler's frames (innermost first): the
    innermost frame, and the innermost of the kit's own code when that is another."""
    def where(frame):
        m = re.match(r'File "(.*)", line (\d+) in (\S+)', frame)
        if not m:
            return frame
        path = Path(m.group(1))
        parts = path.parts
        short = "/".join(parts[parts.index("site-packages") + 1:] if "site-packages" in parts
                         else parts[-3:])
        return f"{short}:{m.group(2)} ({m.group(3)})"
    ours = next((f for f in frames if "site-packages" not in f and "/usr/lib/python" not in f), None)
    text = f"it crashed in {where(frames[0])}"
    return text + (f", called from {where(ours)}" if ours and ours != frames[0] else "")


def _helper_failure(rc: int, said: str | None, trace: list[str], last: str) -> str:
    """Why the lab command failed, in one line: its own error line when it printed one, else how
    it ended (a signal, or an exit status with no reason given) and, for a crash, where
    (faulthandler's frames in `trace`), else the last line it printed."""
    if said and rc >= 0:
        return said
    if rc < 0:
        import signal
        try:
            how = f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"was killed by signal {-rc}"
    else:
        how = f"ended with exit status {rc} and gave no reason"
    if rc < 0 and (trace or said):               # where it crashed, or what it said
        return f"the lab command {how}: {_crash_site(trace) if trace else said}"
    return f"the lab command {how}" + (f" (its last line: {last})" if last else "")


# ---------------------------------------------------------------- loading

def run_dirs(lab: str, root=None) -> list[Path]:
    rec = read_record(lab, root) or {}
    return [lab_dir(lab, root) / r for r in rec.get("runs", {})]


def read_manifest(d: Path) -> dict:
    """A run's manifest with the files the runner's manifest lists "beside" it (the fidelity
    verdict, module parameters) read in under their keys: cclab.results.read_manifest's rule,
    kept here because the student versions of labs 1 and 2 ship labkit without the engine."""
    d = Path(d)
    m = json.loads((d / "manifest.json").read_text())
    for key, name in dict(m.get("beside") or {}).items():
        plain = isinstance(name, str) and name == Path(name).name and name.endswith(".json")
        if plain and name != "manifest.json" and not name.startswith(".") and (d / name).is_file():
            m[key] = json.loads((d / name).read_text())
    return m


_CACHE: dict = {}          # this module's own cache: (path, size, mtime) -> DataFrame


def _csv(d: Path, name: str) -> pd.DataFrame:
    p = Path(d) / f"{name}.csv"
    if not p.is_file():
        return pd.DataFrame()
    st = p.stat()
    if st.st_size == 0:
        return pd.DataFrame()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = pd.read_csv(p, low_memory=False)      # one dtype per column, no DtypeWarning
    return _CACHE[key].copy()


def _profile_name(m: dict) -> str:
    spec = m.get("spec") or {}
    p = spec.get("profile") or (m.get("profile") or {}).get("name") or "?"
    return Path(str(p)).stem


def link(lab: str, experiment: str, root=None) -> str:
    """The link an experiment of the lab ran on, for a plot's title, from its first run's
    manifest: e.g. "wired, 50 Mbit/s, 40 ms RTT, buffer 1bdp" (the delay of both directions;
    jitter and each direction's loss when the link has them: the up direction's is called the
    ACKs' when every flow goes down).  The experiment's name when no run has it."""
    for d in run_dirs(lab, root):
        if not (d / "manifest.json").is_file():
            continue
        m = read_manifest(d)
        if m.get("experiment") != experiment:
            continue
        prof = m.get("profile") or {}
        down, up = prof.get("down") or {}, prof.get("up") or {}
        parts = [_profile_name(m)]
        if down.get("rate"):
            parts.append(f"{float(down['rate']) / 1e6:g} Mbit/s")
        parts.append(f"{(float(down.get('delay') or 0) + float(up.get('delay') or 0)) * 1e3:g} ms RTT")
        if down.get("jitter"):
            parts.append(f"jitter {float(down['jitter']) * 1e3:g} ms")
        flows = (m.get("spec") or {}).get("flow") or []
        acks = flows and all((f.get("direction") or "down") == "down" for f in flows)
        for name, d in (("", down), (" of ACKs" if acks else " up", up)):
            if d.get("loss"):
                corr = float(d.get("loss_correlation") or 0)
                parts.append(f"{float(d['loss']):g} % loss{name}"
                             + (f" ({corr:g} % correlated)" if corr else ""))
        buf = down.get("buffer")
        if buf is not None:
            parts.append(f"buffer {buf}" + (" packets" if isinstance(buf, (int, float)) else ""))
        st = ((m.get("spec") or {}).get("lab") or {}).get("student")
        if isinstance(st, dict) and st.get("id") and not st.get("own_link"):
            parts.append(f"{st['id']}'s link")
        return ", ".join(parts)
    return experiment


def down_rate_mbps(lab: str, experiment: str, root=None) -> float | None:
    """The rate of the down direction an experiment of the lab ran at (Mbit/s), from its first
    run's manifest: the student's link, for a plot's link-rate line."""
    for d in run_dirs(lab, root):
        if (d / "manifest.json").is_file():
            m = read_manifest(d)
            if m.get("experiment") == experiment:
                rate = ((m.get("profile") or {}).get("down") or {}).get("rate")
                return float(rate) / 1e6 if rate else None
    return None


def color(cca: str) -> str | None:
    """An algorithm's colour in every plot of the kit (the engine's palette: BBR is red in each
    lab, Cubic blue); None where the engine is not installed (a grader's copy), and matplotlib
    picks one."""
    try:
        from cclab.analysis.plots import color as engine_color
    except ImportError:
        return None
    return engine_color(cca)


def table(lab: str, name: str, root=None) -> pd.DataFrame:
    """One table over all of the lab's runs, with experiment, profile and run columns first."""
    frames = []
    for d in run_dirs(lab, root):
        if not (d / "manifest.json").is_file():
            continue
        m = read_manifest(d)
        df = _csv(d, name)
        if df.empty:
            continue
        df.insert(0, "run", d.name)
        df.insert(0, "profile", _profile_name(m))
        df.insert(0, "experiment", m.get("experiment"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def with_cca(df: pd.DataFrame, flows: pd.DataFrame) -> pd.DataFrame:
    """Add each row's congestion control and stream count (joined on run and flow)."""
    if df.empty:
        return df
    keep = flows[["experiment", "run", "flow", "cca", "streams"]]
    return df.drop(columns=[c for c in ("cca", "streams") if c in df.columns]).merge(
        keep, on=["experiment", "run", "flow"], how="left")


# ---------------------------------------------------------------- checks of a real run

def verify(lab: str, root=None) -> list[str]:
    """Everything wrong with a lab's saved results; an empty list means they look real."""
    problems = []
    rec = read_record(lab, root)
    if rec is None:
        return [f"no {lab_dir(lab, root) / RECORD}: run the experiment cell"]
    if rec.get("lab") != lab:
        problems.append(f"the record is for {rec.get('lab')!r}, not {lab!r}")
    if not rec.get("runs"):
        problems.append("the record lists no runs")
    base = lab_dir(lab, root)
    for rel, files in (rec.get("runs") or {}).items():
        d = base / rel
        if not (d / "manifest.json").is_file():
            problems.append(f"{rel}: manifest.json missing")
            continue
        for name, digest in files.items():
            p = d / name
            if not p.is_file():
                problems.append(f"{rel}/{name}: missing")
            elif sha256(p) != digest:
                problems.append(f"{rel}/{name}: changed after the run (hash differs)")
        for p in hashed_files(d):
            if str(p.relative_to(d)) not in files:
                problems.append(f"{rel}/{p.relative_to(d)}: not part of the run")
        try:
            m = read_manifest(d)
        except ValueError:
            problems.append(f"{rel}: manifest.json does not parse")
            continue
        problems += [f"{rel}: {p}" for p in _check_run(d, m)]
    return problems


def _check_run(d: Path, m: dict) -> list[str]:
    bad = []
    if m.get("status") != "complete":
        bad.append(f"run status {m.get('status')!r}: {m.get('error')}")
    fid = m.get("fidelity")
    if not fid:
        bad.append("no fidelity verdict (fidelity.json) beside the manifest")
    elif not fid.get("ok"):
        bad.append("fidelity verdict not OK: " + "; ".join(fid.get("reasons") or fid.get("failed") or []))
    flows = _csv(d, "flows")
    spec_flows = (m.get("spec") or {}).get("flow") or (m.get("spec") or {}).get("flows") or []
    if flows.empty:
        return bad + ["flows.csv is empty"]
    if len(spec_flows) != len(flows):
        bad.append(f"{len(flows)} flows in flows.csv, {len(spec_flows)} in the manifest's spec")
    mflows = {int(f["flow"]): f for f in m.get("flows") or []}
    iperf = _csv(d, "iperf")
    for _, f in flows.iterrows():
        n = int(f["flow"])
        asked = spec_flows[n - 1]["cca"] if n - 1 < len(spec_flows) else None
        seen = {str(c) for c in (f.get("cca_iperf"), *str(f.get("cca_ss") or "").split(","))
                if isinstance(c, str) and c and c != "nan"}
        if f["cca"] != asked:
            bad.append(f"flow {n}: flows.csv says {f['cca']}, the spec asked for {asked}")
        if seen != {f["cca"]}:
            bad.append(f"flow {n}: congestion control not verified (asked {f['cca']}, saw {sorted(seen)})")
        mf = mflows.get(n)
        if mf is None or any(str(mf.get(k)) != str(_plain(f.get(k)))
                             for k in ("cca", "received_bytes", "sent_bytes")):
            bad.append(f"flow {n}: flows.csv differs from the manifest")
        rows = iperf[(iperf["flow"] == n) & (iperf["side"] == "sender")] if not iperf.empty else iperf
        sent = float(rows["bytes"].sum()) if len(rows) else 0.0
        if not f.get("sent_bytes") or abs(sent - float(f["sent_bytes"])) > 0.05 * float(f["sent_bytes"]) + 1e5:
            bad.append(f"flow {n}: iperf.csv intervals ({sent:.0f} B) do not add up to the flow's "
                       f"{f.get('sent_bytes')} B")
        rows = iperf[(iperf["flow"] == n) & (iperf["side"] == "receiver")] if not iperf.empty else iperf
        got = float(rows["bytes"].sum()) if len(rows) else 0.0
        if abs(got - float(f.get("received_bytes") or 0)) > 0.01 * float(f.get("received_bytes") or 0) + 1e4:
            bad.append(f"flow {n}: iperf.csv receiver intervals ({got:.0f} B) do not add up to the "
                       f"flow's {f.get('received_bytes')} B received")
        raw = d / "raw" / f"iperf-{n}.json"
        if raw.is_file():
            try:
                end = json.loads(raw.read_text()).get("end", {})
                rb = (end.get("sum_received") or {}).get("bytes")
                if rb is not None and int(rb) != int(f["received_bytes"]):
                    bad.append(f"flow {n}: iperf3's own output says {rb} B received, flows.csv "
                               f"{f['received_bytes']}")
            except ValueError:
                bad.append(f"flow {n}: raw iperf3 output does not parse")
        else:
            bad.append(f"flow {n}: raw iperf3 output missing")
    return bad


def _plain(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def run_modes(lab: str, root=None) -> str | None:
    rec = read_record(lab, root)
    return rec.get("mode") if rec else None


# ---------------------------------------------------------------- the graded metrics

def goodput(lab: str, root=None, side: str = "receiver") -> pd.DataFrame:
    """Per flow: experiment, profile, cca, streams, throughput in Mbit/s: the bytes iperf3's
    receiver reported over all its intervals and streams, over the span of those intervals.
    (The sender's intervals count what it wrote into its socket: for a short flow that includes
    what is still buffered when it stops, up to 1.8x the link rate for 3 s flows of 10 streams
    measured in the lab VM.)"""
    flows = table(lab, "flows", root)
    iperf = table(lab, "iperf", root)
    rows = []
    for _, f in flows.iterrows():
        iv = iperf[(iperf["experiment"] == f["experiment"]) & (iperf["run"] == f["run"])
                   & (iperf["flow"] == f["flow"])]
        rows_ = iv[iv["side"] == side]
        span = rows_["t_end"].max() - rows_["t_start"].min() if len(rows_) else float("nan")
        mbps = rows_["bytes"].sum() * 8 / span / 1e6 if len(rows_) and span > 0 else float("nan")
        rows.append({"experiment": f["experiment"], "profile": f["profile"], "run": f["run"],
                     "flow": int(f["flow"]), "cca": f["cca"], "streams": int(f["streams"]),
                     "mbps": mbps, "retransmits": f.get("retransmits")})
    return pd.DataFrame(rows)


def binned_mbps(intervals: pd.DataFrame, width: float = 0.5, since: float | None = None) -> pd.Series:
    """Goodput over the time in bins of `width` s, in Mbit/s, indexed by each bin's start in s
    since `since` (default: the first interval's start).  `intervals` are iperf3's reports of
    one flow, or of several with the same clock (iperf.csv rows): the streams of one report
    are summed, and each report counts in the bin where it starts, so a bin's rate is its
    reports' bytes over their own seconds.  One report every 0.1 s is bursty to plot; 0.5 s
    bins show the rate a reader expects."""
    if intervals.empty:
        return pd.Series(dtype=float)
    per = intervals.groupby("t_end").agg(b=("bytes", "sum"), a=("t_start", "min"))
    per["s"] = per.index - per["a"]
    zero = per["a"].min() if since is None else since
    bins = per.groupby((per["a"] - zero) // width * width)[["b", "s"]].sum()
    return (bins["b"] * 8 / bins["s"] / 1e6).rename("mbps")


def first_start(lab: str, root=None) -> pd.Series:
    """When each run's first flow started (s, the tables' clock), per (experiment, run)."""
    flows = table(lab, "flows", root)
    if flows.empty:
        return pd.Series(dtype=float)
    return flows.groupby(["experiment", "run"])["t_start"].min()


def idle_pings(lab: str, root=None) -> pd.DataFrame:
    """Ping samples taken before the run's first flow started (the lab files give 2 s for them)."""
    ping = table(lab, "ping", root)
    if ping.empty:
        return ping
    first = first_start(lab, root)
    t0 = [first.get((e, r), 0.0) for e, r in zip(ping["experiment"], ping["run"])]
    return ping[ping["t"] < pd.Series(t0, index=ping.index)]


def idle_rtt_ms(lab: str, root=None) -> pd.Series:
    """Median ping RTT before the first flow, per run."""
    idle = idle_pings(lab, root)
    if idle.empty:
        return pd.Series(dtype=float)
    return idle.groupby(["experiment", "run"])["rtt_ms"].median()


def added_delay(lab: str, root=None, last: float = 4.0) -> pd.DataFrame:
    """Per flow: median smoothed RTT the sender saw (ss) over the flow's last `last` seconds (after
    its start-up) minus the run's idle RTT, in ms."""
    ss = with_cca(table(lab, "ss", root), table(lab, "flows", root))
    idle = idle_rtt_ms(lab, root)
    keys = ["experiment", "profile", "run", "flow", "cca"]
    if len(ss):
        ss = ss[ss["t"] > ss.groupby(keys)["t"].transform("max") - last]
    out = ss.groupby(keys)["rtt_ms"].median().reset_index()
    out["idle_ms"] = [idle.get((e, r), float("nan")) for e, r in zip(out["experiment"], out["run"])]
    out["added_ms"] = out["rtt_ms"] - out["idle_ms"]
    return out


def loss_event(lab: str, root=None) -> dict:
    """From tsg.csv: time of the first retransmission of the data flow, and the highest sequence
    number sent before it."""
    tsg = table(lab, "tsg", root)
    if tsg.empty:
        return {"t": float("nan"), "seq_before": float("nan")}
    data = tsg[tsg["len"] > 0]
    rt = data[data["retrans"] == 1]
    if rt.empty:
        return {"t": float("nan"), "seq_before": float("nan")}
    t = float(rt["t"].min())
    before = data[data["t"] < t]
    return {"t": t, "seq_before": float((before["seq"] + before["len"]).max()) if len(before) else 0.0}


def cwnd_series(lab: str, experiment: str, cca: str, root=None) -> pd.DataFrame:
    """Socket samples of the first run's `cca` flow in `experiment`, in time order."""
    ss = with_cca(table(lab, "ss", root), table(lab, "flows", root))
    s = ss[(ss["experiment"] == experiment) & (ss["cca"] == cca)]
    if len(s):
        s = s[s["run"] == sorted(s["run"].unique())[0]]
    s = s.sort_values("t")
    return s[["t", "cwnd", "rtt_ms", "min_rtt_ms", "mss", "module_info"]].reset_index(drop=True)


REDUCTION_WINDOW_S = 0.2   # a reduction is a fall below the largest cwnd of the last 0.2 s


def first_reduction(cw: pd.DataFrame, drop: float = 0.2,
                    window: float = REDUCTION_WINDOW_S) -> tuple[float, float]:
    """(t, W_max) at the first sample whose cwnd is more than `drop` below the largest cwnd of
    the samples in the `window` seconds before it (at least the previous sample); W_max is that
    largest cwnd.  A window, not the previous sample alone: on a loss in congestion avoidance
    Linux's proportional rate reduction lowers cwnd to beta x W_max over about one RTT (60-80 ms
    on the loaded wired link), so at ss's 20 Hz Cubic's 30 % cut can show as two smaller steps
    (measured in the lab VM: 319, 279, 224 packets in samples 50 ms apart, neither step above
    20 %; with the previous sample alone, two of four 20 s Cubic flows showed no reduction)."""
    c = cw["cwnd"].astype(float).to_numpy()
    t = cw["t"].to_numpy()
    lo = 0
    for i in range(1, len(c)):
        while lo < i - 1 and t[lo] < t[i] - window:
            lo += 1
        top = float(c[lo:i].max())
        if c[i] < (1 - drop) * top:
            return float(t[i]), top
    return float("nan"), float("nan")


CUBIC_C = 0.4
CUBIC_BETA = 0.7         # Linux: cwnd becomes 0.7 x W_max on a loss


def cubic_k(w_max: float) -> float:
    """Seconds the cubic function takes to grow back to W_max after a loss."""
    return (w_max * (1 - CUBIC_BETA) / CUBIC_C) ** (1 / 3)


VEGAS_MIN_ACKS = 20      # RTT samples of the current round a Vegas sample needs to count
VEGAS_LAST_S = 4.0       # the Vegas questions read the flow's last seconds


def vegas_info(cw: pd.DataFrame) -> pd.DataFrame:
    """Vegas' own state per ss sample, read from its vegas:(...) block: enabled, rttcnt (RTT
    samples so far in this round), base_us (BaseRTT: the smallest RTT of the connection) and
    minrtt_us (the smallest RTT of this round, what Vegas compares with BaseRTT once a round)."""
    cols = ["enabled", "rttcnt", "base_us", "minrtt_us"]

    def parse(info):
        if not isinstance(info, str) or not info.startswith("vegas:("):
            return [float("nan")] * 4
        kv = dict(x.split(":", 1) for x in info[len("vegas:("):].rstrip(")").split(","))
        return [float(kv.get(k, "nan")) for k in ("enabled", "rttcnt", "rtt", "minrtt")]
    return pd.DataFrame([parse(x) for x in cw["module_info"]], index=cw.index, columns=cols)


def vegas_diff(lab: str, experiment: str = "lab1-wired", root=None,
               min_acks: int = VEGAS_MIN_ACKS, last: float = VEGAS_LAST_S) -> float:
    """Vegas' own Diff, as Linux computes it once per RTT: cwnd x (minRTT - BaseRTT) / BaseRTT,
    i.e. (Expected - Actual) x minRTT with Expected = cwnd/BaseRTT, Actual = cwnd/minRTT.
    Median over the samples of the flow's last `last` seconds (after the slow-start overshoot has
    drained), with Vegas enabled and at least `min_acks` RTT samples seen in the current round
    (its minRTT restarts every round)."""
    cw = cwnd_series(lab, experiment, "vegas", root)
    if cw.empty:
        return float("nan")
    v = pd.concat([cw, vegas_info(cw)], axis=1)
    ca = v[(v["t"] > v["t"].max() - last) & (v["enabled"] == 1) & (v["rttcnt"] >= min_acks)
           & (v["base_us"] > 0) & (v["minrtt_us"] < 0x7fffffff)]
    return float((ca["cwnd"] * (ca["minrtt_us"] - ca["base_us"]) / ca["base_us"]).median())


def vegas_queue(lab: str, experiment: str = "lab1-wired", root=None, last: float = VEGAS_LAST_S) -> float:
    """Packets the Vegas flow keeps queued on average: the median over the samples of its last
    `last` seconds of cwnd x (1 - BaseRTT / srtt), BaseRTT the smallest min_rtt_ms of its samples.
    Larger than vegas_diff: the smoothed RTT averages the queue over the round, Vegas' minRTT
    takes its low point."""
    cw = cwnd_series(lab, experiment, "vegas", root)
    if cw.empty:
        return float("nan")
    base = cw["min_rtt_ms"].min()
    ca = cw[cw["t"] > cw["t"].max() - last]
    return float((ca["cwnd"] * (1 - base / ca["rtt_ms"])).median())


def bbr_gains(cw: pd.DataFrame) -> pd.Series:
    """BBR's pacing gain per ss sample, read from its bbr:(...) block."""
    def g(info):
        if not isinstance(info, str) or "pacing_gain:" not in info:
            return float("nan")
        return float(info.split("pacing_gain:")[1].split(",")[0].split(")")[0])
    return cw["module_info"].map(g)


def bbr_startup_end(lab: str, experiment: str = "lab1-wired", root=None) -> float:
    """Seconds from the BBR flow's first sample in Startup (a pacing gain above 2: Startup paces
    at 2.89) to the first later sample with a gain below 2 (Drain paces at 0.35, ProbeBW cycles
    1.25/0.75/1).  The samples before Startup's show a gain of 0 or 1: BBR has no bandwidth
    sample yet (measured in the lab VM: "bw:0.000Mbps ... pacing_gain:1" on the first)."""
    cw = cwnd_series(lab, experiment, "bbr", root)
    gains = bbr_gains(cw)
    if not (gains > 2).any():
        return float("nan")
    first = int((gains > 2).idxmax())
    cw, gains = cw.iloc[first:], gains.iloc[first:]
    after = cw[gains < 2]
    return float(after["t"].iloc[0] - cw["t"].iloc[0]) if len(after) else float("nan")


def share(lab: str, experiment: str, cca: str, root=None) -> float:
    """Percent of the bytes delivered to `cca`'s flows while all flows of `experiment` ran: the
    receiver intervals that lie completely inside the time every flow was running."""
    iperf = with_cca(table(lab, "iperf", root), table(lab, "flows", root))
    iv = iperf[(iperf["experiment"] == experiment) & (iperf["side"] == "receiver")]
    if iv.empty:
        return float("nan")
    spans = iv.groupby("flow").agg(a=("t_start", "min"), b=("t_end", "max"))
    a, b = spans["a"].max(), spans["b"].min()
    inside = iv[(iv["t_start"] >= a) & (iv["t_end"] <= b)]
    per = inside.groupby("cca")["bytes"].sum()
    return float(100 * per.get(cca, 0) / per.sum()) if per.sum() else float("nan")


def handovers(lab: str, experiment: str, root=None) -> int:
    ch = table(lab, "changes", root)
    if ch.empty:
        return 0
    ch = ch[ch["experiment"] == experiment]
    return int(ch.loc[ch["why"] == "handover", "t_planned"].nunique())


MSS = 1448       # cclab.schema.MSS, here too: lab 2's student version has labkit without the engine


def mathis_mbps(rtt_s: float, p: float, mss: int = MSS) -> float:
    """Mathis et al.: throughput <= 1.22 x MSS / (RTT x sqrt(p))."""
    return 1.22 * mss * 8 / (rtt_s * math.sqrt(p)) / 1e6


def close(a, b, rel=0.03, abs_=1e-6) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= max(abs_, rel * abs(b))


def frame_matches(student, truth: pd.Series, rel=0.03, abs_=0.05) -> list[str]:
    """Differences between a student's Series/DataFrame column and the recomputed values."""
    if isinstance(student, pd.DataFrame):
        if student.shape[1] != 1:
            return [f"expected one column, got {list(student.columns)}"]
        student = student.iloc[:, 0]
    if not isinstance(student, pd.Series):
        return [f"expected a pandas Series, got {type(student).__name__}"]
    bad = []
    for k, v in truth.items():
        if k not in student.index:
            bad.append(f"{k}: missing")
        elif not close(student[k], v, rel, abs_):
            bad.append(f"{k}: {student[k]!r} but the saved run gives {v:.3f}")
    return bad


def load_fresh():
    """This module loaded again from its file (tests use it, so a notebook that redefined one of
    these functions does not change what the test checks)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("labkit_check", HERE / "labkit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Metrics whose reference bands scale with a student's link rate (labkit.link_factors): the bands
# are on the lab's own link's scale (grading/make_reference.py divides a run's value by its rate
# factor).  A link-limited flow's throughput follows the rate.  So does vegas_queue in the lab VM:
# beyond Vegas' target of a few packets, the smoothed RTT carries the emulator's delay noise, and
# a window of packets over that noise grows with the rate (lab 1 quick, 27 Nov 2026: 9.3 and
# 10.1 packets at 70 % of the rate, 12.1 at 85 %, 12.9 and 13.1 at 100 %, whatever the delay).
# Vegas' own diff does not (4.4-6.3 packets in the same runs).
RATE_SCALED_METRICS = ("throughput_mbps", "vegas_queue_pkts")


def link_rate_factor(lab: str, root=None) -> float:
    """The rate factor of the student's link the lab's runs were made on (1 without one)."""
    for d in run_dirs(lab, root):
        try:
            st = ((read_manifest(d).get("spec") or {}).get("lab") or {}).get("student") or {}
            if st.get("own_link"):
                continue                    # a file that keeps the lab's link for everyone
            return float(st.get("rate") or 1.0)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return 1.0


# Throughputs a busy host lowers.  The lab VM emulates its links in software: when the student's
# machine (or the CI host) is busy, a flow gets less than its link, BBR most of all, and the run's
# fidelity verdict does not always see it (lab 1 quick, 2 Dec 2026, in a CI run whose host also
# ran the host tests: BBR 26.1 Mbit/s on the wired link at 80 % of its rate, against a band from
# 26.8; lab 1's Wi-Fi band was widened for the same reason on 26 Nov).  Nothing makes a flow
# faster than its link, so the upper edge stays; below the band, only a value under
# LOAD_FLOOR x its lower edge counts as another setup (a link at half the rate, say).
LOAD_LOWERED_METRICS = ("throughput_mbps", "p1_mbps", "p10_mbps")
LOAD_FLOOR = 0.5


def outside_bands(lab: str, metric: str, values: pd.Series, root=None) -> list[str]:
    """Values (keyed by a name or a tuple of names) outside their reference band for the mode the
    results (in root, like every reader here) were made in, scaled to the student's link for
    RATE_SCALED_METRICS, with the lower edge at LOAD_FLOOR of itself for LOAD_LOWERED_METRICS;
    keys without a band are not judged."""
    m = run_modes(lab, root)
    k_rate = link_rate_factor(lab, root) if metric in RATE_SCALED_METRICS else 1.0
    out = []
    for k, v in values.items():
        key = "/".join(k) if isinstance(k, tuple) else str(k)
        b = band(lab, m, metric, key)
        if b is not None and k_rate != 1.0:
            b = (b[0] * k_rate, b[1] * k_rate)
        if b is not None and metric in LOAD_LOWERED_METRICS:
            b = (round(b[0] * LOAD_FLOOR, 3), b[1])
        if b is not None and not (b[0] <= float(v) <= b[1]):
            out.append(f"{key}: {float(v):.3g} outside the reference band [{b[0]:g}, {b[1]:g}]")
    return out


# ---------------------------------------------------------------- figures in a notebook

def _show_laid_out_figures_as_drawn() -> bool:
    """In a notebook's kernel: show a figure whose layout its code already made (tight_layout,
    which cclab.analysis.plots.finish also calls, or a layout engine) as it was laid out,
    without the inline backend's bbox_inches="tight".  That option measures every text on the
    figure once more to crop it: 1.5-2.5 s a figure in the software-emulated lab VM, for a crop
    the layout has already made.  A figure without a layout (a student's own plot, a pandas
    bar chart) is cropped as before.  Anything else the course set (InlineBackend's
    print_figure_kwargs) is kept.  True when installed."""
    if "IPython" not in sys.modules:
        return False
    try:
        import matplotlib
        from IPython import get_ipython
        from IPython.core.pylabtools import print_figure
        shell = get_ipython()
        if shell is None or "inline" not in matplotlib.get_backend():
            return False
        import matplotlib.pyplot  # noqa: F401  (the inline backend registers its formatter)
        from matplotlib.figure import Figure
        from matplotlib_inline.config import InlineBackend
    except Exception:                           # no kernel, another backend: nothing to change
        return False
    png = shell.display_formatter.formatters.get("image/png")
    if png is None or set(InlineBackend.instance().figure_formats) != {"png"}:
        return False                            # retina, SVG...: the course's own choice

    def show(fig):
        kw = dict(InlineBackend.instance().print_figure_kwargs)
        if fig.get_layout_engine() is not None:   # tight_layout leaves a placeholder engine
            kw["bbox_inches"] = None
        return print_figure(fig, "png", base64=True, **kw)
    png.for_type(Figure, show)
    return True


_show_laid_out_figures_as_drawn()
