"""A trainer that sends version 1 into SGLang, publishes version 2, says so and waits to be killed.

    python killed_trainer.py MODEL_DIR SERVER_URL

Prints one JSON line after version 1 is live (``{"v1_tokens": ...}``: its own greedy tokens for the
example's prompts), then ``published 2`` once version 2 is published (moving, not swapped)."""

import json
import sys
import time

import torch
import transformers

from sglang_rl_loop import greedy_tokens, prompts
from weightport.sglang import HTTPClient, SGLangTrainer


def main() -> None:
    model_dir, url = sys.argv[1], sys.argv[2]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = prompts(model.config.vocab_size)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    sync = SGLangTrainer(HTTPClient(url), model, timeout=60)
    sync.send_weights()
    print(json.dumps({"v1_tokens": greedy_tokens(model, ids)}), flush=True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    sync.publisher.publish(2)
    print("published 2", flush=True)
    time.sleep(600)  # killed before it swaps


if __name__ == "__main__":
    main()
