"""The canonical record: validation, label rules, reading and writing JSONL, resuming.

Every expectation is worked by hand; error tests check that the message names the field (and,
when reading a file, the file and the line), as ARCHITECTURE.md ("Records") asks.
"""

from __future__ import annotations

import json
import os

import pytest

from prmkit.errors import PrmkitError, RecordError
from prmkit.records import (FIELDS, Record, ResumableWriter, atomic_output,
                            first_error_from_labels, iter_jsonl, iter_records,
                            labels_from_first_error, read_records, write_jsonl, write_records)
from prmkit.resume import check_resume

NAN = float("nan")
INF = float("inf")


def base(**changes):
    """A valid two-step record as a dict, with ``changes`` applied (_DELETE removes a key)."""
    obj = {"id": "r1", "problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "The answer is 5."]}
    for k, v in changes.items():
        if v is _DELETE:
            obj.pop(k, None)
        else:
            obj[k] = v
    return obj


_DELETE = object()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def line(**changes):
    return json.dumps(base(**changes))


# ---------------------------------------------------------------------------------------------
# validation: every error names its field

BAD = [
    # (changes, field, a fragment of the reason)
    (dict(id=""), "id", "empty"),
    (dict(id="   "), "id", "empty"),
    (dict(id=None), "id", "null"),
    (dict(id=True), "id", "boolean"),
    (dict(id=["a"]), "id", "list"),
    (dict(problem=""), "problem", "empty"),
    (dict(problem="\n\t "), "problem", "empty"),
    (dict(problem=5), "problem", "number"),
    (dict(steps="2 + 3 = 5."), "steps", "list"),
    (dict(steps={"0": "a"}), "steps", "object"),
    (dict(steps=[]), "steps", "empty"),
    (dict(steps=["a", 3]), "steps", "step 1"),
    (dict(steps=["a", None]), "steps", "step 1"),
    (dict(steps=[["a"], "b"]), "steps", "step 0"),
    (dict(labels=[1.0]), "labels", "1 entries but there are 2 steps"),
    (dict(labels=[1.0, 0.0, 1.0]), "labels", "3 entries"),
    (dict(labels=[1.5, 0.0]), "labels", "[0, 1]"),
    (dict(labels=[1.0, -0.1]), "labels", "entry 1"),
    (dict(labels=[True, 0.0]), "labels", "entry 0"),
    (dict(labels=[0.0, False]), "labels", "entry 1"),
    (dict(labels=[NAN, 0.0]), "labels", "finite"),
    (dict(labels=[INF, 0.0]), "labels", "finite"),
    (dict(labels=["1", 0.0]), "labels", "entry 0"),
    (dict(labels="10"), "labels", "list"),
    (dict(first_error=2), "first_error", "out of range"),
    (dict(first_error=-2), "first_error", "out of range"),
    (dict(first_error=True), "first_error", "boolean"),
    (dict(first_error=1.0), "first_error", "integer"),
    (dict(first_error="1"), "first_error", "integer"),
    (dict(step_scores=[0.5]), "step_scores", "1 entries but there are 2 steps"),
    (dict(step_scores=[0.5, NAN]), "step_scores", "finite"),
    (dict(step_scores=[True, 0.5]), "step_scores", "entry 0"),
    (dict(step_scores=0.5), "step_scores", "list"),
    (dict(is_correct="true"), "is_correct", "string"),
    (dict(is_correct=1), "is_correct", "number"),
    (dict(meta=[]), "meta", "object"),
    (dict(meta="note"), "meta", "object"),
    (dict(answer=["5"]), "answer", "list"),
    (dict(reference={"v": 5}), "reference", "object"),
    (dict(group=True), "group", "boolean"),
    (dict(score=0.9), "score", "unknown field"),
    (dict(id=_DELETE), "id", "missing"),
    (dict(problem=_DELETE), "problem", "missing"),
    (dict(steps=_DELETE), "steps", "missing"),
]


@pytest.mark.parametrize("changes,field,reason", BAD,
                         ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(BAD)])
def test_invalid_record_names_the_field(changes, field, reason):
    with pytest.raises(RecordError) as info:
        Record.from_dict(base(**changes))
    err = info.value
    assert err.field == field
    assert f"field '{field}'" in str(err)
    assert reason in str(err)


def test_unknown_field_points_to_meta():
    with pytest.raises(RecordError, match="under 'meta'"):
        Record.from_dict(base(extra=1))


def test_not_an_object():
    for obj in ([1, 2], "text", 3, None):
        with pytest.raises(RecordError, match="expected a JSON object"):
            Record.from_dict(obj)


def test_constructor_validates_too():
    with pytest.raises(RecordError, match="field 'steps'"):
        Record(id="a", problem="p", steps=[])
    with pytest.raises(RecordError, match="field 'first_error'"):
        Record(id="a", problem="p", steps=["s"], first_error=1)  # only index 0 or -1 exists


def test_valid_edge_values_are_accepted():
    r = Record.from_dict(base(labels=[0.0, 1.0], first_error=-1, step_scores=[None, 0.25],
                              is_correct=False, answer="", reference="", group="", meta=None))
    assert r.labels == [0.0, 1.0]
    assert r.step_scores == [None, 0.25]
    assert r.meta == {}
    assert Record.from_dict(base(labels=[None, None], first_error=1)).first_error == 1


@pytest.mark.parametrize("name,given,expected", [
    ("id", 7, "7"), ("id", 1.5, "1.5"), ("answer", 42, "42"), ("answer", -0.5, "-0.5"),
    ("reference", 3, "3"), ("group", 12, "12"),
])
def test_numbers_become_strings(name, given, expected):
    r = Record.from_dict(base(**{name: given}))
    assert getattr(r, name) == expected
    assert isinstance(getattr(r, name), str)


def test_int_labels_and_scores_become_floats():
    r = Record.from_dict(base(labels=[1, 0], step_scores=[0, 1]))
    assert r.labels == [1.0, 0.0] and all(type(x) is float for x in r.labels)
    assert r.step_scores == [0.0, 1.0] and all(type(x) is float for x in r.step_scores)
    r = Record.from_dict(base(labels=[1, None]))
    assert r.labels == [1.0, None]


def test_to_dict_omits_empty_fields():
    assert Record(id="a", problem="p", steps=["s"]).to_dict() == {
        "id": "a", "problem": "p", "steps": ["s"]}
    d = Record(id="a", problem="p", steps=["s"], meta={}, is_correct=False, answer="").to_dict()
    assert d == {"id": "a", "problem": "p", "steps": ["s"], "answer": "", "is_correct": False}


def test_to_dict_keeps_field_order():
    # keyword order deliberately scrambled
    r = Record(meta={"k": [1, {"x": None}]}, step_scores=[0.9, 0.1], group="g", is_correct=True,
               reference="5", answer="5", first_error=1, labels=[1.0, 0.0], steps=["a", "b"],
               problem="p", id="i")
    assert list(r.to_dict()) == list(FIELDS)
    json.dumps(r.to_dict())  # JSON-ready


def test_round_trip():
    full = Record(id="i", problem="p é", steps=["a", "b", "c"], labels=[1.0, 0.0, None],
                  first_error=1, answer="5", reference="6", is_correct=False, group="g",
                  step_scores=[0.9, 0.2, None], meta={"source": "x", "n": [1, 2]})
    for r in (full, Record(id="m", problem="p", steps=["only"])):
        assert Record.from_dict(r.to_dict()) == r
        assert Record.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_labels_or_first_error():
    assert Record(id="a", problem="p", steps=["s", "t"], labels=[1.0, 0.5]).labels_or_first_error() \
        == [1.0, 0.5]
    assert Record(id="a", problem="p", steps=["s", "t", "u"],
                  first_error=1).labels_or_first_error() == [1.0, 0.0, None]
    assert Record(id="a", problem="p", steps=["s"]).labels_or_first_error() is None


# ---------------------------------------------------------------------------------------------
# label rules (ProcessBench)


def test_labels_from_first_error():
    assert labels_from_first_error(4, 2) == [1.0, 1.0, 0.0, None]
    assert labels_from_first_error(4, 0) == [0.0, None, None, None]
    assert labels_from_first_error(4, 3) == [1.0, 1.0, 1.0, 0.0]
    assert labels_from_first_error(4, -1) == [1.0, 1.0, 1.0, 1.0]
    assert labels_from_first_error(1, -1) == [1.0]


@pytest.mark.parametrize("n,fe", [(4, 4), (4, 7), (4, -2), (0, 0)])
def test_labels_from_first_error_out_of_range(n, fe):
    with pytest.raises(RecordError, match="field 'first_error'.*out of range"):
        labels_from_first_error(n, fe)


def test_first_error_from_labels():
    assert first_error_from_labels([1.0, 1.0, 0.2, 1.0]) == 2
    assert first_error_from_labels([0.0, 1.0]) == 0
    # threshold: a label at the threshold is correct, below is an error
    assert first_error_from_labels([1.0, 0.5, 0.49]) == 2
    assert first_error_from_labels([1.0, 0.5, 0.49], threshold=0.6) == 1
    assert first_error_from_labels([0.3, 0.3], threshold=0.3) == -1
    # an unlabelled step before any error: unknown
    assert first_error_from_labels([1.0, None, 0.0]) is None
    assert first_error_from_labels([None]) is None
    # the error comes first: later unlabelled steps do not matter
    assert first_error_from_labels([1.0, 0.0, None]) == 1
    # all good
    assert first_error_from_labels([1.0, 1.0, 0.7]) == -1


@pytest.mark.parametrize("fe", [-1, 0, 1, 2, 3])
def test_first_error_round_trip(fe):
    assert first_error_from_labels(labels_from_first_error(4, fe)) == fe


# ---------------------------------------------------------------------------------------------
# reading


def test_blank_lines_are_skipped_and_lines_keep_their_numbers(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('\n{"a": 1}\n   \n\t\n{"a": 2}\r\n\n', encoding="utf-8")
    assert list(iter_jsonl(str(p))) == [(2, {"a": 1}), (5, {"a": 2})]


def test_empty_file(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text("", encoding="utf-8")
    assert read_records(str(p)) == []


def test_read_records_valid(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), "", line(id="b", labels=[1, 0])])
    recs = read_records(path)
    assert [r.id for r in recs] == ["a", "b"]
    assert recs[1].labels == [1.0, 0.0]


def test_invalid_json_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), line(id="b"), '{"id": "c", "prob'])
    with pytest.raises(RecordError) as info:
        read_records(path)
    assert str(info.value).startswith(f"{path}:3:")
    assert info.value.path == path and info.value.line == 3
    assert "invalid JSON" in str(info.value)
    # iter_jsonl itself yields the good lines first
    it = iter_jsonl(path)
    assert next(it)[0] == 1 and next(it)[0] == 2
    with pytest.raises(RecordError, match=r":3: invalid JSON"):
        next(it)


@pytest.mark.parametrize("text, says", [
    ('{"id": "c", "prob', "the line ends (column 18) before its JSON does, cut off?: "
                          "Unterminated string starting at column 13"),
    ('{"id": "c", "steps": ["x"]', "the line ends (column 27) before its JSON does, cut off?: "
                                   "Expecting ',' delimiter at column 27"),
    ('{"id": "c",, "steps": []}', "Expecting property name enclosed in double quotes at "
                                  "column 12"),
])
def test_invalid_json_gives_the_parser_s_column_and_says_a_cut_line(tmp_path, text, says):
    """A line cut off mid-write (no newline inside the message, the parser's own column)."""
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), text])
    with pytest.raises(RecordError) as info:
        read_records(path)
    assert str(info.value) == f"{path}:2: invalid JSON: {says}"


def test_invalid_json_after_blank_lines_counts_blank_lines(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", ["", line(), "", "nope"])
    with pytest.raises(RecordError, match=r"in\.jsonl:4: invalid JSON"):
        read_records(path)


def test_non_object_line(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), "[1, 2]"])
    with pytest.raises(RecordError) as info:
        read_records(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert "expected a JSON object, got a list" in str(info.value)


def test_invalid_record_is_located(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), line(id="b", steps=[])])
    with pytest.raises(RecordError) as info:
        read_records(path)
    assert str(info.value).startswith(f"{path}:2: field 'steps': ")
    assert (info.value.path, info.value.line, info.value.field) == (path, 2, "steps")


def test_duplicate_id_names_both_lines(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [line(id="x"), line(id="y"), line(id="x")])
    with pytest.raises(RecordError) as info:
        read_records(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:3: field 'id': ")
    assert "duplicate id 'x'" in msg and "line 1" in msg


def test_duplicate_id_after_number_conversion(tmp_path):
    # 7 and "7" are the same id once numbers become strings
    path = write_lines(tmp_path / "in.jsonl", [line(id=7), line(id="7")])
    with pytest.raises(RecordError, match=r":2: field 'id': duplicate id '7'"):
        read_records(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    with pytest.raises(PrmkitError, match="no such file") as info:
        read_records(path)
    assert path in str(info.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(PrmkitError, match="is a directory"):
        read_records(str(tmp_path))


def test_not_utf8(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(line(id="a").encode() + b'\n{"id": "b", "problem": "\xff\xfe", "steps": ["s"]}\n')
    with pytest.raises(RecordError, match="UTF-8") as info:
        read_records(str(p))
    assert str(info.value).startswith(f"{p}:2:")


def test_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + line(id="a").encode() + b"\n")
    assert [r.id for r in read_records(str(p))] == ["a"]


def test_utf8_text_is_read(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(base(problem="√2 ≈ 1.414 — ünïcode"),
                                                          ensure_ascii=False)])
    assert read_records(path)[0].problem == "√2 ≈ 1.414 — ünïcode"


def test_iter_records_is_lazy(tmp_path):
    # the good records before a bad line come out first (a converter can stream)
    path = write_lines(tmp_path / "in.jsonl", [line(id="a"), "bad"])
    it = iter_records(path)
    assert next(it).id == "a"
    with pytest.raises(RecordError, match=":2:"):
        next(it)


# ---------------------------------------------------------------------------------------------
# writing


def recs(n, prefix="r"):
    return [Record(id=f"{prefix}{i}", problem=f"problem {i} é", steps=[f"step {i}"], labels=[1.0])
            for i in range(n)]


def test_write_records(tmp_path):
    out = str(tmp_path / "out.jsonl")
    rs = recs(3)
    assert write_records(out, rs) == 3
    assert read_records(out) == rs
    text = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert "é" in text  # UTF-8 kept as is, not \u escapes
    assert text.endswith("\n") and text.count("\n") == 3
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_write_to_stdout(capsys):
    assert write_records("-", recs(2)) == 2
    out = capsys.readouterr().out
    assert [json.loads(x)["id"] for x in out.splitlines()] == ["r0", "r1"]


def failing(rows, after):
    for i, row in enumerate(rows):
        if i == after:
            raise RuntimeError("boom")
        yield row


def test_failure_midway_leaves_no_output(tmp_path):
    out = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError, match="boom"):
        write_records(str(out), failing(recs(5), after=3))
    assert not out.exists()
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_failure_midway_keeps_previous_content(tmp_path):
    out = tmp_path / "out.jsonl"
    write_records(str(out), recs(2, "old"))
    before = out.read_bytes()
    with pytest.raises(RuntimeError):
        write_records(str(out), failing(recs(5), after=2))
    assert out.read_bytes() == before
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_record_error_midway_leaves_no_output(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [line(id="a"), line(id="b"), "oops"])
    out = tmp_path / "out.jsonl"
    with pytest.raises(RecordError, match=":3:"):
        write_records(str(out), iter_records(src))
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_atomic_output_writes_beside_then_renames(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n", encoding="utf-8")
    with atomic_output(str(out)) as f:
        f.write("new\n")
        f.flush()
        # while writing, the output still holds the old content; the new one is beside it
        assert out.read_text(encoding="utf-8") == "old\n"
        others = [n for n in os.listdir(tmp_path) if n != "out.jsonl"]
        assert len(others) == 1 and others[0].startswith(".out.jsonl.tmp")
    assert out.read_text(encoding="utf-8") == "new\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_atomic_output_interrupted(tmp_path):
    out = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(str(out)) as f:
            f.write("partial")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_write_to_missing_folder(tmp_path):
    out = tmp_path / "no" / "such" / "out.jsonl"
    with pytest.raises(PrmkitError, match="does not exist") as info:
        write_records(str(out), recs(1))
    assert str(tmp_path / "no" / "such") in str(info.value)
    assert os.listdir(tmp_path) == []
    with pytest.raises(PrmkitError):
        write_jsonl(str(out), [{"a": 1}])


def test_write_to_a_directory_is_a_user_error(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(PrmkitError):
        write_records(str(tmp_path / "d"), recs(1))


# ---------------------------------------------------------------------------------------------
# resumable writing


def kill(writer):
    """Simulate a kill: the process dies without close(); every write was already flushed."""
    writer._f.close()  # only to release the descriptor; no rename, no cleanup


def test_resume_after_kill_with_torn_line(tmp_path):
    out = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"
    rs = recs(4)  # input order r0 r1 r2 r3
    w = ResumableWriter(str(out))
    assert w.done_ids() == set()
    w.write(rs[2])            # a long job finishes records out of input order
    w.write(rs[0].to_dict())  # dicts are accepted too
    kill(w)
    with open(partial, "a", encoding="utf-8") as f:  # killed in the middle of writing r3
        f.write(json.dumps(rs[3].to_dict())[:25])
    assert not out.exists()

    w = ResumableWriter(str(out))
    assert w.done_ids() == {"r2", "r0"}
    assert w.done_rows()["r0"] == rs[0].to_dict()
    # the torn line is gone from the partial file, so appending continues cleanly
    assert partial.read_text(encoding="utf-8").splitlines() == [
        json.dumps(rs[2].to_dict(), ensure_ascii=False), json.dumps(rs[0].to_dict(), ensure_ascii=False)]
    w.write(rs[3])
    w.write(rs[1])
    w.close(order=[r.id for r in rs])
    assert read_records(str(out)) == rs  # input order, nothing lost, nothing twice
    assert not partial.exists()
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_torn_line_that_parses_is_still_redone(tmp_path):
    # a kill between the object and its newline: the record is redone, not trusted
    out = tmp_path / "out.jsonl"
    w = ResumableWriter(str(out))
    w.write({"id": "a", "v": 1})
    kill(w)
    with open(str(out) + ".partial", "a", encoding="utf-8") as f:
        f.write('{"id": "b", "v": 2}')
    assert ResumableWriter(str(out)).done_ids() == {"a"}


def test_resume_twice(tmp_path):
    out = str(tmp_path / "out.jsonl")
    w = ResumableWriter(out)
    w.write({"id": "a"})
    kill(w)
    w = ResumableWriter(out)
    w.write({"id": "b"})
    kill(w)
    w = ResumableWriter(out)
    assert w.done_ids() == {"a", "b"}
    w.close(order=["b", "a"])
    assert [json.loads(x)["id"] for x in open(out, encoding="utf-8")] == ["b", "a"]


def test_close_with_missing_ids(tmp_path):
    out = tmp_path / "out.jsonl"
    w = ResumableWriter(str(out))
    w.write({"id": "a"})
    with pytest.raises(PrmkitError, match=r"2 records are not finished \(first: 'b'\)"):
        w.close(order=["a", "b", "c"])
    assert not out.exists()
    # the finished work is kept, so a rerun resumes
    assert ResumableWriter(str(out)).done_ids() == {"a"}


def test_close_without_order_keeps_write_order(tmp_path):
    out = tmp_path / "out.jsonl"
    w = ResumableWriter(str(out))
    w.write({"id": "b"})
    w.write({"id": "a"})
    w.close()
    assert [json.loads(x)["id"] for x in out.read_text(encoding="utf-8").splitlines()] == ["b", "a"]
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_no_resume_starts_fresh(tmp_path):
    out = tmp_path / "out.jsonl"
    w = ResumableWriter(str(out))
    w.write({"id": "a"})
    w.write({"id": "b"})
    kill(w)
    w = ResumableWriter(str(out), resume=False)
    assert w.done_ids() == set()
    assert (tmp_path / "out.jsonl.partial").read_text(encoding="utf-8") == ""
    w.write({"id": "c"})
    with pytest.raises(PrmkitError):  # a and b were thrown away
        w.close(order=["a", "b", "c"])
    w = ResumableWriter(str(out))
    assert w.done_ids() == {"c"}
    w.close(order=["c"])
    assert [json.loads(x)["id"] for x in out.read_text(encoding="utf-8").splitlines()] == ["c"]


def test_resumable_writer_missing_folder(tmp_path):
    for resume in (True, False):
        with pytest.raises(PrmkitError, match="does not exist"):
            ResumableWriter(str(tmp_path / "missing" / "out.jsonl"), resume=resume)
    assert os.listdir(tmp_path) == []


def test_resume_after_kill_inside_a_multibyte_character(tmp_path):
    out = str(tmp_path / "out.jsonl")
    w = ResumableWriter(out)
    w.write({"id": "a", "problem": "é"})
    kill(w)
    with open(out + ".partial", "ab") as f:
        f.write('{"id": "b", "problem": "é'.encode("utf-8")[:-1])  # cut inside "é"
    assert ResumableWriter(out).done_ids() == {"a"}


def test_resume_with_non_object_line(tmp_path):
    out = str(tmp_path / "out.jsonl")
    with open(out + ".partial", "w", encoding="utf-8") as f:
        f.write('{"id": "a"}\n[1, 2]\n')
    try:
        done = ResumableWriter(out).done_ids()
    except PrmkitError:
        return
    assert done == {"a"}



def test_check_resume_refuses_rows_of_another_run(tmp_path):
    out = str(tmp_path / "out.jsonl")
    w = ResumableWriter(out, sync=True)  # fsynced writes read back like flushed ones
    w.write({"id": "a", "meta": {"n": 4, "job": {"k": 2}}})
    kill(w)
    done = ResumableWriter(out).done_rows()
    mine = lambda row: row["id"] in {"a", "b"}  # noqa: E731
    check_resume(out, done, mine, {"n": 4, "seed": 1})  # a setting the row lacks is not compared
    with pytest.raises(PrmkitError, match=r"out.jsonl.partial was written with n=4, this run has n=8"):
        check_resume(out, done, mine, {"n": 8})
    with pytest.raises(PrmkitError, match="record 'a', which this run would not write"):
        check_resume(out, done, lambda row: False, {"n": 4})
    nested = lambda row: row["meta"]["job"]  # noqa: E731
    check_resume(out, done, mine, {"k": 2, "n": 8}, stored=nested)
    with pytest.raises(PrmkitError, match="k=2, this run has k=3"):
        check_resume(out, done, mine, {"k": 3}, stored=nested)


def test_discard_removes_the_partial_file(tmp_path):
    out = tmp_path / "out.jsonl"
    w = ResumableWriter(str(out))
    w.discard()
    assert os.listdir(tmp_path) == []
