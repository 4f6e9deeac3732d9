import pytest

from keras_transformer.text.summary_stats import summary_statistics


def test_statistics_equal_hand_counts():
    articles = ["Mưa lớn ở Hà_Nội hôm_nay .", "Giá vàng tăng mạnh ."]
    summaries = [
        "mưa lớn ở Sài_Gòn",  # bigrams: mưa lớn, lớn ở (seen), ở sài, sài gòn (new)
        "giá vàng giá vàng giá vàng \u2047",  # trigram "giá vàng giá" twice
    ]
    stats = summary_statistics(summaries, articles)
    # Bigrams: summary 1 has 4 (2 novel), summary 2 has 5: "giá vàng" x3 seen, "vàng giá" x2
    # novel -> 4 novel of 9. Trigrams: 3 (2 novel) and 4 (all novel) -> 6 of 7.
    assert stats["novel_bigrams"] == pytest.approx(100 * 4 / 9, abs=0.01)
    assert stats["novel_trigrams"] == pytest.approx(100 * 6 / 7, abs=0.01)
    assert stats["repeated_trigram_summaries"] == 50.0
    assert stats["unk_summaries"] == 50.0
    assert stats["mean_tokens"] == (5 + 6) / 2


def test_a_summary_that_copies_its_article_is_not_novel():
    article = "Công_an tỉnh Sóc_Trăng triệu_tập em Hào . Hào tập lái_xe ."
    stats = summary_statistics([article.split(" . ")[0]], [article])
    assert stats["novel_bigrams"] == stats["novel_trigrams"] == 0.0


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="2 summaries for 1 articles"):
        summary_statistics(["a", "b"], ["a"])
