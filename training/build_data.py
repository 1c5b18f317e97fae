"""Build the data folder the trainer reads from local copies of its public sources.

    python -m training.build_data --sources SRC --out DATA [--only STAGE ...] [--no-ted-archive]

``SRC`` holds one copy of each source repository (docs/data.md, "Building the data folder"):
a checkout as ``git clone`` names it (``SRC/TED-Talks``), or a git copy, bare or not, named
``SRC/OWNER+NAME`` or ``SRC/OWNER+NAME/repo``. A git copy is read at the documented commit
when it has it, else at its HEAD (with a warning). Nothing here uses the network.

Stages (all by default) and what they write under ``DATA``:

- ``iwslt``: ``iwslt2011_che/dev2012`` (byte copy), ``iwslt2011_che/train2012_partial/...``
  (CRLF -> LF);
- ``dev2010``: ``cased_spoken/ted_iwslt_dev2010_cased.txt`` (byte copy);
- ``spoken``: ``unlabeled/{swda,mrda,maptask}_*.txt`` and ``cased_spoken/swda_*_cased.txt``
  (the transform of the data folder's ``tools/make_spoken.py``; the SwDA test split is held out);
- ``ted``: ``ted_talks/ted.jsonl.gz`` from the TED markdown transcripts;
- ``tedx``: ``unlabeled/tedx_autocaptions.txt.gz`` from the TEDx automatic captions.

``ted`` and ``tedx`` drop every talk that shares ``MIN_SHARED`` or more word 8-grams with an
evaluation set (IWSLT test2011 and test2011asr, TED dev2010 and tst2012), read from the same
sources. Each stage checks what it wrote; ``build_manifest.json`` records the sources, counts
and content hashes, and the log says for each file whether it equals the reference data folder
(``REFERENCE_SHA256``, the folder the shipped models were trained from).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import logging
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from streampunct.commands.argtypes import path_argument
from streampunct.errors import InputError
from training.cli_support import run_tool

log = logging.getLogger(__name__)


# --- sources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Repo:
    owner: str
    name: str
    commit: str
    license: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"

    def candidates(self, sources: Path) -> list[Path]:
        """Folders that may hold a copy: the clone name, and the mirror names make_spoken.py took."""
        mirror = sources / f"{self.owner}+{self.name}"
        return [sources / self.name, mirror, mirror / "repo", sources / self.owner / self.name]

    def clone_hint(self, sources: Path) -> str:
        dest = sources / self.name
        return (f"git clone https://github.com/{self.slug} {dest} && "
                f"git -C {dest} checkout {self.commit}")


REPOS = {
    "ted": Repo("saranyan", "TED-Talks", "4d7e8c2155e12cb34ab8da993dee0700a6775ff9",
                "MIT (repository); transcripts TED's, CC BY-NC-ND"),
    "xashru": Repo("xashru", "punctuation-restoration", "0f32a37cc4db37a818eb22560b31010c67a63a56", "MIT"),
    "alyakubovich": Repo("al-yakubovich", "Punctuation_Restorator", "d3c37a2b25aecf4f2ef899fde4d7aed05e1d2cfe",
                         "Apache-2.0"),
    "paddle": Repo("745165806", "PaddleSpeechTask", "59a080628d303ce9f77b02398385c26752f1353f",
                   "none stated; TED transcripts CC BY-NC-ND"),
    "swda": Repo("NathanDuran", "Switchboard-Corpus", "2aec5da98f15808d578c83328b871907b9d31f05",
                 "GPL-3.0 (repository code); text terms not stated"),
    "mrda": Repo("NathanDuran", "MRDA-Corpus", "58006b32d4e36ca518e365899924cd56035466a2",
                 "GPL-3.0 (repository code); text terms not stated"),
    "maptask": Repo("NathanDuran", "Maptask-Corpus", "7478ba45d1014090bef9fc8bb55705ec26e95ca3",
                    "GPL-3.0 (repository code); text terms not stated"),
}


def _git(repo_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo_dir), "-c", "core.quotepath=off", *args],
                          capture_output=True, check=False)


def _is_git_dir(path: Path) -> bool:
    """``path`` itself is a repository (a clone with .git, or a bare copy), not a folder inside one."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _has_git() -> bool:
    return shutil.which("git") is not None


class SourceTree:
    """The files of one source repository: a checkout on disk (``rev`` None) or a git copy at ``rev``."""

    def __init__(self, repo: Repo, root: Path, rev: str | None) -> None:
        self.repo, self.root, self.rev = repo, root, rev

    def describe(self) -> dict:
        return {"repository": self.repo.slug, "documented_commit": self.repo.commit, "path": str(self.root),
                "read_from": f"git {self.rev}" if self.rev else "checkout"}

    def exists(self, path: str) -> bool:
        if self.rev is None:
            return (self.root / path).exists()
        return _git(self.root, "cat-file", "-e", f"{self.rev}:{path}").returncode == 0

    def files(self, folder: str, suffix: str) -> list[str]:
        """Repository-relative paths of the files under ``folder`` ending in ``suffix``, sorted."""
        if self.rev is None:
            base = self.root / folder
            names = [p.relative_to(self.root).as_posix() for p in base.rglob(f"*{suffix}") if p.is_file()]
        else:
            res = _git(self.root, "ls-tree", "-r", "-z", "--name-only", self.rev, "--", folder)
            if res.returncode:
                raise InputError(f"{self.repo.slug} at {self.root}: git ls-tree {folder} failed: "
                                 f"{res.stderr.decode(errors='replace').strip()}")
            names = [n for n in res.stdout.decode("utf-8", errors="surrogateescape").split("\0")
                     if n.endswith(suffix)]
        return sorted(names)

    def read(self, path: str) -> bytes:
        if self.rev is None:
            return (self.root / path).read_bytes()
        res = _git(self.root, "cat-file", "blob", f"{self.rev}:{path}")
        if res.returncode:
            raise InputError(f"{self.repo.slug} at {self.root}: cannot read {path} at {self.rev}")
        return res.stdout

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", errors="replace")


def open_source(sources: Path, key: str, needed: Sequence[str]) -> SourceTree:
    """The copy of ``REPOS[key]`` under ``sources`` that holds every path of ``needed``.

    Raises InputError (one line, naming the repository, the commit and how to clone it) when
    there is none.
    """
    repo = REPOS[key]
    incomplete = ""
    for cand in repo.candidates(sources):
        if not cand.is_dir():
            continue
        is_git = _is_git_dir(cand)
        if is_git and not _has_git() and not all((cand / p).exists() for p in needed):
            raise InputError(f"{repo.slug}: reading the git copy {cand} needs the git program")
        is_git = is_git and _has_git()
        if is_git and _git(cand, "cat-file", "-e", f"{repo.commit}^{{commit}}").returncode == 0:
            tree = SourceTree(repo, cand, repo.commit)
        elif all((cand / p).exists() for p in needed):
            tree = SourceTree(repo, cand, None)
            head = _git(cand, "rev-parse", "HEAD") if is_git else None
            sha = head.stdout.decode().strip() if head is not None and head.returncode == 0 else ""
            if sha != repo.commit:
                log.warning("%s: using the files of %s (%s), not checked out at the documented commit %s: "
                            "the output may differ from the reference", repo.slug, cand,
                            f"HEAD {sha[:12]}" if sha else "no git history", repo.commit[:12])
        elif is_git and _git(cand, "rev-parse", "--verify", "-q", "HEAD").returncode == 0:
            log.warning("%s: %s lacks the documented commit %s; reading its HEAD: the output may differ "
                        "from the reference", repo.slug, cand, repo.commit[:12])
            tree = SourceTree(repo, cand, "HEAD")
        else:
            if not incomplete and not (cand / "repo").is_dir():
                missing = next(p for p in needed if not (cand / p).exists())
                incomplete = f"{repo.slug} at {cand} has no {missing}"
            continue
        missing = [p for p in needed if not tree.exists(p)]
        if missing:
            raise InputError(f"{repo.slug} at {cand} has no {missing[0]} (expected at commit {repo.commit})")
        log.info("%s: %s", repo.slug, tree.describe()["read_from"] + f" in {cand}")
        return tree
    if incomplete:
        raise InputError(f"{incomplete} (expected at commit {repo.commit}: {repo.clone_hint(sources)})")
    raise InputError(f"source {repo.slug} @ {repo.commit[:12]} not found under {sources}: "
                     f"{repo.clone_hint(sources)}")


# --- transforms ------------------------------------------------------------------------

#: A line that is one parenthesized audience/sound annotation: "(Laughter)", "(Camera click)".
ANNOTATION_LINE = re.compile(r"\([^()]*\)")
#: "[Music]"-style annotations of the automatic captions.
CAPTION_ANNOTATION = re.compile(r"\[[^\]]*\]")
MIN_TALK_WORDS = 50
DUPLICATE_PREFIX_WORDS = 40


def ted_markdown_text(raw: str) -> str:
    """A TED markdown transcript as paragraphs joined by ``\\n``.

    HTML entities are decoded (once); the subtitle lines of a paragraph (blank-line separated)
    are joined with spaces; a line that is only an annotation such as ``(Laughter)`` is dropped
    and ends its paragraph; whitespace is collapsed.
    """
    paragraphs: list[str] = []
    current: list[str] = []
    for line in html.unescape(raw).split("\n"):
        line = " ".join(line.split())
        if not line or ANNOTATION_LINE.fullmatch(line):
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs)


EDGE = ',.?!;:"*=%^&()[]{}<>/#+_~`-'
_ACRONYM = re.compile(r"(?:[a-z]\.){2,}(?:'s)?")
_NOT_WORD_CHAR = re.compile(r"[^a-z0-9'\-]")
_HAS_ALNUM = re.compile(r"[a-z0-9]")


def unpunct(text: str) -> str:
    """Lowercase, unpunctuated words (``tools/make_spoken.py``'s rule, also used for the captions).

    Dotted acronyms become spaced letters (``a.m.`` -> ``a m``); each token loses its edge
    punctuation, every character outside ``[a-z0-9'-]`` and its edge hyphens; tokens without a
    letter or digit are dropped.
    """
    out: list[str] = []
    for tok in text.lower().split():
        if _ACRONYM.fullmatch(tok):
            out.extend(t for t in tok.split(".") if t)
            continue
        tok = _NOT_WORD_CHAR.sub("", tok.strip(EDGE)).strip("-")
        if tok and _HAS_ALNUM.search(tok):
            out.append(tok)
    return " ".join(out)


def swda_clean(text: str) -> str:
    """SwDA utterance: annotator comments (from ``*`` to the end) cut, whitespace collapsed."""
    return " ".join(text.split("*", 1)[0].split())


def plain_clean(text: str) -> str:
    return " ".join(text.split())


def caption_text(raw: str) -> str:
    """A TEDx automatic-caption markdown file as one lowercase, unpunctuated line."""
    return unpunct(CAPTION_ANNOTATION.sub(" ", html.unescape(raw)))


# --- test hygiene ----------------------------------------------------------------------

NGRAM = 8
#: A talk sharing this many distinct word 8-grams with an evaluation set is left out.
MIN_SHARED = 15
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")

#: Evaluation sets no training talk may overlap: (name, source, path, format).
EVAL_SETS = (
    ("test2011", "xashru", "data/en/test2011", "che"),
    ("test2011asr", "xashru", "data/en/test2011asr", "che"),
    ("dev2010", "paddle", "data/english/iwslt2012_en/iwslt2010_dev_en", "text"),
    ("tst2012", "paddle", "data/english/iwslt2012_en/iwslt2012_test_en", "text"),
)


def overlap_words(text: str) -> list[str]:
    """Words for the overlap test: lowercase letter/digit runs, inner apostrophes kept."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def che_words_text(data: str) -> str:
    """A ``word<TAB>LABEL`` file as text, Che's split clitics re-joined (``do n't`` -> ``don't``)."""
    words: list[str] = []
    for line in data.splitlines():
        word = line.split("\t", 1)[0].strip()
        if words and (word.startswith("'") or word == "n't"):
            words[-1] += word
        elif word:
            words.append(word)
    return " ".join(words)


def ngrams(words: Sequence[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class Hygiene:
    """The word 8-grams of each evaluation set; ``hit`` names the set a text overlaps, if any."""

    sets: dict[str, set[tuple[str, ...]]]
    min_shared: int = MIN_SHARED
    dropped: Counter = field(default_factory=Counter)

    @classmethod
    def from_sources(cls, trees: dict[str, SourceTree]) -> Hygiene:
        sets = {}
        for name, key, path, fmt in EVAL_SETS:
            data = trees[key].read_text(path)
            grams = ngrams(overlap_words(che_words_text(data) if fmt == "che" else data))
            if not grams:
                raise InputError(f"evaluation set {name} ({trees[key].repo.slug}: {path}) is empty")
            sets[name] = grams
        return cls(sets)

    def hit(self, text: str) -> str | None:
        grams = ngrams(overlap_words(text))
        for name, eval_grams in self.sets.items():
            if len(grams & eval_grams) >= self.min_shared:
                self.dropped[name] += 1
                return name
        return None


# --- writing and checking --------------------------------------------------------------


def _write(path: Path, data: bytes, *, compress: bool = False) -> None:
    """Write atomically; gzip with a fixed header (no name, mtime 0) so builds are reproducible."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if compress:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(data)
    else:
        tmp.write_bytes(data)
    tmp.replace(path)


def _lines_bytes(lines: Iterable[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def _content(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def _fail(path: Path, why: str) -> None:
    raise InputError(f"built {path} is wrong: {why}")


LABEL_NAMES = {"O", "COMMA", "PERIOD", "QUESTION"}
UNLABELED_LINE = re.compile(r"[a-z0-9' -]+")


def check_word_labels(path: Path) -> int:
    lines = _content(path).decode("utf-8", errors="replace").splitlines()
    if not lines:
        _fail(path, "empty")
    for i, line in enumerate(lines, 1):
        parts = line.split("\t")
        if len(parts) != 2 or parts[1] not in LABEL_NAMES:
            _fail(path, f"line {i} is not word<TAB>LABEL: {line[:60]!r}")
    return len(lines)


def check_text_lines(path: Path, *, pattern: re.Pattern | None = None) -> int:
    lines = _content(path).decode("utf-8", errors="replace").splitlines()
    if not lines or not any(line.strip() for line in lines):
        _fail(path, "empty")
    if pattern is not None:
        for i, line in enumerate(lines, 1):
            if not pattern.fullmatch(line):
                _fail(path, f"line {i} has characters outside [a-z0-9' -] or is empty: {line[:60]!r}")
    return len(lines)


def check_talks(path: Path) -> int:
    n = 0
    for i, line in enumerate(_content(path).decode("utf-8").splitlines(), 1):
        rec = json.loads(line)
        if sorted(rec) != ["id", "source", "text"] or not all(isinstance(v, str) and v for v in rec.values()):
            _fail(path, f"line {i} is not a talk record {{id, source, text}}")
        n += 1
    if not n:
        _fail(path, "no talks")
    return n


# --- stages ----------------------------------------------------------------------------

TED_FOLDERS = ("cleaned_ted_data", "cleaned_ted_archive_data")
TEDX_FOLDER = "cleaned_tedx_data"
TED_OUT = "ted_talks/ted.jsonl.gz"
TEDX_OUT = "unlabeled/tedx_autocaptions.txt.gz"
DEV2012 = ("data/en/dev2012", "iwslt2011_che/dev2012")
TRAIN2012_SLICE = ("data/train2012", "iwslt2011_che/train2012_partial/train2012_slice_alyakubovich")
DEV2010 = ("data/english/iwslt2012_en/iwslt2010_dev_en", "cased_spoken/ted_iwslt_dev2010_cased.txt")
#: (corpus, source folder, cleaner, also write the cased text)
SPOKEN = (
    ("swda", "swda_data", swda_clean, True),
    ("mrda", "mrda_data", plain_clean, False),
    ("maptask", "maptask_data", plain_clean, False),
)
SPLITS = ("train", "val", "test")
#: Kept out of the data folder on purpose (an independent evaluation set).
HELD_OUT = {("swda", "test")}


@dataclass
class Build:
    """One build: the sources opened, the output folder, and what was written."""

    out: Path
    trees: dict[str, SourceTree]
    ted_folders: tuple[str, ...] = TED_FOLDERS
    written: dict[str, dict] = field(default_factory=dict)
    dropped: dict[str, dict] = field(default_factory=dict)
    _hygiene: Hygiene | None = None

    @property
    def hygiene(self) -> Hygiene:
        if self._hygiene is None:
            self._hygiene = Hygiene.from_sources(self.trees)
        return self._hygiene

    def record(self, rel: str, count: int, unit: str) -> None:
        content = _content(self.out / rel)
        sha = hashlib.sha256(content).hexdigest()
        ref = REFERENCE_SHA256.get(rel) if (rel != TED_OUT or self.ted_folders == TED_FOLDERS) else None
        same = None if ref is None else sha == ref
        self.written[rel] = {unit: count, "sha256": sha, "same_as_reference": same}
        verdict = {None: "no reference", True: "same as the reference", False: "DIFFERS from the reference"}[same]
        (log.info if same is not False else log.warning)("wrote %s: %d %s (%s)", rel, count, unit, verdict)

    # iwslt ---------------------------------------------------------------------------
    def iwslt(self) -> None:
        src, rel = DEV2012
        _write(self.out / rel, self.trees["xashru"].read(src))
        self.record(rel, check_word_labels(self.out / rel), "tokens")
        src, rel = TRAIN2012_SLICE
        _write(self.out / rel, self.trees["alyakubovich"].read(src).replace(b"\r\n", b"\n"))
        self.record(rel, check_word_labels(self.out / rel), "tokens")

    # dev2010 -------------------------------------------------------------------------
    def dev2010(self) -> None:
        src, rel = DEV2010
        _write(self.out / rel, self.trees["paddle"].read(src))
        self.record(rel, check_text_lines(self.out / rel), "lines")

    # spoken --------------------------------------------------------------------------
    def spoken(self) -> None:
        for name, folder, cleaner, cased in SPOKEN:
            tree = self.trees[name]
            for split in SPLITS:
                if (name, split) in HELD_OUT:
                    continue
                unlabeled, cased_lines = [], []
                paths = tree.files(f"{folder}/{split}", ".txt")
                if not paths:
                    raise InputError(f"{tree.repo.slug} at {tree.root}: no {folder}/{split}/*.txt")
                for path in paths:
                    for lineno, line in enumerate(tree.read_text(path).split("\n"), 1):
                        if not line.strip():
                            continue
                        parts = line.split("|")
                        if len(parts) < 2:
                            raise InputError(f"{tree.repo.slug}: {path}:{lineno}: no '|'-separated utterance")
                        text = cleaner(parts[1])
                        words = unpunct(text) if text else ""
                        if words:
                            unlabeled.append(words)
                            cased_lines.append(text)
                rel = f"unlabeled/{name}_{split}.txt"
                _write(self.out / rel, _lines_bytes(unlabeled))
                self.record(rel, check_text_lines(self.out / rel, pattern=UNLABELED_LINE), "lines")
                if cased:
                    rel_cased = f"cased_spoken/{name}_{split}_cased.txt"
                    _write(self.out / rel_cased, _lines_bytes(cased_lines))
                    n = check_text_lines(self.out / rel_cased)
                    if n != len(unlabeled):
                        _fail(self.out / rel_cased, f"{n} lines, {len(unlabeled)} in {rel} (must align)")
                    self.record(rel_cased, n, "lines")

    # ted -----------------------------------------------------------------------------
    def ted(self) -> None:
        tree = self.trees["ted"]
        hygiene = self.hygiene
        before = Counter(hygiene.dropped)
        talks, seen, dropped = [], set(), Counter()
        for folder in self.ted_folders:
            paths = tree.files(folder, ".md")
            if not paths:
                raise InputError(f"{tree.repo.slug} at {tree.root}: no {folder}/**/*.md")
            for path in paths:
                text = ted_markdown_text(tree.read_text(path))
                words = text.split()
                if len(words) < MIN_TALK_WORDS:
                    dropped["under_50_words"] += 1
                    continue
                key = tuple(words[:DUPLICATE_PREFIX_WORDS])
                if key in seen:
                    dropped["duplicate"] += 1
                    continue
                seen.add(key)
                if hygiene.hit(text):
                    dropped["overlaps_evaluation_set"] += 1
                    continue
                talks.append({"id": PurePosixPath(path).stem, "source": path, "text": text})
        _write(self.out / TED_OUT, _lines_bytes(json.dumps(t, ensure_ascii=False) for t in talks), compress=True)
        self.dropped["ted"] = {**dropped, "by_set": dict(hygiene.dropped - before)}
        log.info("ted: kept %d talks, dropped %s", len(talks), self.dropped["ted"])
        self.record(TED_OUT, check_talks(self.out / TED_OUT), "talks")

    # tedx ----------------------------------------------------------------------------
    def tedx(self) -> None:
        tree = self.trees["ted"]
        hygiene = self.hygiene
        before = Counter(hygiene.dropped)
        lines, dropped = [], Counter()
        paths = tree.files(TEDX_FOLDER, ".md")
        if not paths:
            raise InputError(f"{tree.repo.slug} at {tree.root}: no {TEDX_FOLDER}/**/*.md")
        for path in paths:
            text = caption_text(tree.read_text(path))
            if len(text.split()) < MIN_TALK_WORDS:
                dropped["under_50_words"] += 1
            elif hygiene.hit(text):
                dropped["overlaps_evaluation_set"] += 1
            else:
                lines.append(text)
        _write(self.out / TEDX_OUT, _lines_bytes(lines), compress=True)
        self.dropped["tedx"] = {**dropped, "by_set": dict(hygiene.dropped - before)}
        log.info("tedx: kept %d talks, dropped %s", len(lines), self.dropped["tedx"])
        self.record(TEDX_OUT, check_text_lines(self.out / TEDX_OUT, pattern=UNLABELED_LINE), "talks")


#: stage -> (the sources it reads: key -> paths that must exist)
STAGE_SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "iwslt": {"xashru": (DEV2012[0],), "alyakubovich": (TRAIN2012_SLICE[0],)},
    "dev2010": {"paddle": (DEV2010[0],)},
    "spoken": {name: tuple(f"{folder}/{split}" for split in SPLITS if (name, split) not in HELD_OUT)
               for name, folder, _, _ in SPOKEN},
    "ted": {"ted": TED_FOLDERS, "xashru": (EVAL_SETS[0][2], EVAL_SETS[1][2]),
            "paddle": (EVAL_SETS[2][2], EVAL_SETS[3][2])},
    "tedx": {"ted": (TEDX_FOLDER,), "xashru": (EVAL_SETS[0][2], EVAL_SETS[1][2]),
             "paddle": (EVAL_SETS[2][2], EVAL_SETS[3][2])},
}
STAGES = tuple(STAGE_SOURCES)

#: sha256 of each file's content (decompressed for .gz) in the data folder the shipped models were
#: trained from (../shared/data); a build from the documented commits should match them.
REFERENCE_SHA256 = {
    "iwslt2011_che/dev2012": "3810f16887cbeaa1903d2eec8fdf8ddf5c604176947a28fdd6bb4615f554ff9e",
    "iwslt2011_che/train2012_partial/train2012_slice_alyakubovich":
        "328d092f73b9ef91d212bc469f8dcfa62c8767de379f920ac18b68614549c345",
    "cased_spoken/ted_iwslt_dev2010_cased.txt": "1349b68bfa40ba0b96539bb3a791b1f3f18063a5bd4a1a72a97ab576c41a257e",
    "cased_spoken/swda_train_cased.txt": "26a3d2e050b2c5106cbeeff58677bb4610b8be9bfddbf7918d2632cd54aed26c",
    "cased_spoken/swda_val_cased.txt": "2890677264456e5cf8f918c90d6f577b4b5f4acac994befe61e677a7665b843f",
    "unlabeled/swda_train.txt": "cf3121529e356ef395c700f0c928dfdadae4a62ceb690b40252493c5cb85de17",
    "unlabeled/swda_val.txt": "f829c2ebed49870c2f25c3abb26c3fa5c449f238f3078c39a6567cb92c2fd89e",
    "unlabeled/mrda_train.txt": "c1de28cfb79daa2ad8da026d397559c22674682902245ed84d77e9037b07b33d",
    "unlabeled/mrda_val.txt": "0725a3b4487e8b149f8af2a90ed3ab44333deb671c1c09ba0f1e07e42eb7c9e1",
    "unlabeled/mrda_test.txt": "3b94b2ca5e0b0ea41f64bebd07d72cc3c3ac4d7b72064a3878da440f9814e0d3",
    "unlabeled/maptask_train.txt": "de321e8ab56c503c66da3b66c9cf95e22a2c9dc3d818bf5dc59611fd52ad05d7",
    "unlabeled/maptask_val.txt": "1c1f0f694d3740627244e6d7f3f84d4752c8e1d8291b44472ae3ff02fc27b84c",
    "unlabeled/maptask_test.txt": "6c54140c345519d68ce8ab1d62a31f945646c8ecddf1e82290bb84a33b3f219f",
    TED_OUT: "bd5bab4fdf6b77adc108eb5bf3751965f64d150d97d33f6eb32326229ea45603",
    TEDX_OUT: "16008f93cbb42bb38ff38dfa89284eab4fc709792cc34e93b8a0fb1f65f91e11",
}


def _empty_folders(sources: Path, trees: dict[str, SourceTree], stages: Sequence[str],
                   ted_archive: bool) -> list[str]:
    """A problem for each source folder a chosen stage reads that holds none of its files (a
    copy whose folder is there but empty), in the words of the stage's own error."""
    folders: list[tuple[str, str, str]] = []  # (source, folder, suffix)
    if "spoken" in stages:
        folders += [(key, path, ".txt") for key, paths in STAGE_SOURCES["spoken"].items() for path in paths]
    if "ted" in stages:
        folders += [("ted", folder, ".md") for folder in (TED_FOLDERS if ted_archive else TED_FOLDERS[:1])]
    if "tedx" in stages:
        folders.append(("ted", TEDX_FOLDER, ".md"))
    problems = []
    for key, folder, suffix in folders:
        tree = trees.get(key)
        if tree is not None and not tree.files(folder, suffix):
            hint = "; or build without the archive: --no-ted-archive" if folder == TED_FOLDERS[1] else ""
            problems.append(f"{tree.repo.slug} at {tree.root}: no {folder}/**/*{suffix} (expected at commit "
                            f"{tree.repo.commit}: {tree.repo.clone_hint(sources)}){hint}")
    return problems


def build(sources: str | Path, out: str | Path, *, stages: Sequence[str] = STAGES,
          ted_archive: bool = True) -> dict:
    """Build the data folder ``out`` from the source copies under ``sources``; returns the manifest.

    Every source the chosen stages read (each file and folder, and that a folder holds files) is
    looked up before anything is written, so missing ones fail at once (one InputError naming
    each repository and commit to clone). The files are built beside ``out`` and moved in once
    every stage has checked them: a build that fails writes nothing into ``out``.
    """
    sources, out = Path(sources), Path(out)
    if not sources.is_dir():
        raise InputError(f"sources folder {sources} does not exist (docs/data.md: Building the data folder)")
    unknown = [s for s in stages if s not in STAGE_SOURCES]
    if unknown:
        raise InputError(f"unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    needed: dict[str, list[str]] = {}
    for stage in stages:
        for key, paths in STAGE_SOURCES[stage].items():
            if stage == "ted" and key == "ted" and not ted_archive:
                paths = TED_FOLDERS[:1]
            have = needed.setdefault(key, [])
            have.extend(p for p in paths if p not in have)
    trees: dict[str, SourceTree] = {}
    problems = []
    for key, paths in needed.items():  # every missing source is named at once, not one per run
        try:
            trees[key] = open_source(sources, key, paths)
        except InputError as e:
            hint = ("; or build without the archive: --no-ted-archive"
                    if key == "ted" and f"has no {TED_FOLDERS[1]}" in str(e) else "")
            problems.append(f"{e}{hint}")
    problems += _empty_folders(sources, trees, stages, ted_archive)
    if len(problems) == 1:
        raise InputError(problems[0])
    if problems:
        raise InputError(f"{len(problems)} sources are missing or incomplete:\n" +
                         "\n".join(f"  - {p}" for p in problems))
    # built into a folder beside ``out``, moved in when every stage has built and checked its files:
    # a build that fails (a malformed line, a check) leaves ``out`` as it was
    staging = out.parent / f".{out.name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    b = Build(staging, trees, TED_FOLDERS if ted_archive else TED_FOLDERS[:1])
    actions: dict[str, Callable[[], None]] = {"iwslt": b.iwslt, "dev2010": b.dev2010, "spoken": b.spoken,
                                              "ted": b.ted, "tedx": b.tedx}
    try:
        for stage in STAGES:
            if stage in stages:
                log.info("stage %s", stage)
                actions[stage]()
        for rel in b.written:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staging / rel, out / rel)  # a copy where ``out`` is another file system (a mount)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = {"sources": {t.repo.slug: t.describe() for t in trees.values()},
                "files": b.written, "dropped": b.dropped,
                "ted_archive": ted_archive}
    manifest_path = out / "build_manifest.json"
    old = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    if old:  # a partial build (--only) keeps what earlier stages recorded
        manifest = {"sources": {**old.get("sources", {}), **manifest["sources"]},
                    "files": {**old.get("files", {}), **manifest["files"]},
                    "dropped": {**old.get("dropped", {}), **manifest["dropped"]},
                    "ted_archive": ted_archive}
    _write(manifest_path, (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    differ = [rel for rel, f in b.written.items() if f["same_as_reference"] is False]
    log.info("built %d files in %s%s", len(b.written), out,
             f"; {len(differ)} differ from the reference: {', '.join(differ)}" if differ else "")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.build_data", description=__doc__.split("\n")[0])
    ap.add_argument("--sources", required=True, type=path_argument,
                    help="folder with a copy of each source repository (docs/data.md)")
    ap.add_argument("--out", required=True, type=path_argument, help="the data folder to write")
    ap.add_argument("--only", nargs="+", choices=STAGES, default=list(STAGES), metavar="STAGE",
                    help=f"build only these stages ({', '.join(STAGES)}; default: all)")
    ap.add_argument("--no-ted-archive", action="store_true",
                    help="leave cleaned_ted_archive_data out of ted.jsonl.gz (its talks are automatic "
                         "captions without punctuation; the reference folder includes them)")
    args = ap.parse_args(argv)
    return run_tool(lambda: build(args.sources, args.out, stages=args.only, ted_archive=not args.no_ted_archive))


if __name__ == "__main__":
    raise SystemExit(main())
