#!/usr/bin/env python3
"""The GPT of samples/programs/gpt.cpp in PyTorch: the reference its losses are checked against.

Builds the model in float32 from a seed (GPT-2's initialisation), draws one batch of byte windows
from a text, writes the initial weights (one .npy per state_dict entry) and the batch (int32
[batch, seq + 1]), trains `--steps` steps on that batch with torch.optim.Adam and writes the loss
of each step, one per line, before the step's update (as the sample prints them).

    /usr/bin/python3 tests/models/gpt_reference.py --out DIR [--steps 10] [--seed 0]
        [--text /usr/share/common-licenses/GPL-3] [--layers 2] [--dtype f32|bf16]
    build/bin/gpt --mode sp --weights DIR/weights --batch-file DIR/batch.npy --steps 10

The math is the sample's: pre-LayerNorm blocks (eps 1e-5), causal softmax attention with separate
q, k, v and proj linears, a tanh-GELU MLP 4x wide, learned positions, an untied lm_head without
bias, cross-entropy averaged over batch * seq. Adam's hyperparameters are passed as the float32
values the sample uses, so both round the same numbers.

With --dtype bf16 the forward pass is the sample's mixed precision, written out with explicit
casts (not torch.autocast): every parameter cast to bfloat16 where it is used (the float32
parameters stay the master weights Adam updates), matmul operands in bfloat16 with products summed
in float32 (bf16.float() @ bf16.float(): a product of two bfloat16 values is exact in float32),
q, k, v and the attention probabilities cast to bfloat16 before their matmuls, everything else
(residual stream, LayerNorm, softmax, GELU, the loss) in float32. The gradient of each cast
rounds to the dtype of its input, as JAX's convert_element_type's (and meshvk's astype's) does.
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def f32(x):
    """x rounded to float32, as a Python float: the value the sample's C++ float holds."""
    return float(np.float32(x))


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.heads

        def split(t):
            return t.view(b, s, self.heads, hd).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, d)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, d, heads, layers, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        # GPT-2's initialisation, as gpt_init: N(0, 0.02), the residual projections scaled by
        # 1 / sqrt(2 layers), biases 0, LayerNorm scales 1.
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            elif name.endswith("attn.proj.weight") or name.endswith("mlp.fc2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens):
        s = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(s))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


BF16 = torch.bfloat16


def mixed_logits(model, tokens):
    """The bf16 forward pass: model's float32 parameters cast where used (see the docstring)."""
    def p(t):
        return t.to(BF16)

    def mm(a, b):  # bfloat16 operands, float32 sums and result
        return p(a).float() @ p(b).float()

    def linear(x, lin):
        return mm(x, lin.weight.t()) + p(lin.bias)

    def norm(x, ln):
        return F.layer_norm(x, (x.shape[-1],), eps=ln.eps) * p(ln.weight) + p(ln.bias)

    b, s = tokens.shape
    # wte[tokens] in bfloat16 (the gather's gradient summed in float32, rounded once) + wpe.
    x = (F.embedding(tokens, p(model.wte.weight).float()).to(BF16) + p(model.wpe.weight)[:s])
    x = x.float()
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    for block in model.h:
        a = norm(x, block.ln_1)
        att = block.attn
        hd = x.shape[-1] // att.heads

        def split(t):
            return p(t).view(b, s, att.heads, hd).transpose(1, 2)

        q, k, v = split(linear(a, att.q)), split(linear(a, att.k)), split(linear(a, att.v))
        scores = (q.float() @ k.float().transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        probs = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        y = (p(probs).float() @ v.float()).transpose(1, 2).contiguous().view(b, s, -1)
        x = x + linear(y, att.proj)
        m = norm(x, block.ln_2)
        x = x + linear(F.gelu(linear(m, block.mlp.fc1), approximate="tanh"), block.mlp.fc2)
    return mm(norm(x, model.ln_f), model.lm_head.weight.t())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for weights/, batch.npy, losses.txt")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="the forward pass's dtype: float32, or the sample's bf16 mixed precision")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    torch.set_default_dtype(torch.float32)
    model = Gpt(args.vocab, args.d_model, args.heads, args.layers, args.seq)

    with open(args.text, "rb") as f:
        text = np.frombuffer(f.read(), dtype=np.uint8)
    if len(text) < args.seq + 1:
        raise SystemExit(f"--text {args.text} has {len(text)} bytes; a window needs {args.seq + 1}")
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, len(text) - args.seq, size=args.batch)
    batch = np.stack([text[s:s + args.seq + 1] for s in starts]).astype(np.int32)

    os.makedirs(os.path.join(args.out, "weights"), exist_ok=True)
    for name, p in model.state_dict().items():
        np.save(os.path.join(args.out, "weights", name + ".npy"), p.detach().numpy())
    np.save(os.path.join(args.out, "batch.npy"), batch)

    opt = torch.optim.Adam(model.parameters(), lr=f32(args.lr), betas=(f32(0.9), f32(0.999)),
                           eps=f32(1e-8))
    tokens = torch.from_numpy(batch[:, :-1].astype(np.int64))
    targets = torch.from_numpy(batch[:, 1:].astype(np.int64))
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        logits = model(tokens) if args.dtype == "f32" else mixed_logits(model, tokens)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(args.out, "losses.txt"), "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))
    for i, v in enumerate(losses):
        print(f"step {i + 1}/{args.steps}  loss {v:.9g}")


if __name__ == "__main__":
    main()
