import numpy as np
import pytest

from streampunct.evaluation.scores import evaluate
from streampunct.text.word_labels import read_word_labels
from tests.conftest import SHIPPED_TEST_DATA

O, C, P, Q = 0, 1, 2, 3  # noqa: E741


def test_hand_computed_example():
    gold = [O, C, O, P, Q, C, O, P, O, C]
    pred = [O, C, C, P, P, O, O, P, Q, P]
    # COMMA: tp=1 (i1), fp=1 (i2), fn=2 (i5 miss, i9 wrong) -> P 50, R 33.33, F1 40
    # PERIOD: tp=2 (i3, i7), fp=2 (i4, i9), fn=0 -> P 50, R 100, F1 66.67
    # QUESTION: tp=0, fp=1 (i8), fn=1 (i4) -> 0/0/0
    # micro: tp=3, fp=4, fn=3 -> P 42.857, R 50, F1 46.154
    r = evaluate(gold, pred)
    assert r.per_class["COMMA"] == pytest.approx((50.0, 100 / 3, 40.0))
    assert r.per_class["PERIOD"] == pytest.approx((50.0, 100.0, 200 / 3))
    assert r.per_class["QUESTION"] == pytest.approx((0.0, 0.0, 0.0))
    assert r.overall == pytest.approx((300 / 7, 50.0, 2 * (300 / 7) * 50 / (300 / 7 + 50)))
    assert r.macro_f1 == pytest.approx((40.0 + 200 / 3 + 0.0) / 3)
    assert r.confusion[C].tolist() == [1, 1, 1, 0]  # gold COMMA: i1 right, i5 missed, i9 -> PERIOD
    assert r.confusion.sum() == 10
    assert r.to_dict()["overall_f1"] == round(r.overall_f1, 2)


def test_confusion_rows_are_gold():
    r = evaluate([C, C, P], [O, P, P])
    assert r.confusion.tolist() == [[0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]]


def test_length_mismatch_and_bad_ids():
    with pytest.raises(ValueError, match="gold has 2 labels but prediction has 1"):
        evaluate([O, C], [O])
    with pytest.raises(ValueError, match="label ids must be in 0..3"):
        evaluate([O, 7], [O, O])


def test_gold_as_prediction_scores_100_on_test2011():
    data = read_word_labels(SHIPPED_TEST_DATA / "test2011")
    r = evaluate(data.labels, data.labels)
    assert r.overall_f1 == 100.0
    assert r.macro_f1 == 100.0
    assert r.n_words == 12626
    assert np.count_nonzero(r.confusion - np.diag(np.diag(r.confusion))) == 0
