"""bench.stream_scale's goals from its runs, against ratios worked by hand."""

import pytest

from bench.stream_scale import goals_of, parse_args


def row(tokens, rss, first=10.0):
    return {"target_tokens_per_s": tokens, "peak_rss_mb": rss, "first_step_s": first}


def test_alternated_runs_compare_by_their_medians():
    runs = [row(1000, 2000), row(990, 2100), row(1200, 2000), row(1100, 2080),
            row(1100, 2000), row(1050, 2090), row(900, 2300, first=55.0)]
    goals = goals_of(runs, 3)
    # In memory 1000, 1200, 1100 (median 1100); streamed 990, 1100, 1050 (median 1050).
    assert goals["tokens_per_s_stream_over_memory"] == pytest.approx(1050 / 1100, abs=1e-3)
    assert goals["peak_rss_large_over_small"] == pytest.approx(2300 / 2090, abs=1e-3)
    assert goals["first_step_s_large"] == 55.0
    assert goals["tokens_per_s_spread"] == {"in_memory": 1.2, "streamed": 1.111}


def test_one_run_each_gives_the_plain_ratios():
    goals = goals_of([row(1000, 2000), row(880, 2100), row(900, 2200)], 1)
    assert goals["tokens_per_s_stream_over_memory"] == 0.88
    assert "tokens_per_s_spread" not in goals
    assert parse_args(["--repeats", "4"]).repeats == 4
    with pytest.raises(SystemExit):
        parse_args(["--repeats", "0"])
