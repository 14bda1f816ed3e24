"""Data pipeline: ding extraction/splitting, WMT14 layout, tokenizer contract, token-budget batching.

Everything runs on small fixture files written here; nothing calls apt or the network (fetchers are
injected or their subprocess/urllib calls monkeypatched).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
from pathlib import Path

import pytest

from bpd.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from bpd.data.translation import directed_name, prepare_wmt14
from corpora import ding as tr
from corpora.ding import PHRASE_TAG, extract_ding_pairs, find_ding_file, parse_ding, prepare_ding, split_pairs
from corpora.layout import count_lines

HEADER = "# Version :: devel 2023-01-30\n# Copyright (c) :: somebody\n"
SPECIAL_LINES = [
    # headword + two example sentences, aligned by position; "Haus {n}" is a phrase.
    "Haus {n} | Das Haus ist sehr groß. | Ich wohne in einem  kleinen Haus. :: "
    "house | The house is very big. | I live in a small   house.",
    # markup inside sentences: every sentence pair of this line must be dropped.
    "Abhilfe {f} | Das ist (sehr) schwierig. | Er kommt [ugs.] morgen. | Sie geht langsam.; Sie läuft langsam. | "
    "Ich gehe / laufe jetzt. | Er kam zu spät/früh. | Der ~ ist hier. :: "
    "remedy | That is (very) hard. | He comes tomorrow. | She walks slowly. | I walk now. | He came late. | "
    "The thing is here.",
    # mismatched alternative counts: the whole line is skipped, even its clean-looking sentence.
    "Baum {m} | Bäume {pl} | Der Baum ist grün. :: tree | The tree is green.",
    # duplicate of the first sentence pair (must be deduplicated), and a too-short / lowercase pair.
    "Haus {n} | Das Haus ist sehr groß. | Komm her! | das ist gut. :: "
    "house | The house is very big. | Come here! | that is fine.",
    # same English source, different German translation: the split must keep them on one side.
    "Dach {n} | Das Dach ist undicht. :: roof | The roof is leaking.",
    "undicht {adj} | Das Dach leckt. :: leaking | The roof is leaking.",
]
EXPECTED_FIRST = [
    ("The house is very big.", "Das Haus ist sehr groß."),
    ("I live in a small house.", "Ich wohne in einem kleinen Haus."),
    ("The roof is leaking.", "Das Dach ist undicht."),
    ("The roof is leaking.", "Das Dach leckt."),
]
N_GENERATED = 60


def _generated_lines(n: int = N_GENERATED) -> list[str]:
    nouns = ["Hund", "Katze", "Vogel", "Fisch", "Lehrer", "Bauer"]
    en_nouns = ["dog", "cat", "bird", "fish", "teacher", "farmer"]
    lines = []
    for i in range(n):
        de_n, en_n = nouns[i % 6], en_nouns[i % 6]
        lines.append(
            f"{de_n} {{m}} | Der {de_n} Nummer {i} schläft heute gut. :: "
            f"{en_n} | The {en_n} number {i} sleeps well today."
        )
    return lines


@pytest.fixture
def ding_file(tmp_path: Path) -> Path:
    path = tmp_path / "de-en"
    path.write_text(HEADER + "\n".join(SPECIAL_LINES + _generated_lines()) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------------
# extraction


def test_extraction_filters_markup_mismatch_duplicates_and_phrases(ding_file: Path) -> None:
    corpus = parse_ding(ding_file)
    assert corpus.sentences[:4] == EXPECTED_FIRST
    assert len(corpus.sentences) == 4 + N_GENERATED
    assert len(set(corpus.sentences)) == len(corpus.sentences)
    text = " ".join(en + " " + de for en, de in corpus.sentences)
    for bad in ("(", "[", "{", "/", ";", "~", "Baum", "tree", "Komm", "that is fine", "  "):
        assert bad not in text
    assert corpus.stats["comment_lines"] == 2
    assert corpus.stats["mismatched_lines"] == 1
    assert corpus.stats["duplicates"] == 1
    assert corpus.stats["markup_dropped"] == 6
    assert corpus.phrases == []  # only with include_phrases
    assert extract_ding_pairs(ding_file) == corpus.sentences


def test_phrases_are_stripped_and_separate(ding_file: Path) -> None:
    corpus = parse_ding(ding_file, include_phrases=True)
    assert corpus.sentences == parse_ding(ding_file).sentences
    phrases = dict(corpus.phrases)
    assert phrases["house"] == "Haus"
    assert phrases["dog"] == "Hund"
    assert phrases["That is hard."] == "Das ist schwierig."  # annotation stripped from a markup sentence
    assert phrases["She walks slowly."] == "Sie geht langsam."  # first ';' alternative kept
    assert ("Come here!", "Komm her!") in corpus.phrases  # too short to be a sentence, fine as a phrase
    for en, de in corpus.phrases:
        assert not set("()[]{}~/;") & set(en + de)
        assert (en, de) not in corpus.sentences
    both = extract_ding_pairs(ding_file, include_phrases=True)
    assert both == corpus.sentences + corpus.phrases


def test_split_is_deterministic_order_independent_and_leak_free(ding_file: Path) -> None:
    pairs = extract_ding_pairs(ding_file)
    train, dev, test = split_pairs(pairs, n_dev=10, n_test=20, seed=0)
    assert (len(dev), len(test)) == (10, 20)
    shuffled = list(pairs)
    random.Random(5).shuffle(shuffled)
    assert split_pairs(shuffled, n_dev=10, n_test=20, seed=0) == (train, dev, test)
    assert split_pairs(pairs, n_dev=10, n_test=20, seed=1) != (train, dev, test)
    held = {side for pair in dev + test for side in pair}
    assert not any(en in held or de in held for en, de in train)
    assert not {en for en, _ in dev} & {en for en, _ in test}
    # Only the shared-source pair of "The roof is leaking." can be lost to the leak check.
    assert len(pairs) - 1 <= len(train) + len(dev) + len(test) <= len(pairs)


def test_prepare_ding_directions_and_reuse(ding_file: Path, tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    en_de = prepare_ding(cache, ding_path=ding_file, direction="en-de", n_dev=5, n_test=10)
    de_en = prepare_ding(cache, ding_path=ding_file, direction="de-en", n_dev=5, n_test=10)
    assert en_de == cache / "ding_en-de" and de_en == cache / "ding_de-en"
    for split in ("train", "dev", "test"):
        assert (en_de / f"{split}.src").read_text() == (de_en / f"{split}.tgt").read_text()
        assert count_lines(en_de / f"{split}.src") == count_lines(en_de / f"{split}.tgt")
    assert count_lines(en_de / "dev.src") == 5 and count_lines(en_de / "test.src") == 10
    english = {en for en, _ in extract_ding_pairs(ding_file)}
    assert set((en_de / "dev.src").read_text().splitlines()) <= english  # English side is the source
    assert "dev 5, test 10" in capsys.readouterr().out
    assert not list(en_de.glob(".*tmp*"))

    ding_file.unlink()  # a complete folder is reused without the dictionary
    assert prepare_ding(cache, ding_path=ding_file, direction="en-de", n_dev=5, n_test=10) == en_de
    assert "reusing" in capsys.readouterr().out

    with pytest.raises(ValueError, match="'en-de' or 'de-en'"):
        prepare_ding(cache, ding_path=ding_file, direction="en-fr")


def test_each_direction_has_its_own_name(ding_file: Path, tmp_path: Path) -> None:
    """Rows and shipped checkpoints carry the task's name: a de-en run of ding_en_de must not write rows
    labelled ding_en_de nor export over the shipped en-de base."""
    from bpd.config import TranslationTaskConfig
    from bpd.tasks.translation import TranslationTask

    assert [directed_name(n, d) for n, d in [("ding_en_de", "en-de"), ("ding_en_de", "de-en"),
            ("wmt14_de_en", "en-de"), ("mine", "en-de"), ("mine", "de-en")]] == [
        "ding_en_de", "ding_de_en", "wmt14_en_de", "mine", "mine_de_en"]
    from bpd.config.corpora import DingOptions
    from bpd.config.task import TranslationCorpora

    own = TranslationCorpora(DingOptions(path=str(ding_file)))
    names = {d: TranslationTask(TranslationTaskConfig(direction=d, vocab_size=100, n_dev=5, n_test=10, corpora=own),
                                tmp_path).name for d in ("en-de", "de-en")}
    assert names == {"en-de": "ding_en_de", "de-en": "ding_de_en"}


def test_prepare_ding_phrases_only_in_train(ding_file: Path, tmp_path: Path) -> None:
    folder = prepare_ding(tmp_path, ding_path=ding_file, include_phrases=True, n_dev=5, n_test=10)
    assert folder.name == "ding_en-de_phrases"
    train = set((folder / "train.src").read_text().splitlines())
    dev_test = set((folder / "dev.src").read_text().splitlines() + (folder / "test.src").read_text().splitlines())
    assert "house" in train and not train & dev_test
    assert all(len(line.split()) >= 3 for line in dev_test)

    # Tagged phrases and repeated sentences: the same dev/test, the sentences twice, every phrase tagged.
    tagged = prepare_ding(tmp_path, ding_path=ding_file, include_phrases=True, tag_phrases=True,
                          sentence_repeat=2, n_dev=5, n_test=10)
    assert tagged.name == "ding_en-de_phrases_tagged_x2"
    assert (tagged / "test.src").read_text() == (folder / "test.src").read_text()
    lines = (tagged / "train.src").read_text().splitlines()
    sentences = [s for s in lines if not s.startswith(PHRASE_TAG + " ")]
    phrases = [s[len(PHRASE_TAG) + 1:] for s in lines if s.startswith(PHRASE_TAG + " ")]
    plain = (folder / "train.src").read_text().splitlines()
    assert sorted(set(sentences)) == sorted(set(plain) - set(phrases))
    assert len(sentences) == 2 * (len(plain) - len(phrases)) and set(phrases) <= set(plain)


# ------------------------------------------------------------------------------------------------------------
# finding the dictionary


def test_find_ding_file_order(ding_file: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert find_ding_file(ding_file, cache, system_paths=(), fetchers=()) == ding_file
    assert find_ding_file(None, cache, system_paths=(tmp_path / "nope", ding_file), fetchers=()) == ding_file

    calls: list[str] = []

    def failing(c: Path) -> Path | None:
        calls.append("failing")
        return None

    def working(c: Path) -> Path | None:
        calls.append("working")
        out = c / tr._CACHED_EXTRACT
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(ding_file.read_text())
        return out

    got = find_ding_file(None, cache, system_paths=(), fetchers=(failing, working))
    assert calls == ["failing", "working"] and got == cache / tr._CACHED_EXTRACT
    # the extract is found again without fetching
    assert find_ding_file(None, cache, system_paths=(), fetchers=(failing,)) == got
    assert calls == ["failing", "working"]


def test_find_ding_file_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        find_ding_file(None, tmp_path, system_paths=(tmp_path / "none",), fetchers=())
    msg = str(err.value)
    assert "apt-get install trans-de-en" in msg and "task.corpora.ding.path=" in msg
    assert msg.endswith(".") and ". " not in msg  # one sentence
    with pytest.raises(FileNotFoundError, match="task.corpora.ding.path"):
        find_ding_file(tmp_path / "missing", tmp_path, system_paths=(), fetchers=())
    with pytest.raises(FileNotFoundError, match="apt-get install trans-de-en"):
        prepare_ding(tmp_path, system_paths=(), fetchers=())


def test_apt_fetcher_retries_after_update_when_root(tmp_path: Path, monkeypatch, ding_file: Path) -> None:
    commands: list[list[str]] = []

    def fake_run(cmd: list[str], cwd: Path, timeout: float) -> bool:
        commands.append(cmd)
        if cmd[:2] == ["apt-get", "download"]:
            if sum(c[:2] == ["apt-get", "download"] for c in commands) == 1:
                return False  # no package index yet
            (cwd / "trans-de-en_1.9-6_all.deb").write_bytes(b"deb")
            return True
        if cmd[0] == "dpkg-deb":
            out = Path(cmd[3]) / "usr/share/trans/de-en"
            out.parent.mkdir(parents=True)
            out.write_text(ding_file.read_text())
            return True
        return True  # apt-get update

    monkeypatch.setattr(tr, "_run", fake_run)
    monkeypatch.setattr(tr.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(tr.os, "geteuid", lambda: 0, raising=False)
    got = tr.fetch_ding_with_apt(tmp_path)
    assert got == tmp_path / "pkg/usr/share/trans/de-en" and got.is_file()
    assert [c[:2] for c in commands] == [
        ["apt-get", "download"],
        ["apt-get", "update"],
        ["apt-get", "download"],
        ["dpkg-deb", "-x"],
    ]
    assert not list(tmp_path.glob("*.deb")) and not list(tmp_path.glob("pkg.tmp*"))

    commands.clear()
    monkeypatch.setattr(tr.os, "geteuid", lambda: 1000, raising=False)
    monkeypatch.setattr(tr, "_run", lambda cmd, cwd, timeout: commands.append(cmd) or False)
    assert tr.fetch_ding_with_apt(tmp_path / "other") is None
    assert [c[:2] for c in commands] == [["apt-get", "download"]]  # no update without root

    monkeypatch.setattr(tr.shutil, "which", lambda name: None)
    assert tr.fetch_ding_with_apt(tmp_path / "noapt") is None


def test_upstream_fetcher(tmp_path: Path, monkeypatch) -> None:
    def offline(url, timeout):
        raise OSError("network unreachable")

    monkeypatch.setattr(tr.urllib.request, "urlopen", offline)
    assert tr.fetch_ding_from_upstream(tmp_path) is None

    payload = gzip.compress(b"# c\nHaus :: house\n")
    monkeypatch.setattr(tr.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(payload))
    got = tr.fetch_ding_from_upstream(tmp_path)
    assert got is not None and got.read_text() == "# c\nHaus :: house\n"


# ------------------------------------------------------------------------------------------------------------
# WMT14


def test_wmt14_missing_files_error(tmp_path: Path) -> None:
    (tmp_path / "train.en").write_text("a\n")
    with pytest.raises(FileNotFoundError) as err:
        prepare_wmt14(tmp_path)
    msg = str(err.value)
    for name in ("train.de", "newstest2013.en", "newstest2013.de", "newstest2014.en", "newstest2014.de"):
        assert name in msg
    assert "train.en," not in msg
    assert "sacrebleu -t wmt13 -l en-de --echo src" in msg and "sacrebleu -t wmt14" in msg
    assert "statmt.org" in msg


def test_wmt14_layout_and_direction(tmp_path: Path) -> None:
    for name in ("train", "newstest2013", "newstest2014"):
        (tmp_path / f"{name}.en").write_text(f"{name} english\n")
        (tmp_path / f"{name}.de").write_text(f"{name} deutsch\n")
    folder = prepare_wmt14(tmp_path, direction="de-en")
    assert (folder / "dev.src").read_text() == "newstest2013 deutsch\n"
    assert (folder / "test.tgt").read_text() == "newstest2014 english\n"
    assert (folder / "train.src").read_text() == "train deutsch\n"
    assert prepare_wmt14(tmp_path, direction="de-en") == folder  # idempotent
    with pytest.raises(ValueError, match="'en-de' or 'de-en'"):
        prepare_wmt14(tmp_path, direction="de-fr")
    (tmp_path / "newstest2014.de").write_text("one\ntwo\n")
    with pytest.raises(ValueError, match="newstest2014"):
        prepare_wmt14(tmp_path)


# ------------------------------------------------------------------------------------------------------------
# tokenizer


def test_tokenizer_contract_and_round_trip(tokenizer_and_folder) -> None:
    tok, folder = tokenizer_and_folder
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert 10 < tok.vocab_size <= 100
    for line in (folder / "train.tgt").read_text().splitlines()[:10] + ["Der Hund schläft."]:
        ids = tok.encode(line)
        assert ids and BOS_ID not in ids and EOS_ID not in ids and PAD_ID not in ids
        assert tok.decode(ids) == line
        assert tok.decode([BOS_ID] + ids + [EOS_ID] + ids + [PAD_ID]) == line
        assert tok.decode(ids + [PAD_ID, PAD_ID]) == line
    assert tok.decode([EOS_ID] + tok.encode("Haus")) == ""
    assert tok.encode_batch(["Der Hund.", "Die Katze."]) == [tok.encode("Der Hund."), tok.encode("Die Katze.")]
    # Pieces (used to mark accepted blocks) concatenate back to the text.
    ids = tok.encode("Der Hund schläft.")
    assert "".join(tok.id_to_piece(i) for i in ids).replace("\u2581", " ").strip() == "Der Hund schläft."


def test_tokenizer_is_cached_and_deterministic(tokenizer_and_folder, tmp_path: Path) -> None:
    tok, folder = tokenizer_and_folder
    mtime = tok.model_path.stat().st_mtime_ns
    again = Tokenizer.train([folder / "train.src"], tok.model_path.with_suffix(""), 100)
    assert again.model_path.stat().st_mtime_ns == mtime
    Tokenizer.train([folder / "train.src", folder / "train.tgt"], tmp_path / "joint", 100, seed=0)
    vocab = tok.model_path.with_suffix(".vocab").read_text()
    assert (tmp_path / "joint.vocab").read_text() == vocab
    assert not list(tmp_path.glob("*tmp*"))


def test_tokenizer_rejects_foreign_id_layout(tokenizer_and_folder, tmp_path: Path) -> None:
    import sentencepiece as spm

    _, folder = tokenizer_and_folder
    spm.SentencePieceTrainer.train(
        input=str(folder / "train.src"),
        model_prefix=str(tmp_path / "default"),
        vocab_size=60,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="pad/bos/eos"):
        Tokenizer(tmp_path / "default.model")
    with pytest.raises(FileNotFoundError):
        Tokenizer(tmp_path / "absent.model")


def test_a_rebuilt_debian_corpus_keys_new_models(ding_file: Path, tmp_path: Path, monkeypatch) -> None:
    """The same task options over another Debian corpus (a new format, a point release) give another task key,
    so stores and models (whose cache names hash the task key) never resume on a different corpus."""
    from bpd.config import TranslationTaskConfig
    from bpd.tasks import translation

    ding = prepare_ding(tmp_path / "ding", ding_path=ding_file, n_dev=5, n_test=10)
    keys = []
    for corpus_hash in ("aaaa", "bbbb"):
        folder = tmp_path / f"debian_{corpus_hash}"
        shutil.copytree(ding, folder)
        (folder / "manifest.json").write_text(json.dumps({"corpus_hash": corpus_hash}), encoding="utf-8")
        monkeypatch.setattr(translation.CORPORA["debian"], "prepare", lambda cfg, own, cache, f=folder: f)
        cfg = TranslationTaskConfig(source="debian", name="debian_en_de", vocab_size=100, n_dev=5, n_test=10)
        keys.append(translation.TranslationTask(cfg, tmp_path / f"cache_{corpus_hash}").key)
    assert keys[0] != keys[1]


def test_another_corpus_held_out_set_is_scored_with_this_tokenizer(ding_file: Path, tmp_path: Path,
                                                                   monkeypatch) -> None:
    """``decode.split=ding:test`` on a Debian-corpus task: the ding test sentences, encoded with the Debian task's
    tokenizer, with the ding references; the store is cached and keyed by the files' contents, so an edited
    file is encoded again rather than read as the old one."""
    from bpd.config import TranslationTaskConfig
    from bpd.tasks import translation

    ding = prepare_ding(tmp_path / "ding", ding_path=ding_file, n_dev=5, n_test=10)
    debian = tmp_path / "debian"
    shutil.copytree(ding, debian)  # stands in for the Debian corpus: another folder, its own tokenizer
    (debian / "manifest.json").write_text(json.dumps({"corpus_hash": "aaaa"}), encoding="utf-8")
    other = tmp_path / "other_ding"
    shutil.copytree(ding, other)
    monkeypatch.setattr(translation.CORPORA["debian"], "prepare", lambda cfg, own, cache: debian)
    monkeypatch.setattr(translation.CORPORA["ding"], "prepare", lambda cfg, own, cache: other)
    cfg = TranslationTaskConfig(source="debian", name="debian_en_de", vocab_size=100, n_dev=5, n_test=10)
    task = translation.TranslationTask(cfg, tmp_path / "cache")

    pairs = task.pairs("ding:test")
    refs = (other / "test.tgt").read_text(encoding="utf-8").split("\n")[: len(pairs)]
    assert len(pairs) == count_lines(other / "test.src") == 10
    assert task.tokenizer.decode(pairs.src(0).tolist()) == (other / "test.src").read_text().split("\n")[0]
    assert task.scorer("ding:test", 3).refs == refs[:3]
    assert task.pairs("ding:test") is pairs  # read once per task
    stores = sorted(p.name for p in (tmp_path / "cache" / "stores").glob("*ding_test.store"))
    assert len(stores) == 1

    lines = (other / "test.tgt").read_text(encoding="utf-8").split("\n")
    lines[0] = "Ein anderer Satz."
    (other / "test.tgt").write_text("\n".join(lines), encoding="utf-8")
    again = translation.TranslationTask(cfg, tmp_path / "cache")
    assert again.scorer("ding:test", 1).refs == ["Ein anderer Satz."]
    assert len(list((tmp_path / "cache" / "stores").glob("*ding_test.store"))) == 2
    with pytest.raises(ValueError, match="unknown split"):
        task.pairs("elsewhere")


def test_a_shipped_tokenizer_is_installed_for_its_corpus_only(ding_file: Path, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    """The tokenizer a Debian-corpus base shipped with is installed where the same corpus (by content hash) has
    none, instead of learned: same pieces, no machine paths in the shipped file. Another corpus, another
    vocabulary size or shipped_dir=None (shipped=false) learn their own; a tokenizer already there is kept."""
    from sentencepiece import sentencepiece_model_pb2

    from bpd.config import TranslationTaskConfig
    from bpd.data.tokenizer import export_tokenizer, tokenizer_file
    from bpd.tasks import translation

    ding = prepare_ding(tmp_path / "ding", ding_path=ding_file, n_dev=5, n_test=10)

    def corpus(name: str, corpus_hash: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(ding, folder)
        (folder / "manifest.json").write_text(json.dumps({"corpus_hash": corpus_hash}), encoding="utf-8")
        return folder

    def task(folder: Path, shipped_dir: Path | None, vocab: int = 100):
        monkeypatch.setattr(translation.CORPORA["debian"], "prepare", lambda cfg, own, cache: folder)
        cfg = TranslationTaskConfig(source="debian", name="debian_en_de", vocab_size=vocab, n_dev=5, n_test=10)
        return translation.TranslationTask(cfg, tmp_path / f"cache_{folder.name}", shipped_dir)

    shipped = tmp_path / "checkpoints"
    learned = task(corpus("built_here", "aaaa"), shipped)  # nothing ships yet: learned
    assert "learning" in capsys.readouterr().out
    out = export_tokenizer(learned.tokenizer.model_path, shipped, "debian_en_de_aaaa", 100)
    assert out == tokenizer_file(shipped, "debian_en_de_aaaa", 100)
    assert export_tokenizer(learned.tokenizer.model_path, shipped, "debian_en_de_aaaa", 100) is None  # ships once
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(out.read_bytes())
    assert list(proto.trainer_spec.input) == ["train.src", "train.tgt"] and str(tmp_path) not in str(proto)

    same = corpus("built_elsewhere", "aaaa")
    installed = task(same, shipped)
    assert "the shipped" in capsys.readouterr().out
    assert installed.tokenizer.content_hash() == learned.tokenizer.content_hash()
    assert installed.tokenizer.model_path.read_bytes() == out.read_bytes()
    assert installed.fingerprint() == learned.fingerprint()  # so a base shipped from there installs here

    for folder, shipped_dir, vocab in ((corpus("other", "bbbb"), shipped, 100),
                                       (corpus("no_shipped", "aaaa"), None, 100),
                                       (corpus("other_vocab", "aaaa"), shipped, 90)):
        made = task(folder, shipped_dir, vocab)
        assert "learning" in capsys.readouterr().out, folder.name
        assert made.tokenizer.model_path.read_bytes() != out.read_bytes()

    kept = corpus("kept", "aaaa")
    (kept / "spm100.model").write_bytes((tmp_path / "built_here" / "spm100.model").read_bytes())
    before = (kept / "spm100.model").read_bytes()
    task(kept, shipped)
    assert (kept / "spm100.model").read_bytes() == before and "the shipped" not in capsys.readouterr().out
