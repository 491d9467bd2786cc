"""Data in: a datasets folder (save_to_disk), an Arrow file and a Parquet file of each known
layout convert to the same records as its JSONL form, recognised by its columns; errors name
the row and the column. Everything is built locally; no hub is touched."""

from __future__ import annotations

import json

import pytest

pa = pytest.importorskip("pyarrow")

from prmkit.cli import main
from prmkit.errors import PrmkitError, RecordError
from prmkit.formats.detect import detect, read_records
from prmkit.records import Record
from prmkit.tables import parse_hub_name
from test_formats import MS_INPUT, MS_LABEL, PB, PRMB, STEPWISE, prm800k_line, step

NATIVE = [Record(id="a", problem="p", steps=["s1", "s2"], labels=[1.0, 0.0], meta={"k": 1}),
          Record(id="b", problem="q", steps=["t"], labels=[1.0], meta={"k": 2})]

LAYOUTS = {
    "prmkit": [r.to_dict() for r in NATIVE],
    "trl": [{"prompt": "p", "completions": ["a", "b"], "labels": [True, False]},
            {"prompt": "q", "completions": ["c"], "labels": [True]}],
    "math-shepherd": [{"input": MS_INPUT, "label": MS_LABEL, "task": "GSM8K"}],
    "processbench": PB,
    "prmbench": [PRMB, {**PRMB, "idx": "i1"}],
    "prm800k": [prm800k_line([step(1, texts=["Six sevens."]), step(1, -1, chosen=0,
                                                                   texts=["42", "43"])])],
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def as_arrow(path, rows, stream=False):
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(path), "wb") as sink:
        writer = (pa.ipc.new_stream if stream else pa.ipc.new_file)(sink, table.schema)
        writer.write_table(table)
        writer.close()
    return str(path)


def as_parquet(path, rows):
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def as_folder(path, rows):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return str(path)


def dicts(records):
    return [r.to_dict() for r in records]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", ["arrow", "stream", "parquet", "folder"])
def test_every_known_layout_reads_the_same_from_a_table(tmp_path, layout, kind):
    rows = LAYOUTS[layout]
    want = read_records(write_jsonl(tmp_path / "x.jsonl", rows))
    assert detect(str(tmp_path / "x.jsonl")) == layout
    make = {"arrow": as_arrow, "parquet": as_parquet, "folder": as_folder,
            "stream": lambda p, r: as_arrow(p, r, stream=True)}[kind]
    source = make(tmp_path / f"x.{ {'stream': 'arrow', 'folder': 'ds'}.get(kind, kind) }", rows)
    assert detect(source) == layout
    assert dicts(read_records(source)) == dicts(want)


def test_prm800k_stepwise_rows_read_from_any_table(tmp_path):
    rows = [{"answer": None, "is_human_response": False, "is_solution": False, **r}
            for r in STEPWISE]
    want = dicts(read_records(as_parquet(tmp_path / "s.parquet", rows)))
    assert dicts(read_records(as_arrow(tmp_path / "s.arrow", rows))) == want
    assert dicts(read_records(as_folder(tmp_path / "s", rows))) == want


def test_a_datasetdict_folder_with_one_split_and_with_two(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(LAYOUTS["trl"])
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "one"))
    assert len(read_records(str(tmp_path / "one"))) == 2
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(PrmkitError, match="name one"):
        read_records(str(tmp_path / "two"))
    assert len(read_records(str(tmp_path / "two" / "test"))) == 2


def test_errors_name_the_row_and_the_column(tmp_path):
    rows = LAYOUTS["trl"] + [{"prompt": "r", "completions": ["x"], "labels": [2.0]}]
    src = as_parquet(tmp_path / "bad.parquet", rows)
    with pytest.raises(RecordError, match=r"bad\.parquet: row 2: field 'labels'"):
        read_records(src)
    native = [r.to_dict() for r in NATIVE] + [{"id": "c", "problem": "p", "steps": ["x"],
                                               "labels": [1.0, 1.0], "meta": {"k": 3}}]
    with pytest.raises(RecordError, match=r"n\.arrow: row 2: field 'labels'"):
        read_records(as_arrow(tmp_path / "n.arrow", native))
    with pytest.raises(PrmkitError, match="not a known layout"):
        read_records(as_parquet(tmp_path / "u.parquet", [{"what": 1}]))


def test_commands_take_tables(tmp_path):
    src = as_parquet(tmp_path / "in.parquet", LAYOUTS["processbench"])
    out = tmp_path / "out.jsonl"
    assert main(["convert", "--from", "processbench", "--to", "prmkit", src, str(out)]) == 0
    jsonl = write_jsonl(tmp_path / "pb.jsonl", PB)
    assert dicts(read_records(str(out))) == dicts(read_records(jsonl))
    scored = [{**r.to_dict(), "step_scores": [0.9, 0.2]} for r in NATIVE[:1]] + \
             [{**NATIVE[1].to_dict(), "step_scores": [0.7]}]
    folder = as_folder(tmp_path / "scored", scored)
    jsonl = write_jsonl(tmp_path / "scored.jsonl", scored)
    for source, name in ((folder, "a"), (jsonl, "b")):
        assert main(["eval", "steps", "--input", source, "--output",
                     str(tmp_path / f"{name}.json")]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert {**a, "input": None} == {**b, "input": None}


def test_hub_names_parse_and_never_load_here():
    assert parse_hub_name("hf:trl-lib/math_shepherd") == ("trl-lib/math_shepherd", None, "train")
    assert parse_hub_name("hf:Qwen/ProcessBench::gsm8k") == ("Qwen/ProcessBench", None, "gsm8k")
    assert parse_hub_name("hf:a/b:c:test") == ("a/b", "c", "test")
    with pytest.raises(PrmkitError, match="expected hf:NAME"):
        parse_hub_name("hf:")


def test_hub_source_goes_through_load_dataset(monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load(name, config=None, split=None):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(LAYOUTS["trl"])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    want = read_records(write_jsonl(tmp_path / "t.jsonl", LAYOUTS["trl"]))
    assert dicts(read_records("hf:trl-lib/x:default:test")) == dicts(want)
    assert calls[-1] == ("trl-lib/x", "default", "test")


def test_problems_and_paths_read_from_tables_too(tmp_path):
    """generate reads its problems through the same rows; a pathlib path is a path."""
    from pathlib import Path

    assert main(["lab", "problems", "--n", "3", "--seed", "1", "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    src = as_parquet(tmp_path / "p.parquet", rows)
    for name, source in (("a", str(tmp_path / "p.jsonl")), ("b", src)):
        assert main(["generate", "--policy", "lab", "--input", source, "-n", "2",
                     "--output", str(tmp_path / f"{name}.jsonl")]) == 0
    assert dicts(read_records(str(tmp_path / "a.jsonl"))) == \
        dicts(read_records(str(tmp_path / "b.jsonl")))
    assert dicts(read_records(Path(src))) == dicts(read_records(src))
