"""bench.paired_rouge: the paired bootstrap against a loop written out here, and the command
on files, with its refusals."""

import numpy as np

from tests.cli_probe import assert_clean_failure, run_cli


def test_the_bootstrap_resamples_documents_as_a_plain_loop_does():
    from bench.paired_rouge import paired_bootstrap

    rng = np.random.default_rng(1)
    base, other = rng.random(50), rng.random(50) + 0.1
    mean, low, high = paired_bootstrap(base, other, samples=300, seed=7)
    picks = np.random.default_rng(7).integers(0, 50, size=(300, 50))
    means = sorted(np.mean([other[i] - base[i] for i in row]) for row in picks)
    # numpy's linear percentile of 300 sorted values: position p/100 * 299.
    def percentile(p):
        at = p / 100 * 299
        below = int(np.floor(at))
        return means[below] + (at - below) * (means[below + 1] - means[below])
    assert abs(mean - float(np.mean(other - base))) < 1e-12
    assert abs(low - percentile(2.5)) < 1e-12 and abs(high - percentile(97.5)) < 1e-12
    assert low < mean < high
    # The same summaries: no difference in any resampling.
    assert paired_bootstrap(base, base, samples=100, seed=0) == (0.0, 0.0, 0.0)


def test_the_command_reports_each_summarizer_against_the_base(tmp_path):
    ref = ["mưa lớn ở Hà_Nội hôm nay", "giá vàng tăng mạnh", "đội tuyển thắng trận"]
    (tmp_path / "ref").write_text("\n".join(ref) + "\n")
    (tmp_path / "same").write_text("\n".join(ref) + "\n")
    (tmp_path / "other").write_text("mưa lớn\ngiá vàng giảm\nthua trận\n")
    result = run_cli("bench.paired_rouge", "--ref", str(tmp_path / "ref"), "--base",
                     str(tmp_path / "same"), "--hyp", str(tmp_path / "other"),
                     str(tmp_path / "same"), "--samples", "200")
    assert result.code == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert "rouge1 100.00" in lines[0] and "(3 documents)" in lines[0]
    assert "rouge2 100.00 (+0.00, 95% [+0.00, +0.00])" in lines[2]
    assert "rouge1" in lines[1] and "(-" in lines[1]
    (tmp_path / "short").write_text("mưa\n")
    refused = run_cli("bench.paired_rouge", "--ref", str(tmp_path / "ref"), "--base",
                      str(tmp_path / "short"), "--hyp", str(tmp_path / "other"))
    assert_clean_failure(refused, 2, "--base", "1 lines for 3 references")
