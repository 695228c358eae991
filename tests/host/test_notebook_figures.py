"""How a lab notebook's kernel shows figures once labkit is imported (a real kernel, through
nbclient, with the inline backend JupyterLab uses): a figure its code laid out is shown as drawn,
at its own size, without being measured again for bbox_inches="tight"; a figure without a
layout is still cropped to what it draws."""

import base64
import struct
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbclient")

KIT = Path(__file__).resolve().parents[2]


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def test_laid_out_figures_are_shown_as_drawn_and_others_cropped(tmp_path, monkeypatch):
    from nbclient import NotebookClient
    monkeypatch.delenv("MPLBACKEND", raising=False)
    cells = [
        f"import sys\nsys.path.insert(0, {str(KIT / 'notebooks')!r})\n"
        "import matplotlib.pyplot as plt\nimport labkit\n"
        "print(labkit._show_laid_out_figures_as_drawn(), plt.rcParams['figure.dpi'])",
        # laid out by its code: shown at its own size
        "fig, ax = plt.subplots(figsize=(4, 3))\nax.plot([0, 1], [0, 1])\n"
        "ax.set_ylabel('goodput (Mbit/s)')\nfig.tight_layout()",
        # no layout: a category name longer than the margin, cropped to include it
        "ax = plt.figure(figsize=(4, 3)).add_subplot()\n"
        "ax.barh(['a category name longer than the left margin'], [1])",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    installed, dpi = nb.cells[0].outputs[0]["text"].split()
    assert installed == "True"
    dpi = float(dpi)

    def image(cell):
        (out,) = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        return png_size(out["data"]["image/png"])

    laid_out, plain = image(nb.cells[1]), image(nb.cells[2])
    print(f"\ndpi {dpi:g}: laid-out figure {laid_out}, figure without a layout {plain}")
    assert laid_out == (round(4 * dpi), round(3 * dpi))
    assert plain[0] > round(4 * dpi)        # the long name reaches left of the figure's edge
