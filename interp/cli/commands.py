"""The ``cmd_*`` functions behind each ``glitchlens`` subcommand, each a thin layer over a
library call. Each imports what it runs, the standard library's heavier modules included
(dataclasses, json, threading, typing), so that importing this module (as ``glitchlens --help``
does) costs little beside Python's own start.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path


def _model_overrides(args) -> dict:
    import json

    overrides = {k: getattr(args, k) for k in ("n_layers", "n_heads", "d_model", "d_mlp", "dropout", "n_ctx",
                                               "attention_impl", "norm_placement", "init", "linear_bias",
                                               "embedding_dropout", "attention_dropout", "mlp_hidden_dropout")
                 if getattr(args, k) is not None}
    options = {}
    for item in args.attn_opt or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--attn-opt expects key=value, got {item!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    if options:
        overrides["attention_options"] = options
    return overrides


def resolve_task(args) -> None:
    """Replace ``args.task``, a task name or a ``MODULE:CLASS`` spec, by the registered name (a
    spec is imported and registered first; ``interp.tasks.registry``)."""
    from interp.tasks.registry import resolve

    if getattr(args, "task", None):
        args.task = resolve(args.task)


def checkpoint_task_of(args, checkpoint) -> str:
    """The task a checkpoint trained on; ``--task``, when given, must name that one."""
    from interp.evaluate import checkpoint_task
    from models import read_config

    resolve_task(args)
    task = checkpoint_task(read_config(checkpoint))
    if args.task and args.task != task:
        raise ValueError(f"{shown(str(checkpoint))} was trained on the {task} task, not {args.task}: leave --task out "
                         "or name its own")
    return task


def cmd_data(args) -> int:
    from interp.tasks import SPLITS, TRAIN_P_I, load_split, sample_ffl, write_sequences

    if Path(args.out).exists() and not args.overwrite:
        raise ValueError(f"--out {args.out} exists; pass --overwrite to replace it")
    resolve_task(args)
    if args.task != "flipflop":
        return _task_data(args)
    if args.split not in ("train", *SPLITS):
        raise ValueError(f"--split {args.split}: flipflop's splits are {', '.join(SPLITS)}, or train")
    args.seq_len = args.seq_len or 512
    if args.split == "train":
        tokens = sample_ffl(args.n or 1000, args.seq_len, TRAIN_P_I, args.seed)
    elif args.seed is None:
        tokens = load_split(args.split, args.n, args.seq_len)
    else:
        split = SPLITS[args.split]
        tokens = sample_ffl(args.n or split.size, args.seq_len, split.p_i, args.seed)
    path = write_sequences(tokens, args.out)
    print(shown(f"wrote {len(tokens)} sequences of {tokens.shape[1]} tokens to {path}"))
    return 0


def _task_data(args) -> int:
    """``glitchlens data --task NAME`` for a task other than flip-flop: a split, or training draws."""
    from interp.tasks import get_task
    from interp.tasks.registry import write_token_file

    task = get_task(args.task)
    if args.split == "train":
        tokens = task.sample(args.n or 1000, args.seq_len or task.seq_len, args.seed, **task.train_params)
    elif args.split not in task.splits:
        raise ValueError(f"--split {args.split}: the {task.name} task's splits are {', '.join(task.splits)}, or train")
    elif args.seed is None and args.seq_len in (None, task.splits[args.split].seq_len):
        tokens = task.load_split(args.split, args.n)
    else:
        split = task.splits[args.split]
        tokens = task.sample(args.n or split.size, args.seq_len or split.seq_len,
                             split.seed if args.seed is None else args.seed, **split.params)
    path = write_token_file(task, tokens, args.out)
    print(shown(f"wrote {len(tokens)} sequences of {tokens.shape[1]} tokens of the {task.name} task to {path}"))
    return 0


def train_configs(args):
    """The ``(ModelConfig, TrainConfig)`` that ``glitchlens train`` arguments describe; the training
    length defaults to the task's (``interp.training.recipes.run_configs`` sets its vocabulary and n_ctx)."""
    from interp.tasks import get_task
    from interp.training.recipes import run_configs

    resolve_task(args)
    seq_len = args.seq_len or get_task(args.task).seq_len

    recipe_fields = {k: getattr(args, k) for k in ("weight_decay", "decay_all_parameters", "warmup", "grad_clip")
                     if getattr(args, k) is not None}
    if recipe_fields.get("grad_clip") == "none":
        recipe_fields["grad_clip"] = None
    training = {**recipe_fields,
                "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seq_len": seq_len,
                "loss": args.loss, "task": args.task, "mixture": args.mixture, "p_bottom": args.p_bottom,
                "regulariser": args.regulariser, "reg_coef": args.reg_coef, "reg_start": args.reg_start,
                "beta_schedule": args.beta_schedule, "beta_final": args.beta_final,
                "beta_ramp_start": args.beta_ramp_start, "beta_ramp_end": args.beta_ramp_end,
                "seed": args.seed, "data_file": args.data, "eval_every": args.eval_every, "eval_n": args.eval_n,
                "checkpoint_every": args.checkpoint_every}
    return run_configs(args.model, args.preset, args.recipe, _model_overrides(args), training)


def resumed_configs(args):
    """The ``(ModelConfig, TrainConfig)`` of the checkpoint in ``--out``, for ``train --resume``
    without ``--model``: each flag given (one that differs from its default) must equal the
    checkpoint's value, except the logging ones (``--eval-every``, ``--eval-n``,
    ``--checkpoint-every``), which apply to the rest of the run; an error names each field that differs."""
    import dataclasses

    from interp.cli.parser import build_parser
    from interp.training.setup import TrainConfig, saved_configs
    from models import read_config

    saved = read_config(args.out)
    if not isinstance(saved.get("training"), dict):
        raise ValueError(f"{args.out} holds a checkpoint without training state; it cannot be resumed")
    model_cfg, _ = saved_configs(saved)
    train_cfg = TrainConfig.from_dict(saved["training"]["config"])
    train = ["train", "--out", str(args.out)]
    defaults = vars(build_parser(train).parse_args(train))
    given = {dest for dest, value in vars(args).items() if dest in defaults and value != defaults[dest]}
    fixed = given & {"preset", "recipe"}
    if fixed:
        raise ValueError(f"--{' --'.join(sorted(fixed))} set a run up when it starts; a resumed run keeps its "
                         "checkpoint's configuration (give --model too to check them against it)")
    wanted = {field: value for field, value in dataclasses.asdict(train_configs_fields(args)).items()}
    differ = [f"{field} {value!r} (checkpoint: {getattr(model_cfg, field)!r})"
              for field, value in _model_overrides(args).items() if getattr(model_cfg, field) != value]
    logging = {}
    for dest, field in TRAIN_FLAG_FIELDS.items():
        if dest not in given:
            continue
        if field in TrainConfig.LOGGING_FIELDS:
            logging[field] = wanted[field]
        elif getattr(train_cfg, field) != wanted[field]:
            differ.append(f"{field} {wanted[field]!r} (checkpoint: {getattr(train_cfg, field)!r})")
    if differ:
        raise ValueError(f"{args.out}: cannot resume with other settings than its checkpoint's: {'; '.join(differ)}")
    return model_cfg, dataclasses.replace(train_cfg, **logging)


# train's flags (argparse dest) that set a TrainConfig field, and the field
TRAIN_FLAG_FIELDS = {**{name: name for name in (
    "weight_decay", "decay_all_parameters", "warmup", "grad_clip", "steps", "batch_size", "lr", "seq_len", "loss",
    "task", "mixture", "p_bottom", "regulariser", "reg_coef", "reg_start", "beta_schedule", "beta_final",
    "beta_ramp_start", "beta_ramp_end", "seed", "eval_every", "eval_n", "checkpoint_every")}, "data": "data_file"}


def train_configs_fields(args):
    """The TrainConfig fields that ``train``'s flags give, as a TrainConfig (validated)."""
    from interp.training.setup import TrainConfig

    fields = {field: getattr(args, dest) for dest, field in TRAIN_FLAG_FIELDS.items()
              if getattr(args, dest) is not None}
    if fields.get("grad_clip") == "none":
        fields["grad_clip"] = None
    return TrainConfig(**fields)


@contextlib.contextmanager
def stop_signals_ignored():
    """Ctrl-C, SIGTERM and SIGHUP ignored for the block: the command is ending and says why, and a
    storm of Ctrl-C cannot cut that line. Put back after it, for a caller that goes on (``main``
    called from Python, a test)."""
    import signal
    import threading

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    if threading.current_thread() is not threading.main_thread():   # signals belong to the main thread
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stops}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:   # None: a handler set outside Python, which cannot be put back
                signal.signal(signum, handler)


def cmd_train(args) -> int:
    from interp.training.loop import format_quick_eval, train
    from interp.training.setup import TrainingInterrupted
    from models.checkpoint import CONFIG_FILE

    resuming = args.resume and (Path(args.out) / CONFIG_FILE).exists()
    if args.model is None and not resuming:
        raise ValueError("--model is required (only --resume of the checkpoint in --out reads it from there)")
    resolve_task(args)
    model_cfg, train_cfg = resumed_configs(args) if args.model is None else train_configs(args)
    check_attention_size("--seq-len", train_cfg.seq_len, train_cfg.batch_size, model_cfg.n_heads, train_cfg.seq_len)
    check_model_size(model_cfg)
    if args.resume and not resuming:
        print(shown(f"glitchlens train: no checkpoint in {args.out} to resume; starting at step 0"), file=sys.stderr)
    try:
        train(model_cfg, train_cfg, args.out, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet,
              metadata={"command": " ".join(["glitchlens", *args.argv])}, device=args.device)
    except TrainingInterrupted as stop:
        with stop_signals_ignored():   # the run has saved and ends: a storm of Ctrl-C cannot cut this line
            print(shown(stop), file=sys.stderr)
        return 128 + stop.signum
    from models import read_config

    evaluation = read_config(args.out)["metadata"].get("evaluation")
    print(shown(f"saved {args.out}"))
    if evaluation:
        print(f"first {train_cfg.eval_n} sequences per split: " + format_quick_eval(evaluation))
    return 0


def checkpoint_dir(text: str) -> Path:
    """The checkpoint a CHECKPOINT argument names: a path that exists as given, even one named
    like a pretrained model (the user's own directory is the one meant), else the pretrained
    entry of that name."""
    from interp.studies.specimens import ENTRIES, build_command
    from models import pretrained

    if Path(text).exists():
        return checked_checkpoint(Path(text))
    if text not in ENTRIES:
        raise ValueError(f"{text}: no such checkpoint directory, nor a pretrained model of that name "
                         f"(pretrained: {', '.join(ENTRIES)})")
    if text not in pretrained.built():
        raise ValueError(f"pretrained model {text!r} is not built in {pretrained.PRETRAINED_DIR}; build it with "
                         f"`{build_command(text)}`")
    return checked_checkpoint(pretrained.path(text))


def checked_checkpoint(path: Path) -> Path:
    """``path`` after checking, before anything loads it, that its ``config.json`` and the
    tensor files it names are regular files of a sane size (:func:`interp.outputs.input_file`:
    never a FIFO or a device, which would block) and that its sections have their types."""
    from interp.outputs import MAX_JSON_BYTES, input_file, read_json

    if not path.is_dir():   # models.read_config says what the file is, once it is known to be a small one
        input_file(path, "checkpoint", MAX_JSON_BYTES)
        return path
    config_file = path / "config.json"
    if not os.path.lexists(config_file):
        return path   # models.read_config says what is missing
    config = read_json(config_file, "checkpoint config")
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: not a GlitchLens config (a JSON object)")
    for section in ("model", "training", "metadata", "files"):
        value = config.get(section)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{config_file}: its {section!r} section is not an object (a {type(value).__name__}); "
                             "the file was edited or belongs to another tool")
    training = config.get("training")
    if training and not isinstance(training.get("config"), dict):
        raise ValueError(f"{config_file}: its training section has no 'config' object; the file was edited")
    for name in (config.get("files") or {}).values() or ["model.safetensors"]:
        if os.path.lexists(path / str(name)):
            input_file(path / str(name), "checkpoint tensor file")
    return path


def cmd_eval(args) -> int:
    from interp.evaluate import BATCH_SIZE, evaluate_automaton, evaluate_splits, evaluate_tokens
    from models import load

    if args.transformerlens or args.task == "light-switch":
        from interp.diagnose.transformerlens import eval_command

        return eval_command(args)
    if args.checkpoint is None:
        raise ValueError("give a CHECKPOINT to evaluate, or --transformerlens NAME_OR_PATH with --task light-switch")
    if args.lengths:
        raise ValueError("--lengths are the light-switch test's (--task light-switch)")

    for option, value in (("--data", args.data), ("--splits", args.splits)):
        if value is not None and not value.strip():   # not the default it would fall back to
            raise ValueError(f"{option} is empty; give a value, or leave {option} out for the canonical splits")
    from interp.tasks import check_draw_size

    batch_size = args.batch_size or BATCH_SIZE
    check_draw_size(batch_size, 512, "sequences per batch (--batch-size)")
    if args.n:
        check_draw_size(args.n, 512, "sequences (-n)")
    checkpoint = checkpoint_dir(args.checkpoint)
    task = checkpoint_task_of(args, checkpoint)
    if task not in ("flipflop", "automaton") and args.data:
        raise ValueError(f"--data reads flip-flop files; a model of the {task} task is evaluated on its canonical "
                         "splits (--splits)")
    if task == "automaton" and (args.data or args.splits):
        raise ValueError(f"{args.checkpoint} was trained on the automaton task; it is evaluated on fresh automaton "
                         "sequences, so --data and --splits (flip-flop sequences) do not apply")
    if args.data and args.splits:
        raise ValueError("--data evaluates one file and --splits the canonical splits: give one of them")
    model = load(checkpoint, device=args.device)
    progress = not args.quiet
    if task == "automaton":
        result = evaluate_automaton(model, args.n or 1000, batch_size=batch_size, progress=progress)
        if args.json:
            print_json({"automaton": result})
            return 0
        rows = [("automaton", str(result["sequences"]), f"{100 * result['position_accuracy']:.2f}%",
                 f"{100 * result['sequence_accuracy']:.2f}%")]
        _print_table(f"{args.checkpoint} ({model.cfg.model}, automaton task)",
                     ("task", "sequences", "state accuracy", "seq accuracy"), rows)
        return 0
    if args.data:
        from interp.tasks import read_sequences

        tokens = read_sequences(args.data)[:args.n]
        results = {args.data: evaluate_tokens(model, tokens, args.data, batch_size, progress)}
    else:
        splits = [s.strip() for s in args.splits.split(",") if s.strip()] if args.splits else None
        results = evaluate_splits(model, splits, n=args.n, batch_size=batch_size, progress=progress, task=task)
    if args.json:
        print_json({name: r.to_dict() for name, r in results.items()})
        return 0
    rows = [(r.split, str(r.sequences), str(r.reads), str(r.read_errors), f"{r.error_rate:.2e}",
             f"{r.error_rate_upper95:.2e}", f"{100 * r.sequence_accuracy:.2f}%") for r in results.values()]
    _print_table(f"{args.checkpoint} ({model.cfg.model})",
                 ("split", "sequences", "reads", "read errors", "error rate", "95% upper", "seq accuracy"), rows)
    return 0


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]],
                 caption: str | None = None) -> None:
    from rich.table import Table

    table = Table(title=shown(title), caption=caption)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*map(shown, row))
    plain_console().print(table)


def print_json(value, **options) -> None:
    """``value`` printed as indented JSON (``--json``); ``options`` go to ``json.dumps``."""
    import json

    print(json.dumps(value, indent=2, **options))


def shown(text) -> str:
    """User text as printed: every control character but the newline (an escape sequence would
    reach the terminal) written as its Python escape. Rich takes it with markup off
    (:func:`plain_console`)."""
    return "".join(ch if ch.isprintable() or ch in " \n" else ascii(ch)[1:-1] for ch in str(text))


# The width of a table printed to a file or a pipe: rich would cut it to 80 columns there, wrapping
# each cell; a table never comes near this wide, so it keeps the width it has on a wide terminal.
PIPED_WIDTH = 10_000


def wide_console(**options):
    """A rich console, as wide as the terminal, or :data:`PIPED_WIDTH` when the output is no terminal."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH, **options)


def plain_console():
    """A rich console that takes ``[...]`` literally: paths and names are never markup."""
    return wide_console(markup=False, highlight=False)


# The bound on one layer's attention maps a size option may ask for, and on explain's --pairs.
ATTENTION_BYTES = 8 << 30
MAX_PAIRS = 1024


def check_attention_size(flag: str, value: int, sequences: int, heads: int, length: int) -> None:
    """Refuse ``flag value`` when one layer's float32 attention maps ``[sequences, heads, T, T]``
    at ``T = length`` would exceed :data:`ATTENTION_BYTES`, before anything is allocated."""
    need = sequences * heads * length * length * 4
    if need > ATTENTION_BYTES:
        raise ValueError(f"{flag} {value}: one layer's attention maps of {sequences} sequences x {heads} heads at "
                         f"T = {length} take {need / 2**30:,.0f} GiB, more than the {ATTENTION_BYTES >> 30} GiB "
                         "limit (interp.cli.commands.ATTENTION_BYTES); ask for fewer or shorter sequences")


def check_model_size(cfg) -> None:
    """Refuse a model whose float32 parameters, with their gradients and AdamW's two moments, would
    exceed :data:`ATTENTION_BYTES` (``--d-model 1000000``), before it is built: its blocks' weights
    (4 d_model^2 + 2 d_model d_mlp each) and its position table (n_ctx x d_model)."""
    d_mlp = cfg.d_mlp or 2 * cfg.d_model
    params = cfg.n_layers * (4 * cfg.d_model ** 2 + 2 * cfg.d_model * d_mlp) + cfg.n_ctx * cfg.d_model
    if 16 * params > ATTENTION_BYTES:
        raise ValueError(f"--n-layers {cfg.n_layers}, --d-model {cfg.d_model}, --d-mlp {d_mlp}, --n-ctx {cfg.n_ctx}: "
                         f"about {params:,} parameters, {16 * params / 2**30:,.0f} GiB to train, more than the "
                         f"{ATTENTION_BYTES >> 30} GiB limit (interp.cli.commands.ATTENTION_BYTES)")


def check_split_n(n: int, splits) -> None:
    """Refuse ``-n`` beyond the largest of the canonical flip-flop ``splits``: it would mean the
    whole of each, minutes of work that ``-n`` was given to avoid."""
    from interp.tasks import SPLITS

    largest = max(SPLITS[split].size for split in splits)
    if n > largest:
        raise ValueError(f"-n {n:,}: the {'/'.join(splits)} split{'s hold' if len(splits) > 1 else ' holds'} at most "
                         f"{largest:,} sequences; ask for at most that many")


def _recorded_heads(checkpoint: Path) -> int:
    """The heads per layer a checkpoint's config records (1 if it records none)."""
    from models import read_config

    heads = read_config(checkpoint)["model"].get("n_heads", 1)
    return heads if isinstance(heads, int) and heads > 0 else 1


def cmd_diagnose(args) -> int:
    from interp.diagnose import diagnose

    if args.transformerlens or args.tokens:
        from interp.diagnose.transformerlens import diagnose_command

        return diagnose_command(args)
    if args.checkpoint is None:
        raise ValueError("give a CHECKPOINT to diagnose, or --transformerlens NAME_OR_PATH with --tokens FILE")

    options = {"n": args.n, "lengths": args.lengths, "n_cache_sequences": args.cache_sequences, "device": args.device}
    checkpoint = checkpoint_dir(args.checkpoint)
    task = checkpoint_task_of(args, checkpoint)
    if task == "flipflop" and args.n:
        check_split_n(args.n, ("iid", "sparse", "dense"))
    heads = _recorded_heads(checkpoint)
    for length in args.lengths or ():
        check_attention_size("--lengths", length, args.cache_sequences or 2, heads, length)
    if task != "flipflop":   # every other registered task: interp.diagnose.task
        from interp.diagnose.task import diagnose_task

        if args.lengths:
            raise ValueError(f"--lengths measures flip-flop attention across lengths; the {task} task is diagnosed "
                             "at its own splits' lengths")
        if args.png:
            raise ValueError(f"--png draws the flip-flop report's plots as PNG files; the {task} task's report has "
                             "none to draw: leave --png out")
        options.pop("lengths")
        result = diagnose_task(checkpoint, args.out, task, overwrite=args.overwrite,
                               **{k: v for k, v in options.items() if v is not None})
    else:
        result = diagnose(checkpoint, args.out, progress=not args.quiet, overwrite=args.overwrite, png=args.png,
                          **{k: v for k, v in options.items() if v is not None})
    if args.json:   # the JSON holds the reasons of what was skipped, under "skipped"
        print_json(result.metrics)
        return 0
    metrics = result.metrics
    for part, reason in [*((f"length {T}", r) for T, r in (metrics.get("lengths") or {}).get("skipped", {}).items()),
                         *metrics.get("skipped", {}).items()]:
        print(f"skipped {part}: {reason}", file=sys.stderr)
    from rich.table import Table

    table = Table(title=f"{shown(args.checkpoint)} ({result.metrics['model']}): diagnosis")
    for col in ("quantity", "value", "detail"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for row in result.summary_rows():
        table.add_row(*map(shown, row), style="dim" if row[1] == "skipped" else None)
    console = plain_console()
    console.print(table)
    console.print(f"wrote {shown(result.files['report'])} ({result.metrics['timings_s']['total']:.1f} s); "
                  f"also {', '.join(sorted(p.name for k, p in result.files.items() if k != 'report'))}")
    return 0


def cmd_explain(args) -> int:
    from interp.explain import ANALYSES, explain

    if args.pairs > MAX_PAIRS:
        raise ValueError(f"--pairs {args.pairs}: each patching pass runs that many sequences, once per head, "
                         f"position and path; at most {MAX_PAIRS} (docs/results/tools.md \"What explain costs\")")
    checkpoint = checkpoint_dir(args.checkpoint)
    result = explain(checkpoint, args.out, split=args.split, n=args.n, pairs=args.pairs, device=args.device,
                     progress=not args.quiet, overwrite=args.overwrite, task=checkpoint_task_of(args, checkpoint))
    for kind, reason in result.summary["skipped"].items():
        print(f"skipped {ANALYSES[kind]}: {reason}", file=sys.stderr)
    print(shown("\n".join(result.lines())))
    others = sorted(p.name for k, p in result.files.items() if k != "report")
    print(f"wrote {shown(result.files['report'])}; also {', '.join(others)}")
    return 0


def cmd_hunt(args) -> int:
    from interp.hunt import OVERVIEW_COLUMNS, OVERVIEW_NOTE, hunt, overview_rows, shortest_rows, write_hunt
    from models import load

    checkpoint = checkpoint_dir(args.checkpoint)
    task = checkpoint_task_of(args, checkpoint)
    from interp.outputs import check_free, moved, staged, writable_dir
    from interp.tasks import check_draw_size

    if task != "flipflop":
        return _task_hunt(args, checkpoint, task)

    if args.out:
        check_free(writable_dir(args.out), ("hunt.json",), args.overwrite)
    heads = _recorded_heads(checkpoint)
    for flag, length in (("--seq-len", args.seq_len), ("--max-len", args.max_len or 2 * args.seq_len)):
        check_attention_size(flag, length, args.population, heads, length)
    check_draw_size(args.budget, args.max_len or 2 * args.seq_len, "sequences (--budget)")
    from interp.diagnose import require_finite

    model = require_finite(load(checkpoint, device=args.device), args.checkpoint, "search's scores")
    result = hunt(model, budget=args.budget, seq_len=args.seq_len, max_len=args.max_len, p_i=args.p_i,
                  population=args.population, seed=args.seed, progress=not args.quiet)
    files = {}
    if args.out:
        with staged(args.out, args.overwrite, ("hunt.json",)) as stage:
            files = moved(write_hunt(result, stage), stage, args.out)
    if args.json:
        print_json(result.summary())
        return 0
    _print_table(f"{args.checkpoint} ({model.cfg.model}): glitch hunt, at most {args.budget} sequences per method",
                 OVERVIEW_COLUMNS, overview_rows(result), caption=OVERVIEW_NOTE)
    shortest = shortest_rows(result)
    _print_table("shortest failing sequence per error type",
                 ("type", "method", "length", "read at", "gap", "stale write at"), [row[:-1] for row in shortest])
    for error_type, method, *_, text in shortest:
        print(f"{error_type}, {method}: {text}")
    if files:
        print(shown(f"wrote {files['json']} and {len(files) - 1} files of failing sequences; re-check one with "
                    f"glitchlens eval {args.checkpoint} --data FILE"))
    return 0


def _task_hunt(args, checkpoint, task: str) -> int:
    """``glitchlens hunt`` of a model of a registered task: random sampling from each split
    (:mod:`interp.hunt.task`)."""
    from interp.hunt.task import hunt_task, summary, write_task_hunt
    from interp.outputs import check_free, writable_dir
    from models import load

    if args.out:
        check_free(writable_dir(args.out), ("hunt.json",), args.overwrite)
    result = hunt_task(load(checkpoint, device=args.device), task, budget=args.budget, seed=args.seed)
    files = write_task_hunt(result, args.out, args.overwrite) if args.out else {}
    if args.json:
        print_json(summary(result))
        return 0
    rows = [(name, str(r["scored"]), str(r["failing_sequences"]), f"{r['answer_error_rate']:.2e}",
             f"{100 * r['sequence_error_rate']:.1f}%") for name, r in result["splits"].items()]
    _print_table(f"{shown(args.checkpoint)} ({task}): random hunt, {args.budget} sequences per split",
                 ("split", "scored", "failing seqs", "answer error rate", "seq error rate"), rows)
    if files:
        print(shown(f"wrote {files['json']} and {len(files) - 1} files of failing sequences"))
    return 0


def cmd_check_task(args) -> int:
    from interp import conformance

    name, checks = conformance.isolated(conformance.task_checks, args.task, seconds=conformance.TASK_CHECK_SECONDS,
                                        what=f"check-task {args.task}")
    for check in checks:
        print(check.line())
    failed = [check.name for check in checks if not check.passed]
    print(f"{name}: {len(checks) - len(failed)} of {len(checks)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_reproduce(args) -> int:
    from dataclasses import replace

    from interp.outputs import writable_dir
    from interp.studies import sweeps
    from interp.studies.reproduce import SCALES, TABLE1_MODELS, check_configs
    from interp.studies.seed_groups import batching
    from interp.training.setup import output_lock

    batch_seeds = batching(args.batch_seeds, args.device)   # a bad choice refused before --out is made
    models = tuple(args.models.split(",")) if args.models else TABLE1_MODELS
    scale = SCALES[args.scale] if args.steps is None else replace(SCALES[args.scale], steps=args.steps)
    sweeps.SHOW_PROGRESS = not args.quiet
    from interp.outputs import check_free, linked_folders, read_bytes
    from interp.studies.registry import STUDIES

    if args.seeds > MAX_SEEDS:
        raise ValueError(f"--seeds {args.seeds:,}: a sweep runs at most {MAX_SEEDS} seeds per model "
                         "(interp.cli.commands.MAX_SEEDS)")
    reports = REPRODUCE_REPORTS["study" if args.what in STUDIES else args.what]
    if args.what not in STUDIES:   # the names refused before --out is created (and locked)
        for recipe in args.recipes.split(",") if args.what == "recipes" else [scale.recipe]:
            check_configs(models, replace(scale, recipe=recipe))
    else:
        if args.steps is not None:
            raise ValueError(f"--steps is for table1 and recipes: {args.what} fixes its runs' budgets "
                             "(interp/studies/registry.py)")
        if args.device != "cpu":
            raise ValueError(f"--device is for table1 and recipes: {args.what} trains on the CPU "
                             "(interp/studies/registry.py)")
    out = Path(args.out)
    if out.is_dir():   # before the runs; a run's files are written in their own folders
        check_free(out, reports)
        linked = linked_folders(out)
        if linked:
            raise ValueError(f"{linked[0]} is a symbolic link to a folder: the runs would be written outside "
                             f"--out {args.out}; remove it or choose another --out")
    with output_lock(writable_dir(out), " ".join(["glitchlens", *args.argv])):   # one sweep per --out
        report = _reproduce(args, models, scale, batch_seeds)   # its reports are staged and recorded
    print(f"wrote {shown(args.out)}/{report}")
    print(shown(read_bytes(Path(args.out) / report, "report").decode()))
    return 0


MAX_SEEDS = 1000
# the reports each kind of sweep writes into --out
REPRODUCE_REPORTS = {"table1": ("table1.csv", "table1.md"), "recipes": ("recipes.csv", "recipes.md"),
                     "study": ("runs.csv", "summary.md")}


def _reproduce(args, models: tuple[str, ...], scale, batch_seeds: bool) -> str:
    """Run what ``glitchlens reproduce`` names, each configuration's seeds batched if ``batch_seeds``;
    returns the report's file name."""
    from interp.studies.registry import STUDIES, run_study
    from interp.studies.reproduce import reproduce_recipes, reproduce_table1

    if args.what in STUDIES:
        run_study(args.what, args.out, args.jobs, args.ray, train=not args.report_only, batch_seeds=batch_seeds)
        report = "summary.md"
    elif args.what == "recipes":
        reproduce_recipes(args.out, tuple(args.recipes.split(",")), models, args.seeds, args.jobs, scale,
                          ray_address=args.ray, device=args.device, train=not args.report_only,
                          batch_seeds=batch_seeds)
        report = "recipes.md"
    else:
        reproduce_table1(args.out, scale, args.seeds, args.jobs, models, train=not args.report_only,
                         ray_address=args.ray, device=args.device, batch_seeds=batch_seeds)
        report = "table1.md"
    return report


def cmd_pretrained(args) -> int:
    from interp.studies import pretrained
    from interp.studies.specimens import ENTRIES, specimen

    if args.action == "list" and not Path(args.root).is_dir():
        raise ValueError(f"--root {args.root}: no such directory of pretrained entries")
    if args.action == "build":
        from interp.training.setup import TrainingInterrupted

        names = args.names or [name for name, entry in ENTRIES.items() if not entry.gpu]
        if args.from_run and len(names) != 1:
            raise ValueError("--from-run adopts one run: name exactly one entry")
        for name in names:
            print(f"building {name}: {specimen(name, args.steps).command()}")
            try:
                built = pretrained.build(name, steps=args.steps, root=args.root, from_run=args.from_run,
                                         progress=not args.quiet, overwrite=args.overwrite)
                print(shown(f"wrote {built}"))
            except TrainingInterrupted:  # its run was in a temporary directory, now gone
                print(f"glitchlens pretrained: interrupted; {name} not written", file=sys.stderr)
                return 130
        return 0
    if args.table1:
        if args.names:
            raise ValueError("--table1 compares every built GPU specimen with the paper: give no names")
        print(pretrained.specimens_table1(args.root))
        return 0
    rows = pretrained.listing(args.root, args.names)
    if args.json:
        try:
            print_json(rows, allow_nan=False)
        except ValueError:
            raise ValueError(f"--root {args.root}: an entry records a number that is not finite, which JSON "
                             "cannot hold; rebuild it") from None
        return 0
    from rich.console import Console
    from rich.table import Table

    # The listing is laid out for 100 columns (one line an entry); on a terminal, the terminal's.
    console = plain_console() if sys.stdout.isatty() else Console(width=100, markup=False, highlight=False)
    if args.names:
        for row in rows:
            console.print(_entry_table(row))
        return 0
    # No padding at the table's edges: every entry then fits one line of 100 columns.
    table = Table(title="pretrained models: models.load_pretrained(NAME); one in full (read accuracy, "
                        "command, seed): glitchlens pretrained list NAME", pad_edge=False)
    unbroken = ("name", "trained\n(steps, T)", "sequences right (%)\niid / sparse / dense")
    for col in ("name", "model", "layers x\nheads x\nd_model", *unbroken[1:], "beta per\nlayer", "size"):
        table.add_column(col, no_wrap=col in unbroken)
    for row in rows:
        shape = "x".join(str(row[field]) for field in pretrained.SHAPE_FIELDS)
        trained = f"{row['steps']}, T={row['seq_len']}"
        right = _sequences_right(row["accuracy"]) if row["built"] else "not built"
        beta = _betas(row["beta"]) if "beta" in row else ""
        table.add_row(*map(shown, (row["name"], row["model"], shape, trained, right, beta,
                                   f"{row['size_kb']:.0f} KB" if row["built"] else "-")))
    console.print(table)
    unbuilt = [row["name"] for row in rows if not row["built"]]
    if unbuilt:  # their build commands are in `list NAME`
        console.print(f"not built: {', '.join(unbuilt)}; `glitchlens pretrained list NAME` says how to build one")
    return 0


def _betas(betas: list[float]) -> str:
    """A threshold entry's beta per layer, layer 0 first."""
    return "/".join(f"{beta:.2f}" for beta in betas)


def _sequences_right(accuracy: dict) -> str:
    """A pretrained entry's full-sequence accuracies, in percent: iid / sparse / dense, or its one other task's."""
    if set(accuracy) == {"iid", "sparse", "dense"}:
        return " / ".join(f"{100 * accuracy[split]['sequence_accuracy']:.1f}" for split in ("iid", "sparse", "dense"))
    return ", ".join(f"{split} {100 * r['sequence_accuracy']:.1f}" for split, r in accuracy.items())


def _accuracy_lines(accuracy: dict) -> str:
    """A pretrained entry's accuracy, a line per split: read (or automaton state) / full-sequence."""
    return "\n".join(f"{split}: {100 * r.get('read_accuracy', r.get('position_accuracy', 0.0)):.2f}% / "
                     f"{100 * r['sequence_accuracy']:.1f}%" for split, r in accuracy.items())


def _entry_table(row: dict):
    """One row of ``interp.studies.pretrained.listing``, field by field, as a ``rich.table.Table``
    (``glitchlens pretrained list NAME``)."""
    from rich.table import Table

    from interp.studies.specimens import build_command

    fields = {"description": row["description"], "path": row["path"]}
    if row["built"]:
        fields.update({"model": row["model"] + (f" (beta per layer: {_betas(row['beta'])})" if "beta" in row else ""),
                       "size": f"{row['size_kb']:.0f} KB", "seed": str(row["seed"]),
                       "accuracy": _accuracy_lines(row["accuracy"]) + "\n(read / full-sequence)",
                       "command": row["command"]})
    else:
        fields["built"] = f"not yet: {build_command(row['name'])}"
    table = Table(title=row["name"], show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for field, value in fields.items():
        table.add_row(field, shown(value))
    return table


def cmd_figures(args) -> int:
    from interp.figures import make_figures

    if args.table1 is not None:
        from interp.outputs import input_file

        if not os.path.lexists(args.table1):
            raise ValueError(f"--table1 {args.table1}: no such file (write one with `glitchlens reproduce table1`)")
        input_file(args.table1, "--table1")
    written = make_figures(args.out, args.only, table1_csv=args.table1, progress=not args.quiet,
                           overwrite=args.overwrite)
    print(shown(f"wrote {len(written)} figures (PNG, HTML, CSV each) to {args.out}; captions in "
                f"{Path(args.out) / 'captions.json'}, all of them in {Path(args.out) / 'index.md'}"))
    return 0


def cmd_claims(args) -> int:
    from interp import claims
    from interp.claims import measure, sources

    if args.measure is not None:
        for path in measure.measure(args.measure, progress=not args.quiet):
            print(shown(f"wrote {path}"), file=sys.stderr)
        sources.clear()
    frame = claims.table()
    if args.write_docs:
        for block in claims.write_docs(frame):
            print(shown(f"rewrote {block}"), file=sys.stderr)
    print(claims.render(frame, args.format), end="")
    return 0


def cmd_bench(args) -> int:
    from interp import bench

    return bench.run(args.what, args)


def cmd_check_mechanism(args) -> int:
    from interp import conformance

    report = conformance.isolated(conformance.mechanism_report, args.mechanism, args.device,
                                  seconds=conformance.mechanism_seconds(), what=f"check-mechanism {args.mechanism}")
    name = report.mechanism
    if args.json:
        print_json(report.to_dict())
        return 0 if report.passed else 1
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(shown(f"{name} ({report.source}) on {report.device}: conformance")))
    for col in ("check", "result", "measured"):
        table.add_column(col)
    for check in report.checks:
        passed = "[green]PASS[/]" if check.passed else "[bold red]FAIL[/]"
        table.add_row(check.name, passed, escape(shown(check.detail)))
    printer = wide_console()
    printer.print(table)
    failed = [check.name for check in report.checks if not check.passed]
    printer.print(f"{len(report.checks) - len(failed)} of {len(report.checks)} checks passed"
                  + (f"; failed: {', '.join(failed)}" if failed else ""), highlight=False)
    return 1 if failed else 0


# Each subcommand's function, by the name the parser gives it (``args.command``); the parser
# names the commands and their options, and imports nothing from here.
def cmd_campaign(args) -> int:
    from interp.studies.campaign import campaign, estimate

    if args.estimate:
        estimate(args.plan, args.out, args.device, args.budget_s, args.jobs, args.reserve_s)
        return 0
    if args.budget_s is not None and args.budget_s <= args.reserve_s:
        raise ValueError(f"--budget-s {args.budget_s:g} leaves no training time after --reserve-s {args.reserve_s:g}")
    campaign(args.plan, args.out, args.device, args.budget_s, args.jobs, args.checkpoint_s, args.reserve_s)
    return 0


COMMANDS = {"data": cmd_data, "train": cmd_train, "eval": cmd_eval, "diagnose": cmd_diagnose, "explain": cmd_explain,
            "hunt": cmd_hunt, "reproduce": cmd_reproduce, "pretrained": cmd_pretrained, "figures": cmd_figures,
            "bench": cmd_bench, "check-mechanism": cmd_check_mechanism, "check-task": cmd_check_task,
            "claims": cmd_claims, "campaign": cmd_campaign}
