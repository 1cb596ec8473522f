"""``build_parser``: every ``glitchlens`` subcommand and option. It imports neither torch nor
anything that does, so that ``--help`` answers at once, nor the commands: ``args.command`` names
the one to run (:data:`interp.cli.commands.COMMANDS`). Each subcommand's options are added by a
function of its own (:data:`SUBCOMMANDS`), called only for the subcommand the command line names:
the names its help lists (models, presets, recipes, pretrained entries) are imported there.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

TRANSFORMERLENS_HELP = ("a TransformerLens model instead of a checkpoint: a Hugging Face name (gpt2, needs a network) "
                        "or a local directory holding one, loaded as a transformer_lens.TransformerBridge")
TASK_HELP = ("a registered task: flipflop, automaton, counting (1 variable), counting-3, counting-5, selective-copy "
             "(CoPE Sec. 5.2-5.3), or your own as MODULE:CLASS (docs/how-to/add-a-task.md \"Your own task\")")
CHECKPOINT_TASK_HELP = ("the task the checkpoint was trained on, which it records (default: that one); MODULE:CLASS "
                        "registers a task of your own first")


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


def positive_float(text: str) -> float:
    """argparse type of the options in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def tile_configs(text: str) -> list:
    """argparse type of ``--tile-configs``: comma-separated ``kernels.tooling.tiles.TileConfig`` names."""
    from kernels.tooling.tiles import TileConfig  # imports triton: only when the option is given

    try:
        return [TileConfig.parse(name) for name in text.split(",") if name.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def output_path(text: str) -> str:
    """argparse type of every --out: a name, never the empty string (which would write into the
    current directory unasked)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or directory (\".\" for the current one)")
    return text


def _clip_norm(text: str) -> float | str:
    return "none" if text.lower() == "none" else float(text)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Every subcommand with its options; given ``argv``, only the subcommand it names gets its
    options. The others are listed with their summaries as ``glitchlens --help`` shows them, so
    that a command builds only its own options and ``glitchlens --help`` imports none of the
    modules that name the models, presets, recipes and pretrained entries in the options' help."""
    parser = argparse.ArgumentParser(prog="glitchlens", formatter_class=HelpFormatter,
                                     description="Train, evaluate and diagnose small transformers on the flip-flop "
                                                 "language. Each command is a thin layer over a library call.")
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of these; `glitchlens COMMAND --help` lists its options")
    named = None if argv is None else named_command(argv)
    for name, (summary, add_options) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary, formatter_class=HelpFormatter)
        if argv is None or name == named:
            _shared_options(p)
            add_options(p)
    return parser


def named_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the options before
    the subcommand, --help and --version, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


# name -> (summary, the function that adds its options), in the order `glitchlens --help` lists them
SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {}


def subcommand(name: str, summary: str) -> Callable:
    """Registers the decorated function as the one that adds subcommand ``name``'s options."""
    def register(add_options: Callable[[argparse.ArgumentParser], None]) -> Callable:
        SUBCOMMANDS[name] = (summary, add_options)
        return add_options
    return register


def _shared_options(p: argparse.ArgumentParser) -> None:
    """The options of every subcommand."""
    p.add_argument("--mechanism", action="append", metavar="[NAME=]MODULE:CLASS",
                   help="import an attention mechanism of your own and register it as the model NAME (default: "
                        "the class name, lower-case, less 'Attention'), here and in the processes this command "
                        "starts; repeatable (docs/how-to/add-a-mechanism.md \"Your own mechanism\")")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads, here and in the processes this command starts (default: "
                        "OMP_NUM_THREADS if set, else the cores the load average leaves idle, at least 1: on a "
                        "busy machine more threads than idle cores wait for each other; README \"Quick start\")")


def checkpoint_help() -> str:
    """The help of a command's checkpoint argument, which names the pretrained entries."""
    from interp.studies.specimens import ENTRIES

    return (f"checkpoint directory, or the name of a pretrained model ({', '.join(ENTRIES)}; "
            "`glitchlens pretrained list`); a path that exists wins over a name")


@subcommand("data", "write flip-flop sequences in the text format (.jsonl or .parquet)")
def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="flipflop", metavar="NAME|MODULE:CLASS", help=TASK_HELP)
    p.add_argument("--split", required=True,
                   help="a canonical split of the task (flipflop: iid, sparse, dense; `glitchlens check-task NAME` "
                        "lists a task's), or train: fresh sequences as training draws them")
    p.add_argument("-n", type=positive_int, default=None,
                   help="number of sequences (default: the split's size; train: 1000)")
    p.add_argument("--seed", type=int, default=None,
                   help="sampling seed (default: the canonical split's own; train: a fresh random one)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence (default: the split's; train: the task's training length)")
    p.add_argument("--out", type=output_path, required=True, help="file to write; .jsonl or .parquet")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists (without it, that is an error)")


@subcommand("train", "train a model on a flip-flop task and save a checkpoint")
def _train_options(p: argparse.ArgumentParser) -> None:
    from interp.training.recipes import DEFAULT_RECIPE, RECIPES
    from models.config import ATTENTION_IMPLS, INIT_SCHEMES, NORM_PLACEMENTS, PRESETS
    from models.mechanisms import built_in_names

    # the built-in names only, so that the help (and the reference made from it) is the same whatever is registered
    p.add_argument("--model", type=model_name, default=None, metavar="MODEL",
                   help=f"architecture: attention mechanism and position embedding (models/config.py): "
                        f"{', '.join(built_in_names())}, or a mechanism of your own (--mechanism, or an installed "
                        "package's glitchlens.mechanisms entry point); required, except with --resume, where the checkpoint "
                        "in --out records it and every other setting")
    p.add_argument("--preset", choices=list(PRESETS), default="tiny",
                   help="sizes (layers x heads, d_model): " + "; ".join(
                       f"{name} {size['n_layers']} x {size['n_heads']}, {size['d_model']}"
                       for name, size in PRESETS.items()))
    p.add_argument("--out", type=output_path, required=True, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (linear warm-up, then cosine decay)")
    p.add_argument("--recipe", choices=list(RECIPES), default=DEFAULT_RECIPE,
                   help="block, init, dropout and optimiser defaults (see interp/training/recipes.py; llama is the "
                        "Llama-style set-up of the options' own defaults); explicit flags win")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="AdamW weight decay (default: the recipe's; authors-notebook: 0.01, llama: 0.1)")
    p.add_argument("--decay-all-parameters", action=argparse.BooleanOptionalAction, default=None,
                   help="apply the weight decay to every parameter, biases and norm gains too, as the TRA "
                        "authors' notebook (default: the recipe's; authors-notebook: yes, llama: matrices only)")
    p.add_argument("--warmup", type=int, default=None,
                   help="linear warm-up steps (default: the recipe's; authors-notebook: 0, llama: 50)")
    p.add_argument("--grad-clip", type=_clip_norm, default=None,
                   help="max gradient norm, or 'none' for no clipping (default: the recipe's; authors-notebook: "
                        "none, llama: 1.0)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="training sequence length (default: the task's, 512 for flipflop); also n_ctx unless --n-ctx "
                        "(a task of its own: the longest of its splits)")
    p.add_argument("--loss", choices=["clean", "generative"], default="clean",
                   help="clean: only the bit after each r; generative: every next token")
    p.add_argument("--task", default="flipflop", metavar="NAME|MODULE:CLASS",
                   help="flipflop: predict reads; automaton: the flip-flop automaton's state at every position; "
                        + TASK_HELP.removeprefix("a registered task: flipflop, automaton, "))
    p.add_argument("--mixture", action="store_true", help="train on the long-tailed FFL(0.8/0.98/0.1) mixture")
    p.add_argument("--p-bottom", type=float, default=0.5, help="automaton task: probability of a no-op")
    p.add_argument("--regulariser", choices=["none", "entropy", "l2", "linf"], default="none",
                   help="attention sharpening (flip-flop paper Sec. 5.2): entropy, negative L2 or L-inf norm")
    p.add_argument("--reg-coef", type=float, default=0.0, help="weight of the regulariser in the loss")
    p.add_argument("--reg-start", type=int, default=0, help="step at which the regulariser starts")
    p.add_argument("--beta-schedule", choices=["learned", "ramp"], default="learned",
                   help="trela/TDA threshold scale beta: learned from beta_init, or ramp: fixed, 0 until "
                        "--beta-ramp-start, linear to --beta-final at --beta-ramp-end, then held (the TDA "
                        "authors' code keeps beta fixed at 1)")
    p.add_argument("--beta-final", type=float, default=1.0, help="ramp: the beta held after the ramp")
    p.add_argument("--beta-ramp-start", type=int, default=0, help="ramp: the step at which beta starts to rise")
    p.add_argument("--beta-ramp-end", type=int, default=0, help="ramp: the step at which beta reaches --beta-final")
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
    p.add_argument("--device", default="cpu",
                   help="torch device to train on, e.g. cuda (the model is initialised on the CPU, then moved)")
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
                   help="default auto: the Triton kernels on CUDA, kernels.tooling.rows on the CPU")
    p.add_argument("--norm-placement", choices=NORM_PLACEMENTS, default=None,
                   help="pre (default): x + f(norm(x)); stream: x = norm(x), then x + f(x) (the TRA authors' block)")
    p.add_argument("--init", choices=INIT_SCHEMES, default=None,
                   help="scaled (default): scaled normal; torch: nn.Linear's defaults (the TRA authors' code)")
    p.add_argument("--linear-bias", action=argparse.BooleanOptionalAction, default=None,
                   help="biases on the MLP and the attention output projection (default off)")


@subcommand("eval", "glitch rates and sequence accuracy of a checkpoint (automaton models: state accuracy on "
                    "fresh automaton sequences; --transformerlens: the light-switch test of a TransformerLens model)")
def _eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", nargs="?", help=checkpoint_help())
    p.add_argument("--transformerlens", default=None, metavar="NAME_OR_PATH", help=TRANSFORMERLENS_HELP)
    p.add_argument("--lengths", type=positive_int, nargs="+", default=None,
                   help="--task light-switch: sequence lengths in sentences (default: 16 32 64 128)")
    p.add_argument("--task", default=None, metavar="NAME|MODULE:CLASS", help=CHECKPOINT_TASK_HELP)
    p.add_argument("--splits", default=None, help="comma-separated canonical splits (default: iid,sparse,dense)")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="evaluate the sequences of a .jsonl/.parquet file instead of the canonical splits")
    p.add_argument("-n", type=positive_int, default=None,
                   help="first n sequences of each split, or of --data (default: all; automaton models: 1000)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="a batch holds at most this many sequences' worth of tokens (default: "
                        "interp.evaluate.BATCH_SIZE, the fastest measured on the CPU)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")


@subcommand("diagnose", "evaluate a checkpoint, measure its attention, write a self-contained report")
def _diagnose_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", nargs="?", help=checkpoint_help())
    p.add_argument("--transformerlens", default=None, metavar="NAME_OR_PATH", help=TRANSFORMERLENS_HELP)
    p.add_argument("--tokens", default=None, metavar="FILE",
                   help="--transformerlens: the .txt text or .jsonl token file whose sequences are measured")
    p.add_argument("--task", default=None, metavar="NAME|MODULE:CLASS", help=CHECKPOINT_TASK_HELP)
    p.add_argument("--out", type=output_path, required=True,
                   help="directory for report.html, browser.html, metrics.json/.csv, glitches.csv (and the PNGs "
                        "of --png)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in --out that glitchlens did not write (without it, such a file is an error; "
                        "its own earlier outputs are always replaced)")
    p.add_argument("-n", "--n", type=positive_int, default=None, help="first n sequences of each split (default: 32)")
    p.add_argument("--lengths", type=positive_int, nargs="+", default=None,
                   help="context lengths to measure attention at (default: 128 256 512 1024 2048)")
    p.add_argument("--cache-sequences", type=positive_int, default=None,
                   help="sequences run with hooks per length (default: 2)")
    p.add_argument("--device", default=None, help="torch device, e.g. cuda (default: cpu)")
    p.add_argument("--png", action="store_true",
                   help="a flip-flop checkpoint: also write the report's key plots as PNG files (error_by_dependency, "
                        "attention_final_layer, sparsity, survivors, sink_ratio), drawn again with matplotlib; "
                        "report.html shows every plot, interactive, either way (--transformerlens: its heatmaps are "
                        "PNG files always)")
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the summary table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")


@subcommand("explain", "name the components that carry the bit to the reads and the ones that corrupt it at "
                       "the glitches (direct logit attribution, activation and path patching); the patching "
                       "is the cost: one forward pass of --pairs sequences per head of every patched hook, per "
                       "stream position and per path, for each kind of pair "
                       "(docs/results/tools.md \"What explain costs\")")
def _explain_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=checkpoint_help())
    p.add_argument("--task", default=None, metavar="NAME|MODULE:CLASS", help=CHECKPOINT_TASK_HELP)
    p.add_argument("--split", default=None,
                   help="the canonical split whose glitches are explained (default: flip-flop's dense; another "
                        "task's first split out of distribution)")
    p.add_argument("-n", type=positive_int, default=100, help="first n sequences of the split")
    p.add_argument("--pairs", type=positive_int, default=16,
                   help="at most this many (clean, corrupt) pairs of each kind: correct reads with their write's bit "
                        "flipped, and glitches with the edit that the model reads right; each patching run is a "
                        "forward pass of this many sequences, so the time grows with it")
    p.add_argument("--out", type=output_path, required=True,
                   help="directory for report.md, explain.json, CSVs and PNGs")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in --out that glitchlens did not write (without it, such a file is an error; "
                        "its own earlier outputs are always replaced)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")


@subcommand("hunt", "search for flip-flop sequences the model gets wrong (an evolutionary search over "
                    "instruction and bit edits, longer sequences, denser distractors) against random sampling at "
                    "the canonical sparse and dense settings, at an equal budget")
def _hunt_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=checkpoint_help())
    p.add_argument("--task", default=None, metavar="NAME|MODULE:CLASS", help=CHECKPOINT_TASK_HELP)
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
    p.add_argument("--out", type=output_path, default=None, metavar="DIR",
                   help="write hunt.json and the failing sequences, one .jsonl per method and length, for "
                        "`glitchlens eval CKPT --data FILE`")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in --out that glitchlens did not write (without it, such a file is an error; "
                        "its own earlier outputs are always replaced)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--json", action="store_true", help="print hunt.json instead of the tables")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")


@subcommand("reproduce", "sweeps over models and seeds: the TRA paper's Table 1 (table1), or which training "
                         "recipe learns (recipes)")
def _reproduce_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["table1", "recipes", "app-a", "tda-threshold", "tda-threshold-long",
                                    "tda-threshold-4500", "sharpening", "mixture", "table1-budget", "lstm-r2",
                                    "app-a-extended", "r6-levers", "cope-tasks"],
                   help="which sweep (app-a: the TRA paper's App. A pair over seeds; tda-threshold: TDA at the paper's "
                        "beta = 1; sharpening: the flip-flop paper's attention-sharpening regularisers; mixture: "
                        "RoPE on a mixture of sparsities; table1-budget: the baselines at 3000 and 10,000 steps; "
                        "lstm-r2: the flip-flop paper's LSTM recipe over 20 seeds; "
                        "cope-tasks: CoPE, RoPE, APE, Shaw and REL on "
                        "CoPE's counting and selective copy, interp/studies/cope_tasks.py; interp/studies/registry.py)")
    p.add_argument("--scale", choices=["cpu", "learning", "paper"], default="cpu",
                   help="cpu: tiny models with 4 heads and the cpu-learning-authors recipe, 1000 steps at lr 1e-3, "
                        "batch 16, T = 512; learning: tiny models with 4 heads (recipe cpu-learning), 1000 steps at "
                        "T = 128 (docs/results/learning.md \"Learning on CPU\"); paper: the TRA paper's mini models, "
                        "25k steps at lr 1e-4, batch 64 (a GPU's work)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="table1, recipes: train every run for this many steps instead of the scale's (the cosine "
                        "schedule stretched to them, nothing else changed); give each budget an --out of its own")
    p.add_argument("--device", default="cpu",
                   help="table1, recipes: train and evaluate every run on this torch device, e.g. cuda (the --jobs "
                        "runs share it; the Triton kernels run there); each result.json names it")
    p.add_argument("--models", default=None, help="comma-separated models (default: the 12 of Table 1)")
    p.add_argument("--recipes", default="llama,authors",
                   help="recipes: comma-separated names from interp/training/recipes.py")
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds per model (and recipe)")
    p.add_argument("--jobs", type=positive_int, default=2,
                   help="processes at once on this machine, one torch thread each (a run, or with --batch-seeds a "
                        "configuration's seeds); with --ray local, Ray's CPUs")
    p.add_argument("--batch-seeds", default="auto", metavar="{auto,on,off}",
                   help="on: the seeds of each configuration train as one batched model, a process per "
                        "configuration (each run's directory and result.json as trained alone); off: a process per "
                        "run; auto: batched on CUDA, not on the CPU, where it is slower "
                        "(interp/studies/seed_groups.py)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the runs as tasks on a Ray cluster (the ray extra): auto, host:6379, "
                        "ray://host:10001, or local to start one here; --out must be on a filesystem every node "
                        "shares (docs/how-to/sweep-on-ray.md \"Sweeps on Ray\")")
    p.add_argument("--out", type=output_path, required=True, help="directory for the runs and the report")
    p.add_argument("--report-only", action="store_true",
                   help="table1, app-a: write the table from the runs that have finished, training nothing")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (it goes to stderr: the runs done, the time so far and an estimate of "
                        "what is left)")


@subcommand("campaign", "train a plan's runs of the studies on one device as fast as it goes: the seeds of a "
                        "configuration batched into one model, several configurations at once, within a time "
                        "budget (interp/studies/campaign.py; docs/how-to/run-on-a-gpu.md \"A campaign\")")
def _campaign_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help="the plan: a JSON file of entries naming the studies' runs, in the order to train "
                                "them (e.g. interp/studies/plans/h200.json)")
    p.add_argument("--out", type=output_path, required=True,
                   help="directory for campaign.jsonl (each group's steps per second) and results.tar (the "
                        "result.json files written); the runs go to their sweeps' directories")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--budget-s", type=positive_float, default=None,
                   help="end within this many seconds: training stops --reserve-s before it, every unfinished run "
                        "at a checkpoint (the same command resumes it); groups not started by then are cut")
    p.add_argument("--reserve-s", type=positive_float, default=60.0,
                   help="seconds of the budget kept for the last evaluations and results.tar")
    p.add_argument("--checkpoint-s", type=positive_float, default=120.0,
                   help="seconds between the checkpoints of a batched group")
    p.add_argument("--jobs", type=positive_int, default=1, help="groups training at once, a process each")
    p.add_argument("--estimate", action="store_true",
                   help="print what fits in --budget-s: each group's steps per second measured on --device or, "
                        "with --device cuda where there is none, read from the committed campaign logs "
                        "(runs/gpu/campaign-*.jsonl; nothing trained)")


@subcommand("pretrained", "list the shipped pretrained models, show one, or rebuild them from their recipes")
def _pretrained_options(p: argparse.ArgumentParser) -> None:
    from models.pretrained import PRETRAINED_DIR

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
    p.add_argument("--overwrite", action="store_true",
                   help="build: replace an entry already built in --root (the shipped ones included)")
    p.add_argument("--table1", action="store_true",
                   help="list: the GPU specimens' full-split accuracies beside the TRA paper's Table 1 (markdown)")
    p.add_argument("--quiet", action="store_true", help="build: no progress bars (they go to stderr)")


@subcommand("figures", "reproduce the papers' mechanistic figures on the pretrained models")
def _figures_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=output_path, required=True,
                   help="directory for the PNG/HTML/CSV files, captions.json and index.md")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in --out that glitchlens did not write (without it, such a file is an error; "
                        "its own earlier outputs are always replaced)")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="draw only these figures (names in interp.figures.FIGURE_NAMES, e.g. tra_vs_fot drift)")
    p.add_argument("--table1", default=None, metavar="CSV",
                   help="table1.csv of `glitchlens reproduce table1` (without it the table1 figure is skipped)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it goes to stderr)")


@subcommand("bench", "benchmarks that print ratios measured side by side")
def _bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["data", "models", "train", "seeds", "diagnose", "kernels", "tiles", "eval",
                                    "attribution", "threads", "demo"],
                   help="what to time (docs/results/benchmarks.md \"Benchmarks\")")
    p.add_argument("checkpoint", nargs="?", help="bench tiles: a trained checkpoint directory")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed runs of each measurement; the best counts (bench kernels: the median, after a warm-up)")
    p.add_argument("--out", type=output_path, default=None, metavar="CSV",
                   help="bench kernels: append the rows here, and skip the (kernel, T) pairs it already holds; "
                        "with --compile-only a folder for compile.csv and the binaries; bench attribution: a folder "
                        "for attribution.csv; bench threads: for threads.csv and startup.csv; bench demo: for "
                        "demo.csv; bench train: for train.csv; bench seeds: for seeds.csv")
    p.add_argument("--compile-only", action="store_true",
                   help="bench kernels: compile every kernel for --targets at every dtype, head dim and tile "
                        "configuration the dispatcher may choose (no GPU needed), and tabulate registers, spills "
                        "and shared memory")
    p.add_argument("--targets", default="sm_80,sm_90,gfx942",
                   help="bench kernels --compile-only: GPU targets, comma-separated (sm_80 A100, sm_90 H100, "
                        "gfx942 MI300)")
    p.add_argument("--defaults-only", action="store_true",
                   help="bench kernels --compile-only: only the tile configuration the dispatcher picks for each "
                        "dtype and head dim")
    p.add_argument("--skip-gain", action="store_true",
                   help="bench tiles: also time each layer's Triton kernel (TRA, trela, TDA) forward with and without "
                        "skip_zero_tiles on the checkpoint's own inputs (a GPU, or TRITON_INTERPRET=1)")
    p.add_argument("--cost-model", action="store_true",
                   help="bench kernels: print each kernel's predicted FLOPs, bytes and roofline time on H100 and "
                        "A100 beside FlashAttention-2's published throughput (predictions: nothing runs)")
    p.add_argument("--tile-configs", type=tile_configs, default=None, metavar="BMxBN-wW-sS,...",
                   help="bench kernels: time each kernel at these tile configurations (tiles, warps, stages; e.g. "
                        "64x64-w4-s3,128x64-w8-s2) beside the default and SDPA, one row each, and print the fastest "
                        "for the forward and for the backward")
    p.add_argument("--budget-s", type=float, default=float("inf"),
                   help="bench kernels: start no new (kernel, T) pair after this many seconds (resume with --out)")
    p.add_argument("--inputs", choices=["random", "trained", "both"], default="random",
                   help="bench kernels: random inputs, or each kernel's inputs from a trained specimen stretched to "
                        "each T (interp.bench.SPARSITY_SOURCES), or both; each row gives its zero-tile fraction")
    p.add_argument("--seq-lens", type=positive_int, nargs="+", default=None,
                   help="bench kernels: sequence lengths T (default: 512 ... 16384)")
    p.add_argument("--tokens", type=positive_int, default=16384,
                   help="bench kernels: tokens per batch (batch = tokens / T)")
    p.add_argument("--d-head", type=positive_int, default=None,
                   help="bench kernels: head dim (default 64; with --compile-only all of 16, 32, 64, 128)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=None,
                   help="bench kernels: element type (default bfloat16; with --compile-only all three; float32 on "
                        "the CPU only: SDPA's flash backend on CUDA needs half precision)")
    p.add_argument("--models", default=None, help="bench eval: pretrained models, comma-separated (default: all "
                                                  "flip-flop entries)")
    p.add_argument("-n", type=positive_int, default=1024, help="bench eval: first n sequences of the sparse split")
    p.add_argument("--no-baseline", action="store_true", help="bench eval: skip the previous evaluation loop")


@subcommand("check-mechanism", "check that an attention mechanism keeps the contract every tool relies on "
                               "(causality of outputs and gradients, hooks, determinism, gradients, half "
                               "precision, T = 0 and 1, longer inputs, fast paths) and print the measurements; "
                               "exit status 1 if a check fails")
def _check_mechanism_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("mechanism", metavar="MODULE:CLASS",
                   help="the class to check ([NAME=]MODULE:CLASS, imported and registered), or the name of a registered "
                        "mechanism or model")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda (which also runs Triton kernels)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


@subcommand("check-task", "check that a task keeps the contract every tool relies on (seeded determinism, "
                          "prefix-stable draws, splits, scored positions, answers consistent with the sequence); "
                          "one line per check; exit status 1 if a check fails")
def _check_task_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", metavar="NAME|MODULE:CLASS", help="a registered task, or the Task class to import and check")


@subcommand("claims", "the papers' claims tested: every claim's paper number, ours computed from the committed "
                      "runs, figures and specimen measurements, and the verdict by one rule (interp/claims)")
def _claims_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=["md", "csv", "json"], default="md", help="how to print the table")
    p.add_argument("--write-docs", action="store_true",
                   help="write every generated block of the docs between its markers: the table and its counts "
                        "(docs/results/claims.md, README.md), the tables of the sweeps, runs, hunts and benchmarks "
                        "(docs/results/, interp.claims.generated_blocks)")
    p.add_argument("--measure", nargs="*", metavar="NAME",
                   help="first recompute these specimen measurements into runs/claims/ (none named: all of them; "
                        "r1-checkpoints: the checkpoint study, a training run)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr while measuring")


def model_name(text: str) -> str:
    """argparse type of ``--model``: a model name, a plugin's found through the installed entry
    points only when it is not a built-in one (reading them costs ``--help`` a third of its start)."""
    from models.mechanisms import find_mechanism, unknown_model

    if not find_mechanism(text):
        raise argparse.ArgumentTypeError(unknown_model(text))
    return text


class VersionAction(argparse.Action):
    """``--version``: prints the installed version, read from the package metadata only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the installed version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"glitchlens {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("glitchlens")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"
