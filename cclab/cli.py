"""The `cclab` command (also `python3 -m cclab`).

    cclab run SPEC [--quick] [--out DIR]   run an experiment file (all repetitions)
    cclab check FILE                       validate an experiment (or a profile) file, run nothing
    cclab schema [experiment|profile|paths]  the JSON Schema of those files, for editors
    cclab profiles                         list the link profiles
    cclab shell SPEC                       Mininet's CLI on the experiment's shaped dumbbell
    cclab clean                            remove what a killed run left behind
    cclab plot RUN_DIR [-o PNG]            throughput / cwnd / RTT over time

Exit status: 0 success, 1 the run failed or is incomplete, 2 bad input (nothing was created),
130 interrupted by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (cleaned up; partial results marked
incomplete).
"""

from __future__ import annotations

import argparse
import sys

from .units import SpecError


def _err(msg: str) -> None:
    print(f"cclab: error: {msg}", file=sys.stderr)


def cmd_profiles(a) -> int:
    from . import profiles
    if not profiles.names():
        _err(f"no link profiles in {profiles.TOPOLOGY_DIR} (an installed cclab reads them "
             "from the kit's checkout: set CCLAB_KIT to it)")
        return 2
    rows = []
    for name in profiles.names():
        try:
            p = profiles.load(name)
            rows.append((name, p.summary or "", ""))
        except SpecError as e:
            rows.append((name, "", f"  (invalid: {e})"))
    width = max((len(r[0]) for r in rows), default=0)
    for name, summary, bad in rows:
        print(f"{name:<{width}}  {summary}{bad}")
    return 0


def cmd_check(a) -> int:
    from . import profiles, spec, topo
    from pathlib import Path
    table = profiles.load_toml(Path(a.spec), "experiment")
    if "profile" not in table and "path" in table:
        # a paths file (topologies/paths/*.toml): lab 5's kind of topology
        from . import paths
        try:
            ps = paths.from_dict(table)
        except SpecError as e:
            raise e.in_file(a.spec) from None
        print(f"{Path(a.spec).stem}: paths, " + "; ".join(
            f"{x.key} {x.name} {x.rate / 1e6:g} Mbit/s {x.delay * 1e3:g} ms {x.loss:g} % loss" for x in ps))
        return 0
    if "profile" not in table and ({"down", "up"} & set(table)):
        # a profile file (topologies/*.toml): it shapes a link and runs nothing
        try:
            p = profiles.from_dict(table, Path(a.spec).stem, Path(a.spec).parent, a.spec)
        except SpecError as e:
            raise e.in_file(a.spec) from None
        print(f"{p.name}: profile, {p.pairs} pair(s), shapes {' and '.join(p.directions())}")
        return 0
    exp = spec.load(a.spec)
    print(f"{exp.name}: profile {exp.link.name}, {len(exp.flows)} flow(s), "
          f"{exp.repetitions} repetition(s), about {exp.planned_length():.0f} s each")
    if a.plan:
        for node, argv in topo.plan(exp):
            print(f"{node}: {' '.join(argv)}")
    return 0


def cmd_schema(a) -> int:
    from . import schema
    sys.stdout.write(schema.json_text(a.kind))
    return 0


def _engine(call):
    """call()'s result, or None after one line on standard error when the engine fails."""
    from . import runner
    try:
        return call()
    except runner.RunError as e:
        _err(str(e))
    except (OSError, RuntimeError, ValueError) as e:
        _err(f"{type(e).__name__}: {e}")
    return None


def cmd_run(a) -> int:
    from . import runner, spec
    exp = spec.load(a.spec)              # bad input stops here, before anything is created
    progress = (lambda msg: print(msg, file=sys.stderr, flush=True))
    dirs = _engine(lambda: runner.run(exp, out=a.out, quick=a.quick, progress=progress))
    if dirs is None:
        return 1
    for d in dirs:                       # printed outside _engine: a closed pipe is not a failed run
        print(d)
    return 0


def cmd_shell(a) -> int:
    from . import shell, spec
    exp = spec.load(a.spec)              # bad input stops here, before anything is created
    rc = _engine(lambda: shell.shell(exp))
    return 1 if rc is None else rc


def cmd_clean(a) -> int:
    from . import state
    import os
    if os.geteuid() != 0:
        _err("cclab clean needs root")
        return 1
    try:
        report = state.clean(force=True)
    except RuntimeError as e:
        _err(str(e))
        return 1
    for line in report:
        print(line)
    print("clean: nothing left" if not report else "clean: done")
    return 0


def cmd_plot(a) -> int:
    from . import plot
    from pathlib import Path
    if not (Path(a.run_dir) / "manifest.json").is_file():
        _err(f"run_dir: {a.run_dir} is not a run folder (no manifest.json)")
        return 2
    print(plot.plot(a.run_dir, a.output))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cclab", description="Congestion-control lab engine.")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run an experiment file")
    r.add_argument("spec")
    r.add_argument("--quick", action="store_true", help="one repetition, at most ~10 s")
    r.add_argument("--out", default="results", help="results folder (default: ./results)")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("check", help="validate an experiment or a profile file")
    c.add_argument("spec")
    c.add_argument("--plan", action="store_true", help="print the configuration commands")
    c.set_defaults(func=cmd_check)
    s = sub.add_parser("schema", help="print the JSON Schema of experiment, profile or paths files")
    s.add_argument("kind", nargs="?", default="experiment", choices=("experiment", "profile", "paths"))
    s.set_defaults(func=cmd_schema)
    p = sub.add_parser("profiles", help="list link profiles")
    p.set_defaults(func=cmd_profiles)
    h = sub.add_parser("shell", help="Mininet's CLI on an experiment's shaped dumbbell (no flows)")
    h.add_argument("spec")
    h.set_defaults(func=cmd_shell)
    k = sub.add_parser("clean", help="remove what a killed run left")
    k.set_defaults(func=cmd_clean)
    g = sub.add_parser("plot", help="plot a run")
    g.add_argument("run_dir")
    g.add_argument("-o", "--output")
    g.set_defaults(func=cmd_plot)
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    try:
        return a.func(a)
    except SpecError as e:
        _err(str(e))
        return 2
    except KeyboardInterrupt as e:
        import signal
        name = e.args[0] if e.args and isinstance(e.args[0], str) else "SIGINT"
        _err(f"interrupted ({name}); cleaned up, partial results are marked incomplete")
        try:
            return 128 + signal.Signals[name].value
        except KeyError:
            return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
