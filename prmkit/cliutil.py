"""What every ``prmkit`` subcommand's parser shares: the help formatter, the records epilog,
the dtype option, and options generated from a typed dataclass config.

A config field becomes ``--field-name`` with the field's default and its ``metadata["help"]``; a
bool field becomes a flag (``--name`` when it defaults to False, ``--no-name`` when True); a field
whose type is itself a dataclass (a nested config) is flattened: its fields become options of
their own, in an argument group titled by ``metadata["group"]``, and :func:`config_from_args`
builds the nested config back. A field with ``metadata={"cli": False}`` is not an option; one
with ``metadata={"identity": False}`` is an option outside a resume's identity (prmkit.resume).
It also holds the checks every command gets before it runs: an output path that is one of the
inputs is refused, and an empty input file is named. ARCHITECTURE.md, "Layers": this module
imports only the errors, prmkit.resume's markers and prmkit.models.reading's dtypes and
HFConfig at its top (the options of scaling out, inside their functions), so every CLI module
may import it.
"""

from __future__ import annotations

import argparse
import re
import dataclasses
import os
import types
import typing
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models.reading import DTYPES, HFConfig
from prmkit.resume import in_identity, outside_identity

EPILOG_RECORDS = ("Records are JSONL, one object per line, with the fields id, problem, steps, "
                  "labels, first_error, answer, reference, is_correct, group, step_scores, meta "
                  "(see docs/records.md). An input of records may also be a datasets folder "
                  "(save_to_disk), an Arrow or Parquet file, or hf:NAME[:CONFIG][:SPLIT] "
                  "(datasets.load_dataset), in any known layout, recognised by its columns: "
                  "prmkit records, Math-Shepherd, PRM800K, ProcessBench, PRMBench, TRL stepwise.")
AGGREGATE_CHOICES = ["prod", "min", "last", "mean", "geomean"]


# reStructuredText roles and literals in docstrings that serve as --help descriptions
_ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]*)``")


# Markdown bold, a Python keyword argument where the user passes a flag, and a module path
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_KWARG = re.compile(r"\b([a-z][a-z_]*)=\"([^\"]*)\"")
_MODULE = r"prmkit(?:\.\s*[A-Za-z_]\w*)+(?:\(\))?"
_MODULES_ALONE = re.compile(rf"\s*\((?:see )?{_MODULE}(?:(?:,\s*|\s+and\s+){_MODULE})*\)")
_MODULE_FIRST = re.compile(rf"(?<=\()(?:see )?{_MODULE},\s*")
_MODULE_LAST = re.compile(rf";\s*(?:see )?{_MODULE}(?=\))")


def plain(text: str) -> str:
    """``text`` as a terminal user reads it: reStructuredText roles and literals become their
    plain words, Markdown bold its words, ``name="value"`` the flag ``--name value``, and a
    reference to a module in parentheses (which a user cannot act on) is left out."""
    text = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))
    text = _BOLD.sub(r"\1", text)
    text = _KWARG.sub(lambda m: f"--{m.group(1).replace('_', '-')} {m.group(2)}", text)
    text = _MODULES_ALONE.sub("", text)
    return _MODULE_LAST.sub("", _MODULE_FIRST.sub("", text))


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written (with their line breaks, without markup), and each option's
    default shown where it says something: not for a flag, not None, not twice."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain(text), width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = plain(action.help or "")
        if (action.default is None or isinstance(action.default, bool)
                or "default" in help_text.lower() or action.default is argparse.SUPPRESS):
            return help_text
        return help_text + " (default: %(default)s)"


def add_parser(sub: Any, name: str, help: str, description: str | None,
               epilog: str | None = None) -> argparse.ArgumentParser:
    """A subcommand parser with prmkit's formatter."""
    return sub.add_parser(name, help=help, description=description, epilog=epilog,
                          formatter_class=Formatter)


def add_dtype_option(p: Any, flag: str = "--dtype",
                     help: str = "auto = bfloat16 where native, else float32",
                     choices: tuple[str, ...] = DTYPES) -> None:
    """The weights' dtype (default auto) for a job that loads a model."""
    p.add_argument(flag, default="auto", choices=list(choices), help=help)


FORMAT_HELP = ("step format preset or prmkit_format.json path; default: the format saved in the "
               "model folder. With --backend generative, the verifier's template: thinkprm, "
               "genprm or plain (the default)")


def add_model_options(p: Any, model_help: str, required: bool = False) -> None:
    """What names a model, for every command that opens one the way ``prmkit score`` does
    (:func:`prmkit.models.spec.resolve_model` reads them): --model, --format and
    --trust-remote-code."""
    p.add_argument("--model", required=required, default=None, help=model_help)
    p.add_argument("--format", default=None, help=FORMAT_HELP)
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow the model folder's own Python code (off by default)")


def add_model_run_options(p: Any, dtype_help: str, max_length_help: str) -> None:
    """How a job that scores runs its HF model: --dtype, --device, --token-budget, --max-length
    (the fields of :class:`prmkit.models.reading.HFConfig`)."""
    add_dtype_option(p, help=dtype_help)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--token-budget", type=int, default=HFConfig.token_budget,
                   help="maximum padded tokens per forward pass")
    p.add_argument("--max-length", type=int, default=None, help=max_length_help)


def add_scale_options(p: Any) -> None:
    """``--backend`` and the Ray options (:class:`prmkit.distributed.RayConfig`) of every
    command that scores with a PRM."""
    from prmkit.distributed import RayConfig
    from prmkit.scoring import BACKENDS

    p.add_argument("--backend", default="hf", choices=list(BACKENDS),
                   help="hf: transformers in this process (or on each Ray worker); vllm: vLLM's "
                        "pooling API on a CUDA GPU (pip install 'prmkit[vllm]'), for a PRM "
                        "folder or hub id (tested only against a stand-in engine: "
                        "docs/scaling.md); generative: an instruct model that writes a "
                        "verification and a verdict per step (--format thinkprm, genprm or "
                        "plain, the default; docs/generative-prms.md)")
    add_config_options(p, RayConfig, mark_optional=False)
    from prmkit.verify.prm import GenConfig

    add_config_options(p.add_argument_group("generative PRM (--backend generative)"), GenConfig)


def option_type(tp: Any) -> tuple[Any, bool]:
    """(python type, optional) of a dataclass field annotation such as ``int | None``."""
    args = typing.get_args(tp)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return inner[0], True
    return tp, False


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def add_config_options(parser: Any, cls: Any, skip: tuple[str, ...] = (),
                       mark_optional: bool = True, defaults: Any = None) -> None:
    """Add an option for every field of the dataclass ``cls`` (nested configs flattened, in an
    argument group when the field's metadata names one); ``metadata["choices"]`` limits the
    values; ``mark_optional`` adds "(optional)" to the help of a field that may be None. A field
    marked ``metadata={"identity": False}`` gives an option outside a resume's identity
    (:mod:`prmkit.resume`). A nested config's defaults are those of the instance its field's
    ``default_factory`` makes (``defaults``), so one command may default a shared config
    otherwise."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.metadata.get("cli", True):
            continue
        tp, optional = option_type(hints[f.name])
        if _is_config(tp):
            group = parser.add_argument_group(f.metadata["group"]) if "group" in f.metadata \
                else parser
            inner = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            add_config_options(group, tp, skip, mark_optional, inner)
            continue
        default = getattr(defaults, f.name) if defaults is not None else f.default
        action = _add_field(parser, f, tp, optional and mark_optional, default)
        if not in_identity(f):
            outside_identity(action)


def _add_field(parser: Any, f: dataclasses.Field, tp: Any, mark_optional: bool,
               default: Any) -> Any:
    """The option of one config field (a flag for a bool), ``default`` its default; returns its
    argparse action."""
    flag = "--" + f.name.replace("_", "-")
    required = default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    help_text = f.metadata.get("help", "")
    if tp is bool:
        if default is None:   # unset: the config decides; --X or --no-X sets it
            return parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                       default=None, help=help_text)
        if default:
            return parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name,
                                       action="store_false",
                                       help=f"turn off what is on by default: {help_text}")
        return parser.add_argument(flag, dest=f.name, action="store_true", help=help_text)
    kwargs: dict[str, Any] = {k: f.metadata[k] for k in ("choices", "metavar") if k in f.metadata}
    return parser.add_argument(flag, dest=f.name, type=tp, required=required,
                               default=None if required else default,
                               help=help_text + (" (optional)" if mark_optional else ""), **kwargs)


def config_from_args(cls: Any, args: argparse.Namespace, **extra: Any) -> Any:
    """The config ``cls`` from the options :func:`add_config_options` added (nested configs
    built from their own options); ``extra`` gives fields that are not options."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    given = vars(args)
    for f in dataclasses.fields(cls):
        if f.name in extra:
            continue
        tp, _ = option_type(hints[f.name])
        if _is_config(tp) and f.metadata.get("cli", True):
            values[f.name] = config_from_args(tp, args)
        elif f.name in given:
            values[f.name] = given[f.name]
    return cls(**values, **extra)


# ---------------------------------------------------------------------------------------------
# checks every command gets before it starts (prmkit/cli.py's main calls them)

# options that name what a command reads, and those that name what it writes
INPUT_OPTIONS = ("input", "data", "eval_data", "mc", "judge", "gold", "labels", "predictions",
                 "heuristic_train", "policy", "prm", "model", "base")
OUTPUT_OPTIONS = ("output", "save_scores", "plot")


def _flag(dest: str) -> str:
    return "LABELS" if dest == "labels" else "--" + dest.replace("_", "-")


def _paths(value: Any) -> list[str]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, str) and v and v != "-"]


def check_output_is_not_input(args: argparse.Namespace) -> None:
    """Refuse (exit 2) an output path that is one of the command's inputs: writing it would
    destroy the input (a records file replaced by JSON or HTML, a folder made over a file)."""
    given = vars(args)
    inputs = [(d, p) for d in INPUT_OPTIONS for p in _paths(given.get(d)) if os.path.exists(p)]
    for out_dest in OUTPUT_OPTIONS:
        for out in _paths(given.get(out_dest)):
            if not os.path.exists(out):
                continue
            for in_dest, path in inputs:
                if os.path.samefile(out, path):
                    raise PrmkitError(
                        f"{_flag(out_dest)} {out} is also the input {_flag(in_dest)}: writing "
                        f"it would destroy the input; choose another output path")


RECORD_INPUTS = ("input", "data", "eval_data", "mc", "judge", "gold", "labels")


def check_inputs_not_empty(args: argparse.Namespace) -> None:
    """Refuse (exit 2) an input file with no record, naming it, for every command (a missing
    file or a folder is left to the reader, which names it too)."""
    given = vars(args)
    for dest in RECORD_INPUTS:
        for path in _paths(given.get(dest)):
            if os.path.isfile(path) and _is_blank(path):
                raise PrmkitError(f"{path}: no records (the {_flag(dest)} file is empty)")


def _is_blank(path: str) -> bool:
    with open(path, "rb") as f:
        return not any(line.strip().removeprefix(b"\xef\xbb\xbf").strip() for line in f)
