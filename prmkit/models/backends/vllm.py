"""Score steps on GPUs through vLLM's offline pooling API (the optional extra ``prmkit[vllm]``).

The step format builds the inputs as for every other backend: vLLM receives the token ids of
``StepFormat.bind(tokenizer).encode(problem, steps)`` (a ``TokensPrompt``), never text, and
prmkit reads the scores at the read positions itself, so a step is read at exactly the token
where the HF backend and the trainer read it.

The engine is ``vllm.LLM(..., runner="pooling")``; scores come from ``llm.encode(...,
pooling_task="token_classify")`` with ``PoolingParams(use_activation=False)`` (raw logits), read
by the format's rule (``classes``: softmax, ``value``: sigmoid). Both all-token and step-tag
pooling outputs are accepted (:func:`rows_for_positions`). Steps past ``max_model_len`` come
back as None. Engine keyword arguments not named here pass through to ``vllm.LLM``.

Label-token formats (Math-Shepherd, RLHFlow) are refused unless ``convert_label_tokens=True``,
which has vLLM build a one-logit head ``W[positive] - W[negative]`` from the LM head; this is
exact only for an LM head without bias, soft-capping or scaling, and is untested on a GPU.
vLLM older than ``PoolingParams.use_activation`` (0.11.1) is refused at load time. The sources
this follows and what is verified: docs/scoring.md, "Design notes".
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.models.spec import ModelSpec, resolve_model
from prmkit.models.reading import DTYPES, ScoreStats, encode_or_warn, prefix_encodings
from prmkit.stepformat import BoundFormat, Encoded, StepFormat

log = logging.getLogger("prmkit")

POOLING_TASK = "token_classify"


# ---------------------------------------------------------------------------------------------
# pure parts: no vLLM needed


def build_prompts(encs: Sequence[Encoded]) -> list[dict[str, list[int]]]:
    """vLLM prompts (``TokensPrompt``, a TypedDict) holding exactly the step format's ids."""
    return [{"prompt_token_ids": [int(t) for t in e.input_ids]} for e in encs]


def as_rows(data: Any) -> np.ndarray:
    """A per-token output (a torch tensor, an array or nested lists) as a float64 2-D array,
    one row per returned token. A 1-D output is one logit per token (a one-label head)."""
    if hasattr(data, "detach"):  # torch; bfloat16 has no numpy type
        data = data.detach().float().cpu().numpy()
    arr = np.asarray(data, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise PrmkitError(f"vLLM returned a pooled output of shape {arr.shape}; expected one "
                          f"row per token (tokens x labels)")
    return arr


def rows_for_positions(n_rows: int, input_ids: Sequence[int],
                       read_positions: Sequence[int]) -> list[int]:
    """The row of the pooled output that holds each read position.

    All-token pooling returns one row per prompt token: the row is the position. Step pooling
    with a tag returns one row per occurrence of the tag token: the row is the read position's
    rank among those occurrences. Any other shape is an error.
    """
    n_ids = len(input_ids)
    if n_rows == n_ids:
        return list(read_positions)
    if not read_positions:
        return []
    tag = input_ids[read_positions[0]]
    if any(input_ids[p] != tag for p in read_positions):
        raise PrmkitError(f"vLLM returned {n_rows} rows for {n_ids} tokens (step pooling?), but "
                          f"the steps are not all read at the same tag token, so the rows cannot "
                          f"be matched to steps. Use all-token pooling (pooling_type ALL)")
    occurrences = [i for i, t in enumerate(input_ids) if t == tag]
    if len(occurrences) != n_rows:
        raise PrmkitError(f"vLLM returned {n_rows} rows for {n_ids} tokens, which is neither one "
                          f"row per token nor one per occurrence of the step tag (id {tag}, "
                          f"{len(occurrences)} occurrences). Is the model's step_tag_id the "
                          f"format's tag?")
    rank = {p: k for k, p in enumerate(occurrences)}
    return [rank[p] for p in read_positions]


def scores_from_logits(rows: np.ndarray, reading: str, positive_class: int = 1) -> list[float]:
    """Step scores in [0, 1] from raw logit rows, by the format's reading rule.

    ``classes``: softmax over each row, taking ``positive_class``. ``value`` and converted
    ``label-tokens`` (one logit, positive minus negative): sigmoid.
    """
    if rows.shape[0] == 0:
        return []
    width = rows.shape[1]
    if reading == "classes":
        if width < 2 or positive_class >= width:
            raise PrmkitError(f"the format reads class {positive_class} of a classification head, "
                              f"but vLLM returned {width} logit(s) per token")
        z = rows - rows.max(axis=1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        return [float(p) for p in probs[:, positive_class]]
    if reading in ("value", "label-tokens"):
        if width != 1:
            raise PrmkitError(f"the format reads one logit per step ({reading}), but vLLM "
                              f"returned {width} per token")
        return [float(s) for s in 1.0 / (1.0 + np.exp(-rows[:, 0]))]
    raise PrmkitError(f"unknown reading rule {reading!r}")


def read_scores(data: Any, enc: Encoded, reading: str, positive_class: int = 1) -> list[float]:
    """The scores of one solution's readable steps, from its vLLM pooled output."""
    rows = as_rows(data)
    index = rows_for_positions(rows.shape[0], enc.input_ids, enc.read_positions)
    return scores_from_logits(rows[index], reading, positive_class)


def label_token_overrides(bound: BoundFormat) -> dict[str, Any]:
    """``hf_overrides`` that make vLLM build a one-logit head ``W[positive] - W[negative]``
    from the LM head (its ``from_2_way_softmax`` conversion; vLLM looks the token strings up
    again with ``convert_tokens_to_ids``, so the ids round-trip exactly)."""
    tok = bound.tokenizer
    neg, pos = (tok.convert_ids_to_tokens(int(i)) for i in (bound.negative_id, bound.positive_id))
    return {"classifier_from_token": [neg, pos], "method": "from_2_way_softmax", "num_labels": 1}


def engine_args(path: str, bound: BoundFormat, *, dtype: str = "auto",
                tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                trust_remote_code: bool = False, max_model_len: int | None = None,
                convert_label_tokens: bool = False, **engine_kwargs: Any) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for this model and format."""
    fmt = bound.format
    kwargs: dict[str, Any] = dict(model=path, runner="pooling", dtype=dtype,
                                  tensor_parallel_size=tensor_parallel_size,
                                  gpu_memory_utilization=gpu_memory_utilization,
                                  trust_remote_code=trust_remote_code)
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if fmt.hazard:
        raise PrmkitError(f"format {fmt.name!r} is a hazard head, read at every token of the "
                          f"solution: score it with the HF backend (the vLLM path reads the "
                          f"step positions only)")
    if fmt.reading == "label-tokens":
        if not convert_label_tokens:
            raise PrmkitError(
                f"format {fmt.name!r} reads label tokens of a causal LM, which vLLM's pooling API "
                f"does not return. Score it with the HF backend, or pass "
                f"convert_label_tokens=True to let vLLM build a one-logit head from the two "
                f"label rows of the LM head (exact for LM heads without bias or logit scaling; "
                f"not yet verified on a GPU, see prmkit/models/backends/vllm.py)")
        kwargs["convert"] = "classify"
        kwargs["hf_overrides"] = {**engine_kwargs.pop("hf_overrides", {}),
                                  **label_token_overrides(bound)}
    kwargs.update(engine_kwargs)
    return kwargs


def pooling_params_factory(vllm: Any) -> Callable[[], Any]:
    """A maker of ``PoolingParams(use_activation=False)`` (raw logits). Older vLLM, whose
    flags were ``softmax``/``activation``, is refused: its outputs cannot be read safely."""
    cls = vllm.PoolingParams
    try:
        cls(use_activation=False)
    except TypeError:
        version = getattr(vllm, "__version__", "?")
        raise PrmkitError(f"vLLM {version} is too old for prmkit's vLLM backend: it needs "
                          f"PoolingParams(use_activation=...) and pooling_task='token_classify' "
                          f"(the runner/pooling-task API of vLLM 0.11.1 and later)") from None
    return lambda: cls(use_activation=False)


def _engine_max_len(llm: Any) -> int | None:
    for path in (("llm_engine", "model_config", "max_model_len"), ("model_config", "max_model_len"),
                 ("llm_engine", "vllm_config", "model_config", "max_model_len")):
        obj = llm
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, int) and obj > 0:
            return obj
    return None


# ---------------------------------------------------------------------------------------------
# the backend


class VLLMPRM:
    """A PRM scored by vLLM. ``score`` is the protocol method.

    ``VLLMPRM(model, step_format)`` loads the engine; :meth:`from_engine` wraps an engine that
    already exists (or a fake one, in tests).
    """

    def __init__(self, model: str | ModelSpec, step_format: str | StepFormat | None = None, *,
                 dtype: str = "auto", tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.9, trust_remote_code: bool = False,
                 max_model_len: int | None = None, convert_label_tokens: bool = False,
                 **engine_kwargs: Any):
        if dtype not in DTYPES:
            raise PrmkitError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if tensor_parallel_size < 1:
            raise PrmkitError(f"tensor_parallel_size must be positive, got {tensor_parallel_size}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise PrmkitError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if max_model_len is not None and max_model_len < 2:
            raise PrmkitError(f"max_model_len must be at least 2, got {max_model_len}")
        vllm = _import_vllm()   # before the model's folder or download is looked for
        spec = model if isinstance(model, ModelSpec) else resolve_model(
            model, "vllm", step_format, trust_remote_code=trust_remote_code)
        path, fmt = spec.path, spec.step_format
        assert fmt is not None, "resolve_model chooses the format of a vLLM PRM"
        make_params = pooling_params_factory(vllm)  # refuse an old vLLM before loading weights
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PrmkitError(f"model {spec.name!r}: cannot load its tokenizer: {first}") from None
        bound = fmt.bind(tokenizer)
        kwargs = engine_args(path, bound, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                             gpu_memory_utilization=gpu_memory_utilization,
                             trust_remote_code=trust_remote_code, max_model_len=max_model_len,
                             convert_label_tokens=convert_label_tokens, **engine_kwargs)
        if fmt.reading == "label-tokens":
            _check_plain_lm_head(path, trust_remote_code)
        llm = vllm.LLM(**kwargs)
        self._setup(llm, bound, max_model_len or _engine_max_len(llm), make_params)

    @classmethod
    def from_engine(cls, llm: Any, bound: BoundFormat, max_length: int | None = None,
                    make_params: Callable[[], Any] | None = None) -> "VLLMPRM":
        """Wrap an existing ``vllm.LLM`` (pooling runner) and a bound step format."""
        self = cls.__new__(cls)
        if make_params is None:
            make_params = pooling_params_factory(_import_vllm())
        self._setup(llm, bound, max_length, make_params)
        return self

    def _setup(self, llm: Any, bound: BoundFormat, max_length: int | None,
               make_params: Callable[[], Any]) -> None:
        self.llm = llm
        self.bound = bound
        self.format = bound.format
        self.make_params = make_params
        self.stats = ScoreStats()
        if max_length is None:
            limit = getattr(bound.tokenizer, "model_max_length", None)
            max_length = int(limit) if limit and limit < 10**7 else 4096
            log.warning("vLLM backend: model length unknown, cutting solutions at %d tokens",
                        max_length)
        self.max_length = max_length

    # -- the protocol -----------------------------------------------------------------------
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """One score per step; every solution read in one pass (vLLM batches them)."""
        if len(problems) != len(steps):
            raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
        encs = [self.encode(p, s) for p, s in zip(problems, steps)]
        return self._run(encs)

    def score_per_prefix(self, problems: Sequence[str],
                         steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """The slow reference: every prefix its own prompt, only its last step read."""
        where, encs = prefix_encodings(self.bound, problems, steps, self.max_length)
        out: list[list[float | None]] = [[None] * len(s) for s in steps]
        for (i, k), scores in zip(where, self._run(encs)):
            out[i][k] = scores[0]
        return out

    def encode(self, problem: str, steps: Sequence[str]) -> Encoded:
        return encode_or_warn(self.bound, problem, steps, self.max_length, self.stats)

    def _run(self, encs: Sequence[Encoded]) -> list[list[float | None]]:
        """One ``llm.encode`` call over every solution that has a readable step."""
        out: list[list[float | None]] = [[None] * e.n_steps for e in encs]
        todo = [i for i, e in enumerate(encs) if e.read_positions]
        if not todo:
            return out
        prompts = build_prompts([encs[i] for i in todo])
        results = self.llm.encode(prompts, pooling_params=self.make_params(),
                                  pooling_task=POOLING_TASK, use_tqdm=False)
        if len(results) != len(todo):
            raise RuntimeError(f"vLLM returned {len(results)} outputs for {len(todo)} prompts")
        self.stats.forwards += 1
        n_tokens = sum(len(p["prompt_token_ids"]) for p in prompts)
        self.stats.real_tokens += n_tokens
        self.stats.computed_tokens += n_tokens  # vLLM packs sequences: no padding
        for i, result in zip(todo, results):
            scores = read_scores(result.outputs.data, encs[i], self.format.reading,
                                 self.format.positive_class)
            out[i][:len(scores)] = scores
        return out


# ---------------------------------------------------------------------------------------------
# loading helpers


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise PrmkitError("the vLLM backend needs vLLM: pip install 'prmkit[vllm]' "
                          "(a CUDA machine)") from None
    return vllm


def _check_plain_lm_head(path: str, trust_remote_code: bool) -> None:
    """The label-token conversion is exact only for a plain linear LM head."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return  # vLLM reports what it cannot load
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(text, attr, None):
            raise PrmkitError(f"model {path!r} scales its logits ({attr}), so a head built from "
                              f"LM-head rows would not equal its label-token scores: use the HF "
                              f"backend")
