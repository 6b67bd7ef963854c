"""The human report: grouping, collapsing, advice and the verdict line."""

from __future__ import annotations

from doctor_helpers import run_fixture

from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.report import make_console, render_findings, verdict_line


def f(check: str, severity: Severity, subject: str, observed: str = "x", advice: str = "") -> Finding:
    return Finding(id=check, severity=severity, subject=subject, observed=observed, advice=advice)


def render(findings: list[Finding], verbose: bool = False) -> str:
    console = make_console(width=160)
    with console.capture() as captured:
        render_findings(console, findings, title="t", verbose=verbose)
    return captured.get()


def test_ok_rows_collapse_but_problems_stay_alone() -> None:
    findings = [f("rdma.rate", Severity.OK, f"mlx5_{i}/1", "400") for i in range(3)]
    findings.insert(1, f("rdma.rate", Severity.WARN, "mlx5_9/1", "100", advice="check the cable"))
    text = render(findings)
    assert "mlx5_0/1" in text and "mlx5_9/1" in text and "2: mlx5_1/1 … mlx5_2/1" in text
    assert "advice:" in text and "warn rdma.rate [mlx5_9/1]: check the cable" in text
    assert "2: mlx5_1/1" not in render(findings, verbose=True)


def test_advice_names_at_most_six_subjects() -> None:
    findings = [f("probe.read", Severity.WARN, f"file{i}", advice="recapture") for i in range(9)]
    assert "file5 and 3 more]: recapture" in render(findings)


def test_verdict_line() -> None:
    assert verdict_line([], "h").plain == "verdict: OK (exit 0) on h: no findings"
    degraded = run_fixture("degraded-ib-8gpu").findings
    assert verdict_line(degraded, "gpu-node-07").plain.startswith("verdict: FAIL (exit 2) on gpu-node-07: 4 fail, ")
    info_only = [f("gpu.count", Severity.INFO, "h")]
    assert verdict_line(info_only, "h").plain == "verdict: OK (exit 0) on h: 1 info"
