"""The rejects ledger and report.json: counts must reconcile or nothing is written."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from mtcore.data.ledger import REJECT_SCHEMA, ReconciliationError, StageReport, rejects_table, write_report


def test_rejects_table_schema_and_per_row_reasons():
    table = rejects_table(["a", "b"], ["x", "y"], ["o", "o"], ["1", "2"], stage="clean", reason=["empty", "copy"], scores=[0.0, 1.0])
    assert table.schema == REJECT_SCHEMA
    assert table["reason"].to_pylist() == ["empty", "copy"]
    assert table["stage"].to_pylist() == ["clean", "clean"]


def test_report_counts_reasons_and_reconciles(tmp_path):
    kept = pa.table({"src": ["k"] * 7})
    rejects = rejects_table(["r"] * 3, [""] * 3, ["o"] * 3, ["1", "2", "3"], stage="clean", reason=["empty", "empty", "copy"])
    report = StageReport.from_tables("clean", 10, kept, rejects)
    assert report.rejected == {"copy": 1, "empty": 2}
    path = write_report(tmp_path / "report.json", report)
    body = json.loads(path.read_text())
    assert body["input"] == body["kept"] + sum(body["rejected"].values()) == 10
    assert body["reconciled"] is True and body["stages"][0]["stage"] == "clean"


def test_report_refuses_to_write_when_rows_are_lost(tmp_path):
    report = StageReport("clean", input=10, kept=7, rejected={"empty": 2})
    with pytest.raises(ReconciliationError, match="input 10 != kept 7 \\+ rejected 2"):
        write_report(tmp_path / "report.json", report)
    assert not (tmp_path / "report.json").exists()


def test_summary_table_lists_every_reason():
    text = StageReport("clean", 100, 90, {"empty": 6, "copy": 4}).summary_table()
    assert "rejected: empty" in text and "rejected: copy" in text and "90.00%" in text
