"""HF transformers' assisted generation on the same folders as `sharpdraft generate --drafter ...
--compare-ar`, for a side-by-side run (README "End to end on the real pair"): greedy AR and greedy
assisted generation with a fixed chain of K drafts, the same chat-templated prompt, the same thread
count, f32. `*_tokens_per_s` counts the whole `generate` call, prefill included, as the workbench's
`tokens_per_s` does; `*_decode_tokens_per_s` leaves out the prompt's prefill (a separate timed forward).
Prints one JSON object.

    PYTHON crates/cli/benches/hf_assisted.py --target DIR --drafter DIR --prompt "..." [--draft-len 4]
"""
import argparse
import json
import time

import torch
import transformers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--drafter", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.target)
    load = lambda path: transformers.AutoModelForCausalLM.from_pretrained(  # noqa: E731
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    started = time.perf_counter()
    target = load(args.target)
    load_seconds = time.perf_counter() - started
    drafter = load(args.drafter)
    # A fixed chain of K drafts: no schedule, no confidence cut-off (its default 0.4 cuts chains short).
    drafter.generation_config.num_assistant_tokens = args.draft_len
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    drafter.generation_config.assistant_confidence_threshold = 0.0
    messages = [{"role": "user", "content": args.prompt}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    if not isinstance(ids, torch.Tensor):
        ids = ids["input_ids"]
    with torch.no_grad():
        started = time.perf_counter()
        target(ids)
        prefill = time.perf_counter() - started

        def run(**extra):
            started = time.perf_counter()
            out = target.generate(
                ids,
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                attention_mask=torch.ones_like(ids),
                **extra,
            )
            seconds = time.perf_counter() - started
            new = out[0, ids.shape[1]:].tolist()
            return new, len(new) / seconds, len(new) / max(seconds - prefill, 1e-9)

        ar_ids, ar_rate, ar_decode_rate = run()
        assisted_ids, assisted_rate, assisted_decode_rate = run(assistant_model=drafter)
    print(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "threads": args.threads,
                "prompt_ids": ids[0].tolist(),
                "target_load_seconds": load_seconds,
                "ar_tokens_per_s": ar_rate,
                "assisted_tokens_per_s": assisted_rate,
                "ar_decode_tokens_per_s": ar_decode_rate,
                "assisted_decode_tokens_per_s": assisted_decode_rate,
                "speedup": assisted_rate / ar_rate,
                "identical": ar_ids == assisted_ids,
                "ids": assisted_ids,
            }
        )
    )


if __name__ == "__main__":
    main()
