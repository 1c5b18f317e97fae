"""Truecasing scores: the rules, the learned head, and the metric itself."""

import pytest

from streampunct.evaluation.case import case_report, evaluate_case, rule_cases
from streampunct.labels import CAPITALIZED, COMMA, LOWER, MIXED, PERIOD, QUESTION, UPPER, O


def test_rule_cases_follow_sentence_ends_and_i():
    words = ["so", "i", "think", "nasa", "works", "right", "yes"]
    labels = [COMMA, O, O, O, O, QUESTION, PERIOD]
    assert rule_cases(words, labels) == [CAPITALIZED, CAPITALIZED, LOWER, LOWER, LOWER, LOWER, CAPITALIZED]
    learned = [LOWER, LOWER, LOWER, UPPER, LOWER, LOWER, LOWER]
    assert rule_cases(words, labels, learned)[3] == UPPER
    assert rule_cases(["iphone"], [O], [MIXED]) == [CAPITALIZED]  # shown as render shows it


def test_case_report_counts():
    gold = [LOWER, CAPITALIZED, UPPER, LOWER, -1]
    pred = [LOWER, CAPITALIZED, CAPITALIZED, CAPITALIZED, UPPER]
    r = case_report(gold, pred)
    assert r["words"] == 4 and r["accuracy"] == 50.0
    # non-lower: gold {1, 2}, predicted {1, 2, 3} -> P 2/3, R 1
    assert r["non_lower"] == {"precision": 66.67, "recall": 100.0, "f1": 80.0}
    assert r["per_class"]["upper"]["recall"] == 0.0 and r["per_class"]["lower"]["support"] == 2


class FakePunctuator:
    def __init__(self, cases):
        self.cases = cases

    def labels_and_cases(self, words):
        return [PERIOD if w == "home" else O for w in words], self.cases(words)


def test_evaluate_case_scores_rules_and_learned_head():
    text = "NASA went home. Then John left."
    no_head = evaluate_case(FakePunctuator(lambda ws: None), text)
    assert not no_head["has_case_head"] and "learned" not in no_head
    assert no_head["rules"]["accuracy"] == pytest.approx(100 * 4 / 6, abs=0.01)  # NASA, John missed
    head = evaluate_case(FakePunctuator(lambda ws: [UPPER if w == "nasa" else CAPITALIZED if w == "john" else LOWER
                                                    for w in ws]), text)
    assert head["learned"]["accuracy"] == 100.0


def test_mid_sentence_report_counts_a_missed_periods_capital_as_false():
    from streampunct.evaluation.case import mid_sentence_report

    # gold: "Is there anything else? Alright, John said NASA. I left."
    words = "is there anything else alright john said nasa i left".split()
    gold_labels = [O, O, O, QUESTION, COMMA, O, O, PERIOD, O, PERIOD]
    gold_cases = [CAPITALIZED, LOWER, LOWER, LOWER, CAPITALIZED, CAPITALIZED, LOWER, UPPER, CAPITALIZED, LOWER]
    # the model missed the question mark and the period after "nasa" ("I" is left out: a rule)
    labels = [O, O, O, O, COMMA, O, O, O, O, PERIOD]
    shown = [CAPITALIZED, LOWER, LOWER, LOWER, CAPITALIZED, CAPITALIZED, LOWER, UPPER, CAPITALIZED, LOWER]
    r = mid_sentence_report(words, labels, shown, gold_labels, gold_cases)
    # mid-sentence: words 1-7 and 9; names there: john, nasa; shown capitals: alright, john, nasa
    assert r["mid_sentence"] == 8 and r["words"] == 10
    assert r["non_lower"] == {"precision": 66.67, "recall": 100.0, "f1": 80.0}
    assert r["sentence_start_capitals"] == 100.0 and r["other_false_capitals"] == 0.0  # 1 in 10 words
    demoted = [*shown[:4], LOWER, *shown[5:]]
    assert mid_sentence_report(words, labels, demoted, gold_labels, gold_cases)["non_lower"]["f1"] == 100.0
    with pytest.raises(ValueError, match="lengths differ"):
        mid_sentence_report(words[:-1], labels, shown, gold_labels, gold_cases)


def test_the_command_checks_its_output_and_input_before_the_run(tmp_path, capsys):
    from streampunct.evaluation.case import main

    data = tmp_path / "cased.txt"
    data.write_text("Hello there. How are you?\n")
    with pytest.raises(SystemExit) as done:
        main(["--data", str(data), "--json", str(data / "r.json"), "--model", str(tmp_path)])  # under a file
    assert done.value.code == 2 and "cannot write --json" in capsys.readouterr().err
    data.write_text("  \n")
    assert main(["--data", str(data), "--model", str(tmp_path)]) == 2
    assert f"{data} holds no words" in capsys.readouterr().err
    data.write_text("hello\tCOMMA\nthere\tPERIOD\n")  # an IWSLT labels file has no case to score
    assert main(["--data", str(data), "--model", str(tmp_path)]) == 2
    assert "holds word<TAB>LABEL lines (no case to score)" in capsys.readouterr().err


def test_case_report_refuses_predictions_of_another_length():
    # a numpy boolean-index IndexError before; now the same refusal as mid_sentence_report's
    with pytest.raises(ValueError, match="lengths differ: 2 gold case classes, 3 predicted"):
        case_report([LOWER, CAPITALIZED], [LOWER, CAPITALIZED, UPPER])
    with pytest.raises(ValueError, match="lengths differ: 0 gold case classes, 1 predicted"):
        case_report([], [LOWER])
    # nothing to score: every figure is 0, not a division by zero
    assert case_report([], [])["non_lower"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert case_report([-1], [UPPER])["words"] == 0
