"""training.build_data: the data folder built from tiny synthetic copies of its source repositories."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from streampunct.errors import InputError
from streampunct.labels import LABELS
from training import build_data
from training.build_data import REPOS, build, caption_text, che_words_text, main, ted_markdown_text
from training.data import data_root, load_labelled, load_ted_talks, load_unlabeled, resolve_cache

SYLLABLES = ["ba", "ko", "ri", "te", "mu", "sa", "lo", "ne", "vi", "da", "pe", "zu"]


def vocab_words(rng: random.Random, n: int) -> list[str]:
    """``n`` lowercase pseudo-words of 2-3 syllables (common to no other stream of the same rng)."""
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(n)]


def cased(words: list[str]) -> str:
    """Words as cased, punctuated text: a sentence every 7 words, a comma after the 3rd."""
    out = []
    for i, w in enumerate(words):
        w = w.capitalize() if i % 7 == 0 else w
        out.append(w + ("." if i % 7 == 6 else "," if i % 7 == 2 else ""))
    return " ".join(out).rstrip(",") + ("" if out[-1].endswith(".") else ".")


def che_file(words: list[str]) -> str:
    """``word<TAB>LABEL`` lines with a split clitic (``do n't``) in the middle."""
    words = [*words[:20], "do", "n't", *words[20:]]
    labels = ["PERIOD" if i % 7 == 6 else "COMMA" if i % 7 == 2 else "O" for i in range(len(words))]
    return "".join(f"{w}\t{lab}\n" for w, lab in zip(words, labels, strict=True))


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def subtitle_lines(text: str, width: int = 5) -> str:
    """Text as markdown subtitle lines of ``width`` words, apostrophes as HTML entities."""
    words = text.split()
    return "\n".join(" ".join(words[i : i + width]) for i in range(0, len(words), width)).replace("'", "&#39;")


@pytest.fixture()
def sources(tmp_path) -> dict:
    """Tiny copies of every source repository, laid out as ``git clone`` names them."""
    rng = random.Random(7)
    src = tmp_path / "sources"
    eval_words = {name: vocab_words(rng, 60) for name in ("test2011", "test2011asr", "dev2010", "tst2012")}

    xashru = src / "punctuation-restoration" / "data" / "en"
    dev2012 = "".join(f"{w}\t{'PERIOD' if i % 9 == 8 else 'O'}\n" for i, w in enumerate(vocab_words(rng, 90)))
    dev2012 += "\tCOMMA\n"  # an empty word, as in Che's dev2012
    write(xashru / "dev2012", dev2012)
    write(xashru / "test2011", che_file(eval_words["test2011"]))
    write(xashru / "test2011asr", che_file(eval_words["test2011asr"]))
    write(src / "Punctuation_Restorator" / "data" / "train2012", b"but\tO\r\ni\tO\r\nsee\tPERIOD\r\n")
    paddle = src / "PaddleSpeechTask" / "data" / "english" / "iwslt2012_en"
    write(paddle / "iwslt2010_dev_en", "".join(cased(eval_words["dev2010"][i : i + 12]) + " \n"
                                               for i in range(0, 60, 12)))
    write(paddle / "iwslt2012_test_en", cased(eval_words["tst2012"]) + " \n")

    ted = src / "TED-Talks"
    one = vocab_words(rng, 80)
    talk_one = ("\n\nTranslator: Ann Example\n\n" + subtitle_lines(cased(one[:40]).replace(".", ". It's", 1))
                + "\n(Laughter)\n" + subtitle_lines(cased(one[40:])) + " &quot;Quoted.&quot;\n\n(Applause)\n\n")
    write(ted / "cleaned_ted_data" / "Titles_A" / "talk_one.md", talk_one)
    # shares 30 words (23 8-grams) with test2011, its clitic re-joined: must be dropped
    shared = che_words_text(che_file(eval_words["test2011"])).split()[5:35]
    write(ted / "cleaned_ted_data" / "Titles_A" / "talk_two.md",
          subtitle_lines(cased(vocab_words(rng, 30) + shared + vocab_words(rng, 30))))
    write(ted / "cleaned_ted_data" / "Titles_B" / "short.md", subtitle_lines(cased(vocab_words(rng, 30))))
    # the same opening 40 words as talk_one: a duplicate
    write(ted / "cleaned_ted_archive_data" / "dup.md", talk_one.replace("(Applause)", "Extra words here."))
    archive_words = vocab_words(rng, 60)
    write(ted / "cleaned_ted_archive_data" / "archive_talk.md", subtitle_lines(" ".join(archive_words)))
    cap = vocab_words(rng, 70)
    write(ted / "cleaned_tedx_data" / "X" / "cap1.md",
          "\n[Music]\n[Applause]\n" + subtitle_lines("I'm " + " ".join(cap)) + "\n[Music]\n")
    write(ted / "cleaned_tedx_data" / "X" / "cap2.md", subtitle_lines(" ".join(eval_words["dev2010"])))
    write(ted / "cleaned_tedx_data" / "Y" / "cap3.md", "[Music]\nhello there\n")

    swda = src / "Switchboard-Corpus" / "swda_data"
    write(swda / "train" / "sw01.txt",
          "A|Okay.|bc\nB|Uh, first, um, I need the U.S.A. map. *listen to this|qy\n\nA|--|x\n")
    write(swda / "train" / "sw00.txt", "B|Well, uh, it's mother-in-law's -- house.|sd\n")
    write(swda / "val" / "sw02.txt", "A|Right?|qy\n")
    write(swda / "test" / "sw03.txt", "A|Held out.|sd\n")
    mrda = src / "MRDA-Corpus" / "mrda_data"
    for split in ("train", "val", "test"):
        write(mrda / split / "m1.txt", f"me011|so um, {split} here.|s|s|s\n")
        write(src / "Maptask-Corpus" / "maptask_data" / split / "q1.txt", f"g|okay starting {split}|ready\n")
    return {"dir": src, "one": one, "archive": archive_words, "cap": cap, "dev2012": dev2012}


def test_builds_the_data_folder_the_trainer_reads(sources, tmp_path):
    out = tmp_path / "data"
    manifest = build(sources["dir"], out)
    root, cache = data_root(str(out)), resolve_cache(str(tmp_path / "cache"))

    # TED: one talk kept from cleaned_ted_data plus the archive talk; short, duplicate, overlapping dropped
    with gzip.open(out / "ted_talks" / "ted.jsonl.gz", "rt", encoding="utf-8") as f:
        talks = [json.loads(line) for line in f]
    assert [t["id"] for t in talks] == ["talk_one", "archive_talk"]
    assert [list(t) for t in talks] == [["id", "source", "text"]] * 2
    assert talks[0]["source"] == "cleaned_ted_data/Titles_A/talk_one.md"
    text = talks[0]["text"]
    paragraphs = text.split("\n")
    assert paragraphs[0] == "Translator: Ann Example"
    assert paragraphs[1].startswith(f"{sources['one'][0].capitalize()} ") and "It's" in paragraphs[1]
    assert paragraphs[2].endswith('"Quoted."') and len(paragraphs) == 3  # (Laughter) ended a paragraph
    assert "(" not in text and "&" not in text
    assert talks[1]["text"] == " ".join(sources["archive"])
    assert manifest["dropped"]["ted"] == {"under_50_words": 1, "duplicate": 1, "overlaps_evaluation_set": 1,
                                          "by_set": {"test2011": 1}}
    docs = load_ted_talks(root, cache)
    assert [d.name for d in docs] == ["ted:talk_one", "ted:archive_talk"]
    assert docs[0].words[:2] == ["translator", "ann"] and "'s" in docs[0].words
    assert {LABELS[i] for i in docs[0].labels} == {"O", "COMMA", "PERIOD"}

    # TEDx captions: lowercase, no [Music], the dev2010 overlap and the short talk dropped
    with gzip.open(out / "unlabeled" / "tedx_autocaptions.txt.gz", "rt", encoding="utf-8") as f:
        assert f.read() == "i'm " + " ".join(sources["cap"]) + "\n"
    assert manifest["dropped"]["tedx"] == {"under_50_words": 1, "overlaps_evaluation_set": 1,
                                           "by_set": {"dev2010": 1}}
    captions = load_unlabeled(["tedx"], root, max_words=0, seed=0)
    assert len(captions) == 1 and captions[0].pseudo and "music" not in captions[0].words

    # conversational corpora: make_spoken.py's transform, files sorted, SwDA test held out
    assert (out / "unlabeled" / "swda_train.txt").read_text() == (
        "well uh it's mother-in-law's house\nokay\nuh first um i need the u s a map\n")
    assert (out / "cased_spoken" / "swda_train_cased.txt").read_text() == (
        "Well, uh, it's mother-in-law's -- house.\nOkay.\nUh, first, um, I need the U.S.A. map.\n")
    assert (out / "cased_spoken" / "swda_val_cased.txt").read_text() == "Right?\n"
    assert not (out / "unlabeled" / "swda_test.txt").exists()
    assert not (out / "cased_spoken" / "swda_test_cased.txt").exists()
    assert (out / "unlabeled" / "mrda_test.txt").read_text() == "so um test here\n"
    assert (out / "unlabeled" / "maptask_train.txt").read_text() == "okay starting train\n"
    spoken = load_unlabeled(["swda", "mrda", "maptask"], root, max_words=0, seed=0)
    assert {d.name: len(d) for d in spoken} == {"swda:0": 18, "mrda:0": 4, "maptask:0": 3}  # it 's, law 's split

    # IWSLT and dev2010 copies
    assert (out / "iwslt2011_che" / "dev2012").read_text() == sources["dev2012"]
    assert (out / "iwslt2011_che" / "train2012_partial" / "train2012_slice_alyakubovich").read_bytes() == (
        b"but\tO\ni\tO\nsee\tPERIOD\n")
    assert load_labelled("train2012_partial", root, cache)[0].words == ["but", "i", "see"]
    paddle = sources["dir"] / "PaddleSpeechTask" / "data" / "english" / "iwslt2012_en" / "iwslt2010_dev_en"
    assert (out / "cased_spoken" / "ted_iwslt_dev2010_cased.txt").read_bytes() == paddle.read_bytes()
    assert not (out / "iwslt2011_che" / "test2011").exists()  # test sets stay out of the data folder

    recorded = json.loads((out / "build_manifest.json").read_text())
    assert recorded["sources"]["NathanDuran/Switchboard-Corpus"]["read_from"] == "checkout"
    assert recorded["files"]["unlabeled/swda_train.txt"]["lines"] == 3
    assert recorded["files"]["unlabeled/swda_train.txt"]["same_as_reference"] is False


def test_ted_archive_can_be_left_out(sources, tmp_path):
    manifest = build(sources["dir"], tmp_path / "data", stages=["ted"], ted_archive=False)
    with gzip.open(tmp_path / "data" / "ted_talks" / "ted.jsonl.gz", "rt", encoding="utf-8") as f:
        assert [json.loads(line)["id"] for line in f] == ["talk_one"]
    assert manifest["files"]["ted_talks/ted.jsonl.gz"]["same_as_reference"] is None
    assert not (tmp_path / "data" / "unlabeled").exists()


def test_a_missing_source_names_the_repository_and_commit(sources, tmp_path, capsys):
    shutil.rmtree(sources["dir"] / "Maptask-Corpus")
    out = tmp_path / "data"
    repo = REPOS["maptask"]
    with pytest.raises(InputError, match=f"source NathanDuran/Maptask-Corpus @ {repo.commit[:12]} not found") as e:
        build(sources["dir"], out)
    assert "\n" not in str(e.value)
    assert f"git clone https://github.com/NathanDuran/Maptask-Corpus {sources['dir'] / 'Maptask-Corpus'}" in str(e.value)
    assert f"checkout {repo.commit}" in str(e.value)
    assert not out.exists()  # sources are all looked up before anything is written

    assert main(["--sources", str(sources["dir"]), "--out", str(out), "--only", "spoken"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: source NathanDuran/Maptask-Corpus @ ")

    # the stages that do not need it still build
    assert main(["--sources", str(sources["dir"]), "--out", str(out), "--only", "iwslt", "dev2010"]) == 0
    assert (out / "iwslt2011_che" / "dev2012").is_file()


def test_every_missing_source_is_named_in_one_error(sources, tmp_path, capsys):
    """A new user fetching the sources learns all that is missing from one run, not one per run."""
    shutil.rmtree(sources["dir"] / "Maptask-Corpus")
    (sources["dir"] / "Punctuation_Restorator" / "data" / "train2012").unlink()
    out = tmp_path / "data"
    with pytest.raises(InputError) as e:
        build(sources["dir"], out)
    lines = str(e.value).splitlines()
    assert lines[0] == "2 sources are missing or incomplete:"
    assert lines[1].startswith("  - al-yakubovich/Punctuation_Restorator at ") and "has no data/train2012" in lines[1]
    assert lines[2].startswith(f"  - source NathanDuran/Maptask-Corpus @ {REPOS['maptask'].commit[:12]} not found")
    assert len(lines) == 3
    assert not out.exists()

    assert main(["--sources", str(sources["dir"]), "--out", str(out)]) == 2
    assert "2 sources are missing or incomplete:" in capsys.readouterr().err


def test_a_source_without_the_expected_file_says_which(sources, tmp_path):
    (sources["dir"] / "Punctuation_Restorator" / "data" / "train2012").unlink()
    with pytest.raises(InputError, match="al-yakubovich/Punctuation_Restorator at .* has no data/train2012"):
        build(sources["dir"], tmp_path / "data", stages=["iwslt"])


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_bare_git_copy_is_read_like_a_checkout(sources, tmp_path, caplog):
    """make_spoken.py's layout: OWNER+NAME/repo, a bare copy (read at HEAD when it lacks the commit)."""
    checkout = sources["dir"] / "Switchboard-Corpus"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(checkout)], check=True)
    subprocess.run([*git, "-C", str(checkout), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(checkout), "commit", "-qm", "x"], check=True)
    bare = sources["dir"] / "NathanDuran+Switchboard-Corpus" / "repo"
    subprocess.run(["git", "clone", "-q", "--bare", str(checkout), str(bare)], check=True)
    build(sources["dir"], tmp_path / "from_checkout", stages=["spoken"])
    shutil.rmtree(checkout)
    caplog.set_level("WARNING")
    manifest = build(sources["dir"], tmp_path / "from_git", stages=["spoken"])
    assert manifest["sources"]["NathanDuran/Switchboard-Corpus"]["read_from"] == "git HEAD"
    assert "lacks the documented commit" in caplog.text
    for rel in ("unlabeled/swda_train.txt", "cased_spoken/swda_train_cased.txt", "unlabeled/swda_val.txt"):
        assert (tmp_path / "from_git" / rel).read_bytes() == (tmp_path / "from_checkout" / rel).read_bytes()


def test_transforms():
    assert ted_markdown_text("\n\nA line\nand more\n(Explosion)\nNext &amp; last.\n\n(Laughter)\n\nEnd (Clang) here.\n") == (
        "A line and more\nNext & last.\nEnd (Clang) here.")
    assert caption_text("[Music]\nI&#39;M here, at 5 a.m.\n[Applause]\n") == "i'm here at 5 a m"
    assert che_words_text("we\tO\ndo\tO\nn't\tCOMMA\nit\tO\n's\tPERIOD\n\tCOMMA\n") == "we don't it's"


def test_train_without_a_data_folder_says_where_to_get_one(tmp_path, capsys):
    from training.cli import main as train_main

    missing = tmp_path / "no_data"
    with pytest.raises(InputError, match=r"data folder .*no_data does not exist: give one \(--data-root, data.root in a config, or \$STREAMPUNCT_DATA\)"
                                         r".*python -m training.build_data \(docs/data.md\)"):
        data_root(str(missing))
    config = Path(__file__).resolve().parents[2] / "training" / "configs" / "ce.toml"
    assert train_main(["--config", str(config), "--set", f"data.root={json.dumps(str(missing))}",
                       "--out", str(tmp_path / "ckpt")]) == 2
    assert "build one from the public sources with python -m training.build_data (docs/data.md)" in (
        capsys.readouterr().err)
    # the option the message names first is train's too
    assert train_main(["--config", str(config), "--data-root", str(missing), "--out", str(tmp_path / "ckpt")]) == 2
    assert f"data folder {missing} does not exist" in capsys.readouterr().err


def test_a_data_root_that_is_a_file_is_named_a_file(tmp_path, capsys):
    from training.cli import main as train_main

    a_file = tmp_path / "t.txt"
    a_file.write_text("hello world\n")
    with pytest.raises(InputError, match=rf"^data folder {a_file} is a file, not a folder: give one \(--data-root"):
        data_root(str(a_file))
    config = Path(__file__).resolve().parents[2] / "training" / "configs" / "ce.toml"
    assert train_main(["--config", str(config), "--data-root", str(a_file), "--out", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"streampunct train: error: data folder {a_file} is a file, not a folder: give one ")
    assert err.count("\n") == 1


def test_reference_hashes_cover_every_file_the_trainer_reads():
    from training.data import CASED_FILES, LABELLED_FILES, TED_FILE, UNLABELED_FILES

    read = {TED_FILE, *LABELLED_FILES.values(), *CASED_FILES.values(), *UNLABELED_FILES.values()}
    assert read <= set(build_data.REFERENCE_SHA256)


def test_a_relative_data_folder_is_taken_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "mydata").mkdir()
    monkeypatch.chdir(tmp_path)
    assert data_root("mydata") == tmp_path / "mydata"
    monkeypatch.setenv("STREAMPUNCT_DATA", "mydata")
    assert data_root() == tmp_path / "mydata"


@pytest.mark.parametrize("incomplete", ["swda_val", "empty_tedx", "malformed"])
def test_an_incomplete_source_writes_nothing(sources, tmp_path, capsys, incomplete):
    """docs/data.md: a missing or incomplete source stops the build before anything is written,
    and a source that fails later (a malformed line) leaves the folder as it was."""
    src = sources["dir"]
    if incomplete == "swda_val":
        shutil.rmtree(src / "Switchboard-Corpus" / "swda_data" / "val")
        message = "NathanDuran/Switchboard-Corpus at .* has no swda_data/val \\(expected at commit"
    elif incomplete == "empty_tedx":
        shutil.rmtree(src / "TED-Talks" / "cleaned_tedx_data")
        (src / "TED-Talks" / "cleaned_tedx_data").mkdir()
        message = "saranyan/TED-Talks at .*: no cleaned_tedx_data/\\*\\*/\\*.md \\(expected at commit"
    else:
        write(src / "MRDA-Corpus" / "mrda_data" / "val" / "m2.txt", "no separator here\n")
        message = "m2.txt:1: no '\\|'-separated utterance"
    out = tmp_path / "data"
    with pytest.raises(InputError, match=message):
        build(src, out)
    assert list(tmp_path.iterdir()) == [src]  # no data folder, no staging folder
    # an existing folder keeps its files as they were
    write(out / "iwslt2011_che" / "dev2012", "old\tO\n")
    assert main(["--sources", str(src), "--out", str(out)]) == 2
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["iwslt2011_che", "iwslt2011_che/dev2012"]
    assert (out / "iwslt2011_che" / "dev2012").read_text() == "old\tO\n"
    assert not (tmp_path / ".data.building").exists()


def test_a_missing_ted_archive_suggests_building_without_it(sources, tmp_path):
    shutil.rmtree(sources["dir"] / "TED-Talks" / "cleaned_ted_archive_data")
    with pytest.raises(InputError, match="has no cleaned_ted_archive_data .*; or build without the archive: "
                                         "--no-ted-archive$"):
        build(sources["dir"], tmp_path / "data")
    assert not (tmp_path / "data").exists()
    build(sources["dir"], tmp_path / "data", ted_archive=False)
    assert (tmp_path / "data" / "ted_talks" / "ted.jsonl.gz").is_file()
