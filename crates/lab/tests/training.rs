//! Training each drafter (EAGLE-3.1, PARD, DFlash) on a tiny random target: a few steps lower the loss; a
//! saved checkpoint reloads bit-identically and drafts the same tokens under real verification; an
//! interrupted run resumes from its last checkpoint (weights and optimizer moments) and ends where an
//! uninterrupted run ends; each trained drafter drafts in bf16 beside the f32 target.
use sharpdraft_decode::drafter_spec::{self, DrafterSpec};
use sharpdraft_decode::{speculative_generate, SpecOptions};
use sharpdraft_draft::dflash::train::{
    self as dflash_train, block_visibility, DFlashObjective, DFlashOptions,
};
use sharpdraft_draft::eagle3::train::{
    self as eagle3_train, frequent_tokens, Eagle3Objective, Eagle3Options,
};
use sharpdraft_draft::pard::train::{
    self as pard_train, copy_layout, kept_offsets, PardObjective, PardOptions,
};
use sharpdraft_draft::training::{
    extract_windows, train, LoopOptions, LrDecay, Objective, OwnedObjective, TrainObserver,
    TrainState, TrainWindow,
};
use sharpdraft_draft::{Drafter, DrafterKind};
use sharpdraft_model::{CausalLm, Sampling, Tap};
use std::path::{Path, PathBuf};
use tch::{Device, Kind};

fn target() -> CausalLm {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/llama");
    CausalLm::load(&dir, Device::Cpu, Kind::Float).unwrap()
}

/// A token stream with structure to learn: repeated short patterns.
fn stream() -> Vec<i64> {
    (0..2048)
        .map(|i: i64| [3, 17, 42, 8, 8, 21, 5][(i % 7) as usize] + (i / 97) % 3)
        .collect()
}

/// The methods this file trains (the vanilla drafter has its own recipe test).
const ALL: [DrafterKind; 3] = [DrafterKind::Eagle3, DrafterKind::Pard, DrafterKind::Dflash];

fn eagle3_options() -> Eagle3Options {
    Eagle3Options {
        ttt_steps: 3,
        ttt_decay: 0.8,
        draft_vocab: 48,
        eagle31: true,
        warm_start: true,
        capture_layers: None,
    }
}
fn pard_options() -> PardOptions {
    PardOptions {
        layers: 1,
        from_layers: None,
        trainable_from: 0,
        mask_token: 63,
        copies: 3,
        keep_ratio: 0.7,
        min_keep: 0.2,
    }
}
fn dflash_options() -> DFlashOptions {
    DFlashOptions {
        layers: 1,
        block_size: 4,
        mask_token: 63,
        gamma: 4.0,
        anchors: 8,
        target_layer_ids: Some(vec![0, 1]),
        draft_vocab: 0,
    }
}

fn taps(method: DrafterKind) -> Vec<Tap> {
    match method {
        // The tiny target has 2 layers: capture the inputs of 0, 1 and 2 (the final hidden state).
        DrafterKind::Eagle3 => vec![Tap::LayerInput(0), Tap::LayerInput(1), Tap::LayerInput(2)],
        DrafterKind::Pard => Vec::new(),
        DrafterKind::Dflash => dflash_options().taps(2),
        DrafterKind::Vanilla => unreachable!("not trained here"),
    }
}

fn windows(target: &CausalLm, method: DrafterKind, count: usize) -> Vec<TrainWindow> {
    extract_windows(&target.net, &taps(method), &stream(), 64, count, 8).unwrap()
}

fn loop_config(steps: usize) -> LoopOptions {
    LoopOptions {
        n0: 64,
        steps,
        learning_rate: 3e-3,
        weight_decay: 0.0,
        seed: 1,
        checkpoint_every: 10,
        warmup_steps: 3,
        decay: LrDecay::Cosine,
    }
}

fn init(method: DrafterKind, dir: &Path, target: &CausalLm, windows: &[TrainWindow]) {
    match method {
        DrafterKind::Eagle3 => {
            eagle3_train::init(dir, target, windows, &eagle3_options(), 1).unwrap()
        }
        DrafterKind::Pard => pard_train::init(dir, target, &pard_options()).unwrap(),
        DrafterKind::Dflash => dflash_train::init(dir, target, windows, &dflash_options()).unwrap(),
        DrafterKind::Vanilla => unreachable!("not trained here"),
    }
}

fn objective<'t>(
    method: DrafterKind,
    dir: &Path,
    target: &'t CausalLm,
) -> Box<dyn OwnedObjective + 't> {
    match method {
        DrafterKind::Eagle3 => {
            Box::new(Eagle3Objective::load(dir, &target.net, &eagle3_options()).unwrap())
        }
        DrafterKind::Pard => {
            Box::new(PardObjective::load(dir, Device::Cpu, &pard_options(), 1).unwrap())
        }
        DrafterKind::Dflash => {
            Box::new(DFlashObjective::load(dir, &target.net, &dflash_options(), 1).unwrap())
        }
        DrafterKind::Vanilla => unreachable!("not trained here"),
    }
}

struct Quiet;
impl TrainObserver for Quiet {
    fn step(&mut self, _state: &TrainState) {}
}

/// Fails at the first checkpoint at or after `step`, as a killed run would stop there.
struct CrashAt(usize);
impl TrainObserver for CrashAt {
    fn step(&mut self, _state: &TrainState) {}
    fn checkpoint(
        &mut self,
        state: &TrainState,
        _dir: &Path,
    ) -> sharpdraft_draft::drafter::Result<()> {
        if state.step >= self.0 {
            return Err(sharpdraft_draft::DraftError::Protocol("killed".into()));
        }
        Ok(())
    }
}

/// Starts (or resumes) a run in `dir` and trains up to `steps`.
fn run(
    method: DrafterKind,
    dir: &Path,
    target: &CausalLm,
    windows: &[TrainWindow],
    steps: usize,
) -> TrainState {
    run_observed(method, dir, target, windows, steps, &mut Quiet).unwrap()
}

fn run_observed(
    method: DrafterKind,
    dir: &Path,
    target: &CausalLm,
    windows: &[TrainWindow],
    steps: usize,
    observer: &mut dyn TrainObserver,
) -> sharpdraft_draft::drafter::Result<TrainState> {
    if TrainState::load(dir).unwrap().is_none() {
        init(method, dir, target, windows);
    }
    train(
        objective(method, dir, target).as_ref(),
        windows,
        dir,
        &loop_config(steps),
        observer,
    )
}

/// The trained drafter in `dir`, through the one drafter specification (chains of 3).
fn drafter<'t>(method: DrafterKind, dir: &Path, target: &'t CausalLm) -> Box<dyn Drafter + 't> {
    let spec = DrafterSpec::new(method, dir.to_str().unwrap()).chains_of(3);
    drafter_spec::build(&spec, target, Sampling::greedy(), 256)
        .unwrap()
        .drafter
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn a_few_training_steps_lower_the_loss_of_every_drafter() {
    let target = target();
    for method in ALL {
        let windows = windows(&target, method, 8);
        let dir = tempfile::tempdir().unwrap();
        let state = run(method, dir.path(), &target, &windows, 60);
        let (first, last) = (mean(&state.losses[..10]), mean(&state.losses[50..]));
        assert!(
            last < 0.9 * first,
            "{method:?}: loss {first:.3} -> {last:.3}"
        );
    }
}

#[test]
fn a_saved_checkpoint_reloads_bit_identically_and_drafts_the_same_tokens() {
    let target = target();
    let prompt: Vec<i64> = stream()[..20].to_vec();
    let config = greedy_config(24);
    for method in ALL {
        let windows = windows(&target, method, 4);
        let dir = tempfile::tempdir().unwrap();
        run(method, dir.path(), &target, &windows, 20);
        let copy = tempfile::tempdir().unwrap();
        if let DrafterKind::Pard = method {
            pard_train::init(copy.path(), &target, &pard_options()).unwrap(); // tokenizer files and config
        }
        objective(method, dir.path(), &target)
            .save(copy.path(), 64)
            .unwrap();
        let a = safetensors_of(dir.path());
        let b = safetensors_of(copy.path());
        assert_eq!(a.len(), b.len());
        for (name, tensor) in &a {
            assert!(
                tensor.equal(&b[name]),
                "{method:?}: {name} differs after a save/load round trip"
            );
        }
        let first = speculative_generate(
            &target.net,
            drafter(method, dir.path(), &target).as_mut(),
            &prompt,
            &config,
        )
        .unwrap();
        let second = speculative_generate(
            &target.net,
            drafter(method, copy.path(), &target).as_mut(),
            &prompt,
            &config,
        )
        .unwrap();
        let drafts = |r: &sharpdraft_decode::SpecReport| {
            r.cycles
                .iter()
                .map(|c| c.accepted_per_position.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(first.ids, second.ids);
        assert_eq!(
            drafts(&first),
            drafts(&second),
            "{method:?}: the reloaded drafter drafts differently"
        );
    }
}

fn safetensors_of(dir: &Path) -> std::collections::HashMap<String, tch::Tensor> {
    tch::Tensor::read_safetensors(dir.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn an_interrupted_run_resumes_and_ends_where_an_uninterrupted_run_ends() {
    let target = target();
    for method in ALL {
        let windows = windows(&target, method, 4);
        let straight = tempfile::tempdir().unwrap();
        let whole = run(method, straight.path(), &target, &windows, 30);
        let interrupted = tempfile::tempdir().unwrap();
        // Killed after its checkpoint at step 20, under the same config (warm-up and cosine decay over
        // 30 steps): the resumed run must follow the schedule of the uninterrupted one.
        let killed = run_observed(
            method,
            interrupted.path(),
            &target,
            &windows,
            30,
            &mut CrashAt(20),
        );
        assert!(killed.is_err(), "{method:?}: the run was not stopped");
        let partial = TrainState::load(interrupted.path()).unwrap().unwrap();
        assert_eq!(partial.step, 20);
        let resumed = run(method, interrupted.path(), &target, &windows, 30);
        assert_eq!(resumed.step, 30);
        assert_eq!(
            resumed.losses[..20],
            partial.losses[..],
            "{method:?}: the first 20 steps are kept, not redone"
        );
        for (step, (a, b)) in whole.losses.iter().zip(&resumed.losses).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs().max(1.0),
                "{method:?}: step {} loss {a} uninterrupted, {b} resumed",
                step + 1
            );
        }
    }
}

#[test]
fn the_eagle_draft_vocabulary_holds_the_most_frequent_tokens() {
    let target = target();
    let windows = windows(&target, DrafterKind::Eagle3, 8);
    let mut counts = [0usize; 64];
    windows
        .iter()
        .flat_map(|w| &w.tokens)
        .for_each(|&t| counts[t as usize] += 1);
    let top3 = frequent_tokens(&windows, 64, 3);
    let least_kept = top3.iter().map(|&t| counts[t as usize]).min().unwrap();
    assert!(
        (0..64)
            .filter(|t| !top3.contains(t))
            .all(|t| counts[t as usize] <= least_kept),
        "{top3:?} are not the three most frequent"
    );
    assert_eq!(frequent_tokens(&windows, 64, 8).len(), 8);
}

#[test]
fn pard_mask_rows_see_exactly_the_inference_view() {
    let options = PardOptions {
        copies: 3,
        keep_ratio: 1.0,
        min_keep: 1.0,
        ..pard_options()
    };
    use rand::SeedableRng;
    let copies = kept_offsets(5, &options, &mut rand::rngs::StdRng::seed_from_u64(0));
    assert_eq!(
        copies,
        vec![vec![0, 1, 2, 3, 4], vec![1, 2, 3, 4], vec![2, 3, 4]]
    );
    let (rows, visible) = copy_layout(&copies);
    let row =
        |copy: usize, offset: usize| rows.iter().position(|&r| r == (copy, offset)).unwrap() as i64;
    // Mask 2 at offset 4: after the real prefix 0..=2, its chain (mask 1 at offset 3) and itself.
    let seen: Vec<i64> = (0..rows.len() as i64)
        .filter(|&k| visible.int64_value(&[row(2, 4), k]) != 0)
        .collect();
    assert_eq!(
        seen,
        vec![row(0, 0), row(0, 1), row(0, 2), row(1, 3), row(2, 4)]
    );
    // Conditional drop keeps every chain whole: a kept mask's predecessor in the previous copy is kept.
    let dropped = kept_offsets(
        64,
        &pard_options(),
        &mut rand::rngs::StdRng::seed_from_u64(3),
    );
    for i in 1..dropped.len() {
        assert!(dropped[i].len() < dropped[i - 1].len());
        assert!(dropped[i].iter().all(|p| dropped[i - 1].contains(&(p - 1))));
    }
}

#[test]
fn dflash_blocks_see_the_context_before_their_anchor_and_only_their_own_block() {
    // Context of 6 keys; blocks of 3 at anchors 2 and 4: keys [c0..c5 | a0 a1 a2 | b0 b1 b2].
    let visible = block_visibility(&[2, 4], 6, 3, false, None);
    let seen = |row: i64| {
        (0..12)
            .filter(|&k| visible.int64_value(&[row, k]) != 0)
            .collect::<Vec<i64>>()
    };
    for r in 0..3 {
        assert_eq!(seen(r), vec![0, 1, 6, 7, 8], "block at anchor 2, row {r}");
        assert_eq!(
            seen(3 + r),
            vec![0, 1, 2, 3, 9, 10, 11],
            "block at anchor 4, row {r}"
        );
    }
    // Causal blocks see only their earlier rows; a window of 3 keys drops context far behind each row.
    let causal = block_visibility(&[4], 6, 3, true, Some(3));
    let seen = |row: i64| {
        (0..9)
            .filter(|&k| causal.int64_value(&[row, k]) != 0)
            .collect::<Vec<i64>>()
    };
    assert_eq!(
        seen(0),
        vec![2, 3, 6],
        "position 4 with a window of 3 keeps keys 2 and 3 of the context"
    );
    assert_eq!(
        seen(2),
        vec![6, 7, 8],
        "position 6: its window (keys 4 and 5) lies past the anchor"
    );
}

#[test]
fn training_consumes_query_scaling_beta_zero_is_off_and_a_schedule_changes_loss_and_gradients() {
    use sharpdraft_math::ScaleSchedule;
    use sharpdraft_model::{QueryScaling, ScalingMode};
    let target = target();
    for method in ALL {
        let dir = tempfile::tempdir().unwrap();
        let windows = windows(&target, method, 4);
        init(method, dir.path(), &target, &windows);
        let loss_with = |beta: Option<f64>| {
            let mut objective = objective(method, dir.path(), &target);
            let (layers, heads) = objective.query_layout();
            // n0 = 16 inside 64-token windows: rows past 16 keys are scaled.
            let scaling = beta.map_or(QueryScaling::off(), |b| {
                let schedule = ScaleSchedule::global(16.0, b).unwrap();
                QueryScaling::from_schedule(ScalingMode::Fixed, schedule, layers, heads).unwrap()
            });
            objective.set_query_scaling(scaling);
            for (_, mut p) in objective.parameters() {
                let _ = p.requires_grad_(true);
            }
            let loss = objective.loss(&windows[0], 0).unwrap();
            loss.backward();
            let grad_norm: f64 = objective
                .parameters()
                .iter()
                .map(|(_, p)| p.grad().square().sum(Kind::Double).double_value(&[]))
                .sum();
            (loss.double_value(&[]), grad_norm)
        };
        let (off, off_grad) = loss_with(None);
        let (zero, zero_grad) = loss_with(Some(0.0));
        let (strong, strong_grad) = loss_with(Some(3.0));
        assert_eq!(zero, off, "{method:?}: beta = 0 is the unscaled loss");
        // The extra multiply by 1 may change a backward kernel's summation order: equal to rounding.
        assert!(
            (zero_grad - off_grad).abs() <= 1e-12 * off_grad,
            "{method:?}: and the same gradients ({off_grad} vs {zero_grad})"
        );
        assert!(
            (strong - off).abs() > 1e-6,
            "{method:?}: a strong schedule changes the loss ({off} vs {strong})"
        );
        assert!(
            strong_grad.is_finite() && strong_grad > 0.0,
            "{method:?}: gradients flow through the scaling"
        );
    }
}

#[test]
fn a_warm_started_eagle_head_starts_from_the_targets_last_layer_final_norm_and_lm_head_rows() {
    let target = target();
    let windows = windows(&target, DrafterKind::Eagle3, 4);
    let dir = tempfile::tempdir().unwrap();
    init(DrafterKind::Eagle3, dir.path(), &target, &windows);
    let head = safetensors_of(dir.path());
    let vars = target.vars.variables();
    let last = format!("model.layers.{}", target.net.config.num_layers - 1);
    let same = |head_name: &str, target_name: &str| {
        assert!(
            head[head_name].equal(&vars[target_name].to_kind(Kind::Float)),
            "{head_name} is not the target's {target_name}"
        );
    };
    same("norm.weight", "model.norm.weight");
    same(
        "midlayer.mlp.down_proj.weight",
        &format!("{last}.mlp.down_proj.weight"),
    );
    same(
        "midlayer.post_attention_layernorm.weight",
        &format!("{last}.post_attention_layernorm.weight"),
    );
    // The feature half of q_proj's 2H input is the target's q_proj.
    let h = target.net.config.hidden_size;
    assert!(head["midlayer.self_attn.q_proj.weight"]
        .narrow(1, h, h)
        .equal(&vars[&format!("{last}.self_attn.q_proj.weight")].to_kind(Kind::Float)));
    // lm_head row i is the target's output row of draft id i's target id (d2t holds target - draft).
    let d2t = &head["d2t"];
    let used = d2t + tch::Tensor::arange(d2t.size()[0], (Kind::Int64, Device::Cpu));
    let target_rows = vars
        .get("lm_head.weight")
        .unwrap_or_else(|| &vars["model.embed_tokens.weight"])
        .to_kind(Kind::Float)
        .index_select(0, &used);
    assert!(head["lm_head.weight"].equal(&target_rows));
    // fc reads only the deepest captured feature.
    let fc = &head["fc.weight"];
    assert_eq!(abs_sum(&fc.narrow(1, 0, 2 * h)), 0.0);
    assert!(
        fc.narrow(1, 2 * h, h)
            .diagonal(0, 0, 1)
            .min()
            .double_value(&[])
            > 0.0
    );
}

/// The tiny Qwen2 fixture: q/k/v biases, RoPE base 10^6.
fn qwen2_target() -> CausalLm {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/qwen2");
    let target = CausalLm::load(&fixture, Device::Cpu, Kind::Float).unwrap();
    assert!(target.net.config.qkv_bias, "the fixture has q/k/v biases");
    target
}

/// Greedy speculative decoding of exactly `new_tokens` tokens.
fn greedy_config(new_tokens: usize) -> SpecOptions {
    SpecOptions {
        max_new_tokens: new_tokens,
        sampling: Sampling::greedy(),
        stop_tokens: vec![],
        max_proposal: 64,
        gate: Default::default(),
    }
}

/// Greedy speculative decoding of `prompt` by `method`'s trained drafter in `dir`.
fn speculate(
    method: DrafterKind,
    dir: &Path,
    target: &CausalLm,
    prompt: &[i64],
    new_tokens: usize,
) -> sharpdraft_decode::SpecReport {
    speculative_generate(
        &target.net,
        drafter(method, dir, target).as_mut(),
        prompt,
        &greedy_config(new_tokens),
    )
    .unwrap()
}

/// The target's own greedy continuation: what speculation must reproduce.
fn greedy_ids(target: &CausalLm, prompt: &[i64], new_tokens: usize) -> Vec<i64> {
    sharpdraft_model::generate::generate(
        &target.net,
        prompt,
        new_tokens,
        &mut sharpdraft_model::Sampler::new(Sampling::greedy()),
        &[],
    )
    .unwrap()
    .ids
}

fn config_of(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

fn abs_sum(tensor: &tch::Tensor) -> f64 {
    tensor.abs().sum(Kind::Float).double_value(&[])
}

#[test]
fn a_warm_started_eagle_head_of_a_qwen2_target_keeps_its_attention_biases_and_rope_base() {
    let target = qwen2_target();
    let windows = windows(&target, DrafterKind::Eagle3, 4);
    let dir = tempfile::tempdir().unwrap();
    init(DrafterKind::Eagle3, dir.path(), &target, &windows);
    let head = safetensors_of(dir.path());
    let vars = target.vars.variables();
    let last = format!(
        "model.layers.{}.self_attn",
        target.net.config.num_layers - 1
    );
    let h = target.net.config.hidden_size;
    for name in ["q_proj", "k_proj", "v_proj"] {
        let target_bias = vars[&format!("{last}.{name}.bias")].to_kind(Kind::Float);
        assert!(
            head[&format!("midlayer.self_attn.{name}.bias")].equal(&target_bias),
            "{name}.bias is the target's"
        );
        let target_weight = vars[&format!("{last}.{name}.weight")].to_kind(Kind::Float);
        assert!(
            head[&format!("midlayer.self_attn.{name}.weight")]
                .narrow(1, h, h)
                .equal(&target_weight),
            "{name}: the feature half is the target's"
        );
    }
    assert_eq!(
        abs_sum(&head["midlayer.self_attn.o_proj.bias"]),
        0.0,
        "Qwen2 has no o_proj bias: the head's starts at zero"
    );
    let config = config_of(dir.path());
    assert_eq!(config["attention_bias"], true);
    assert_eq!(config["rope_theta"], 1_000_000.0, "the target's RoPE base");
    // The head loads with its biases and trains.
    let loss = objective(DrafterKind::Eagle3, dir.path(), &target)
        .loss(&windows[0], 0)
        .unwrap()
        .double_value(&[]);
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
}

#[test]
fn a_warm_started_dflash_drafter_of_a_qwen2_target_keeps_its_attention_biases_and_drafts() {
    let target = qwen2_target();
    let dir = tempfile::tempdir().unwrap();
    init(DrafterKind::Dflash, dir.path(), &target, &[]);
    let drafter_weights = safetensors_of(dir.path());
    let vars = target.vars.variables();
    // One drafter layer, started from the target's last.
    let last = format!(
        "model.layers.{}.self_attn",
        target.net.config.num_layers - 1
    );
    for name in ["q_proj", "k_proj", "v_proj"] {
        assert!(
            drafter_weights[&format!("layers.0.self_attn.{name}.bias")]
                .equal(&vars[&format!("{last}.{name}.bias")].to_kind(Kind::Float)),
            "{name}.bias is the target's"
        );
    }
    let o_bias = &drafter_weights["layers.0.self_attn.o_proj.bias"];
    assert_eq!(o_bias.size(), [target.net.config.hidden_size]);
    assert_eq!(
        abs_sum(o_bias),
        0.0,
        "Qwen2 has no o_proj bias: the drafter's starts at zero"
    );
    let config = config_of(dir.path());
    assert_eq!(config["attention_bias"], true);
    // It loads with every bias and trains: the saved checkpoint carries an o_proj bias that has moved.
    let windows = windows(&target, DrafterKind::Dflash, 4);
    let loss = objective(DrafterKind::Dflash, dir.path(), &target)
        .loss(&windows[0], 0)
        .unwrap()
        .double_value(&[]);
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
    run(DrafterKind::Dflash, dir.path(), &target, &windows, 10);
    let trained = safetensors_of(dir.path());
    assert!(
        abs_sum(&trained["layers.0.self_attn.o_proj.bias"]) > 0.0,
        "training moves the o_proj bias, and saving writes it"
    );
    // Its drafts go through real verification.
    let prompt: Vec<i64> = stream()[..20].to_vec();
    let want = greedy_ids(&target, &prompt, 16);
    let report = speculate(DrafterKind::Dflash, dir.path(), &target, &prompt, 16);
    assert_eq!(report.ids, want);
}

/// A drafter specification with `adapt:` builds an adapting drafter for every trained method: it updates
/// while drafting, its greedy output stays the target's, and the report carries its costs.
#[test]
fn a_specification_with_adapt_builds_a_drafter_that_learns_while_it_drafts() {
    use sharpdraft_draft::adaptation::{AdaptMode, AdaptOptions};
    let target = target();
    let prompt: Vec<i64> = stream()[..20].to_vec();
    let want = greedy_ids(&target, &prompt, 24);
    for method in ALL {
        let windows = windows(&target, method, 4);
        let dir = tempfile::tempdir().unwrap();
        run(method, dir.path(), &target, &windows, 10);
        for mode in [AdaptMode::Full, AdaptMode::Lora] {
            let spec = DrafterSpec {
                adapt: Some(AdaptOptions {
                    every: 2,
                    ..AdaptOptions::new(mode)
                }),
                ..DrafterSpec::new(method, dir.path().to_str().unwrap()).chains_of(3)
            };
            let (mut built, config) =
                drafter_spec::prepare(&spec, &target, Sampling::greedy(), prompt.len(), 24)
                    .unwrap();
            let report =
                speculative_generate(&target.net, built.drafter.as_mut(), &prompt, &config)
                    .unwrap();
            assert_eq!(report.ids, want, "{method:?} {mode:?}");
            let adaptation = report.adaptation.clone().unwrap();
            assert!(adaptation.updates >= 1, "{method:?} {mode:?}: no update");
            assert!(adaptation.optimizer_bytes > 0 && adaptation.buffer_bytes > 0);
            assert_eq!(adaptation.adapter_bytes == 0, mode == AdaptMode::Full);
            assert!(report.memory().adaptation_bytes >= adaptation.optimizer_bytes);
        }
    }
}

#[test]
fn a_dflash_drafter_over_a_draft_vocabulary_learns_round_trips_and_keeps_the_targets_output() {
    let target = target();
    let windows = windows(&target, DrafterKind::Dflash, 8);
    let dir = tempfile::tempdir().unwrap();
    let options = DFlashOptions {
        draft_vocab: 16,
        ..dflash_options()
    };
    dflash_train::init(dir.path(), &target, &windows, &options).unwrap();
    assert_eq!(config_of(dir.path())["draft_vocab_size"], 16);
    let objective = DFlashObjective::load(dir.path(), &target.net, &options, 1).unwrap();
    let state = train(
        &objective,
        &windows,
        dir.path(),
        &loop_config(60),
        &mut Quiet,
    )
    .unwrap();
    let (first, last) = (mean(&state.losses[..10]), mean(&state.losses[50..]));
    assert!(last < 0.9 * first, "loss {first:.3} -> {last:.3}");

    let vocab = target.net.config.vocab_size;
    let frequent = frequent_tokens(&windows, vocab, 16);
    let loaded = sharpdraft_draft::DFlashDrafter::load(dir.path(), &target.net, 256).unwrap();
    let vocabulary = loaded.draft_vocabulary().expect("a draft vocabulary");
    let drafted_over: Vec<i64> = (0..vocabulary.len() as i64)
        .map(|d| vocabulary.to_target(d))
        .collect();
    assert_eq!(
        drafted_over, frequent,
        "the 16 most frequent tokens of the windows"
    );

    let copy = tempfile::tempdir().unwrap();
    objective.save(copy.path(), 64).unwrap();
    assert_eq!(config_of(copy.path())["draft_vocab_size"], 16);
    let saved = safetensors_of(copy.path());
    assert!(
        saved["d2t"].equal(&safetensors_of(dir.path())["d2t"]),
        "d2t survives a save"
    );

    let prompt: Vec<i64> = stream()[..20].to_vec();
    let report = speculate(DrafterKind::Dflash, dir.path(), &target, &prompt, 24);
    assert_eq!(report.ids, greedy_ids(&target, &prompt, 24));
    let accepted: usize = report.cycles.iter().map(|c| c.accepted).sum();
    assert!(
        accepted > 0,
        "a trained drafter over its vocabulary gets drafts accepted"
    );
}

#[test]
fn target_windows_kept_for_a_resume_load_back_bit_identically_only_under_their_own_key() {
    use sharpdraft_lab::target_windows::{self, Kept};
    let target = target();
    let dir = tempfile::tempdir().unwrap();
    for method in [DrafterKind::Eagle3, DrafterKind::Pard] {
        let extracted = windows(&target, method, 3);
        target_windows::save(dir.path(), "key-a", &extracted).unwrap();
        assert_eq!(
            target_windows::kept(dir.path()).unwrap(),
            Kept::Windows {
                key: "key-a".into()
            }
        );
        assert!(target_windows::load(dir.path(), "key-b", Device::Cpu)
            .unwrap()
            .is_none());
        let loaded = target_windows::load(dir.path(), "key-a", Device::Cpu)
            .unwrap()
            .expect("kept under key-a");
        assert_eq!(loaded.len(), 3);
        for (a, b) in extracted.iter().zip(&loaded) {
            assert_eq!(a.tokens, b.tokens);
            assert_eq!(a.features.is_some(), b.features.is_some(), "{method:?}");
            if let (Some(x), Some(y)) = (&a.features, &b.features) {
                assert!(x.equal(y), "{method:?}: features");
            }
            assert!(a.top_ids.equal(&b.top_ids) && a.top_probs.equal(&b.top_probs));
        }
        target_windows::remove(dir.path()).unwrap();
        assert_eq!(target_windows::kept(dir.path()).unwrap(), Kept::None);
    }

    // A file of that name the workbench did not write is never read, replaced or removed.
    let path = dir.path().join(target_windows::FILE);
    std::fs::write(&path, b"a user's own file").unwrap();
    assert_eq!(target_windows::kept(dir.path()).unwrap(), Kept::Foreign);
    target_windows::save(dir.path(), "key-a", &windows(&target, DrafterKind::Pard, 1)).unwrap();
    assert!(target_windows::load(dir.path(), "key-a", Device::Cpu)
        .unwrap()
        .is_none());
    target_windows::remove(dir.path()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"a user's own file");
}

#[test]
fn the_key_of_the_target_windows_changes_with_each_thing_they_are_extracted_from() {
    use sharpdraft_lab::target_windows::WindowsKey;
    let stream = stream();
    let taps = taps(DrafterKind::Eagle3);
    let base = WindowsKey {
        target: "t",
        stream: &stream,
        taps: &taps,
        n0: 64,
        max_windows: 4,
        top_k: 8,
    };
    let digest = base.digest();
    assert_eq!(
        digest,
        WindowsKey { ..base }.digest(),
        "the same inputs, the same key"
    );
    let shorter = &stream[..stream.len() - 1];
    let fewer_taps = &taps[..2];
    for other in [
        WindowsKey {
            target: "u",
            ..base
        },
        WindowsKey {
            stream: shorter,
            ..base
        },
        WindowsKey {
            taps: fewer_taps,
            ..base
        },
        WindowsKey { n0: 32, ..base },
        WindowsKey {
            max_windows: 5,
            ..base
        },
        WindowsKey { top_k: 4, ..base },
    ] {
        assert_ne!(other.digest(), digest);
    }
}

#[test]
fn every_trained_drafter_drafts_in_bf16_beside_an_f32_target_and_keeps_its_output() {
    let target = target();
    let prompt: Vec<i64> = stream()[..20].to_vec();
    let want = greedy_ids(&target, &prompt, 64);
    let over_16_tokens = DFlashOptions {
        draft_vocab: 16,
        ..dflash_options()
    };
    for (method, dflash) in [
        (DrafterKind::Eagle3, None),
        (DrafterKind::Pard, None),
        (DrafterKind::Dflash, None),
        (DrafterKind::Dflash, Some(over_16_tokens)),
    ] {
        let windows = windows(&target, method, 8);
        let dir = tempfile::tempdir().unwrap();
        match &dflash {
            Some(options) => {
                dflash_train::init(dir.path(), &target, &windows, options).unwrap();
                let objective = DFlashObjective::load(dir.path(), &target.net, options, 1).unwrap();
                train(
                    &objective,
                    &windows,
                    dir.path(),
                    &loop_config(60),
                    &mut Quiet,
                )
                .unwrap();
            }
            None => {
                run(method, dir.path(), &target, &windows, 60);
            }
        }
        let label = match dflash {
            Some(_) => format!("{method:?} over 16 tokens"),
            None => format!("{method:?}"),
        };
        let accepted_in = |dtype: Option<&str>| -> usize {
            let spec = DrafterSpec {
                dtype: dtype.map(str::to_string),
                ..DrafterSpec::new(method, dir.path().to_str().unwrap()).chains_of(3)
            };
            let mut built = drafter_spec::build(&spec, &target, Sampling::greedy(), 256).unwrap();
            if dtype == Some("bf16") {
                for (name, weight) in built.drafter.variables() {
                    assert_eq!(weight.kind(), Kind::BFloat16, "{label}: {name} is not bf16");
                }
            }
            let report = speculative_generate(
                &target.net,
                built.drafter.as_mut(),
                &prompt,
                &greedy_config(64),
            )
            .unwrap();
            assert_eq!(
                report.ids, want,
                "{label} in {dtype:?}: not the f32 target's output"
            );
            report.cycles.iter().map(|c| c.accepted).sum()
        };
        let (f32_accepted, bf16_accepted) = (accepted_in(None), accepted_in(Some("bf16")));
        assert!(f32_accepted > 0, "{label}: no draft accepted in f32");
        // bf16 rounds the drafter's logits, which may flip a near tie; it must not stop drafting.
        assert!(
            bf16_accepted * 4 >= f32_accepted * 3,
            "{label}: {bf16_accepted} drafts accepted in bf16 against {f32_accepted} in f32"
        );
    }
}
