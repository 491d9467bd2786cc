"""The lab world's one config, composed into the experiments' configs: the options it gives each
command, each command's own defaults, and the flat settings a run stores."""

from prmkit.cli import build_parser
from prmkit.lab.activelearning.run import ActiveLearningConfig
from prmkit.lab.demo.run import DemoConfig, config_from
from prmkit.lab.stages import settings_of
from prmkit.lab.traceerror.run import TraceErrorConfig
from prmkit.world.config import TEST_OFFSET, WorldConfig
from prmkit.world.problems import LabConfig, make_problems


def _parse(*argv):
    return build_parser().parse_args(list(argv))


def test_each_experiment_keeps_its_own_world_defaults():
    assert (ActiveLearningConfig().world.slip, ActiveLearningConfig().world.confuse) == (0.05, 0.3)
    assert (DemoConfig().world.slip, TraceErrorConfig().world.confuse) == (0.1, 0.6)


def test_the_flattened_options_build_the_world_back():
    from prmkit.cliutil import config_from_args

    args = _parse("lab", "active-learning", "--seed", "7", "--slip", "0.2", "--max-steps", "4")
    c = config_from_args(ActiveLearningConfig, args)
    assert (c.world.seed, c.world.slip, c.world.confuse, c.world.max_steps) == (7, 0.2, 0.3, 4)
    d = config_from(_parse("demo", "--seed", "3", "--confuse", "0.5", "--n", "6"))
    assert (d.world.seed, d.world.confuse, d.world.slip, d.split.n) == (3, 0.5, 0.1, 6)


def test_a_run_stores_its_settings_flat_as_the_command_line_has_them():
    s = settings_of(TraceErrorConfig(world=WorldConfig(seed=5), recover=0.2))
    assert s["seed"] == 5 and s["recover"] == 0.2 and s["n"] == 8
    assert "world" not in s and "split" not in s


def test_the_test_problems_come_from_their_own_seed():
    w = WorldConfig(seed=3, min_steps=2, max_steps=3)
    test = w.problems(4, TEST_OFFSET)
    assert [r.problem for r in test] == [
        r.problem for r in make_problems(LabConfig(n=4, seed=1003, min_steps=2, max_steps=3))]
    assert not {r.problem for r in test} & {r.problem for r in w.problems(4)}
    assert w.policy == "lab:0.1:0.6"
