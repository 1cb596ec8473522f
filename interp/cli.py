"""``glitchlens``: the command line. Each subcommand is a thin layer over a library call.

Errors are handled in one place, :func:`main`: a failure the user can fix (a ``ValueError``
such as ``CheckpointError`` or ``FlipFlopFormatError``, an ``OSError`` on a path, a
``RuntimeError`` such as a diverged run) prints one line, ``glitchlens COMMAND: error: ...``,
and exits with status 2, as argparse does for bad arguments. Anything else is a bug and keeps
its traceback.

This module and :func:`build_parser` import neither torch nor anything that does, so that
``--help`` answers at once; each ``cmd_*`` imports what it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, except a default of None or a flag's False:
    there the help itself says what happens without the option."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def positive_int(text: str) -> int:
    """argparse type of every count option (sequences, steps, batch sizes, lengths)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _model_overrides(args) -> dict:
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


def _clip_norm(text: str) -> float | str:
    return "none" if text.lower() == "none" else float(text)


def cmd_data(args) -> int:
    from interp.tasks import SPLITS, TRAIN_P_I, load_split, sample_ffl, write_sequences

    if args.split == "train":
        tokens = sample_ffl(args.n or 1000, args.seq_len, TRAIN_P_I, args.seed)
    elif args.seed is None:
        tokens = load_split(args.split, args.n, args.seq_len)
    else:
        split = SPLITS[args.split]
        tokens = sample_ffl(args.n or split.size, args.seq_len, split.p_i, args.seed)
    path = write_sequences(tokens, args.out)
    print(f"wrote {len(tokens)} sequences of {tokens.shape[1]} tokens to {path}")
    return 0


def train_configs(args):
    """The ``(ModelConfig, TrainConfig)`` that ``glitchlens train`` arguments describe."""
    from interp.train import TrainConfig
    from models import ModelConfig

    from interp.recipes import get_recipe, model_overrides

    recipe = get_recipe(args.recipe)
    recipe_fields = {k: getattr(args, k) for k in ("weight_decay", "decay_all_parameters", "warmup", "grad_clip")
                     if getattr(args, k) is not None}
    if recipe_fields.get("grad_clip") == "none":
        recipe_fields["grad_clip"] = None
    # the training options first: a bad --seq-len is named as such, not as the n_ctx it sets
    train_cfg = TrainConfig(**{
        **recipe.training, **recipe_fields,
        "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seq_len": args.seq_len,
        "loss": args.loss, "task": args.task, "mixture": args.mixture, "p_bottom": args.p_bottom,
        "regulariser": args.regulariser, "reg_coef": args.reg_coef, "reg_start": args.reg_start, "seed": args.seed,
        "data_file": args.data, "eval_every": args.eval_every, "eval_n": args.eval_n,
        "checkpoint_every": args.checkpoint_every})
    # n_ctx follows the training length unless --n-ctx says otherwise
    recipe_model, flags = model_overrides(recipe, args.model), _model_overrides(args)
    attention_options = {**recipe_model.get("attention_options", {}), **flags.get("attention_options", {})}
    model_cfg = ModelConfig.from_preset(args.model, args.preset, **{"n_ctx": args.seq_len, **recipe_model, **flags,
                                                                    "attention_options": attention_options})
    return model_cfg, train_cfg


def cmd_train(args) -> int:
    from interp.train import TrainingInterrupted, format_quick_eval, train
    from models.checkpoint import CONFIG_FILE

    model_cfg, train_cfg = train_configs(args)
    if args.resume and not (Path(args.out) / CONFIG_FILE).exists():
        print(f"glitchlens train: no checkpoint in {args.out} to resume; starting at step 0", file=sys.stderr)
    try:
        train(model_cfg, train_cfg, args.out, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet,
              metadata={"command": " ".join(["glitchlens", *args.argv])})
    except TrainingInterrupted as stop:
        print(stop, file=sys.stderr)
        return 130
    from models import read_config

    evaluation = read_config(args.out)["metadata"].get("evaluation")
    print(f"saved {args.out}")
    if evaluation:
        print(f"first {args.eval_n} sequences per split: " + format_quick_eval(evaluation))
    return 0


def checkpoint_dir(text: str) -> Path:
    """The checkpoint a CHECKPOINT argument names: a path that exists as given, even one named
    like a pretrained model (the user's own directory is the one meant), else the pretrained
    entry of that name."""
    from models import pretrained

    if Path(text).exists():
        return Path(text)
    if text not in pretrained.RECIPES:
        raise ValueError(f"{text}: no such checkpoint directory, nor a pretrained model of that name "
                         f"(pretrained: {', '.join(pretrained.RECIPES)})")
    pretrained.info(text)  # refuses an entry not built yet, saying how to build it
    return pretrained.path(text)


def cmd_eval(args) -> int:
    from interp.evaluate import checkpoint_task, evaluate_automaton, evaluate_splits, evaluate_tokens
    from models import load, read_config

    checkpoint = checkpoint_dir(args.checkpoint)
    task = checkpoint_task(read_config(checkpoint))
    if task == "automaton" and (args.data or args.splits):
        raise ValueError(f"{args.checkpoint} was trained on the automaton task; it is evaluated on fresh automaton "
                         "sequences, so --data and --splits (flip-flop sequences) do not apply")
    if args.data and args.splits:
        raise ValueError("--data evaluates one file and --splits the canonical splits: give one of them")
    model = load(checkpoint, device=args.device)
    progress = not args.quiet
    if task == "automaton":
        result = evaluate_automaton(model, args.n or 1000, batch_size=args.batch_size, progress=progress)
        if args.json:
            print(json.dumps({"automaton": result}, indent=2))
            return 0
        rows = [("automaton", str(result["sequences"]), f"{100 * result['position_accuracy']:.2f}%",
                 f"{100 * result['sequence_accuracy']:.2f}%")]
        _print_table(f"{args.checkpoint} ({model.cfg.model}, automaton task)",
                     ("task", "sequences", "state accuracy", "seq accuracy"), rows)
        return 0
    if args.data:
        from interp.tasks import read_sequences

        tokens = read_sequences(args.data)[:args.n]
        results = {args.data: evaluate_tokens(model, tokens, args.data, args.batch_size, progress)}
    else:
        splits = [s.strip() for s in (args.splits or "iid,sparse,dense").split(",") if s.strip()]
        results = evaluate_splits(model, splits, n=args.n, batch_size=args.batch_size, progress=progress)
    if args.json:
        print(json.dumps({name: r.to_dict() for name, r in results.items()}, indent=2))
        return 0
    rows = [(r.split, str(r.sequences), str(r.reads), str(r.read_errors), f"{r.error_rate:.2e}",
             f"{r.error_rate_upper95:.2e}", f"{100 * r.sequence_accuracy:.2f}%") for r in results.values()]
    _print_table(f"{args.checkpoint} ({model.cfg.model})",
                 ("split", "sequences", "reads", "read errors", "error rate", "95% upper", "seq accuracy"), rows)
    return 0


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def cmd_diagnose(args) -> int:
    from interp.diagnose import diagnose

    options = {"n": args.n, "lengths": args.lengths, "n_cache_sequences": args.cache_sequences, "device": args.device}
    result = diagnose(checkpoint_dir(args.checkpoint), args.out, **{k: v for k, v in options.items() if v is not None})
    if args.json:
        print(json.dumps(result.metrics, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.checkpoint} ({result.metrics['model']}): diagnosis")
    for col in ("quantity", "value", "detail"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for row in result.summary_rows():
        table.add_row(*row, style="dim" if row[1] == "skipped" else None)
    console = Console()
    console.print(table)
    console.print(f"wrote {result.files['report']} ({result.metrics['timings_s']['total']:.1f} s); "
                  f"also {', '.join(sorted(p.name for k, p in result.files.items() if k != 'report'))}")
    return 0


def cmd_explain(args) -> int:
    from interp.explain import explain

    result = explain(checkpoint_dir(args.checkpoint), args.out, split=args.split, n=args.n, pairs=args.pairs,
                     device=args.device)
    print("\n".join(result.lines()))
    print(f"wrote {result.files['report']}; also {', '.join(sorted(p.name for k, p in result.files.items() if k != 'report'))}")
    return 0


def cmd_hunt(args) -> int:
    from interp.evaluate import checkpoint_task
    from interp.hunt import hunt, overview_rows, shortest_rows, write_hunt
    from models import load, read_config

    checkpoint = checkpoint_dir(args.checkpoint)
    if checkpoint_task(read_config(checkpoint)) == "automaton":
        raise ValueError(f"{args.checkpoint} was trained on the automaton task; hunt searches flip-flop sequences")
    model = load(checkpoint, device=args.device)
    result = hunt(model, budget=args.budget, seq_len=args.seq_len, max_len=args.max_len, p_i=args.p_i,
                  population=args.population, seed=args.seed, progress=not args.quiet)
    files = write_hunt(result, args.out) if args.out else {}
    if args.json:
        print(json.dumps(result.summary(), indent=2))
        return 0
    _print_table(f"{args.checkpoint} ({model.cfg.model}): glitch hunt, at most {args.budget} sequences per method",
                 ("method", "from", "scored", "failing seqs", "read errors", "seq errors", "types"),
                 overview_rows(result))
    shortest = shortest_rows(result)
    _print_table("shortest failing sequence per error type",
                 ("type", "method", "length", "read at", "gap", "stale write at"), [row[:-1] for row in shortest])
    for error_type, method, *_, text in shortest:
        print(f"{error_type}, {method}: {text}")
    if files:
        print(f"wrote {files['json']} and {len(files) - 1} files of failing sequences; re-check one with "
              f"glitchlens eval {args.checkpoint} --data FILE")
    return 0


def cmd_reproduce(args) -> int:
    from interp.reproduce import TABLE1_MODELS, reproduce_recipes, reproduce_table1

    models = tuple(args.models.split(",")) if args.models else TABLE1_MODELS
    if args.what == "recipes":
        reproduce_recipes(args.out, tuple(args.recipes.split(",")), models, args.seeds, args.jobs, args.scale,
                          ray_address=args.ray)
        report = "recipes.md"
    else:
        reproduce_table1(args.out, args.scale, args.seeds, args.jobs, models, train=not args.report_only,
                         ray_address=args.ray)
        report = "table1.md"
    print(f"wrote {args.out}/{report}")
    print((Path(args.out) / report).read_text())
    return 0


def cmd_pretrained(args) -> int:
    from interp import pretrained
    from models.pretrained import build_command

    if args.action == "build":
        names = args.names or [name for name, recipe in pretrained.RECIPES.items() if not recipe.gpu]
        if args.from_run and len(names) != 1:
            raise ValueError("--from-run adopts one run: name exactly one entry")
        for name in names:
            print(f"building {name}: glitchlens train {' '.join(pretrained.recipe_args(name, args.steps))}")
            print(f"wrote {pretrained.build(name, steps=args.steps, root=args.root, from_run=args.from_run)}")
        return 0
    if args.table1:
        if args.names:
            raise ValueError("--table1 compares every built GPU specimen with the paper: give no names")
        print(pretrained.specimens_table1(args.root))
        return 0
    rows = pretrained.listing(args.root, args.names)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.names:
        for row in rows:
            console.print(_entry_table(row))
        return 0
    table = Table(title="pretrained models (models.load_pretrained(name)); accuracy: read / full-sequence")
    for col in ("name", "model", "size", "accuracy", "command"):
        table.add_column(col)
    for row in rows:
        if row["built"]:
            table.add_row(row["name"], row["model"], f"{row['size_kb']:.0f} KB", _accuracy_lines(row["accuracy"]),
                          row["command"])
        else:
            table.add_row(row["name"], "-", "-", "not built", build_command(row["name"]))
    console.print(table)
    return 0


def _accuracy_lines(accuracy: dict) -> str:
    """A pretrained entry's accuracy, a line per split: read (or automaton state) / full-sequence."""
    return "\n".join(f"{split}: {100 * r.get('read_accuracy', r.get('position_accuracy', 0.0)):.2f}% / "
                     f"{100 * r['sequence_accuracy']:.1f}%" for split, r in accuracy.items())


def _entry_table(row: dict) -> Table:
    """One row of ``interp.pretrained.listing``, field by field (``glitchlens pretrained list NAME``)."""
    from rich.table import Table

    from models.pretrained import build_command

    fields = {"description": row["description"], "path": row["path"]}
    if row["built"]:
        fields.update({"model": row["model"], "size": f"{row['size_kb']:.0f} KB", "seed": str(row["seed"]),
                       "accuracy": _accuracy_lines(row["accuracy"]) + "\n(read / full-sequence)",
                       "command": row["command"]})
    else:
        fields["built"] = f"not yet: {build_command(row['name'])}"
    table = Table(title=row["name"], show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for field, value in fields.items():
        table.add_row(field, value)
    return table


def cmd_figures(args) -> int:
    from interp.figures import make_figures

    written = make_figures(args.out, args.only, table1_csv=args.table1)
    print(f"wrote {len(written)} figures (PNG, HTML, CSV each) to {args.out}; captions in "
          f"{Path(args.out) / 'captions.json'}, all of them in {Path(args.out) / 'index.md'}")
    return 0


def cmd_bench(args) -> int:
    from interp import bench

    return bench.run(args.what, args)


def build_parser() -> argparse.ArgumentParser:
    from interp.recipes import RECIPES
    from models import MODEL_NAMES, PRESETS
    from models.config import ATTENTION_IMPLS, INIT_SCHEMES, NORM_PLACEMENTS
    from models.pretrained import PRETRAINED_DIR
    from models.pretrained import RECIPES as PRETRAINED

    parser = argparse.ArgumentParser(prog="glitchlens", formatter_class=HelpFormatter,
                                     description="Train, evaluate and diagnose small transformers on the flip-flop "
                                                 "language. Each command is a thin layer over a library call.")
    parser.add_argument("--version", action="version", version=f"glitchlens {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of these; `glitchlens COMMAND --help` lists its options")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, formatter_class=HelpFormatter)

    checkpoint_help = (f"checkpoint directory, or the name of a pretrained model ({', '.join(PRETRAINED)}; "
                       "`glitchlens pretrained list`); a path that exists wins over a name")

    p = command("data", "write flip-flop sequences in the text format (.jsonl or .parquet)")
    p.add_argument("--split", choices=["train", "iid", "sparse", "dense"], required=True,
                   help="a canonical split, or train: fresh FFL(0.8) sequences as training draws them")
    p.add_argument("-n", type=positive_int, default=None,
                   help="number of sequences (default: the split's size; train: 1000)")
    p.add_argument("--seed", type=int, default=None,
                   help="sampling seed (default: the canonical split's own; train: a fresh random one)")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per sequence")
    p.add_argument("--out", required=True, help="file to write; .jsonl or .parquet")
    p.set_defaults(func=cmd_data)

    p = command("train", "train a model on a flip-flop task and save a checkpoint")
    p.add_argument("--model", choices=MODEL_NAMES, required=True,
                   help="architecture: attention mechanism and position embedding (models/config.py)")
    p.add_argument("--preset", choices=list(PRESETS), default="tiny",
                   help="sizes (layers x heads, d_model): " + "; ".join(
                       f"{name} {size['n_layers']} x {size['n_heads']}, {size['d_model']}"
                       for name, size in PRESETS.items()))
    p.add_argument("--out", required=True, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (linear warm-up, then cosine decay)")
    p.add_argument("--recipe", choices=list(RECIPES), default="llama",
                   help="block, init, dropout and optimiser defaults (see interp/recipes.py); explicit flags win")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="AdamW weight decay on matrices (default: the recipe's; llama: 0.1)")
    p.add_argument("--decay-all-parameters", action=argparse.BooleanOptionalAction, default=None,
                   help="apply the weight decay to every parameter, biases and norm gains too, as the TRA "
                        "authors' notebook (default: the recipe's; llama: matrices only)")
    p.add_argument("--warmup", type=int, default=None, help="linear warm-up steps (default: the recipe's; llama: 50)")
    p.add_argument("--grad-clip", type=_clip_norm, default=None,
                   help="max gradient norm, or 'none' for no clipping (default: the recipe's; llama: 1.0)")
    p.add_argument("--seq-len", type=int, default=512, help="training sequence length; also n_ctx unless --n-ctx")
    p.add_argument("--loss", choices=["clean", "generative"], default="clean",
                   help="clean: only the bit after each r; generative: every next token")
    p.add_argument("--task", choices=["flipflop", "automaton"], default="flipflop",
                   help="flipflop: predict reads; automaton: the flip-flop automaton's state at every position")
    p.add_argument("--mixture", action="store_true", help="train on the long-tailed FFL(0.8/0.98/0.1) mixture")
    p.add_argument("--p-bottom", type=float, default=0.5, help="automaton task: probability of a no-op")
    p.add_argument("--regulariser", choices=["none", "entropy", "l2", "linf"], default="none",
                   help="attention sharpening (flip-flop paper Sec. 5.2): entropy, negative L2 or L-inf norm")
    p.add_argument("--reg-coef", type=float, default=0.0, help="weight of the regulariser in the loss")
    p.add_argument("--reg-start", type=int, default=0, help="step at which the regulariser starts")
    p.add_argument("--seed", type=int, default=0, help="fixes the data, the initialisation and dropout")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="train on the sequences of a .jsonl/.parquet file (default: fresh samples)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="print a quick evaluation every this many steps (0: only at the end)")
    p.add_argument("--eval-n", type=int, default=200, help="sequences per split of each quick evaluation")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="save every this many steps (0: only at the end and on Ctrl-C)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a checkpoint already in --out (without it, or --resume, that is an error)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    for flag, what in (("n-layers", "layers (default: the preset's)"),
                       ("n-heads", "attention heads per layer (default: the preset's)"),
                       ("d-model", "residual stream width (default: the preset's)"),
                       ("d-mlp", "MLP hidden width (default: 2 d_model)"),
                       ("n-ctx", "training length, which sizes the learned position tables (default: --seq-len)")):
        p.add_argument(f"--{flag}", type=int, default=None, help=what)
    for flag, what in (("dropout", "on the embedding and the sublayer outputs (default: 0)"),
                       ("embedding-dropout", "on the embedding output alone (default: --dropout's value)"),
                       ("attention-dropout", "on the attention logits before masking, as the TRA authors' notebook "
                                             "(default: 0)"),
                       ("mlp-hidden-dropout", "on the MLP's hidden activation, as the TRA authors' notebook "
                                              "(default: 0)")):
        p.add_argument(f"--{flag}", type=float, default=None, help="dropout " + what)
    p.add_argument("--attn-opt", action="append", metavar="KEY=VALUE",
                   help="attention option, e.g. --attn-opt qk_norm=false (repeatable)")
    p.add_argument("--attention-impl", choices=ATTENTION_IMPLS, default=None,
                   help="default auto: the Triton kernels on CUDA, kernels.rows on the CPU")
    p.add_argument("--norm-placement", choices=NORM_PLACEMENTS, default=None,
                   help="pre (default): x + f(norm(x)); stream: x = norm(x), then x + f(x) (the TRA authors' block)")
    p.add_argument("--init", choices=INIT_SCHEMES, default=None,
                   help="scaled (default): scaled normal; torch: nn.Linear's defaults (the TRA authors' code)")
    p.add_argument("--linear-bias", action=argparse.BooleanOptionalAction, default=None,
                   help="biases on the MLP and the attention output projection (default off)")
    p.set_defaults(func=cmd_train)

    p = command("eval", "glitch rates and sequence accuracy of a checkpoint (automaton models: state accuracy on "
                        "fresh automaton sequences)")
    p.add_argument("checkpoint", help=checkpoint_help)
    p.add_argument("--splits", default=None, help="comma-separated canonical splits (default: iid,sparse,dense)")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="evaluate the sequences of a .jsonl/.parquet file instead of the canonical splits")
    p.add_argument("-n", type=positive_int, default=None,
                   help="first n sequences of each split, or of --data (default: all; automaton models: 1000)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="a batch holds at most this many sequences' worth of tokens")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")
    p.set_defaults(func=cmd_eval)

    p = command("diagnose", "evaluate a checkpoint, measure its attention, write a self-contained report")
    p.add_argument("checkpoint", help=checkpoint_help)
    p.add_argument("--out", required=True, help="directory for report.html, metrics.json/.csv, glitches.csv, PNGs")
    p.add_argument("-n", "--n", type=positive_int, default=None, help="first n sequences of each split (default: 32)")
    p.add_argument("--lengths", type=positive_int, nargs="+", default=None,
                   help="context lengths to measure attention at (default: 128 256 512 1024 2048)")
    p.add_argument("--cache-sequences", type=positive_int, default=None,
                   help="sequences run with hooks per length (default: 2)")
    p.add_argument("--device", default=None, help="torch device, e.g. cuda (default: cpu)")
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the summary table")
    p.set_defaults(func=cmd_diagnose)

    p = command("explain", "name the components that carry the bit to the reads and the ones that corrupt it at "
                           "the glitches (direct logit attribution, activation and path patching)")
    p.add_argument("checkpoint", help=checkpoint_help)
    p.add_argument("--split", choices=["iid", "sparse", "dense"], default="dense",
                   help="the canonical split whose glitches are explained")
    p.add_argument("-n", type=positive_int, default=100, help="first n sequences of the split")
    p.add_argument("--pairs", type=positive_int, default=16,
                   help="at most this many (clean, corrupt) pairs of each kind: correct reads with their write's bit "
                        "flipped, and glitches with the edit that the model reads right")
    p.add_argument("--out", required=True, help="directory for report.md, explain.json, CSVs and PNGs")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.set_defaults(func=cmd_explain)

    p = command("hunt", "search for flip-flop sequences the model gets wrong (an evolutionary search over "
                        "instruction and bit edits, longer sequences, denser distractors) against random sampling at "
                        "the canonical sparse and dense settings, at an equal budget")
    p.add_argument("checkpoint", help=checkpoint_help)
    p.add_argument("--budget", type=positive_int, default=1024,
                   help="sequences each method scores: the guided search and each random baseline (a quarter of "
                        "it shrinks the failures found)")
    p.add_argument("--seq-len", type=positive_int, default=512,
                   help="length of the sequences the search starts from, and of the random baselines")
    p.add_argument("--max-len", type=positive_int, default=None,
                   help="the search grows sequences up to this length (default: twice --seq-len, within what the "
                        "model's positions allow)")
    p.add_argument("--p-i", type=float, default=0.8,
                   help="the search starts from FFL(p_i) (0.8: the training distribution)")
    p.add_argument("--population", type=positive_int, default=32,
                   help="sequences the search keeps, and children it scores per generation")
    p.add_argument("--seed", type=int, default=0, help="fixes the samples and the edits")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write hunt.json and the failing sequences, one .jsonl per method and length, for "
                        "`glitchlens eval CKPT --data FILE`")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--json", action="store_true", help="print hunt.json instead of the tables")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")
    p.set_defaults(func=cmd_hunt)

    p = command("reproduce", "sweeps over models and seeds: the TRA paper's Table 1 (table1), or which training "
                             "recipe learns (recipes)")
    p.add_argument("what", choices=["table1", "recipes"], help="which sweep")
    p.add_argument("--scale", choices=["cpu", "learning", "paper"], default="cpu",
                   help="cpu: tiny models with 4 heads and the cpu-learning-authors recipe, 1000 steps at lr 1e-3, "
                        "batch 16, T = 512; learning: tiny models with 4 heads (recipe cpu-learning), 1000 steps at "
                        "T = 128 (docs/learning-notes.md \"Learning on CPU\"); paper: the TRA paper's mini models, 25k steps at "
                        "lr 1e-4, batch 64 (a GPU's work)")
    p.add_argument("--models", default=None, help="comma-separated models (default: the 12 of Table 1)")
    p.add_argument("--recipes", default="llama,authors",
                   help="recipes: comma-separated names from interp/recipes.py")
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds per model (and recipe)")
    p.add_argument("--jobs", type=positive_int, default=2,
                   help="runs at once on this machine (one torch thread each); with --ray local, Ray's CPUs")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the runs as tasks on a Ray cluster (the ray extra): auto, host:6379, "
                        "ray://host:10001, or local to start one here; --out must be on a filesystem every node "
                        "shares (docs/guide.md \"Sweeps on Ray\")")
    p.add_argument("--out", required=True, help="directory for the runs and the report")
    p.add_argument("--report-only", action="store_true",
                   help="table1: write the table from the runs that have finished, training nothing")
    p.set_defaults(func=cmd_reproduce)

    p = command("pretrained", "list the shipped pretrained models, show one, or rebuild them from their recipes")
    p.add_argument("action", nargs="?", choices=["list", "build"], default="list",
                   help="list: the entries with their accuracies; build: train them again from their recipes")
    p.add_argument("names", nargs="*",
                   help="entries to show or build (default: all; build: all but the GPU specimens)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="build: override the recipe's steps (a quick check)")
    p.add_argument("--root", default=str(PRETRAINED_DIR), help="directory of the entries")
    p.add_argument("--from-run", default=None, metavar="CHECKPOINT",
                   help="build: adopt a finished training run whose configuration equals the recipe's "
                        "(e.g. a `reproduce table1` run) instead of training again")
    p.add_argument("--json", action="store_true", help="list: print the entries' metadata as JSON")
    p.add_argument("--table1", action="store_true",
                   help="list: the GPU specimens' full-split accuracies beside the TRA paper's Table 1 (markdown)")
    p.set_defaults(func=cmd_pretrained)

    p = command("figures", "reproduce the papers' mechanistic figures on the pretrained models")
    p.add_argument("--out", required=True, help="directory for the PNG/HTML/CSV files, captions.json and index.md")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="draw only these figures (names in interp.figures.FIGURE_NAMES, e.g. tra_vs_fot drift)")
    p.add_argument("--table1", default=None, metavar="CSV",
                   help="table1.csv of `glitchlens reproduce table1` (without it the table1 figure is skipped)")
    p.set_defaults(func=cmd_figures)

    p = command("bench", "benchmarks that print ratios measured side by side")
    p.add_argument("what", choices=["data", "models", "diagnose", "kernels", "tiles", "eval"],
                   help="what to time (docs/cpu-path-and-kernels.md \"Benchmarks\")")
    p.add_argument("checkpoint", nargs="?", help="bench tiles: a trained checkpoint directory")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed runs of each measurement; the best counts")
    p.add_argument("--out", default=None, metavar="CSV",
                   help="bench kernels: append the rows here, and skip the (kernel, T) pairs it already holds")
    p.add_argument("--budget-s", type=float, default=float("inf"),
                   help="bench kernels: start no new (kernel, T) pair after this many seconds (resume with --out)")
    p.add_argument("--seq-lens", type=int, nargs="+", default=None,
                   help="bench kernels: sequence lengths T (default: 512 ... 16384)")
    p.add_argument("--tokens", type=int, default=16384, help="bench kernels: tokens per batch (batch = tokens / T)")
    p.add_argument("--d-head", type=int, default=64, help="bench kernels: head dim")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16",
                   help="bench kernels: element type (float32 on the CPU only: SDPA's flash backend on CUDA needs "
                        "half precision)")
    p.add_argument("--models", default=None, help="bench eval: pretrained models, comma-separated (default: all "
                                                  "flip-flop entries)")
    p.add_argument("-n", type=positive_int, default=1024, help="bench eval: first n sequences of the sparse split")
    p.add_argument("--no-baseline", action="store_true", help="bench eval: skip the previous evaluation loop")
    p.set_defaults(func=cmd_bench)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("glitchlens")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _message(err: BaseException) -> str:
    """One line naming the problem: an OSError as ``path: reason``, anything else as its text."""
    if isinstance(err, OSError) and err.strerror:
        text = f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    else:
        text = str(err) or type(err).__name__
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv
    from interp.train import reuse_freed_memory

    reuse_freed_memory()

    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader of our output left (`glitchlens pretrained --json | head`): stop quietly,
        # and point stdout at /dev/null so that the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, OSError, RuntimeError) as err:  # RuntimeError: TrainingDiverged, torch's own
        print(f"glitchlens {args.command}: error: {_message(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
