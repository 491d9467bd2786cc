"""Format converters: hand-made inputs for every format (read, write, round trips, label rules,
error messages), then the real files in ../shared/data when they are there."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from prmkit import formats
from prmkit.errors import PrmkitError, RecordError
from prmkit.formats import FORMAT_HELP, FORMAT_NAMES, ConvertOptions
from prmkit.records import Record
from prmkit.shareddata import shared_data_dir

DATA = Path(shared_data_dir())
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"no shared data at {DATA}")


def write_lines(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def read_all(fmt: str, path, **options) -> list[Record]:
    return list(formats.read(fmt, str(path), ConvertOptions(**options)))


def jsonl(path) -> list:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def rec(id="r1", steps=("a", "b", "c"), labels=None, **kw) -> Record:
    return Record(id=id, problem="What is 1+1?", steps=list(steps), labels=labels, **kw)


# ---------------------------------------------------------------------------------------------
# the dispatcher and the options


def test_names_and_help():
    assert FORMAT_NAMES == ["prmkit", "trl", "math-shepherd", "prm800k", "processbench",
                            "prmbench", "gsm8k", "math"]
    assert set(FORMAT_HELP) == set(FORMAT_NAMES)
    assert all(len(text) > 80 for text in FORMAT_HELP.values())
    assert set(ConvertOptions.help()) == {"prm800k_neutral", "soft_threshold", "strip_calculator",
                                          "math_shepherd_labels", "prm800k_alternatives",
                                          "skip_empty", "prmbench_later_steps"}


def test_unknown_format_lists_the_known_ones(tmp_path):
    with pytest.raises(PrmkitError, match="unknown format 'jsonl'.*prmkit, trl, math-shepherd"):
        formats.read("jsonl", str(tmp_path / "x.jsonl"))  # fails at the call, not on next()
    with pytest.raises(PrmkitError, match="known formats"):
        formats.write("nope", str(tmp_path / "x.jsonl"), [])


@pytest.mark.parametrize("kwargs, message", [
    ({"prm800k_neutral": 2}, "prm800k_neutral"),
    ({"prm800k_neutral": True}, "prm800k_neutral"),
    ({"soft_threshold": -0.1}, "soft_threshold"),
    ({"soft_threshold": None}, "soft_threshold"),
    ({"math_shepherd_labels": "bits"}, "math_shepherd_labels"),
    ({"skip_empty": "yes"}, "skip_empty"),
    ({"prmbench_later_steps": float("nan")}, "prmbench_later_steps"),
])
def test_options_are_validated(kwargs, message):
    with pytest.raises(PrmkitError, match=message):
        ConvertOptions(**kwargs)


def test_options_accept_none_for_neutral():
    assert ConvertOptions(prm800k_neutral=None).prm800k_neutral is None


def test_duplicate_ids_are_an_error(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [{"id": "x", "prompt": "q", "completions": ["a"],
                                            "labels": [True]}] * 2)
    with pytest.raises(PrmkitError, match="duplicate id 'x' \\(records 1 and 2"):
        read_all("trl", p)


def test_prmkit_format_round_trip(tmp_path):
    records = [rec(labels=[1.0, 0.0, None], first_error=1, meta={"k": 1}), rec(id="r2")]
    assert formats.write("prmkit", str(tmp_path / "a.jsonl"), records) == 2
    assert read_all("prmkit", tmp_path / "a.jsonl") == records


def test_writes_are_atomic(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    bad = [rec(id="ok", labels=[1.0, 1.0, 1.0]), rec(id="bad", labels=[1.0, 0.0, None])]
    with pytest.raises(RecordError, match="record 'bad'"):
        formats.write("trl", str(out), bad)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_invalid_json_names_file_and_line(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [{"question": "q", "answer": "a\n#### 1"}, "{oops"])
    with pytest.raises(RecordError, match=r"g\.jsonl:2: invalid JSON"):
        read_all("gsm8k", p)


# ---------------------------------------------------------------------------------------------
# TRL


def test_trl_read(tmp_path):
    p = write_lines(tmp_path / "t.jsonl", [
        {"prompt": "q1", "completions": ["s1", "s2"], "labels": [True, False]},
        {"id": "mine", "prompt": "q2", "completions": ["s"], "labels": [0.7], "source": "x"},
    ])
    a, b = read_all("trl", p)
    assert (a.id, a.problem, a.steps, a.labels) == ("trl-0", "q1", ["s1", "s2"], [1.0, 0.0])
    assert (b.id, b.labels, b.meta) == ("mine", [0.7], {"source": "x"})


def test_trl_write_thresholds_and_round_trip(tmp_path):
    records = [rec(labels=[0.9, 0.5, 0.2]), rec(id="r2", steps=["x"], first_error=-1)]
    out = tmp_path / "t.jsonl"
    assert formats.write("trl", str(out), records, ConvertOptions(soft_threshold=0.6)) == 2
    rows = jsonl(out)
    assert rows[0] == {"id": "r1", "prompt": "What is 1+1?", "completions": ["a", "b", "c"],
                       "labels": [True, False, False]}
    assert rows[1]["labels"] == [True]
    back = read_all("trl", out)
    assert [r.steps for r in back] == [r.steps for r in records]
    assert [r.labels for r in back] == [[1.0, 0.0, 0.0], [1.0]]
    assert [r.id for r in back] == ["r1", "r2"]


def test_trl_refuses_unlabelled_steps(tmp_path):
    with pytest.raises(RecordError, match=r"record 'r1': field 'labels': step 2 is unlabelled"):
        formats.write("trl", str(tmp_path / "t.jsonl"), [rec(labels=[1.0, 0.0, None])])
    with pytest.raises(RecordError, match="no labels and no first_error"):
        formats.write("trl", str(tmp_path / "t.jsonl"), [rec()])


@pytest.mark.parametrize("row, field", [
    ({"completions": ["a"], "labels": [True]}, "prompt"),
    ({"prompt": "q", "completions": [], "labels": []}, "completions"),
    ({"prompt": "q", "completions": ["a", "b"], "labels": [True]}, "labels"),
    ({"prompt": "q", "completions": ["a"], "labels": ["yes"]}, "labels"),
])
def test_trl_errors_name_line_and_field(tmp_path, row, field):
    p = write_lines(tmp_path / "t.jsonl", [{"prompt": "q", "completions": ["a"]}, row])
    with pytest.raises(RecordError, match=rf"t\.jsonl:2: field '{field}'"):
        read_all("trl", p)


# ---------------------------------------------------------------------------------------------
# Math-Shepherd

MS_INPUT = "What is 2+3*4? Step 1: 3*4 = 12. ки\nStep 2: 2+12 = 15. The answer is: 15 ки"
MS_LABEL = "What is 2+3*4? Step 1: 3*4 = 12. +\nStep 2: 2+12 = 15. The answer is: 15 -"


def test_math_shepherd_read(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", [{"input": MS_INPUT, "label": MS_LABEL, "task": "X"}])
    (r,) = read_all("math-shepherd", p)
    assert r.id == "math-shepherd-0"
    assert r.problem == "What is 2+3*4?"
    assert r.steps == ["Step 1: 3*4 = 12.", "Step 2: 2+12 = 15. The answer is: 15"]
    assert r.labels == [1.0, 0.0]
    assert r.answer == "15"
    assert r.meta == {"task": "X"}


def test_math_shepherd_without_step_marker_uses_the_first_line(tmp_path):
    text = "Add 2 and 2.\nIt is 4. ки\nDone. ки"
    p = write_lines(tmp_path / "m.jsonl", [{"input": text, "label": ["+", 0.25]}])
    (r,) = read_all("math-shepherd", p)
    assert (r.problem, r.steps, r.labels) == ("Add 2 and 2.", ["It is 4.", "Done."], [1.0, 0.25])


def test_math_shepherd_openrlhf_value_key(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", [{"input": MS_INPUT, "value": ["-", "+"]}])
    assert read_all("math-shepherd", p)[0].labels == [0.0, 1.0]


@pytest.mark.parametrize("row, message", [
    ({"input": "no tags here", "label": "no tags here"}, "field 'input': no step tag"),
    ({"input": "One line ки", "label": "One line +"}, "field 'input': cannot tell the question"),
    ({"input": MS_INPUT + " tail", "label": MS_LABEL + " tail"},
     "field 'input': text after the last tag"),
    ({"input": MS_INPUT, "label": MS_LABEL.replace("2+12", "2+13")}, "field 'label': differs"),
    ({"input": MS_INPUT, "label": MS_LABEL.replace(" -", " ?")}, "field 'label': has '\\?'"),
    ({"input": MS_INPUT, "label": MS_LABEL[:-1]}, "field 'label': is .* characters long"),
    ({"input": MS_INPUT, "label": ["+"]}, "field 'label': has 1 entries but the input has 2"),
    ({"input": MS_INPUT}, "field 'label': missing"),
])
def test_math_shepherd_errors(tmp_path, row, message):
    p = write_lines(tmp_path / "m.jsonl", [row])
    with pytest.raises(RecordError, match=r"m\.jsonl:1: " + message):
        read_all("math-shepherd", p)


def test_math_shepherd_write_styles(tmp_path):
    r = rec(steps=["3*4 = 12.", "Step 2: 2+12 = 15."], labels=[0.8, 0.3])
    out = str(tmp_path / "m.jsonl")
    formats.write("math-shepherd", out, [r])
    (row,) = jsonl(out)
    assert row["input"] == "What is 1+1? Step 1: 3*4 = 12. ки\nStep 2: 2+12 = 15. ки"
    assert row["label"] == "What is 1+1? Step 1: 3*4 = 12. +\nStep 2: 2+12 = 15. -"
    assert row["id"] == "r1"
    formats.write("math-shepherd", out, [r], ConvertOptions(math_shepherd_labels="tokens"))
    assert jsonl(out)[0]["label"] == ["+", "-"]
    formats.write("math-shepherd", out, [r], ConvertOptions(math_shepherd_labels="floats"))
    assert jsonl(out)[0]["label"] == [0.8, 0.3]
    back = read_all("math-shepherd", out)[0]
    assert back.steps == ["Step 1: 3*4 = 12.", "Step 2: 2+12 = 15."] and back.labels == [0.8, 0.3]


def test_math_shepherd_round_trip_is_exact(tmp_path):
    rows = [{"input": MS_INPUT, "label": MS_LABEL, "task": "GSM8K"}]
    p = write_lines(tmp_path / "m.jsonl", rows)
    formats.write("math-shepherd", str(tmp_path / "o.jsonl"), read_all("math-shepherd", p))
    assert jsonl(tmp_path / "o.jsonl") == rows


def test_math_shepherd_write_refuses_the_tag_in_a_step(tmp_path):
    with pytest.raises(RecordError, match="step 0 contains the tag"):
        formats.write("math-shepherd", str(tmp_path / "m.jsonl"),
                      [rec(steps=["a ки"], labels=[1.0])])


# ---------------------------------------------------------------------------------------------
# PRM800K, raw nested layout


def prm800k_line(steps, **question) -> dict:
    return {"labeler": "L", "timestamp": "T", "generation": None,
            "is_quality_control_question": False, "is_initial_screening_question": False,
            "question": {"problem": "What is 6*7?", "ground_truth_answer": "42", **question},
            "label": {"steps": steps, "total_time": 10, "finish_reason": "solution"}}


def step(*ratings, chosen=0, human=None, texts=None) -> dict:
    texts = texts or [f"t{i}" for i in range(len(ratings))]
    return {"completions": [{"text": t, "rating": r, "flagged": False}
                            for t, r in zip(texts, ratings)],
            "human_completion": None if human is None else
            {"text": human, "rating": None, "source": "human", "flagged": False},
            "chosen_completion": chosen}


def test_prm800k_path_and_labels(tmp_path):
    steps = [step(1, texts=["Six sevens."]),
             step(-1, -1, chosen=None, human="6*7 = 42."),
             step(0, 1, chosen=0, texts=["Hmm.", "x"]),
             step(1, -1, chosen=1, texts=["ok", "So 43.\n\n# Answer\n\n43"])]
    p = write_lines(tmp_path / "p.jsonl", [prm800k_line(steps)])
    (r,) = read_all("prm800k", p)
    assert r.id == "prm800k-0"
    assert r.steps == ["Six sevens.", "6*7 = 42.", "Hmm.", "So 43.\n\n# Answer\n\n43"]
    assert r.labels == [1.0, None, 1.0, 0.0]  # neutral counts as correct by default
    assert (r.reference, r.answer) == ("42", "43")
    assert r.meta["labeler"] == "L" and r.meta["finish_reason"] == "solution"
    assert read_all("prm800k", p, prm800k_neutral=0)[0].labels == [1.0, None, 0.0, 0.0]
    assert read_all("prm800k", p, prm800k_neutral=None)[0].labels == [1.0, None, None, 0.0]


def test_prm800k_stopped_step_keeps_the_first_bad_completion(tmp_path):
    steps = [step(1), step(1, -1, -1, chosen=None, texts=["good", "bad1", "bad2"]),
             {"completions": None, "human_completion": None, "chosen_completion": None}]
    p = write_lines(tmp_path / "p.jsonl", [prm800k_line(steps)])
    (r,) = read_all("prm800k", p)
    assert r.steps == ["t0", "bad1"] and r.labels == [1.0, 0.0]


def test_prm800k_alternatives(tmp_path):
    steps = [step(1, 0, texts=["a", "a'"]), step(-1, 1, None, chosen=1, texts=["b'", "b", "b?"])]
    p = write_lines(tmp_path / "p.jsonl", [prm800k_line(steps)])
    records = read_all("prm800k", p, prm800k_alternatives=True, prm800k_neutral=0)
    assert [(r.id, r.steps, r.labels) for r in records] == [
        ("prm800k-0", ["a", "b"], [1.0, 1.0]),
        ("prm800k-0-s0c1", ["a'"], [0.0]),
        ("prm800k-0-s1c0", ["a", "b'"], [1.0, 0.0]),  # the unrated "b?" has no label: no record
    ]
    assert records[2].meta["alternative"] == [1, 0]


@pytest.mark.parametrize("line, message", [
    ({"label": {"steps": []}}, "field 'question': missing"),
    (prm800k_line([step(1, chosen=3)]), r"field 'label.steps\[0\].chosen_completion': 3 is out"),
    (prm800k_line([step(2)]), r"field 'label.steps\[0\].completions\[0\].rating': rating 2"),
    (prm800k_line([step(1, 1, chosen=None), step(1)]), r"field 'label.steps\[1\]': has compl"),
    (prm800k_line([step(1, chosen=None)]), r"field 'label.steps': no step on the solution path"),
])
def test_prm800k_errors(tmp_path, line, message):
    p = write_lines(tmp_path / "p.jsonl", [prm800k_line([step(1)]), line])
    with pytest.raises(RecordError, match=r"p\.jsonl:2: " + message):
        read_all("prm800k", p)


def test_prm800k_skip_empty_warns(tmp_path):
    p = write_lines(tmp_path / "p.jsonl", [prm800k_line([step(1, chosen=None)]),
                                           prm800k_line([step(1)])])
    with pytest.warns(UserWarning, match="left out 1 labelling sessions .*line 1"):
        assert len(read_all("prm800k", p, skip_empty=True)) == 1


def test_prm800k_write_and_read_back(tmp_path):
    records = [rec(labels=[1.0, None, 0.0], reference="2", meta={"labeler": "L"}),
               rec(id="prm800k-7", steps=["x"], labels=[0.6])]
    out = str(tmp_path / "p.jsonl")
    assert formats.write("prm800k", out, records) == 2
    rows = jsonl(out)
    assert [c["completions"][0]["rating"] for c in rows[0]["label"]["steps"]] == [1, None, -1]
    assert rows[0]["label"]["finish_reason"] == "found_error" and rows[0]["labeler"] == "L"
    assert rows[0]["question"] == {"problem": "What is 1+1?", "ground_truth_answer": "2"}
    assert "id" not in rows[1]  # an id the reader makes up is not written
    back = read_all("prm800k", out)
    assert [(r.id, r.steps, r.labels, r.reference) for r in back] == [
        ("r1", ["a", "b", "c"], [1.0, None, 0.0], "2"), ("prm800k-1", ["x"], [1.0], None)]
    with pytest.raises(PrmkitError, match="parquet layout is not supported"):
        formats.write("prm800k", str(tmp_path / "p.parquet"), records)


# ---------------------------------------------------------------------------------------------
# PRM800K, one row per step (parquet)


def parquet(path: Path, rows: list[dict]) -> str:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    cols = ["instruction", "responses", "next_response", "answer", "is_human_response",
            "is_solution", "is_preferred_response", "rating"]
    full = [{"answer": None, "is_human_response": False, "is_solution": False, **r} for r in rows]
    table = pa.table({c: [r[c] for r in full] for c in cols},
                     schema=pa.schema([("instruction", pa.string()),
                                       ("responses", pa.list_(pa.string())),
                                       ("next_response", pa.string()), ("answer", pa.string()),
                                       ("is_human_response", pa.bool_()),
                                       ("is_solution", pa.bool_()),
                                       ("is_preferred_response", pa.bool_()),
                                       ("rating", pa.float64())]))
    pq.write_table(table, str(path))
    return str(path)


def row(problem, responses, text, rating, preferred=False, **kw) -> dict:
    return {"instruction": problem, "responses": responses, "next_response": text,
            "rating": rating, "is_preferred_response": preferred, **kw}


STEPWISE = [
    # session 1 of P: a -> (b rejected, c chosen) -> d solution
    row("P", [], "a0", -1.0), row("P", [], "a", 1.0, True),
    row("P", ["a"], "b", -1.0), row("P", ["a"], "c", 0.0, True), row("P", ["a"], "c2", 0.0),
    row("P", ["a", "c"], "d", 1.0, True, is_solution=True, answer="7"),
    # session 2 of P (a restart): x, then stopped at y (all -1)
    row("P", [], "x", 1.0, True),
    row("P", ["x"], "y1", -1.0), row("P", ["x"], "y2", -1.0),
    # Q: a human step, then unrated alternatives
    row("Q", [], "h", None, True, is_human_response=True), row("Q", ["h"], "u", None),
]


def test_prm800k_parquet_sessions(tmp_path):
    p = parquet(tmp_path / "s.parquet", STEPWISE)
    records = read_all("prm800k", p)
    assert [(r.id, r.group, r.steps, r.labels) for r in records] == [
        ("prm800k-r0", "prm800k-p0", ["a", "c", "d"], [1.0, 1.0, 1.0]),
        ("prm800k-r6", "prm800k-p0", ["x", "y1"], [1.0, 0.0]),
        ("prm800k-r9", "prm800k-p1", ["h"], [None]),
    ]
    assert records[0].answer == "7" and records[0].meta["is_solution"] is True
    assert records[0].meta["rows"] == [0, 5] and records[0].meta["n_alternatives"] == 3
    assert read_all("prm800k", p, prm800k_neutral=0)[0].labels == [1.0, 0.0, 1.0]
    alts = read_all("prm800k", p, prm800k_alternatives=True)
    assert [(r.id, r.steps, r.labels) for r in alts if "alternative" in r.meta] == [
        ("prm800k-r0-row0", ["a0"], [0.0]), ("prm800k-r0-row2", ["a", "b"], [1.0, 0.0]),
        ("prm800k-r0-row4", ["a", "c2"], [1.0, 1.0]), ("prm800k-r6-row8", ["x", "y2"], [1.0, 0.0])]


def test_prm800k_parquet_errors(tmp_path):
    bad = STEPWISE[:3] + [row("P", ["a", "zzz"], "q", 1.0, True)]
    p = parquet(tmp_path / "bad.parquet", bad)
    with pytest.raises(RecordError, match=r"bad\.parquet: row 3: field 'responses': has 2 earlier"):
        read_all("prm800k", p)
    p = parquet(tmp_path / "empty.parquet", [row("P", [], "u", None), row("P", [], "v", None)])
    with pytest.raises(RecordError, match=r"empty\.parquet: row 0: .*skip_empty"):
        read_all("prm800k", p)
    with pytest.warns(UserWarning, match="left out 1 labelling sessions"):
        assert read_all("prm800k", p, skip_empty=True) == []


def test_prm800k_parquet_without_pyarrow(tmp_path, monkeypatch):
    p = tmp_path / "s.parquet"
    p.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import now fails
    with pytest.raises(PrmkitError, match=r"pip install 'prmkit\[data\]'"):
        read_all("prm800k", p)


# ---------------------------------------------------------------------------------------------
# ProcessBench

PB = [{"id": "t-0", "generator": "G", "problem": "p0", "steps": ["a", "b", "c"],
       "final_answer_correct": False, "label": 1},
      {"id": "t-1", "generator": "G", "problem": "p1", "steps": ["a", "b"],
       "final_answer_correct": True, "label": -1}]


def test_processbench_label_rule(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(PB, indent=2))
    a, b = read_all("processbench", p)
    assert (a.first_error, a.labels, a.is_correct, a.meta) == (1, [1.0, 0.0, None], False,
                                                               {"generator": "G"})
    assert (b.first_error, b.labels, b.is_correct) == (-1, [1.0, 1.0], True)
    jl = write_lines(tmp_path / "t.jsonl", PB)  # JSONL works too
    assert read_all("processbench", jl) == [a, b]


def test_processbench_write_json_and_jsonl(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(PB, indent=2))
    formats.write("processbench", str(tmp_path / "o.json"), read_all("processbench", p))
    assert (tmp_path / "o.json").read_text() == p.read_text()  # byte for byte
    records = [rec(labels=[1.0, 0.2, 1.0]), rec(id="r2", steps=["x"], first_error=0)]
    formats.write("processbench", str(tmp_path / "o.jsonl"), records)
    assert [r["label"] for r in jsonl(tmp_path / "o.jsonl")] == [1, 0]
    with pytest.raises(RecordError, match="record 'r3': field 'first_error': .*unknown"):
        formats.write("processbench", str(tmp_path / "o.json"),
                      [rec(id="r3", labels=[1.0, None, 0.0])])


@pytest.mark.parametrize("change, message", [
    ({"steps": "abc"}, "field 'steps': expected a list"),
    ({"steps": []}, "field 'steps': empty list"),
    ({"label": 3}, "field 'label': 3 is out of range for 2 steps"),
    ({"label": "1"}, "field 'label': expected an integer"),
    ({"final_answer_correct": "yes"}, "field 'final_answer_correct': expected true or false"),
])
def test_processbench_errors_name_record_id_and_field(tmp_path, change, message):
    p = tmp_path / "gsm8k.json"
    p.write_text(json.dumps([PB[0], {**PB[1], **change}], indent=2))
    with pytest.raises(RecordError, match=r"gsm8k\.json: record 1 \(id t-1\): " + message):
        read_all("processbench", p)
    jl = write_lines(tmp_path / "gsm8k.jsonl", [PB[0], {**PB[1], **change}])
    with pytest.raises(RecordError, match=r"gsm8k\.jsonl:2: " + message):
        read_all("processbench", jl)


def test_processbench_invalid_json_list(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('[\n  {"id": 1,\n  oops\n]')
    with pytest.raises(RecordError, match=r"x\.json:3: invalid JSON"):
        read_all("processbench", p)


# ---------------------------------------------------------------------------------------------
# PRMBench

PRMB = {"original_question": "oq", "modified_question": "mq", "question": "q",
        "original_process": ["o1", "o2", "o3", "o4"], "modified_process": ["m1", "m2", "m3", "m4"],
        "modified_steps": [2, 4], "error_steps": [4, 2], "reason": "why", "idx": "i0",
        "classification": "circular"}


def test_prmbench_labels_and_fields(tmp_path):
    p = write_lines(tmp_path / "b.jsonl", [PRMB])
    (r,) = read_all("prmbench", p)
    assert r.id == "circular-i0"
    assert (r.problem, r.steps) == ("mq", ["m1", "m2", "m3", "m4"])  # never original_process
    assert (r.first_error, r.labels) == (1, [1.0, 0.0, None, 0.0])
    assert r.meta["original_process"] == ["o1", "o2", "o3", "o4"]
    assert r.meta["error_steps"] == [4, 2] and r.meta["classification"] == "circular"
    assert read_all("prmbench", p, prmbench_later_steps=1)[0].labels == [1.0, 0.0, 1.0, 0.0]


def test_prmbench_error_steps_out_of_range(tmp_path):
    p = write_lines(tmp_path / "b.jsonl", [{**PRMB, "error_steps": [3, 9]},
                                           {**PRMB, "idx": "i1", "error_steps": [5]},
                                           {**PRMB, "idx": "i2", "error_steps": []}])
    a, b, c = read_all("prmbench", p)
    assert (a.first_error, a.labels, a.meta["error_steps_out_of_range"]) == (
        2, [1.0, 1.0, 0.0, None], [9])
    assert (b.first_error, b.labels) == (None, [1.0] * 4)  # the error lies past the last step
    assert (c.first_error, c.labels) == (-1, [1.0] * 4)


def test_prmbench_round_trip_and_errors(tmp_path):
    p = write_lines(tmp_path / "b.jsonl", [PRMB, {**PRMB, "idx": "i1", "error_steps": [7]}])
    formats.write("prmbench", str(tmp_path / "o.jsonl"), read_all("prmbench", p))
    assert jsonl(tmp_path / "o.jsonl") == jsonl(p)
    bad = write_lines(tmp_path / "c.jsonl", [{**PRMB, "error_steps": ["2"]}])
    with pytest.raises(RecordError, match=r"c\.jsonl:1: field 'error_steps': entry 0"):
        read_all("prmbench", bad)
    bad = write_lines(tmp_path / "d.jsonl", [{**PRMB, "modified_process": []}])
    with pytest.raises(RecordError, match=r"d\.jsonl:1: field 'modified_process': empty"):
        read_all("prmbench", bad)


# ---------------------------------------------------------------------------------------------
# GSM8K and MATH

GSM = {"question": "Tom has 3 bags of 4 apples. How many?",
       "answer": "He has 3*4=<<3*4=12>>12 apples.\nSo 12 in all.\n#### 1,200"}


def test_gsm8k_read_write(tmp_path):
    p = write_lines(tmp_path / "g.jsonl", [GSM])
    (r,) = read_all("gsm8k", p)
    assert r.id == "gsm8k-0"
    assert r.steps == ["He has 3*4=<<3*4=12>>12 apples.", "So 12 in all."]
    assert (r.reference, r.answer, r.is_correct, r.labels) == ("1,200", "1,200", True, [1.0, 1.0])
    assert read_all("gsm8k", p, strip_calculator=True)[0].steps[0] == "He has 3*4=12 apples."
    formats.write("gsm8k", str(tmp_path / "o.jsonl"), [r])
    assert jsonl(tmp_path / "o.jsonl") == [GSM]
    with pytest.raises(RecordError, match="neither an answer nor a reference"):
        formats.write("gsm8k", str(tmp_path / "o.jsonl"), [rec()])


@pytest.mark.parametrize("answer, message", [
    ("no final line", "no final answer line"), ("#### 5", "no reasoning lines"),
    ("x\n####  ", "nothing after"),
])
def test_gsm8k_errors(tmp_path, answer, message):
    p = write_lines(tmp_path / "g.jsonl", [GSM, {"question": "q", "answer": answer}])
    with pytest.raises(RecordError, match=rf"g\.jsonl:2: field 'answer': {message}"):
        read_all("gsm8k", p)


EMS = {"question": "Tom has 3 bags of 4 apples. How many?",
       "ground_truth": "3 * 4 = <<3*4=12>>12\nA: 12",
       "6b_finetuning": {"is_correct": False, "solution": "3 + 4 = 7\n\nA: 7"},
       "175b_verification": {"is_correct": True, "solution": "3 * 4 = 12\nA: 12"}}


def test_gsm8k_model_solutions_read_as_candidates(tmp_path):
    """The GSM8K paper's example model solutions: one candidate per solver, grouped by line
    (a user's best-of-N input), through convert's reader and through detection."""
    from prmkit.formats.detect import detect, read_records

    p = write_lines(tmp_path / "ems.jsonl", [EMS])
    wrong, right = read_all("gsm8k", p)
    assert (wrong.id, wrong.group, wrong.meta) == ("gsm8k-0-6b_finetuning", "gsm8k-0",
                                                   {"solver": "6b_finetuning"})
    assert (wrong.steps, wrong.answer, wrong.reference, wrong.is_correct, wrong.labels) == (
        ["3 + 4 = 7", "A: 7"], "7", "12", False, None)
    assert (right.id, right.answer, right.is_correct) == ("gsm8k-0-175b_verification", "12", True)
    assert detect(p) == "gsm8k" and read_records(p) == [wrong, right]


@pytest.mark.parametrize("change, message", [
    ({"6b_finetuning": None, "175b_verification": None}, "field '6b_finetuning': missing"),
    ({"6b_finetuning": {"is_correct": True}}, "field '6b_finetuning.solution': missing"),
    ({"6b_finetuning": {"solution": "x", "is_correct": "yes"}},
     "field '6b_finetuning.is_correct': expected true or false"),
])
def test_gsm8k_model_solutions_errors(tmp_path, change, message):
    row = {k: v for k, v in {**EMS, **change}.items() if v is not None}
    p = write_lines(tmp_path / "ems.jsonl", [EMS, row])
    with pytest.raises(RecordError, match=rf"ems\.jsonl:2: {message}"):
        read_all("gsm8k", p)


def test_a_json_list_reads_in_every_layout_and_a_wrong_one_names_the_element(tmp_path):
    """Every layout reads from a JSON list as from JSONL; ProcessBench's .json list read --from
    gsm8k is refused naming the element and the field gsm8k reads."""
    p = tmp_path / "gsm8k.json"
    p.write_text(json.dumps([{"id": "gsm8k-0", "problem": "p", "steps": ["a"], "label": -1}],
                            indent=2))
    with pytest.raises(PrmkitError) as info:
        read_all("gsm8k", p)
    msg = str(info.value)
    assert msg == f"{p}: record 0: field 'question': missing"
    assert "invalid JSON" not in msg and "column" not in msg
    assert [r.id for r in read_all("processbench", p)] == ["gsm8k-0"]  # it reads lists
    rows = [{"question": "What is 2 + 2?", "answer": "2 + 2 = 4.\n#### 4"}]
    (tmp_path / "g.json").write_text(json.dumps(rows))
    (tmp_path / "g.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert [r.to_dict() for r in read_all("gsm8k", tmp_path / "g.json")] == \
        [r.to_dict() for r in read_all("gsm8k", tmp_path / "g.jsonl")]


@needs_data
def test_real_gsm8k_model_solutions():
    path = DATA / "gsm8k" / "example_model_solutions.jsonl"
    rows = jsonl(path)
    records = read_all("gsm8k", path)
    assert len(records) == 4 * len(rows)
    assert [r.is_correct for r in records] == [row[s]["is_correct"] for row in rows
                                               for s in formats.gsm8k.SOLVERS]
    assert records[0].reference == "18" and len({r.group for r in records}) == len(rows)


def test_math_steps_and_fields(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", [
        {"problem": "p", "solution": "First.\nStill first.\n\nSecond $\\boxed{2}$.",
         "answer": "2", "level": 3, "subject": "Algebra", "unique_id": "test/a/1.json"},
        {"problem": "p", "solution": "Line one.\nLine two."},
        {"problem": "p", "solution": "Only one line."},
    ])
    a, b, c = read_all("math", p)
    assert a.id == "test/a/1.json" and a.steps == ["First.\nStill first.", "Second $\\boxed{2}$."]
    assert (a.reference, a.answer, a.is_correct, a.labels) == ("2", "2", True, [1.0, 1.0])
    assert a.meta == {"level": 3, "subject": "Algebra", "unique_id": "test/a/1.json"}
    assert (b.id, b.steps, b.reference, b.is_correct) == ("math-1", ["Line one.", "Line two."],
                                                          None, None)
    assert c.steps == ["Only one line."]
    formats.write("math", str(tmp_path / "o.jsonl"), [a, b])
    rows = jsonl(tmp_path / "o.jsonl")
    assert rows[0] == {"problem": "p", "level": 3, "subject": "Algebra",
                       "solution": "First.\nStill first.\n\nSecond $\\boxed{2}$.",
                       "unique_id": "test/a/1.json", "answer": "2"}
    assert rows[1]["solution"] == "Line one.\n\nLine two."
    bad = write_lines(tmp_path / "bad.jsonl", [{"problem": "p", "solution": "  "}])
    with pytest.raises(RecordError, match=r"bad\.jsonl:1: field 'solution': empty"):
        read_all("math", bad)


# ---------------------------------------------------------------------------------------------
# the real data in ../shared/data


@needs_data
def test_real_math_shepherd_sample(tmp_path):
    path = DATA / "format_samples" / "samples_math-shepherd.jsonl"
    rows = jsonl(path)
    records = read_all("math-shepherd", path)
    assert len(records) == 7
    for r, src in zip(records, rows):
        assert len(r.steps) == src["input"].count("ки")
        chunks = src["input"].split("ки")  # each tag is one character in the label
        ends = [sum(len(c) for c in chunks[:k + 1]) + k for k in range(len(chunks) - 1)]
        marks = [src["label"][at] for at in ends]
        assert r.labels == [1.0 if m == "+" else 0.0 for m in marks]
        assert r.meta["task"] == src["task"]
    assert records[0].labels == [1.0, 1.0, 1.0, 1.0, 0.0]
    formats.write("math-shepherd", str(tmp_path / "o.jsonl"), records)
    assert jsonl(tmp_path / "o.jsonl") == rows  # input and label reproduced exactly


@needs_data
@pytest.mark.parametrize("split, count", [("gsm8k", 40), ("math", 100), ("olympiadbench", 103),
                                          ("omnimath", 104)])
def test_real_processbench(tmp_path, split, count):
    path = DATA / "processbench_dev" / f"{split}.json"
    rows = json.loads(path.read_text(encoding="utf-8"))
    records = read_all("processbench", path)
    assert len(records) == count
    assert [r.first_error for r in records] == [row["label"] for row in rows]
    assert [r.id for r in records] == [row["id"] for row in rows]
    formats.write("processbench", str(tmp_path / "o.json"), records)
    assert (tmp_path / "o.json").read_bytes() == path.read_bytes()
    # TRL holds no unlabelled step: the records with every step labelled round trip, the
    # others are refused by name
    full = [r for r in records if None not in r.labels]
    formats.write("trl", str(tmp_path / "t.jsonl"), full)
    back = read_all("trl", tmp_path / "t.jsonl")
    assert [(r.id, r.steps, r.labels) for r in back] == [(r.id, r.steps, r.labels) for r in full]
    partial = [r for r in records if None in r.labels]
    if partial:
        with pytest.raises(RecordError, match=f"record '{partial[0].id}'"):
            formats.write("trl", str(tmp_path / "t.jsonl"), partial[:1])


@needs_data
def test_real_prm800k_raw_sample(tmp_path):
    records = read_all("prm800k", DATA / "format_samples" / "samples_prm800k.jsonl")
    assert [len(r.steps) for r in records] == [6, 7, 5, 7, 8, 12]
    assert records[0].labels == [1.0, None, 1.0, 1.0, 1.0, 1.0]  # step 2 written by a human
    assert records[0].steps[1] == "We have $3p+e=1.24$ and $5p+e=1.82$."
    assert (records[0].answer, records[0].reference) == ("29", "29")
    assert records[1].labels[-1] == 0.0 and records[1].meta["finish_reason"] == "found_error"
    assert records[4].labels[-1] is None and records[4].meta["finish_reason"] == "give_up"
    formats.write("prm800k", str(tmp_path / "o.jsonl"), records)
    back = read_all("prm800k", tmp_path / "o.jsonl")
    assert [(r.steps, r.labels, r.reference) for r in back] == [
        (r.steps, r.labels, r.reference) for r in records]


@needs_data
def test_real_prm800k_parquet_test_file():
    pytest.importorskip("pyarrow")
    path = DATA / "prm800k_stepwise_critic" / "phase1_test.stepwise-critic.parquet"
    with pytest.raises(RecordError, match=r"row 1044: field 'is_preferred_response'"):
        read_all("prm800k", path)
    with pytest.warns(UserWarning, match="left out 3 labelling sessions"):
        records = read_all("prm800k", path, skip_empty=True)
    assert len(records) == 103
    assert len({r.group for r in records}) == 98  # the 3 sessions left out were 3 problems
    assert sum(r.meta["is_solution"] for r in records) == 90
    assert sum(len(r.steps) for r in records) == 1857  # every preferred row, once
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alts = read_all("prm800k", path, skip_empty=True, prm800k_alternatives=True)
    assert len(alts) == 103 + 3479  # and every rated row off the paths
    assert sum(r.labels[-1] == 0.0 for r in alts) == 1970  # the rows rated -1


@needs_data
def test_real_prm800k_parquet_train_file():
    pytest.importorskip("pyarrow")
    path = DATA / "prm800k_stepwise_critic" / "phase1_train_plus.stepwise-critic.parquet"
    with pytest.warns(UserWarning, match="left out 12 labelling sessions"):
        records = read_all("prm800k", path, skip_empty=True)
    assert len(records) == 931
    assert sum(len(r.steps) for r in records) == 15300


@needs_data
def test_real_prmbench(tmp_path):
    files = sorted((DATA / "prmbench_train_p1_first400").glob("*.jsonl"))
    assert len(files) == 8
    total = out_of_range = 0
    for path in files:
        rows = jsonl(path)
        records = read_all("prmbench", path)
        total += len(records)
        for r, src in zip(records, rows):
            assert r.steps == src["modified_process"]
            inside = [e for e in src["error_steps"] if 1 <= e <= len(r.steps)]
            assert r.first_error == (min(inside) - 1 if inside else
                                     (-1 if not src["error_steps"] else None))
            assert all(r.labels[e - 1] == 0.0 for e in inside)
            out_of_range += "error_steps_out_of_range" in r.meta
        formats.write("prmbench", str(tmp_path / "o.jsonl"), records)
        assert jsonl(tmp_path / "o.jsonl") == rows
    assert (total, out_of_range) == (3203, 57)


@needs_data
def test_real_gsm8k(tmp_path):
    path = DATA / "gsm8k" / "test.jsonl"
    rows = jsonl(path)
    records = read_all("gsm8k", path)
    assert len(records) == 1319
    assert [r.reference for r in records] == [row["answer"].split("#### ")[-1] for row in rows]
    assert all("####" not in s for r in records for s in r.steps)
    formats.write("gsm8k", str(tmp_path / "o.jsonl"), records)
    # exact, except for the 2 answers with a blank line (blank lines are not steps)
    same = [a == b for a, b in zip(jsonl(tmp_path / "o.jsonl"), rows)]
    assert [i for i, s in enumerate(same) if not s] == [
        i for i, row in enumerate(rows) if "\n\n" in row["answer"]]


@needs_data
def test_real_math500(tmp_path):
    path = DATA / "math500" / "test500.jsonl"
    rows = jsonl(path)
    records = read_all("math", path)
    assert len(records) == 500
    assert [r.id for r in records] == [row["unique_id"] for row in rows]
    assert [r.reference for r in records] == [row["answer"] for row in rows]
    assert all(r.meta["subject"] and r.meta["level"] for r in records)
    assert sum(len(r.steps) > 1 for r in records) == 276
    # writing and reading back keeps the steps (the solution is rewritten with blank lines)
    out = tmp_path / "o.jsonl"
    formats.write("math", str(out), records)
    assert [r.steps for r in read_all("math", out)] == [r.steps for r in records]
