"""transformers' LlamaForCausalLM as the reference for accel's llama model (test_llama.py): tiny
configurations built in process (no hub), their weights under accel's names, accel's job section for
the same shape, and a plain transformers + torch training loop that follows docs/spec/training.md
(the batches, AdamW with decay on 2-D parameters, the schedule, clipping) as the reference trainer
does for gpt.
"""
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import trainer_test_support as ts

sys.path.insert(0, ts.REF)
import safetensors_io  # noqa: E402
import token_data  # noqa: E402
from reference_train import global_grad_norm, lr_at, param_groups  # noqa: E402

FORWARD_TOOL = os.path.join(os.path.dirname(os.path.abspath(ts.ACCEL)), "tests", "tools", "accel_model_forward")


def shape(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, intermediate=96, vocab=256, block=64, head_dim=0,
          theta=500000.0, llama3=None, tied=False, attention_bias=False, mlp_bias=False, eps=1e-5):
    """One llama shape as accel's model section (llama3: None or (factor, low, high, original))."""
    m = dict(name="llama", n_layer=n_layer, n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd,
             intermediate_size=intermediate, vocab_size=vocab, block_size=block, head_dim=head_dim,
             rope_theta=theta, norm_eps=eps, tie_word_embeddings=tied, attention_bias=attention_bias,
             mlp_bias=mlp_bias, rope_scaling="none")
    if llama3:
        m.update(rope_scaling="llama3", rope_scaling_factor=llama3[0], rope_scaling_low_freq_factor=llama3[1],
                 rope_scaling_high_freq_factor=llama3[2], rope_scaling_original_max_position_embeddings=llama3[3])
    return m


def hf_config(m):
    """transformers' LlamaConfig of accel's model section `m` (eager attention: the explicit
    softmax(q k^T) v, the CPU path accel takes too)."""
    rope = {"rope_type": "default", "rope_theta": m["rope_theta"]}
    if m["rope_scaling"] == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": m["rope_theta"], "factor": m["rope_scaling_factor"],
                "low_freq_factor": m["rope_scaling_low_freq_factor"],
                "high_freq_factor": m["rope_scaling_high_freq_factor"],
                "original_max_position_embeddings": m["rope_scaling_original_max_position_embeddings"]}
    kw = {}
    if m["head_dim"]:
        kw["head_dim"] = m["head_dim"]
    return LlamaConfig(vocab_size=m["vocab_size"], hidden_size=m["n_embd"], intermediate_size=m["intermediate_size"],
                       num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
                       num_key_value_heads=m["n_kv_head"], max_position_embeddings=m["block_size"],
                       rms_norm_eps=m["norm_eps"], tie_word_embeddings=m["tie_word_embeddings"],
                       attention_bias=m["attention_bias"], mlp_bias=m["mlp_bias"], rope_parameters=rope,
                       attn_implementation="eager", initializer_range=0.02, **kw)


def hf_model(m, seed, spread=False):
    """A LlamaForCausalLM of shape `m` from torch seed `seed`: transformers' own init, or with
    `spread` every tensor redrawn so that each one matters to the logits (norm weights 1 + N(0, 0.2),
    biases N(0, 0.1), Linear weights N(0, 1/n_in), the embedding and head N(0, 1/(16 n_in)):
    activations and logits of about unit size, so a misplaced tensor or a wrong rotation shows far above rounding)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(hf_config(m)).float()
    if spread:
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
                elif name.endswith(".bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                elif "embed_tokens" in name or "lm_head" in name:  # the head: logits of about 1
                    p.copy_(0.25 * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return model.eval()


def accel_names(model):
    """The model's parameters under accel's names: transformers' minus the leading "model."; a tied
    head is embed_tokens itself (named_parameters lists it once)."""
    return OrderedDict((n[len("model."):] if n.startswith("model.") else n, p.detach().clone())
                       for n, p in model.named_parameters())


def save_accel_weights(model, path):
    safetensors_io.save_file(OrderedDict((n, t.float().contiguous()) for n, t in accel_names(model).items()), path)
    return path


def token_loss(logits, targets):
    """Mean token cross-entropy in float32, as accel's trainer computes it."""
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def hf_train(m, init_model, tokens_path, val_fraction, world, micro, accum, steps, seq_len, opt, sched, max_norm):
    """The plain transformers + torch loop of docs/spec/training.md from `init_model`'s weights:
    returns (metrics records, {accel name: numpy array} of the final weights)."""
    model = LlamaForCausalLM(hf_config(m)).float()
    model.load_state_dict(init_model.state_dict())
    model.train()
    data = token_data.TokenWindows(token_data.read_tokens(tokens_path), seq_len, val_fraction)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(param_groups(model, opt["weight_decay"]), lr=opt["lr"], betas=tuple(opt["betas"]),
                                  eps=opt["eps"], weight_decay=opt["weight_decay"])
    scale = 1.0 / (world * accum)  # each micro-batch's mean loss, weighted to the global mean
    metrics = []
    for s in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for mi in range(accum):
            for r in range(world):
                x, y = data.train_batch(s, mi, r, world, micro, accum)
                loss = token_loss(model(input_ids=x).logits, y)
                (loss * scale).backward()
                loss_sum += float(loss.detach()) * scale
        norm = float(global_grad_norm(params))
        if max_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        lr = lr_at(s, opt["lr"], sched["warmup_steps"], steps, sched["min_lr_ratio"], sched["name"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        metrics.append({"step": s, "loss": loss_sum, "lr": lr, "grad_norm": norm})
    weights = {n: t.numpy().astype(np.float32) for n, t in accel_names(model).items()}
    return metrics, weights
