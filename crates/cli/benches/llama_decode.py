"""llama.cpp side of `sharpdraft bench decode --llama-python PYTHON` and of `sharpdraft bench speculative
--llama-python PYTHON`: the xllamacpp wheel's server (llama.cpp, prebuilt for the CPU) run in process
on the same GGUF file, threads and prompt token ids, one completion request per measurement. Prints a
JSON list of rows (prefill and decode tokens/s from llama.cpp's own timings; with a draft model, its
drafts and accepted drafts too), the tokens it generated, their text and the seconds the request
took, prefill included. Install it outside the project (docs/benchmarks.md)."""
import argparse
import json

import xllamacpp as xlc


def completion(server, body):
    result = server.handle_completions(body)
    result = json.loads(result) if isinstance(result, (str, bytes)) else result
    if not isinstance(result, dict) or "timings" not in result:
        raise SystemExit(f"llama.cpp answered without timings: {result}")
    return result


def result_text(result):
    """The generated text (the server answers in OpenAI's completion form, without token ids)."""
    choices = result.get("choices") or [{}]
    return choices[0].get("text", result.get("content"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--draft", help="a GGUF drafter: llama.cpp's own speculation")
    parser.add_argument("--draft-max", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--prompts", required=True, help="JSON list of prompts, each a list of token ids")
    parser.add_argument(
        "--stop-at-eos", action="store_true", help="end at the end of a turn (else decode every token)"
    )
    args = parser.parse_args()
    params = xlc.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx
    params.n_batch = 512
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_prompt = False
    params.warmup = True
    if args.draft:
        params.speculative.draft.mparams.path = args.draft
        params.speculative.draft.n_max = args.draft_max
        params.speculative.draft.n_min = 0
        params.speculative.draft.p_min = 0.0
        params.speculative.draft.cpuparams.n_threads = args.threads
        params.speculative.draft.cpuparams_batch.n_threads = args.threads
        params.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    server = xlc.Server(params)
    rows = []
    for ids in json.load(open(args.prompts)):
        body = {
            "prompt": ids,
            "n_predict": args.decode_tokens + 1,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "ignore_eos": not args.stop_at_eos,
        }
        result = completion(server, body)
        t = result["timings"]
        rows.append(
            {
                "context": len(ids),
                "prefill_tokens_per_s": t["prompt_per_second"],
                "decode_tokens_per_s": t["predicted_per_second"],
                "tokens": t["predicted_n"],
                "seconds": (t["prompt_ms"] + t["predicted_ms"]) / 1e3,
                "text": result_text(result),
                "draft_n": t.get("draft_n", 0),
                "draft_n_accepted": t.get("draft_n_accepted", 0),
            }
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
