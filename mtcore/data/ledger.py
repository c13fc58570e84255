"""The rejects ledger and `report.json`: nothing a stage drops disappears without a reason.

Every stage that drops rows writes them to a rejects table carrying `stage`,
`reason`, the deciding rule's `score` and a human-readable `detail`, and writes a
report whose counts reconcile: `input == kept + sum(rejected by reason)`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

REJECT_SCHEMA = pa.schema(
    [
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("origin", pa.string()),
        ("id", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("score", pa.float64()),  # the rule's score (null where a rule has none)
        ("detail", pa.string()),
    ]
)


class ReconciliationError(AssertionError):
    """A stage's counts do not add up: a row was lost or invented."""


def rejects_table(src, tgt, origin, ids, *, stage: str, reason, scores=None, details=None) -> pa.Table:
    """Build a rejects table; `reason` may be one string for all rows or one per row."""
    n = len(src)
    reasons = [reason] * n if isinstance(reason, str) else list(reason)
    return pa.table(
        {
            "src": list(src),
            "tgt": list(tgt),
            "origin": list(origin),
            "id": list(ids),
            "stage": [stage] * n,
            "reason": reasons,
            "score": list(scores) if scores is not None else [None] * n,
            "detail": list(details) if details is not None else [""] * n,
        },
        schema=REJECT_SCHEMA,
    )


@dataclass
class StageReport:
    """Counts for one stage; `reconcile()` proves that nothing went missing."""

    stage: str
    input: int
    kept: int
    rejected: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_tables(cls, stage: str, input_rows: int, kept: pa.Table, rejects: pa.Table, **extra) -> "StageReport":
        reasons = Counter(rejects.column("reason").to_pylist()) if len(rejects) else Counter()
        return cls(stage, input_rows, len(kept), dict(sorted(reasons.items())), dict(extra))

    @property
    def total_rejected(self) -> int:
        return sum(self.rejected.values())

    def reconcile(self) -> "StageReport":
        if self.input != self.kept + self.total_rejected:
            raise ReconciliationError(
                f"stage '{self.stage}': input {self.input} != kept {self.kept} + rejected {self.total_rejected} "
                f"({self.rejected})"
            )
        return self

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "input": self.input,
            "kept": self.kept,
            "rejected": self.rejected,
            "rejected_total": self.total_rejected,
            "reconciled": self.input == self.kept + self.total_rejected,
            **self.extra,
        }

    def summary_table(self) -> str:
        """A plain-text table for the console: reasons sorted by count, with shares of input."""
        rows = [("input", self.input), ("kept", self.kept)]
        rows += [(f"rejected: {r}", n) for r, n in sorted(self.rejected.items(), key=lambda kv: -kv[1])]
        width = max(len(name) for name, _ in rows) + 2
        lines = [f"stage: {self.stage}", f"{'':<{width}}{'rows':>10}{'share':>9}"]
        for name, count in rows:
            share = count / self.input if self.input else 0.0
            lines.append(f"{name:<{width}}{count:>10,}{share:>9.2%}")
        return "\n".join(lines)


def write_report(path: str | Path, reports: list[StageReport] | StageReport, **extra) -> Path:
    """Write `report.json`; every stage must reconcile before it is written."""
    reports = [reports] if isinstance(reports, StageReport) else reports
    for r in reports:
        r.reconcile()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"stages": [r.to_dict() for r in reports], **extra}
    if len(reports) == 1:
        body.update({k: v for k, v in reports[0].to_dict().items() if k != "stage"} | {"stage": reports[0].stage})
    path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
