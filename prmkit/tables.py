"""Tables as input: a Hugging Face ``datasets`` folder (``save_to_disk``), an Arrow file, a
Parquet file, or ``hf:NAME[:CONFIG][:SPLIT]`` (read through ``datasets.load_dataset``, where a
hub is reachable).

Every reader of records goes through :func:`prmkit.records.iter_jsonl`, which hands a table's
rows out as it hands out a JSONL file's lines: one dict per row, numbered from 1 as
:class:`prmkit.errors.TableRow`, so a converter reads a table with no change, the ids it makes
from the line number are the ids of the same data as JSONL, and an error names the row (from
0) and the column: ``FILE: row N: field 'X': ...``.

A ``save_to_disk`` folder of a ``DatasetDict`` is read when it holds one split; with several,
name one (``DIR/train``). Reading a folder needs only pyarrow (its Arrow files are read
directly when ``datasets`` is not installed); ``hf:`` needs ``datasets``.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Iterator

from prmkit.errors import PrmkitError, RecordError, TableRow

HF_PREFIX = "hf:"
ARROW_MAGIC = b"ARROW1"
PARQUET_MAGIC = b"PAR1"
STREAM_MAGIC = b"\xff\xff\xff\xff"


def _head(path: str, n: int = 8) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_datasets_folder(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name))
        for name in ("state.json", "dataset_info.json", "dataset_dict.json"))


def table_kind(path: str) -> str | None:
    """hf, folder, parquet or arrow: what kind of table ``path`` is (None: not a table)."""
    path = os.fspath(path)
    if path.startswith(HF_PREFIX):
        return "hf"
    if path == "-":
        return None
    if is_datasets_folder(path):
        return "folder"
    if os.path.isfile(path):
        head = _head(path)
        if path.endswith(".parquet") or head.startswith(PARQUET_MAGIC):
            return "parquet"
        if path.endswith(".arrow") or head.startswith((ARROW_MAGIC, STREAM_MAGIC)):
            return "arrow"
    return None


def is_table(path: str) -> bool:
    return table_kind(path) is not None


def read_table(path: str) -> Any:
    """The whole table at ``path`` as a ``pyarrow.Table``."""
    path = os.fspath(path)
    kind = table_kind(path)
    if kind is None:
        raise PrmkitError(f"{path}: not a datasets folder, Arrow or Parquet file, or hf:NAME")
    if kind == "hf":
        return _load_hub(path)
    _pyarrow()
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if kind == "arrow":
            return _arrow_file(path)
        return _folder(path)
    except PrmkitError:
        raise
    except Exception as e:  # pyarrow raises several types for a file it cannot read
        raise PrmkitError(f"{path}: cannot read as {kind} ({type(e).__name__}: {e})") from None


def column_names(path: str) -> list[str]:
    return list(read_table(path).column_names)


def iter_rows(path: str, batch_rows: int = 1024) -> Iterator[tuple[TableRow, dict[str, Any]]]:
    """``(row, dict)`` for every row of the table; ``row`` counts from 1, like a line. A field
    that some rows lack is null in the others (a table gives every row every column), which
    the converters read as they read a JSONL null."""
    table = read_table(path)
    n = 0
    for batch in table.to_batches(max_chunksize=batch_rows):
        for row in batch.to_pylist():
            n += 1
            yield TableRow(n), row


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise PrmkitError("reading Arrow, Parquet and datasets folders needs pyarrow: "
                          "pip install 'prmkit[data]'") from None
    return pyarrow


def _arrow_file(path: str) -> Any:
    import pyarrow as pa

    with pa.memory_map(path) as source:
        head = source.read(6)
        source.seek(0)
        reader = pa.ipc.open_file(source) if head == ARROW_MAGIC else pa.ipc.open_stream(source)
        return reader.read_all()


def _folder(path: str) -> Any:
    """A ``save_to_disk`` folder: its Arrow files, in the order ``state.json`` lists them."""
    import pyarrow as pa

    dict_file = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(dict_file):
        with open(dict_file, encoding="utf-8") as f:
            splits = json.load(f).get("splits", [])
        if len(splits) != 1:
            raise PrmkitError(f"{path}: a DatasetDict with the splits {', '.join(splits)}; "
                              f"name one, e.g. {os.path.join(path, splits[0] if splits else 'train')}")
        return _folder(os.path.join(path, splits[0]))
    state_file = os.path.join(path, "state.json")
    if not os.path.isfile(state_file):
        raise PrmkitError(f"{path}: a datasets folder without state.json")
    with open(state_file, encoding="utf-8") as f:
        files = [d["filename"] for d in json.load(f).get("_data_files", [])]
    if not files:
        raise PrmkitError(f"{path}/state.json: lists no data files")
    tables = [_arrow_file(os.path.join(path, name)) for name in files]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def parse_hub_name(source: str) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG][:SPLIT]`` -> (name, config, split); the split defaults to train."""
    parts = source[len(HF_PREFIX):].split(":")
    if not parts[0] or len(parts) > 3:
        raise PrmkitError(f"{source!r}: expected hf:NAME, hf:NAME:CONFIG or hf:NAME:CONFIG:SPLIT")
    name = parts[0]
    config = parts[1] if len(parts) > 1 and parts[1] else None
    split = parts[2] if len(parts) > 2 and parts[2] else "train"
    return name, config, split


def _load_hub(source: str) -> Any:
    name, config, split = parse_hub_name(source)
    try:
        import datasets
    except ImportError:
        raise PrmkitError(f"{source}: reading a hub dataset needs datasets: "
                          f"pip install 'prmkit[data]'") from None
    try:
        with _offline_unless_reachable():   # a cached copy still loads; no minute of retries
            ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # network, missing dataset, bad config: all reported in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PrmkitError(f"{source}: cannot load ({first}). Where the hub cannot be reached, "
                          f"download it where it can (hf download {name} --repo-type dataset "
                          f"--local-dir DIR) and pass a Parquet file or datasets folder from "
                          f"DIR") from None
    return ds.with_format("arrow")[:]


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub's host cannot be reached at once, or None when it answers."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname or "huggingface.co",
                                  url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
        return None
    except OSError as e:
        return f"{url.hostname} cannot be reached ({e.strerror or type(e).__name__})"


@contextlib.contextmanager
def _offline_unless_reachable(timeout: float = 3.0) -> Iterator[None]:
    """Within: datasets and huggingface_hub in offline mode when the hub's host cannot be
    reached at once (they would retry for most of a minute), so a cached dataset still loads
    and a missing one fails at once."""
    import datasets
    from huggingface_hub import constants

    if hub_unreachable(timeout) is None:
        yield
        return
    before = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = before


# ---------------------------------------------------------------------------------------------
# a file that holds one JSON list


def kind_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def peek(path: str, size: int = 64) -> bytes:
    """The first bytes of a file (empty for standard input, which cannot be peeked, and for a
    table that is not one file: a datasets folder, ``hf:NAME``)."""
    if path == "-" or str(path).startswith(HF_PREFIX) or is_datasets_folder(path):
        return b""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except FileNotFoundError:
        raise PrmkitError(f"{path}: no such file") from None
    except OSError as e:
        raise PrmkitError(f"{path}: cannot open ({e.strerror})") from None


def is_json_list(path: str) -> bool:
    """Whether the file holds one JSON list (first non-space character ``[``) and not JSONL."""
    if path == "-" or is_table(path) or os.path.isdir(path):
        return False
    head = peek(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def iter_json_list(path: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, object)`` for each element of a file that holds one JSON list."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise PrmkitError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise RecordError(f"invalid JSON: {e.msg} (column {e.colno})", path, e.lineno) from None
    except UnicodeDecodeError:
        raise RecordError("not valid UTF-8 text", path) from None
    if not isinstance(data, list):
        raise RecordError(f"expected a JSON list of records, got {kind_name(data)}", path)
    yield from enumerate(data)
