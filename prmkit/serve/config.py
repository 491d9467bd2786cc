"""The reward server's settings: where it listens, who may call it, and its limits.

Kept apart from :mod:`prmkit.serve.app` so that the command line (and its ``--help``) does not
import FastAPI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prmkit.aggregate import AGGREGATES
from prmkit.errors import PrmkitError
from prmkit.models.backends.remote import TOKEN_ALIAS, TOKEN_ENV, env_token
from prmkit.models.backends.remote import is_loopback as is_loopback_address
from prmkit.serve.batcher import BatcherConfig
from prmkit.steps import RULES



def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for anything
    else, including ``0.0.0.0`` and host names (they may resolve to a public interface)."""
    return is_loopback_address(host.strip().strip("[]").lower())


@dataclass
class ServeConfig:
    """Settings of ``prmkit serve`` (see :mod:`prmkit.serve.app` for what each limit answers)."""

    host: str = field(default="127.0.0.1", metadata={
        "help": "address to listen on; anything but loopback (127.0.0.1, ::1, localhost) "
                "needs --token"})
    port: int = field(default=8000, metadata={"help": "port to listen on"})
    token: str | None = field(default=None, metadata={
        "help": f"bearer token every request must carry (Authorization: Bearer TOKEN); default "
                f"${TOKEN_ENV} (or its alias ${TOKEN_ALIAS}), the name clients read too. Required "
                f"on a non-loopback address, enforced whenever set."})
    batching: BatcherConfig = field(default_factory=BatcherConfig)
    max_body_bytes: int = field(default=16 * 2**20, metadata={
        "help": "largest request body in bytes (413 above)"})
    max_header_bytes: int = field(default=64 * 2**10, metadata={
        "help": "largest request line and headers in bytes (431 above)"})
    max_solutions: int = field(default=1024, metadata={
        "help": "most solutions in one request (413 above; at most --max-queue)"})
    max_steps: int = field(default=128, metadata={
        "help": "most steps in one solution (422 above); also the width of the per-step rows "
                "in /get_reward's step_scores_padded"})
    max_tokens: int | None = field(default=None, metadata={
        "help": "most tokens in one encoded solution (422 above); default and ceiling: the "
                "model's maximum length, so no step is ever cut off"})
    step_rule: str = field(default="auto", metadata={
        "help": "how full texts (/v1/score 'texts', /get_reward queries) are split into steps",
        "choices": RULES})
    reward: str = field(default="min", metadata={
        "help": "how /get_reward turns step scores into one reward per response (min: "
                "Math-Shepherd's rule)", "choices": tuple(AGGREGATES)})
    share_prefix: bool = field(default=True, metadata={
        "help": "score the solutions of one problem in a micro-batch on their shared prefixes "
                "(the problem and the steps several begin with read once, the whole tree in "
                "one forward pass where the model's attention takes a mask; the same scores, "
                "to float32 rounding; HF models only); micro-batches then keep a problem's "
                "solutions together, one that begins with them may pass the 2 s aim up to "
                "--token-budget"})
    graceful_timeout: float = field(default=60.0, metadata={
        "help": "on shutdown (Ctrl-C, SIGTERM), seconds to let requests in flight finish"})

    def __post_init__(self) -> None:
        if self.token is None:
            self.token = env_token()
        if self.token is not None and (not self.token.strip() or any(c.isspace() for c in self.token)):
            raise PrmkitError("the token must be non-empty and hold no whitespace")
        if not is_loopback(self.host) and not self.token:
            raise PrmkitError(f"listening on {self.host} (not loopback) needs a token: pass "
                              f"--token or set ${TOKEN_ENV}; every request must then carry "
                              f"'Authorization: Bearer TOKEN'")
        if not 0 <= self.port < 65536:
            raise PrmkitError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_body_bytes", "max_header_bytes", "max_solutions", "max_steps"):
            if getattr(self, name) < 1:
                raise PrmkitError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.max_tokens is not None and self.max_tokens < 2:
            raise PrmkitError(f"max-tokens must be at least 2, got {self.max_tokens}")
        if self.max_solutions > self.batching.max_queue:
            raise PrmkitError(f"max-solutions ({self.max_solutions}) cannot exceed max-queue "
                              f"({self.batching.max_queue}): such a request could never be queued")
        if self.step_rule not in RULES:
            raise PrmkitError(f"unknown step rule {self.step_rule!r}; known: {', '.join(RULES)}")
        if self.reward not in AGGREGATES:
            raise PrmkitError(f"unknown reward rule {self.reward!r}; known: {', '.join(AGGREGATES)}")
        if self.graceful_timeout < 0:
            raise PrmkitError(f"graceful timeout must be 0 or more, got {self.graceful_timeout}")
