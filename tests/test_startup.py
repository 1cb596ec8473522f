"""``glitchlens --help`` answers at once: building the CLI parser imports none of the heavy
libraries (torch, numpy, pandas, transformers, datasets, matplotlib, TransformerLens); each command
imports what it runs. How long it takes, against a bare Python start: ``glitchlens bench threads``."""

import subprocess
import sys

HEAVY = ("torch", "numpy", "pandas", "transformers", "datasets", "matplotlib", "transformer_lens", "plotly", "scipy")


def test_the_parser_imports_no_heavy_library():
    code = ("import sys; from interp.cli import build_parser; build_parser(); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported by the parser: {done.stdout.strip()}"
