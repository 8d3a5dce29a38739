"""BERTScore by bert_score's algorithm (bert_score 0.3.13, defaults: no idf, no baseline rescaling), written out
with PyTorch and HF transformers, for runner/tests/bertscore.rs to compare the runner's against.

    python bertscore_reference.py SNAPSHOT_DIR PAIRS_JSON LAYER [LAYER ...]

PAIRS_JSON holds [[candidate, reference], ...]. Prints one JSON object: {"layers": {LAYER: [result, ...]}} with
each result {"precision", "recall", "f1", "cand_ids", "ref_ids"}, or null where the stripped candidate or
reference is empty (bert_score warns and gives 0 there; the runner records no value).

The steps are bert_score's (utils.py): `sent_encode` (strip; RoBERTa's tokenizer called with add_prefix_space=True,
which the slow tokenizer the package asks for does by putting a space before the text; the specials added; cut to
the tokenizer's model_max_length), the model's output after LAYER layers (the package drops the layers after
num_layers and takes the last hidden state: HF's hidden_states[LAYER]), each embedding divided by its norm, the
similarities of all positions (bmm), the best match per token both ways, and the means with idf weight 1 per token
and 0 for the tokenizer's sep and cls ids; F1 = 2PR/(P+R), NaN set to 0.
"""

import json
import sys

import torch
from transformers import AutoModel, AutoTokenizer


def sent_encode(tokenizer, sent, roberta):
    sent = sent.strip()
    if sent == "":
        return None
    if roberta:
        # The slow RobertaTokenizer's add_prefix_space=True: a space before a text that does not start with one.
        sent = " " + sent
    return tokenizer.encode(sent, add_special_tokens=True, max_length=tokenizer.model_max_length, truncation=True)


def main():
    snapshot, pairs_path = sys.argv[1], sys.argv[2]
    layers = [int(x) for x in sys.argv[3:]]
    torch.set_num_threads(1)
    with open(pairs_path, encoding="utf-8") as f:
        pairs = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    model, info = AutoModel.from_pretrained(snapshot, output_loading_info=True)
    model = model.float()
    missing = [k for k in info.get("missing_keys", [])]
    unexpected = [k for k in info.get("unexpected_keys", [])]
    if missing or unexpected:
        sys.exit(f"the checkpoint does not load whole: missing {missing}, unexpected {unexpected}")
    model.eval()
    roberta = model.config.model_type == "roberta"
    specials = {tokenizer.sep_token_id, tokenizer.cls_token_id}

    def embed(ids, layer):
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True)
        emb = out.hidden_states[layer][0]
        return emb / torch.norm(emb, dim=-1).unsqueeze(-1)

    out = {}
    for layer in layers:
        results = []
        for cand, ref in pairs:
            c, r = sent_encode(tokenizer, cand, roberta), sent_encode(tokenizer, ref, roberta)
            if c is None or r is None:
                results.append(None)
                continue
            sim = embed(c, layer) @ embed(r, layer).T
            word_precision = sim.max(dim=1)[0]
            word_recall = sim.max(dim=0)[0]
            wc = torch.tensor([0.0 if i in specials else 1.0 for i in c])
            wr = torch.tensor([0.0 if i in specials else 1.0 for i in r])
            p = (word_precision * wc / wc.sum()).sum()
            rec = (word_recall * wr / wr.sum()).sum()
            f = 2 * p * rec / (p + rec)
            f = f.masked_fill(torch.isnan(f), 0.0)
            results.append(
                {"precision": p.item(), "recall": rec.item(), "f1": f.item(), "cand_ids": c, "ref_ids": r}
            )
        out[str(layer)] = results
    print(json.dumps({"layers": out, "model_max_length": tokenizer.model_max_length}))


if __name__ == "__main__":
    main()
