"""``glitchlens``: the command line. Each subcommand is a thin layer over a library call.

Errors are handled in one place, :func:`main`: a failure the user can fix (a ``ValueError``
such as ``CheckpointError`` or ``FlipFlopFormatError``, an ``OSError`` on a path, a
``RuntimeError`` such as a diverged run) prints one line, ``glitchlens COMMAND: error: ...``,
and exits with status 2, as argparse does for bad arguments. Ctrl-C, wherever it lands
(imports, loading, evaluation), prints ``glitchlens COMMAND: interrupted`` and exits with status
130. Anything else is a bug and keeps its traceback.

The parser (``interp.cli.parser``) and the ``cmd_*`` behind each subcommand
(``interp.cli.commands``) import neither torch nor anything that does, so that ``--help``
answers at once; each ``cmd_*`` imports what it runs.
"""

from __future__ import annotations

import os
import sys

from interp.cli.commands import COMMANDS, shown, stop_signals_ignored, train_configs
from interp.cli.parser import build_parser, named_command
from interp.cli.threads import use_threads

__all__ = ["build_parser", "main", "train_configs"]


def _message(err: BaseException) -> str:
    """One line naming the problem: an OSError as ``path: reason``, anything else as its text;
    control characters from user text (a data file, a path) as Python escapes, never raw."""
    if isinstance(err, OSError) and err.strerror:
        text = f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    else:
        text = str(err) or type(err).__name__
    return shown(" ".join(text.split()))


def _register_mechanisms(argv: list[str]) -> None:
    """Register the attention mechanisms of one's own that ``GLITCHLENS_MECHANISMS`` and each
    ``--mechanism SPEC`` name, before the parser lists the model names. ``--mechanism`` adds its
    spec to the environment variable, so that the processes the command starts (the runs of a
    sweep) register it too (``models.mechanisms``). Without a subcommand (``glitchlens --help``)
    nothing names a model: nothing is registered, nor ``models`` imported."""
    if named_command(argv) is None:
        return
    from models import mechanisms

    specs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--mechanism"]
    specs += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--mechanism=")]
    if not specs and not mechanisms.environment_specs():
        return
    from interp.conformance import CHECK_SECONDS, CheckTimedOut, time_limit

    try:
        with time_limit(CHECK_SECONDS):   # a module that never finishes importing
            for spec in specs:
                mechanisms.export(spec)
            mechanisms.load_environment()
    except CheckTimedOut as err:
        raise ValueError(f"importing the mechanisms {', '.join(specs or mechanisms.environment_specs())}: "
                         f"{err}") from None


def _close_progress_bars() -> None:
    """Close the progress bars an interrupt left open (clearing those that do not stay), so that
    the message starts a line of its own."""
    if "tqdm" in sys.modules:
        from tqdm import tqdm

        for bar in list(getattr(tqdm, "_instances", ())):
            bar.close()


def main(argv: list[str] | None = None) -> int:
    import warnings

    formatwarning = warnings.formatwarning   # a warning may quote user text (a path drawn in a plot)
    warnings.formatwarning = lambda *args, **kwargs: shown(formatwarning(*args, **kwargs))
    try:
        return _main(argv)
    finally:
        warnings.formatwarning = formatwarning


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = "glitchlens"
    try:
        _register_mechanisms(argv)
        args = build_parser(argv).parse_args(argv)
        command = f"glitchlens {args.command}"
        args.argv = argv
        use_threads(args.threads)   # before anything imports torch
        if args.command != "pretrained" or args.action == "build":  # the listing reads JSON: no torch, at once
            from interp.training.setup import reuse_freed_memory

            reuse_freed_memory()
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:  # Ctrl-C anywhere, imports included (the commands that save say what they kept)
        with stop_signals_ignored():   # a storm of Ctrl-C cannot interrupt the message
            _close_progress_bars()
            print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output left (`glitchlens pretrained --json | head`): stop quietly,
        # and point stdout at /dev/null so that the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, OSError, RuntimeError) as err:  # RuntimeError: TrainingDiverged, torch's own
        _close_progress_bars()   # the message starts a line of its own
        print(f"{command}: error: {_message(err)}", file=sys.stderr)
        return 2

