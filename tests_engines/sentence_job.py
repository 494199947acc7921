"""sentence-transformers' encode as a user calls it, on the emulated hpu and on the CPU, with
the same tiny BERT (built from a config, saved as a user's checkpoint: no download).
Prints RESULT with both embeddings, whether the model went into HPU graphs, and the
emulator's graph compilations for each encode call."""
import json
import sys
from pathlib import Path

import torch
from habana_frameworks.torch.hpu.metrics import metric_global
from sentence_transformers import SentenceTransformer
from transformers import BertConfig, BertModel, BertTokenizerFast

folder = Path(sys.argv[1])
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on",
         "mat", "runs", "fast", "gaudi", "graph", "hello", "world"]
(folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
torch.manual_seed(0)
config = BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
BertModel(config).save_pretrained(folder / "bert")
BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder / "bert")

SENTENCES = ["the cat sat on the mat", "a dog runs fast", "hello world",
             "gaudi graph", "the dog sat on a mat fast"]


def compilations() -> int:
    return dict(metric_global("graph_compilation").stats())["TotalNumber"]


cpu = SentenceTransformer(str(folder / "bert"), device="cpu").encode(SENTENCES)
model = SentenceTransformer(str(folder / "bert"))  # no device: sentence-transformers picks
before = compilations()
first = model.encode(SENTENCES, batch_size=2)
after_first = compilations()
again = model.encode(SENTENCES, batch_size=2)
print("RESULT", json.dumps({
    "device": str(model.device), "graphs": model.is_hpu_graph_enabled,
    "compilations": [after_first - before, compilations() - after_first],
    "cpu": cpu.tolist(), "hpu": first.tolist(), "again": again.tolist(),
}), flush=True)
