"""bench.duel: the alternation of the two sides, the ratios, and the worker protocol
(bench/precision_ct2.py --serve's), against hand-computed values and a stand-in worker."""

from __future__ import annotations

import sys
import textwrap

import pytest

from bench import duel


def test_summary_against_hand_computed_values():
    ours = [[0.001, 0.002, 0.003], [0.002, 0.002, 0.002]]
    theirs = [[0.002, 0.004, 0.006], [0.001, 0.001, 0.001]]
    s = duel.summary(ours, theirs)
    # Over every call: theirs' median 1.5 ms, ours' 2 ms.
    assert s["ours_ms"]["median"] == pytest.approx(2.0)
    assert s["ct2_ms"]["median"] == pytest.approx(1.5)
    assert s["ratio"] == pytest.approx(0.75)
    # Per round: 4 / 2 = 2 (ours won), 1 / 2 = 0.5 (theirs won).
    assert s["round_ratios"] == pytest.approx([2.0, 0.5])
    assert s["ratio_round_median"] == pytest.approx(1.25)
    assert (s["rounds_won"], s["rounds"]) == (1, 2)
    assert s["ours_ms"]["calls"] == s["ct2_ms"]["calls"] == 6


def test_duel_swaps_the_order_every_round_and_asks_each_cell_its_calls():
    log = []

    def side(name):
        def run(cell, n):
            log.append((name, cell, n))
            return [0.001 * (1 + len(log))] * n
        return run

    cells = [(1, 1), (16, 4)]
    samples = duel.duel(side("ours"), side("theirs"), cells, rounds=3,
                        calls=lambda cell: 5 if cell[0] == 1 else 2, rest=0.0)
    assert log == [
        ("ours", (1, 1), 5), ("theirs", (1, 1), 5), ("ours", (16, 4), 2),
        ("theirs", (16, 4), 2),
        ("theirs", (1, 1), 5), ("ours", (1, 1), 5), ("theirs", (16, 4), 2),
        ("ours", (16, 4), 2),
        ("ours", (1, 1), 5), ("theirs", (1, 1), 5), ("ours", (16, 4), 2),
        ("theirs", (16, 4), 2)]
    assert [len(r) for r in samples[(1, 1)]["ours"]] == [5, 5, 5]
    assert len(samples[(16, 4)]["theirs"]) == 3


_STAND_IN = textwrap.dedent("""
    import json, sys, time
    for line in sys.stdin:
        batch, beam, calls = map(int, line.split())
        if batch == 0:
            print(json.dumps({"error": "expected 32 tokens per row, got {31}"}), flush=True)
        elif batch < 0:
            sys.exit("worker gave up")
        else:
            seconds = []
            for _ in range(calls):
                start = time.perf_counter()
                time.sleep(0.002 * beam)
                seconds.append(time.perf_counter() - start)
            print(json.dumps(seconds), flush=True)
""")


def test_worker_protocol_with_a_stand_in():
    worker = duel.Worker([sys.executable, "-c", _STAND_IN])
    try:
        seconds = worker(1, 2, 3)
        assert len(seconds) == 3 and all(0.004 <= s < 0.5 for s in seconds)
        with pytest.raises(RuntimeError, match="expected 32 tokens"):
            worker(0, 1, 1)
        with pytest.raises(RuntimeError, match="worker gave up"):
            worker(-1, 1, 1)
    finally:
        worker.close()
    assert worker.proc.poll() is not None


def test_ct2_serve_takes_one_config():
    from bench import precision_ct2

    with pytest.raises(SystemExit):
        precision_ct2.main(["--peers-dir", ".", "--compute-type", "float32", "--serve"])
    with pytest.raises(SystemExit):  # neither --out nor --serve
        precision_ct2.main(["--peers-dir", ".", "--compute-type", "float32"])


def test_duel_rejects_a_malformed_pair(capsys):
    with pytest.raises(SystemExit):
        duel.main(["--pairs", "float16"])
    assert "write ours:ct2" in capsys.readouterr().err


@pytest.mark.parametrize("bad, message", [
    (["--rounds", "0"], "argument --rounds: 0 is out of range: give an integer at least 1"),
    (["--calls", "-2"], "argument --calls: -2 is out of range: give an integer at least 1"),
    (["--batches", "0"], "argument --batches: 0 is out of range: give an integer at least 1"),
    (["--rest", "-1"], "argument --rest: -1 is out of range: give a number in [0, 60]")])
def test_duel_rejects_counts_that_time_nothing(bad, message, capsys):
    with pytest.raises(SystemExit):
        duel.main(bad)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_report_shows_the_duel(tmp_path):
    from bench import common, report

    row = {"config": "small", "batch": 1, "beam": 4, "ours": "onnx-search:float32",
           "ct2": "float32", "ct2_use_mkl": "0",
           **duel.summary([[0.001, 0.002, 0.003], [0.002, 0.002, 0.002]],
                          [[0.002, 0.004, 0.006], [0.001, 0.001, 0.001]])}
    common.write_json(tmp_path / "duel.json", {"results": [row]})
    text = report.build(tmp_path, tmp_path / "no_peers")
    assert "## Against CTranslate2, call by call" in text
    # The same row as bench.duel prints: over every call 1.5 / 2.0 ms, per round 2 and 0.5.
    line = "| small | 1 | 4 | onnx-search:float32 | float32 | 2.0 | 1.5 (0) | 0.75 | 1.25 | 1/2 |"
    assert line in text
    headers, rows = duel.table_of([row])
    assert "| " + " | ".join(map(str, rows[0])) + " |" == line
    assert headers[-2:] == ["round median", "rounds won"]


def test_python_m_bench_runs_the_duel_on_the_peer_configs_only():
    from bench.__main__ import commands

    class Args:
        quick, results, configs = False, "out", ["demo", "base"]

    (command,) = commands("duel", Args)
    assert command[1:] == ["-m", "bench.duel", "--configs", "base", "--results", "out"]
