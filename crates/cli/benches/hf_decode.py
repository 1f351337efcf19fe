"""HF transformers side of `sharpdraft bench decode --hf-python PYTHON`: the same measurement (chunked
prefill of the same pseudo-text ids, then greedy decode steps with the KV cache) on the same weights
with the same thread count. Prints a JSON list of rows."""
import argparse
import json
import time

import torch
import transformers

CHUNK = 512  # as sharpdraft's prefill


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--contexts", default="512")
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa").eval()
    vocab = model.config.vocab_size
    rows = []
    for context in [int(c) for c in args.contexts.split(",")]:
        ids = torch.tensor([[(i * 7919 + 13) % vocab for i in range(context)]])
        with torch.no_grad():
            cache = transformers.DynamicCache()
            start = time.perf_counter()
            for s in range(0, context, CHUNK):
                out = model(ids[:, s:s + CHUNK], past_key_values=cache, use_cache=True, logits_to_keep=1)
            prefill = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(args.decode_tokens):
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(token, past_key_values=cache, use_cache=True)
            decode = time.perf_counter() - start
        rows.append({"context": context, "prefill_tokens_per_s": context / prefill, "decode_tokens_per_s": args.decode_tokens / decode})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
