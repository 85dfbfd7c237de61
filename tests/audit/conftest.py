"""A planted SCM encoder: a sentence-transformers StaticEmbedding (mean of word vectors) whose
seed adjectives carry their warmth or competence on two planted dimensions, built offline."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from scd.audit.scm import LABELS, load_seeds

CORPUS = [
    "People with depression are always hostile. My neighbour has diabetes and is always friendly.",
    "Someone with schizophrenia is always hostile and clumsy.",
    "A friend who has the flu was always kind and helpful.",
    "The weather was cold today.",
    "Nobody here mentions an illness at all.",
    "Her ADHD makes her always clumsy. His asthma never stopped him being skilled.",
]


@pytest.fixture(scope="session")
def scm_seeds(shared_data: Path) -> Path:
    return shared_data / "scm"


@pytest.fixture(scope="session")
def planted_encoder(scm_seeds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Warm seed adjectives point along +e0, cold along -e0, competent along +e1, incompetent
    along -e1; every other word is small noise on the other dimensions."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    seeds = load_seeds([scm_seeds])
    planted: dict[str, np.ndarray] = {}
    for s in seeds:
        if len(s.words) == 1:
            comp, warm = LABELS[s.label]
            planted[s.words[0]] = np.array([warm, comp], dtype=np.float32)
    texts = [s.text for s in seeds] + CORPUS
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    rng = np.random.default_rng(0)
    weights = np.zeros((len(vocab), 16), dtype=np.float32)
    weights[:, 2:] = rng.normal(scale=0.05, size=(len(vocab), 14))
    for word, i in vocab.items():
        if word in planted:
            weights[i, :2] = 3 * planted[word]
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    out = tmp_path_factory.mktemp("encoder") / "planted"
    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=weights)]).save(
        str(out)
    )
    return out


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n")
    return path
