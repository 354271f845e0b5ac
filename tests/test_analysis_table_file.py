"""The result tables' one writer and one reader: what is written reads back exactly."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.analysis.table_file import read_table_file, write_table_file
from flyviz.errors import InputError

COLUMNS = {"name": ["a", "b,c", 'd"e'], "count": [1, 2, 3],
           "value": [0.1, 1 / 3, float(np.nextafter(1.0, 2.0))]}


def _fail(text: str) -> Exception:
    return ValueError(text)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_written_table_reads_back_with_its_metadata_and_exact_floats(tmp_path, kind):
    if kind == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"t.{kind}"
    info = {"format": "test", "nested": {"x": [1, 2]}}
    write_table_file(out, COLUMNS, info, kind, csv_prefix="# test ", parquet_key=b"test",
                     what="test table", types={"name": "string", "count": "int64"})
    got_info, rows = read_table_file(out, kind, csv_prefix="# test ", parquet_key=b"test",
                                     what="test table", error=_fail, damaged=_fail)
    assert got_info == info
    assert [r["name"] for r in rows] == COLUMNS["name"]
    assert [int(r["count"]) for r in rows] == COLUMNS["count"]
    assert [float(r["value"]) for r in rows] == COLUMNS["value"]  # bit for bit
    assert not list(tmp_path.glob("*.writing"))


def test_a_table_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "missing" / "t.csv"
    with pytest.raises(InputError, match="cannot write"):
        write_table_file(out, COLUMNS, {}, "csv", csv_prefix="# test ", parquet_key=b"test",
                         what="test table")
    assert not (tmp_path / "missing").exists()


def test_a_csv_tables_text_is_each_row_as_the_csv_writer_writes_it(tmp_path):
    """The CSV is written column by column (a screen writes every neuron of every set), and its
    text is still each row as csv.writer writes it with every float as its repr: tables
    written before read back, and folders written by either stay byte for byte the same."""
    import csv
    import io

    columns = {
        "floats": np.array([0.0, -0.0, 1 / 3, 1e-300, np.inf, np.nan, 2.5e17]),
        "float32": np.array([0.1, 1.5, -2.0, 3.25, 0.0, 7.0, 1e-8], dtype=np.float32),
        "ints": np.array([0, -1, 2**40, 3, 4, 5, 6], dtype=np.int64),
        "flags": np.array([True, False, True, False, False, True, True]),
        "mixed": [1, 0.5, None, "x,y", 'say "hi"', "", "line\nbreak"],
        "words": np.array(["a", "b", "c,d", "", "e", "f", "g"]),
    }
    out = tmp_path / "t.csv"
    write_table_file(out, columns, {}, "csv", csv_prefix="# test ", parquet_key=b"test",
                     what="test table")
    body = io.StringIO()
    writer = csv.writer(body, lineterminator="\n")
    writer.writerow(list(columns))
    values = [v.tolist() if hasattr(v, "tolist") else v for v in columns.values()]
    for row in zip(*values):
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    text = out.read_text(encoding="utf-8")
    assert text.split("\n", 1)[1] == body.getvalue()
    assert "0.3333333333333333" in text and "0.10000000149011612" in text  # the float32's
