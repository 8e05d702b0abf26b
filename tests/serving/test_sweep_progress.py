"""One bar for a whole `repro run` of simulated points (repro/progress.py BarLog.taken, repro/serving/sweep.py):
it counts the points done of those known so far, across every group and phase, on stderr only, with the run's
log lines."""
import re


def test_a_run_of_simulated_points_shows_one_bar_of_all_its_points(tmp_path, monkeypatch, capsys):
    from repro.cli import main
    monkeypatch.setenv("REPRO_PROGRESS", "1")
    main(["run", "--experiment", "e2e", "--quick", "--param", "traces=0,3", "--param", "seeds=1",
          "--param", "short_requests=40", "--param", "long_requests=8", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    points = [line for line in err.replace("\r", "\n").splitlines() if " steady out tok/s " in line]
    states = re.findall(r"e2e points:[^|]*\|[^|]*\| *(\d+)/(\d+)", err.replace("\r", "\n"))
    assert points and states and "simulated points" not in err  # no bar of its own per phase or group
    done, known = map(int, states[-1])
    assert done == known == len(points)
    assert all(int(d) <= int(k) <= len(points) for d, k in states)
    assert "e2e points" not in out and " steady out tok/s " not in out
