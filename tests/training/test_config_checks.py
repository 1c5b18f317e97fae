"""validate() refuses values that would fail only later (after the training, or deep in torch),
each with a message naming the key."""

import pytest

from streampunct.errors import InputError
from training.config import load_config


@pytest.mark.parametrize(("override", "key"), [
    ("eval.tune_sizes=[10]", "eval.tune_sizes"),           # no window of the grid fits
    ("eval.tune_sizes=[]", "eval.tune_sizes"),
    ("eval.tune_lefts=[]", "eval.tune_lefts"),
    ("eval.tune_rights=[]", "eval.tune_rights"),
    ("eval.tune_lefts=[-5]", "eval.tune_lefts"),
    ("eval.tune_rights=[10, -1]", "eval.tune_rights"),
    ("eval.tune_sizes=[0]", "eval.tune_sizes"),
])
def test_an_impossible_window_grid_is_refused(override, key):
    with pytest.raises(InputError, match=key):
        load_config(None, ["eval.tune_windows=true", override])


def test_the_grid_rule_is_the_tuners():
    """The check keeps what training.window_tuning.window_grid keeps (an empty grid there is the
    `ValueError: empty window grid` at the end of a training run)."""
    from training.config import tuning_grid
    from training.window_tuning import window_grid

    cfg = load_config(None, ["eval.tune_windows=true", "eval.tune_sizes=[60, 126]"])
    e = cfg.eval
    assert tuning_grid(e, 16) == window_grid(e.tune_sizes, e.tune_lefts, e.tune_rights, 16)
    assert 0 < len(tuning_grid(e, 16)) < len(e.tune_sizes) * len(e.tune_lefts) * len(e.tune_rights)
    # the largest size holding the smallest left + right + two words (20 + 10 + 2 * 16) is enough
    load_config(None, ["eval.tune_windows=true", "eval.tune_sizes=[62]"])
    with pytest.raises(InputError, match="eval.tune_sizes.* 61 < .* = 62"):
        load_config(None, ["eval.tune_windows=true", "eval.tune_sizes=[61]"])
    with pytest.raises(ValueError, match="empty window grid"):
        from training.window_tuning import search_windows

        search_windows(lambda w: None, window_grid([61], e.tune_lefts, e.tune_rights, 16))


def test_an_unused_grid_may_be_empty():
    cfg = load_config(None, ["eval.tune_sizes=[]"])  # tune_windows is off: the grid is never built
    assert cfg.eval.tune_sizes == ()


@pytest.mark.parametrize(("override", "key"), [
    ("optim.threads=-2", "optim.threads"),
    ("optim.eval_every=-1", "optim.eval_every"),
    ("optim.patience=-1", "optim.patience"),
    ("optim.checkpoint_every=-1", "optim.checkpoint_every"),
    ("optim.log_every=0", "optim.log_every"),
    ("optim.weight_decay=-0.1", "optim.weight_decay"),
    ("data.max_train_words=-5", "data.max_train_words"),
    ("data.max_valid_words=-1", "data.max_valid_words"),
    ("data.max_unlabeled_words=-1", "data.max_unlabeled_words"),
    ("data.max_pos_words=-1", "data.max_pos_words"),
    ('data.valid=""', "data.valid"),
    ('data.valid="  "', "data.valid"),
    ('data.train=["dev2012", ""]', "data.train"),
    ("method.case_weight=-1", "method.case_weight"),
    ("method.adversarial.pos_every=0", "method.adversarial.pos_every"),
    ("eval.batch_size=0", "eval.batch_size"),
])
def test_bad_values_are_refused_naming_the_key(override, key):
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize("override", [
    "optim.threads=0", "optim.threads=2", "optim.eval_every=0", "optim.patience=0",
    "data.max_train_words=0", "method.case_weight=0", "optim.checkpoint_every=0",
])
def test_the_off_values_stay_valid(override):
    load_config(None, [override])
