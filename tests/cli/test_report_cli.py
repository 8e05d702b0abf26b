"""`repro report`: a claim whose experiment has no result says "not run"; long metrics and notes wrap, never cut."""
from repro.claims import headline_claims
from repro.report import NOT_RUN, build_report, format_report


def test_claims_without_a_result_are_not_run(tmp_path):
    rows = build_report(str(tmp_path))
    headline = {c["id"] for c in headline_claims()}
    mine = [r for r in rows if r["claim_id"] in headline]
    assert {r["claim_id"] for r in mine} == headline
    assert all(r["verdict"] == NOT_RUN for r in mine)
    assert "not reproduced" not in format_report(mine)


def test_long_metrics_and_notes_wrap_whole():
    metric = "max throughput ratio at the plateau, trace 0, 8 GPUs, sim-full-seed0, " * 2
    note = "a note " * 40
    row = {"claim_id": "c", "metric": metric, "paper": "1x-2x", "reproduced": 1.5, "unit": "x", "verdict": "inside",
           "note": note}
    text = format_report([row])
    assert text.split().count("sim-full-seed0,") == 2  # not broken at its hyphens
    words = " ".join(line[24:] for line in text.splitlines()[2:]).split()
    for word in metric.split():
        assert word in words
    assert "~" not in text and max(len(line) for line in text.splitlines()) <= 150
    assert " ".join(text.split()).count("a note") == 40
