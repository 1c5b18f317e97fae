import numpy as np
import pytest

from streampunct.core.alignment import Aligner
from training.data import (
    IGNORE,
    Document,
    SequenceDataset,
    cap_words,
    cut_sequences,
    encode_document,
    make_batch,
)


@pytest.fixture(scope="module")
def aligner(tiny_base_model):
    return Aligner.from_file(tiny_base_model)


def _doc(n=300):
    words = [("unbelievably" if i % 7 == 0 else "cat") for i in range(n)]
    labels = [(i % 4) for i in range(n)]
    return Document("d", words, labels)


@pytest.mark.parametrize("offset", [0, 1, 37, 125])
def test_cut_sequences_cover_every_word_at_word_boundaries(aligner, offset):
    enc = encode_document(_doc(), aligner)
    spans = cut_sequences(enc, 30, offset)
    assert spans[0][0] == 0 and spans[-1][1] == enc.n_words
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for w0, w1 in spans:
        assert w1 > w0
        assert enc.word_start[w1] - enc.word_start[w0] <= 30
    first_word_len = enc.word_start[1] - enc.word_start[0]
    if 0 < offset < 30 and first_word_len <= offset:
        # a fresh offset: the first span is cut short
        assert enc.word_start[spans[0][1]] - enc.word_start[0] <= offset


@pytest.mark.parametrize("position", ["last", "first"])
def test_batch_puts_each_label_on_its_sub_token(tiny_base_model, position):
    al = Aligner.from_file(tiny_base_model, label_position=position)
    doc = Document("d", ["unbelievably", "cat", "unbelievably"], [1, 0, 2])
    enc = encode_document(doc, al)
    pieces = [al.word_ids(w) for w in doc.words]
    assert len(pieces[0]) > 1  # a multi-token word makes the test meaningful
    batch = make_batch([(enc, 0, 3)], al, 126)
    row = batch.labels[0]
    assert batch.input_ids[0, 0] == al.cls_id
    labelled = np.nonzero(row != IGNORE)[0].tolist()
    start = 1
    expected = []
    for p in pieces:
        expected.append(start + (len(p) - 1 if position == "last" else 0))
        start += len(p)
    assert labelled == expected
    assert row[labelled].tolist() == [1, 0, 2]
    assert batch.input_ids[0, start] == al.sep_id


def test_epochs_differ_but_are_reproducible(aligner):
    ds = SequenceDataset([_doc(500)], aligner, max_len=32)
    a = [b.input_ids.tolist() for b in ds.iter_batches(4, seed=1, epoch=0)]
    b = [b.input_ids.tolist() for b in ds.iter_batches(4, seed=1, epoch=0)]
    c = [b.input_ids.tolist() for b in ds.iter_batches(4, seed=1, epoch=1)]
    assert a == b and a != c
    labelled = sum(int((b.labels != IGNORE).sum()) for b in ds.iter_batches(4, seed=1, epoch=1))
    assert labelled == 500  # every word's label is used exactly once per epoch


def test_cap_words_is_seeded_and_exact():
    docs = [Document(str(i), ["w"] * 10, [0] * 10) for i in range(5)]
    capped = cap_words(docs, 25, seed=3)
    assert sum(map(len, capped)) == 25
    assert [d.name for d in capped] == [d.name for d in cap_words(docs, 25, seed=3)]


def test_an_unknown_labelled_source_lists_the_names_and_points_to_unlabeled(tiny_data_root, tmp_path):
    from streampunct.errors import InputError
    from training.data import load_labelled

    with pytest.raises(InputError, match=r"labelled source 'mrda' is neither a name \(ted, dev2012, .*\) nor a "
                                         r"word<TAB>LABEL file .*'mrda' is an unlabeled source: data.unlabeled"):
        load_labelled("mrda", tiny_data_root, tmp_path)
    with pytest.raises(InputError, match="labelled source 'nonsense' is neither a name"):
        load_labelled("nonsense", tiny_data_root, tmp_path)


@pytest.mark.parametrize(("source", "relative", "stage"), [
    ("dev2012", "iwslt2011_che/dev2012", "iwslt"),
    ("dev2010", "cased_spoken/ted_iwslt_dev2010_cased.txt", "dev2010"),
    ("swda", "cased_spoken/swda_train_cased.txt", "spoken"),
    ("ted", "ted_talks/ted.jsonl.gz", "ted"),
    ("tedx", "unlabeled/tedx_autocaptions.txt.gz", "tedx"),
    ("mrda", "unlabeled/mrda_train.txt", "spoken"),
])
def test_a_data_folder_without_a_named_file_names_the_stage_that_builds_it(tmp_path, source, relative, stage):
    """A folder built in part (``build_data --only iwslt``) or empty: the missing file, the source
    and the build command, not a bare "No such file or directory"."""
    from streampunct.errors import InputError
    from training.data import check_unlabeled, load_labelled

    root = tmp_path / "data"
    root.mkdir()
    load = (lambda: check_unlabeled([source], root)) if source in ("tedx", "mrda") else (
        lambda: load_labelled(source, root, tmp_path))
    with pytest.raises(InputError) as e:
        load()
    assert str(e.value) == (f"data folder {root} has no {relative} (source {source!r}): build it with "
                            f"python -m training.build_data --sources SRC --out {root} --only {stage} (docs/data.md)")


def test_streampunct_cache_moves_the_default_cache_only(tmp_path, monkeypatch):
    from training.data import REPO_ROOT, resolve_cache

    monkeypatch.delenv("STREAMPUNCT_CACHE", raising=False)
    assert resolve_cache() == REPO_ROOT / "cache"
    monkeypatch.setenv("STREAMPUNCT_CACHE", str(tmp_path / "c"))
    assert resolve_cache() == resolve_cache("cache") == tmp_path / "c" and (tmp_path / "c").is_dir()
    assert resolve_cache(str(tmp_path / "mine")) == tmp_path / "mine"  # a folder the config names wins


def test_relative_paths_a_command_is_given_are_taken_from_the_current_directory(tiny_data_root, tmp_path,
                                                                                  monkeypatch):
    from training.config import TrainConfig
    from training.data import REPO_ROOT, load_labelled, source_paths
    from training.run import default_out_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.tsv").write_text("hello\tO\nthere\tPERIOD\n")
    assert load_labelled("mine.tsv", tiny_data_root, tmp_path / "cache")[0].words == ["hello", "there"]
    assert source_paths("mine.tsv", tiny_data_root) == tmp_path / "mine.tsv"
    assert default_out_dir(TrainConfig(name="x", out="runs/x")) == tmp_path / "runs" / "x"
    assert default_out_dir(TrainConfig(name="x")) == REPO_ROOT / "checkpoints" / "x"  # the default is the repo's
