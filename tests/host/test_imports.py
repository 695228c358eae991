"""The engine's imports flow one way (issue 18): spec and profiles, the topology, the runner and
its measurements, the tables; then the analysis, which reads tables; then plots, reports and the
command line.  Read from the source (every import statement, those inside functions too), so an
import added anywhere is seen.

- The import graph among cclab's modules has no cycle.
- Nothing below the analysis imports it, or the command line or the plot command.
- The analysis reads runs through the tables' module (cclab.results) and nothing else of the
  engine that builds and runs the network.
- No cclab module reaches into the labs (labkit, kmodlab, tuner_support): the labs use the
  engine, never the other way.  The scorecard, which judges the labs' claims with the labs' own
  code, lives beside the instructor's tools (grading/scorecard.py), outside the package.
"""

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
PKG = KIT / "cclab"

# Above the engine: they may import anything below them.
TOP = {"cclab.cli", "cclab.__main__", "cclab.plot"}
# What the analysis may import of the engine: the tables it reads, and the plain definitions
# (units, the spec's schema with the packet geometry, whole-file writes).
ANALYSIS_MAY = {"cclab.results", "cclab.units", "cclab.schema", "cclab.files"}
LAB_MODULES = {"labkit", "kmodlab", "tuner_support"}


def module_name(path: Path) -> str:
    rel = path.relative_to(KIT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module the file imports (relative imports resolved; `from X import y` counts X
    and, where X.y is a module of the package, X.y)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    names = {module_name(f) for f in files}
    def resolve(m):
        """The module an imported name lives in: a name imported from a module, or a module
        that no longer exists, counts as the nearest package or module above it."""
        while m not in names and "." in m:
            m = m.rsplit(".", 1)[0]
        return m

    g = {}
    for f in files:
        mine = module_name(f)
        found = {m.split(".")[0] if m.split(".")[0] in LAB_MODULES else resolve(m)
                 for m in imports(f)}
        g[mine] = {m for m in found if m != mine and (m in names or m in LAB_MODULES)}
    return g


def test_the_package_is_read_whole():
    g = graph()
    assert {"cclab.runner", "cclab.cpu", "cclab.analysis.fidelity", "cclab.plot"} <= set(g)
    assert "cclab.results" in g["cclab.analysis.data"]         # the reader really is seen


def test_the_import_graph_has_no_cycle():
    whole = graph()
    g = {k: {m for m in v if m in whole} for k, v in whole.items()}
    state, path = {}, []

    def visit(n):
        state[n] = "open"
        path.append(n)
        for m in sorted(g[n]):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
            if m not in state:
                visit(m)
        path.pop()
        state[n] = "done"

    for n in sorted(g):
        if n not in state:
            visit(n)


def analysis(m: str) -> bool:
    return m == "cclab.analysis" or m.startswith("cclab.analysis.")


def test_nothing_below_the_analysis_imports_it_or_what_sits_above_it():
    bad = []
    for mod, deps in graph().items():
        if mod in TOP or analysis(mod) or mod == "cclab":
            continue
        bad += [f"{mod} imports {d}" for d in sorted(deps) if analysis(d) or d in TOP]
    assert not bad, bad


def test_the_analysis_reads_tables_not_the_engine_that_runs():
    bad = []
    for mod, deps in graph().items():
        if not analysis(mod):
            continue
        bad += [f"{mod} imports {d}" for d in sorted(deps)
                if d.startswith("cclab") and not analysis(d) and d not in ANALYSIS_MAY | {"cclab"}]
    assert not bad, bad


def test_no_module_of_the_package_reaches_into_the_labs():
    readers = {mod for mod, deps in graph().items() if {d.split(".")[0] for d in deps} & LAB_MODULES}
    assert not readers, readers
    assert not (PKG / "scorecard.py").exists() and (KIT / "grading" / "scorecard.py").is_file()


def test_labkit_packet_size_is_the_engines():
    """labkit keeps its own MSS (lab 2's student version ships it without the engine): it must
    be the engine's."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
    import labkit
    from cclab import schema
    assert labkit.MSS == schema.MSS


def test_the_analysis_burst_is_the_engines():
    """fidelity keeps the token bucket's default depth (the analysis does not import tc): the
    same as tc.default_burst's at every rate."""
    from cclab import tc
    from cclab.analysis import fidelity

    class Run:
        def direction(self, d):
            return {}

        def rate(self, d):
            return self.r
    run = Run()
    for r in (1e5, 1e6, 5e6, 20e6, 100e6, 1e9):
        run.r = r
        assert fidelity._burst_bytes(run, "down") == tc.default_burst(r)
