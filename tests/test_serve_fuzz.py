"""Fuzzing the reward server with hypothesis: 1,000 malformed bodies get no 5xx, and the
server then still answers correctly (issue 9's acceptance)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prmkit.serve.batcher import BatcherConfig
from test_serve import PROBLEMS, STEPS, close, http, serving, tiny_prm

EXAMPLES = 1000
PATHS = ["/v1/score", "/get_reward"]

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=16)
texts = st.text(max_size=40)
VALID = [{"problems": PROBLEMS[:1], "steps": STEPS[:1]},
         {"texts": ["Q?\n\na\n\nb"]},
         {"query": ["Q?\n\na\n\nb"], "prompts": ["Q?"], "labels": ["b"]}]


@st.composite
def mutated(draw):
    """A valid body with one field replaced, added or removed, or lengths that disagree."""
    body = dict(draw(st.sampled_from(VALID)))
    key = draw(st.sampled_from(sorted(body) + ["problems", "steps", "texts", "query",
                                               "prompts", "aggregates", "return_steps", "x"]))
    action = draw(st.sampled_from(["replace", "delete", "lengthen"]))
    if action == "delete":
        body.pop(key, None)
    elif action == "lengthen":
        body[key] = list(body.get(key) or []) + draw(st.lists(texts | st.lists(texts, max_size=3),
                                                              min_size=1, max_size=12))
    else:
        body[key] = draw(json_values)
    return json.dumps(body).encode()


def raw(value) -> bytes:
    return json.dumps(value).encode()


bodies = st.one_of(
    st.binary(max_size=120),                                        # not JSON at all
    json_values.map(raw),                                           # JSON of any shape
    st.fixed_dictionaries({"problems": json_values, "steps": json_values}).map(raw),
    st.fixed_dictionaries({"query": json_values}, optional={"prompts": json_values,
                                                            "labels": json_values}).map(raw),
    mutated(),
    st.sampled_from([raw(v) for v in VALID]).flatmap(                # cut short
        lambda b: st.integers(0, len(b) - 1).map(lambda k: b[:k])),
    st.lists(st.sampled_from([b"[", b"{", b'"a":', b"1", b","]), max_size=60).map(b"".join),
    st.sampled_from([b'{"problems":["\\ud800"],"steps":[["x"]]}',     # lone surrogate
                     b'{"query":["' + b"x" * 5000 + b'"]}',          # over the body limit
                     b'{"query":["q' + b"\\n\\ns" * 20 + b'"]}',     # too many steps
                     b'{"problems":["a"],"steps":[["x"]],"aggregates":["min","min"]}']),
)


def test_1000_malformed_bodies_get_no_5xx_and_the_server_keeps_serving():
    prm = tiny_prm()
    statuses: list[int] = []
    with serving(prm, batching=BatcherConfig(max_wait_ms=0), max_body_bytes=4096, max_steps=8,
                 max_solutions=8) as server, \
            http(server) as c:

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(body=bodies, path=st.sampled_from(PATHS))
        def one(body: bytes, path: str) -> None:
            r = c.post(path, content=body, headers={"content-type": "application/json"})
            statuses.append(r.status_code)
            assert r.status_code < 500, (path, body[:200], r.status_code, r.text[:300])
            if r.status_code >= 400:
                assert r.json()["error"]["message"]

        one()
        good = c.post("/v1/score", json={"problems": PROBLEMS, "steps": STEPS})
        assert good.status_code == 200
        assert close(good.json()["step_scores"], prm.score(PROBLEMS, STEPS))
    assert len(statuses) >= EXAMPLES
    assert sum(400 <= s < 500 for s in statuses) > EXAMPLES // 2   # most were refused
