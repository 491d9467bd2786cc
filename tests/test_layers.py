"""The layer order of ARCHITECTURE.md, from a declared table: a module imports only modules of
its own layer or of the layers below it (imports inside functions included). The jobs are
ordered too: the lab world sits below generation's jobs, scoring below evaluation, and the lab's
experiments on top."""

from test_import_graph import graph

# (layer, module prefixes), bottom first; the first prefix that matches places a module
LAYERS = [
    ("foundation", ["prmkit.errors", "prmkit.tables", "prmkit.records", "prmkit.resume",
                    "prmkit.progress",
                    "prmkit.steps", "prmkit.answers", "prmkit.aggregate", "prmkit.stepformat",
                    "prmkit.wholetext", "prmkit.calculator", "prmkit.shareddata",
                    "prmkit.formats"]),
    ("models: what an architecture is, where models come from",
     ["prmkit.models.base", "prmkit.models.architectures", "prmkit.models.body",
      "prmkit.models.pypi", "prmkit.models.names"]),
    ("models: reading", ["prmkit.models.reading", "prmkit.models.surprisal",
                         "prmkit.models.weights", "prmkit.models.folder", "prmkit.models.spec"]),
    ("models: backends", ["prmkit.models.backends"]),
    ("models: sharing", ["prmkit.models.sharing"]),
    ("models: opening and export", ["prmkit.models.load", "prmkit.models.export",
                                    "prmkit.models"]),
    ("generation's base: the Generator protocol, prompts, the scripted generator",
     ["prmkit.generate.base", "prmkit.generate.fake", "prmkit.generate.prompts"]),
    ("the lab world: problems, the lab policy, the oracle", ["prmkit.world"]),
    ("jobs: generating, selecting, spreading work",
     ["prmkit.distributed", "prmkit.select", "prmkit.generate"]),
    ("jobs: verifying and scoring", ["prmkit.verify", "prmkit.scoring"]),
    ("jobs: evaluating", ["prmkit.evaluate", "prmkit.realdata", "prmkit.report"]),
    ("jobs: searching, serving, labelling, training",
     ["prmkit.search", "prmkit.serve", "prmkit.label", "prmkit.train"]),
    ("jobs: reinforcement learning", ["prmkit.rl"]),
    ("the lab's experiments", ["prmkit.lab"]),
    ("command line", ["prmkit.cliutil", "prmkit.cli", "prmkit"]),
]


def layer_of(module: str) -> int:
    if module.endswith(".cli"):
        return len(LAYERS) - 1
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
                if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module} is in no layer of the table"
    return best[1]


def test_every_module_has_a_layer():
    edges, _ = graph()
    for module in edges:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own():
    edges, _ = graph()
    upward = sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                    for a, targets in edges.items() for b in targets
                    if layer_of(b) > layer_of(a))
    assert upward == []


def test_models_never_import_jobs():
    edges, _ = graph()
    jobs = [i for i, (name, _) in enumerate(LAYERS) if name.startswith("generation's base")][0]
    assert not [(a, b) for a, ts in edges.items() for b in ts
                if a.startswith("prmkit.models") and layer_of(b) >= jobs]
