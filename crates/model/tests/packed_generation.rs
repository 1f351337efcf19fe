//! Several prompts generated at once in one packed cache give, token for token, what generating each
//! alone gives, on the real SmolLM2 (skipped with a message when it is not fetched).
use sharpdraft_model::generate::generate;
use sharpdraft_model::packed_generate::generate_packed;
use sharpdraft_model::{CausalLm, ChatMessage, Sampler, Sampling};
use sharpdraft_store::registry;
use tch::{Device, Kind};

fn chat(model: &CausalLm, text: &str) -> Vec<i64> {
    let tokenizer = model.tokenizer().unwrap();
    let prompt = tokenizer
        .apply_chat_template(
            &[ChatMessage {
                role: "user".into(),
                content: text.into(),
            }],
            true,
        )
        .unwrap();
    tokenizer.encode(&prompt, false).unwrap()
}

#[test]
fn packed_greedy_generation_equals_one_prompt_at_a_time() {
    let dir = match registry::resolve("smollm2-135m-instruct") {
        Ok(dir) => dir,
        Err(e) => {
            sharpdraft_testing::skip(e);
            return;
        }
    };
    let model = CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap();
    // Different lengths, and answers short enough that some stop before the others.
    let prompts: Vec<Vec<i64>> = [
        "Say yes.",
        "What is the capital of France? Answer in one word.",
        "Write a haiku about the sea.",
        "List the first five prime numbers, separated by commas.",
        "Explain in two sentences why the sky is blue.",
    ]
    .iter()
    .map(|p| chat(&model, p))
    .collect();
    let stop = model.stop_tokens();
    let mut samplers: Vec<Sampler> = prompts
        .iter()
        .map(|_| Sampler::new(Sampling::greedy()))
        .collect();
    let packed = generate_packed(&model.net, &prompts, 40, &mut samplers, &stop).unwrap();
    let mut stopped_early = 0;
    for (prompt, batch) in prompts.iter().zip(&packed) {
        let alone = generate(
            &model.net,
            prompt,
            40,
            &mut Sampler::new(Sampling::greedy()),
            &stop,
        )
        .unwrap();
        assert_eq!(batch.ids, alone.ids, "prompt of {} tokens", prompt.len());
        stopped_early += usize::from(alone.ids.len() < 40);
    }
    assert!(
        stopped_early >= 1,
        "some sequence leaves the batch before the others"
    );
}
