"""A bare weightport trainer in its own process, driven over a pipe by the vLLM backend's tests: it
publishes versions of a transformers model and reports its own greedy tokens, and can be told to die
(SIGKILL) right after a version starts moving, with the coordinator it runs."""

from __future__ import annotations

import os
import signal


def greedy(model, prompt_ids, max_tokens):
    import torch

    out = []
    with torch.no_grad():
        for ids in prompt_ids:
            seq = torch.tensor([ids])
            for _ in range(max_tokens):
                nxt = model(input_ids=seq).logits[0, -1].argmax().view(1, 1)
                seq = torch.cat([seq, nxt], dim=1)
            out.append(seq[0, len(ids):].tolist())
    return out


def run(conn, model_dir: str, seed: int, transport: str, keep_versions: int = 0) -> None:
    """Commands: ("version", v, prompt_ids, max_tokens[, only]) -> perturbs every tensor (or only the
    one named `only`), publishes, waits for the commit, answers (greedy tokens, bytes moved);
    ("die", v) -> perturbs, publishes and kills itself at once."""
    import torch
    import transformers

    import weightport

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    params = dict(model.named_parameters())
    pub = weightport.Publisher("127.0.0.1:0", secret=os.urandom(32), transport=transport, timeout=120)
    tensors = [[n, list(p.shape), "f32"] for n, p in params.items()]
    conn.send({"coordinator": pub.coordinator, "secret_hex": pub._secret.hex(), "tensors": tensors,
               "transport": transport, "keep_versions": keep_versions})
    pub.register(params)
    conn.send("joined")
    while True:
        cmd = conn.recv()
        only = cmd[4] if cmd[0] == "version" and len(cmd) > 4 else None
        with torch.no_grad():
            for name, p in params.items():
                if only is None or name == only:
                    p.add_(torch.randn_like(p) * 0.05)
        if cmd[0] == "die":
            pub.publish(cmd[1])
            os.kill(os.getpid(), signal.SIGKILL)
        version, prompt_ids, max_tokens = cmd[1:4]
        pub.publish(version)
        outcome = pub.wait(version)
        conn.send((greedy(model, prompt_ids, max_tokens), outcome["bytes"]))
