"""Every command-line default equals the default of the dataclass config field it sets (in the
spirit of torchtune's test over every config): a default is written once, in the config."""

import argparse
import dataclasses
import typing

import pytest

from prmkit.cli import build_parser


def _subparser(parser: argparse.ArgumentParser, path: str) -> argparse.ArgumentParser:
    for name in path.split():
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _fields(cls, defaults=None):
    """(name, default) of every field of ``cls``, nested configs flattened; a nested config's
    defaults are those of the instance its field's default_factory makes (``defaults``), as
    prmkit.cliutil documents."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            inner = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            yield from _fields(tp, inner)
        elif defaults is not None:
            yield f.name, getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            yield f.name, f.default
        elif f.default_factory is not dataclasses.MISSING:
            yield f.name, f.default_factory()


def _configs():
    from prmkit.formats import ConvertOptions
    from prmkit.lab.activelearning.run import ActiveLearningConfig
    from prmkit.lab.traceerror.run import TraceErrorConfig
    from prmkit.generate.run import GenerateConfig
    from prmkit.lab.computeoptimal.run import ComputeOptimalConfig
    from prmkit.models.reading import HFConfig
    from prmkit.rl.grpo import RLConfig
    from prmkit.search.base import SearchConfig
    from prmkit.search.beam import BeamConfig
    from prmkit.search.mcts import MCTSConfig
    from prmkit.serve.config import ServeConfig
    from prmkit.train.implicit import ImplicitTrainConfig
    from prmkit.train.orm import ORMTrainConfig
    from prmkit.train.prm import PRMTrainConfig

    # (command, config, options whose command-line form differs from the field's, by field)
    return [
        ("train prm", PRMTrainConfig, {}), ("train orm", ORMTrainConfig, {}),
        ("train implicit-prm", ImplicitTrainConfig, {}), ("rl", RLConfig, {}),
        ("search", SearchConfig, {}), ("search", BeamConfig, {}), ("search", MCTSConfig, {}),
        ("serve", ServeConfig, {}), ("generate", GenerateConfig, {"chunk": None}),
        ("lab trace-error", TraceErrorConfig, {}),
        ("lab active-learning", ActiveLearningConfig, {}),
        ("score", HFConfig, {}), ("eval processbench", HFConfig, {}),
        ("eval prmbench", HFConfig, {}), ("eval bestofn", HFConfig, {}),
        ("lab compute-optimal", ComputeOptimalConfig, {}),
        # convert writes the numbers as words: 1 -> "1", None -> "null"
        ("convert", ConvertOptions, {"prm800k_neutral": "1", "prmbench_later_steps": "null"}),
    ]


@pytest.mark.parametrize("command, cls, differs", _configs(),
                         ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", ""))
def test_every_cli_default_is_the_config_default(command, cls, differs):
    parser = _subparser(build_parser(), command)
    by_dest = {a.dest: a for a in parser._actions}
    checked = 0
    for name, default in _fields(cls):
        action = by_dest.get(name)
        if action is None:
            continue
        checked += 1
        assert action.default == differs.get(name, default), f"{command} --{name}"
    assert checked, f"{command}: no option of {cls.__name__}"
