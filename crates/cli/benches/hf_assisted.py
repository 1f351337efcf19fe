"""HF transformers' assisted generation on the same folders as the workbench, for side-by-side runs
(README "End to end on the real pair"): AR and assisted generation with chains of K drafts (fixed, or
ended at the first draft below --stop-below) on the same prompt ids, the same thread count, f32. Greedy,
or sampled (temperature T, no top-k / top-p, HF's speculative sampling). `*_tokens_per_s` counts the
whole `generate` call, prefill included, as the workbench's `tokens_per_s` does; `*_decode_tokens_per_s`
leaves out the prompt's prefill (a separate timed forward). Prints one JSON object.

    PYTHON hf_assisted.py --target DIR --drafter DIR --prompt "..." [--draft-len 4] [--stop-below P]
    PYTHON hf_assisted.py --target DIR --drafter DIR --requests FILE   (what `sharpdraft bench
        speculative --hf-python` runs: FILE is {"requests": [{"prompt_ids": [...], "temperature": T,
        "seed": S}, ...]}, each request decoded AR then assisted, one result row each)
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
    parser.add_argument("--prompt")
    parser.add_argument("--requests")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--draft-len", type=int, default=4)
    # The workbench's --draft-stop-below: HF's assistant_confidence_threshold ends a chain at the first
    # draft the assistant gives a probability below it, that draft kept, as the workbench does.
    parser.add_argument("--stop-below", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if (args.prompt is None) == (args.requests is None):
        parser.error("give exactly one of --prompt and --requests")
    torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.target)
    load = lambda path: transformers.AutoModelForCausalLM.from_pretrained(  # noqa: E731
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    started = time.perf_counter()
    target = load(args.target)
    load_seconds = time.perf_counter() - started
    drafter = load(args.drafter)
    # Chains of K drafts: no schedule, and no confidence cut-off unless asked for (HF's default of 0.4
    # would cut chains short).
    drafter.generation_config.num_assistant_tokens = args.draft_len
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    drafter.generation_config.assistant_confidence_threshold = args.stop_below
    header = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "threads": args.threads,
        "target_load_seconds": load_seconds,
        "stop_below": args.stop_below,
    }
    if args.requests is not None:
        with open(args.requests) as f:
            requests = json.load(f)["requests"]
        rows = [
            decode(target, drafter, torch.tensor([r["prompt_ids"]]), args.max_new_tokens,
                   r["temperature"], r["seed"], args.stop_below)
            for r in requests
        ]
        print(json.dumps({**header, "rows": rows}))
        return
    messages = [{"role": "user", "content": args.prompt}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    if not isinstance(ids, torch.Tensor):
        ids = ids["input_ids"]
    row = decode(target, drafter, ids, args.max_new_tokens, 0.0, 0, args.stop_below)
    print(json.dumps({**header, "prompt_ids": ids[0].tolist(), **row}))


def decode(target, drafter, ids, max_new_tokens, temperature, seed, stop_below) -> dict:
    """AR then assisted generation of one prompt `ids` [1, n]."""
    # Explicit settings: a model folder's generation_config (top-k, top-p, repetition penalty) must not
    # change what is compared.
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        if temperature > 0
        else dict(do_sample=False)
    )
    with torch.no_grad():
        started = time.perf_counter()
        target(ids)
        prefill = time.perf_counter() - started

        def run(**extra):
            torch.manual_seed(seed)
            started = time.perf_counter()
            out = target.generate(
                ids,
                max_new_tokens=max_new_tokens,
                attention_mask=torch.ones_like(ids),
                repetition_penalty=1.0,
                **sampling,
                **extra,
            )
            seconds = time.perf_counter() - started
            new = out[0, ids.shape[1]:].tolist()
            return new, seconds

        ar_ids, ar_seconds = run()
        # Some transformers versions retune the threshold after each call (with scikit-learn installed):
        # every request starts from the one asked for.
        drafter.generation_config.assistant_confidence_threshold = stop_below
        assisted_ids, assisted_seconds = run(assistant_model=drafter)
    rate = lambda ids, seconds: len(ids) / max(seconds, 1e-9)  # noqa: E731
    return {
        "temperature": temperature,
        "ar_tokens": len(ar_ids),
        "ar_seconds": ar_seconds,
        "assisted_tokens": len(assisted_ids),
        "assisted_seconds": assisted_seconds,
        "prefill_seconds": prefill,
        "ar_tokens_per_s": rate(ar_ids, ar_seconds),
        "assisted_tokens_per_s": rate(assisted_ids, assisted_seconds),
        "ar_decode_tokens_per_s": rate(ar_ids, ar_seconds - prefill),
        "assisted_decode_tokens_per_s": rate(assisted_ids, assisted_seconds - prefill),
        "speedup": rate(assisted_ids, assisted_seconds) / rate(ar_ids, ar_seconds),
        "identical": ar_ids == assisted_ids,
        "ids": assisted_ids,
    }


if __name__ == "__main__":
    main()
