"""XLNet in the stigma probes: a masked LM for ``mlm`` (permutation mask + target mapping, as
Mei et al. 2023 used XLNet-large), refused by ``aq27`` and ``sds``; built offline in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scd.errors import InputError
from scd.eval.benchmarks import get
from scd.eval.benchmarks.stigma.common import model_kind
from scd.eval.benchmarks.stigma.xlnet import xlnet_fill_mask

SPECIAL = ["<unk>", "<pad>", "<mask>", "<sep>", "<cls>"]


def _xlnet_tokenizer(corpus: list[str]):
    """Word-level, XLNet's special tokens, padding on the left as XLNet's tokenizer does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIAL))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        sep_token="<sep>",
        cls_token="<cls>",
        padding_side="left",
        model_max_length=128,
    )


def _inputs(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    enc = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    ids = enc["input_ids"]
    rows, width = torch.arange(len(texts)), ids.shape[1]
    target = (ids == tokenizer.mask_token_id).int().argmax(1)
    perm = torch.zeros(len(texts), width, width)
    perm[rows, :, target] = 1.0
    mapping = torch.zeros(len(texts), 1, width)
    mapping[rows, 0, target] = 1.0
    return {
        "input_ids": ids,
        "attention_mask": enc["attention_mask"],
        "perm_mask": perm,
        "target_mapping": mapping,
        "use_mems": False,
    }


@pytest.fixture(scope="module")
def xlnet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer XLNet trained 80 steps (~2 s) to fill the SDS mask of stigmatized conditions
    with negative words and of the others with positive ones (as ``build_toy_masked_lm``)."""
    from stigma_toy_models import NEGATIVE_WORDS, POSITIVE_WORDS, _corpus, _fit
    from transformers import XLNetConfig, XLNetLMHeadModel

    sds, _, corpus = _corpus(1)
    tok = _xlnet_tokenizer(corpus)
    texts, targets = [], []
    for n, r in enumerate(sds):
        words = NEGATIVE_WORDS if r["stigmatized"] else POSITIVE_WORDS
        texts.append(r["prompt"])  # the generated prompts' mask is "<mask>", XLNet's too
        targets.append(tok.convert_tokens_to_ids(words[n % len(words)]))
    inputs, labels = _inputs(tok, texts), torch.tensor(targets)[:, None]
    torch.manual_seed(0)
    config = XLNetConfig(
        vocab_size=len(tok),
        d_model=32,
        n_layer=2,
        n_head=2,
        d_inner=64,
        dropout=0.0,
        pad_token_id=tok.pad_token_id,
    )
    model = XLNetLMHeadModel(config)
    gen = torch.Generator().manual_seed(0)

    def batch() -> torch.Tensor:
        idx = torch.randint(len(texts), (64,), generator=gen)
        part = {k: v[idx] if torch.is_tensor(v) else v for k, v in inputs.items()}
        return model(**part, labels=labels[idx]).loss

    _fit(model, batch, 80, 0)
    out = tmp_path_factory.mktemp("stigma") / "xlnet"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_xlnet_counts_as_masked(xlnet_dir: Path, tmp_path: Path) -> None:
    from transformers import XLNetConfig

    assert json.loads((xlnet_dir / "config.json").read_text())["architectures"] == [
        "XLNetLMHeadModel"
    ]
    assert model_kind(str(xlnet_dir)) == "masked"
    XLNetConfig(architectures=["XLNetForSequenceClassification"]).save_pretrained(tmp_path / "c")
    assert model_kind(str(tmp_path / "c")) == "classifier"
    XLNetConfig().save_pretrained(tmp_path / "bare")  # no architectures: model_type decides
    assert model_kind(str(tmp_path / "bare")) == "masked"


def test_batched_topk_equals_one_sentence_at_a_time(xlnet_dir: Path, tiny_prompts: Path):
    from transformers import AutoTokenizer, XLNetLMHeadModel

    from scd.data_gen.stigma_probes import read_stigma_table

    tok = AutoTokenizer.from_pretrained(xlnet_dir)
    model = XLNetLMHeadModel.from_pretrained(xlnet_dir).eval()
    assert tok.padding_side == "left" and tok.mask_token == "<mask>"
    texts = [r["prompt"] for r in read_stigma_table(tiny_prompts, "sds")][::4]
    lengths = {len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts}
    assert len(lengths) > 3  # the batches are padded
    got = xlnet_fill_mask(model, tok, texts, top_k=10, batch_size=8)
    assert len(got) == len(texts)
    for text, preds in zip(texts, got):
        with torch.no_grad():
            logits = model(**_inputs(tok, [text])).logits[0, 0]  # no padding
        probs = torch.softmax(logits, -1)
        values, ids = probs.topk(10)
        assert [p["token"] for p in preds] == ids.tolist()
        assert [p["score"] for p in preds] == pytest.approx(values.tolist(), abs=1e-5)
        assert [p["token_str"] for p in preds] == [tok.decode([i]) for i in ids.tolist()]
    with pytest.raises(InputError, match="expected one <mask> token, found 0"):
        xlnet_fill_mask(model, tok, ["no mask here"], top_k=5, batch_size=8)


def test_mlm_probe_on_xlnet(xlnet_dir: Path, tiny_prompts: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SCD_DATA_DIR", str(tmp_path / "data"))  # the packaged lexicon
    out = tmp_path / "mlm"
    s = get("mlm").evaluate(str(xlnet_dir), out, prompts=tiny_prompts, progress=False)
    assert s["scoring"] == "xlnet_perm_mask" and s["lexicon_source"] == "packaged"
    assert s == json.loads((out / "summary.json").read_text())
    assert s["gap"]["gap"] > 0.3  # the planted gap: negative fills for the stigmatized
    assert s["mean_rated_share"] > 0.9
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 84 and all(0 <= r["p_negative"] <= 1 for r in recs)
    assert json.loads((out / "run.json").read_text())["model_kind"] == "masked"


def test_aq27_and_sds_refuse_xlnet(xlnet_dir: Path, tiny_prompts: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="XLNet does not fit the aq27 probe") as err:
        get("aq27").evaluate(str(xlnet_dir), tmp_path / "a", prompts=tiny_prompts)
    assert "\n" not in str(err.value) and "PLL-word-l2r" in str(err.value)
    with pytest.raises(InputError, match="masked model does not fit the sds probe; use the mlm"):
        get("sds").evaluate(str(xlnet_dir), tmp_path / "s", prompts=tiny_prompts)
    assert not (tmp_path / "a").exists() and not (tmp_path / "s").exists()
