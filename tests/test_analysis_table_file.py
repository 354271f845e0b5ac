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
