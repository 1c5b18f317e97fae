from benchmarks.text_checks import capitals_after_no_mark, check_texts, spacing_faults


def test_a_capital_counts_only_after_a_word_without_a_sentence_mark():
    tokens = "Is there anything else They wanted? Yes. I think I'm done, Monday then".split()
    count, examples = capitals_after_no_mark(tokens)
    assert count == 2 and examples == ["else They", "done, Monday"]  # "I", "I'm" and sentence starts do not count


def test_spacing_faults_are_double_spaces_edge_spaces_and_spaces_before_marks():
    assert spacing_faults(["Hello, world.", "And then"]) == 0
    assert spacing_faults(["Hello  world", " and", "so ."]) == 3


def test_checks_run_over_pieces_that_follow_one_another():
    c = check_texts(["So is there anything else", "They wanted to know.", ""])
    assert (c.words, c.capitals_after_no_mark, c.spacing_faults) == (9, 1, 0)
    assert c.to_dict()["capitals_after_no_mark_per_1000_words"] == round(1000 / 9, 3)


def test_capitals_written_by_one_side_only_are_compared_word_for_word():
    from benchmarks.text_checks import compare_capitals

    stream = ["So is there anything else They wanted.", "We met John there"]
    offline = ["So is there anything else. They wanted.", "We met John there"]
    both = compare_capitals(stream, offline)
    assert both["stream_only"] == 1 and both["offline_only"] == 0  # John is on both sides
    assert both["stream_only_examples"] == ["else They (offline: else. They)"]
    assert compare_capitals(["a b"], ["a"]) is None


def test_a_final_that_opens_with_a_clitic_joins_the_word_before():
    from benchmarks.text_checks import join_pieces

    assert join_pieces(["I do", "n't know. It", "'s", "", "fine."]) == "I don't know. It's fine."


def test_sessions_are_checked_apart_so_no_capital_counts_across_two():
    """A stream ends with a flush (its last word takes no mark) and the next session opens with a
    capital: joined, that would be a capital after no mark that nobody wrote."""
    from benchmarks.text_checks import check_sessions, compare_capitals_by_session

    stream = [["So we went", "home"], ["Then it rained."]]
    offline = [["So we went home."], ["Then it rained."]]
    assert check_texts([t for s in stream for t in s]).capitals_after_no_mark == 1  # "home Then"
    checks = check_sessions(stream)
    assert (checks.words, checks.capitals_after_no_mark, checks.spacing_faults) == (7, 0, 0)
    both = compare_capitals_by_session(stream, offline)
    assert (both["stream_only"], both["offline_only"]) == (0, 0)
    stream[1] = ["Then It rained."]
    both = compare_capitals_by_session(stream, offline)
    assert both["stream_only"] == 1 and both["stream_only_examples"] == ["Then It (offline: Then it)"]
    assert both["stream_only_per_1000_words"] == round(1000 / 7, 3)
    assert compare_capitals_by_session([["a b"]], [["a"]]) is None
