"""``glitchlens --help`` answers at once: building the CLI parser imports none of the heavy
libraries (torch, numpy, pandas, transformers, datasets, matplotlib, TransformerLens); each command
imports what it runs. How long it takes, against a bare Python start: ``glitchlens bench threads``."""

import subprocess
import sys

HEAVY = ("torch", "numpy", "pandas", "transformers", "datasets", "matplotlib", "transformer_lens", "plotly", "scipy")
# What `glitchlens --help` has no use for: the sweeps' processes, and the modules that name the
# models, presets, recipes and pretrained entries in the subcommands' own options or register them.
NOT_FOR_THE_LISTING = ("multiprocessing", "concurrent.futures", "interp.studies.sweeps", "interp.studies.specimens",
                       "interp.training.recipes", "models")


def imported_by(code: str, names: tuple[str, ...]) -> str:
    """Those of ``names`` that ``code``, run in a fresh interpreter, leaves imported."""
    code += f"\nprint('imported:', ','.join(m for m in {names!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1].removeprefix("imported:").strip()   # after what the code printed


def test_the_parser_imports_no_heavy_library():
    assert imported_by("import sys; from interp.cli import build_parser; build_parser()", HEAVY) == ""


def test_help_imports_only_the_listing():
    """``glitchlens --help`` lists the subcommands without building their options."""
    code = ("import sys\nfrom interp.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as exit_:\n"
            "    assert exit_.code == 0")
    assert imported_by(code, HEAVY + NOT_FOR_THE_LISTING) == ""
