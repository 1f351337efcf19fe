//! Every numeric flag of every command, at the edges a hostile but fair user reaches for: 0, 1, -1, NaN,
//! infinity, the bound the SmolLM2 target sets (8192 positions, a 49152-token vocabulary) and one
//! past it, 2^32, 2^63 and u64::MAX. Each run ends in success or a clear error naming the flag or its
//! value (never a panic or a signal), refuses a value of 2^32 or more before it starts work (no
//! count, length or size that large fits anything a run applies it to; seeds and the gradient clip,
//! which are not sizes, excepted), and changes no file outside its output folder.
//!
//! Every case runs a model with SmolLM2's vocabulary, positions and tokenizer at a width of 64 (random
//! weights, [`tiny_target`]): the same bounds at a fraction of the cost of the real 135M model.
//!
//! The flags come from the command tree itself (`sharpdraft::Cli`), so a numeric flag added later is
//! covered without touching this file; a subcommand with numeric flags and no cheap base command line
//! here fails the test by name.

use clap::CommandFactory;
use std::any::TypeId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The model every case runs: SmolLM2's architecture, tokenizer, vocabulary and positions (the bounds
/// the edges probe) at a width of 64 and two layers, random weights, written into the workspace as
/// `tiny` ([`tiny_target`]). Loading and running it costs milliseconds where the real 135M model costs
/// seconds, and every flag meets the same bounds.
const TARGET: &str = "tiny";

/// The fetched model whose tokenizer and configuration the tiny one takes.
const REAL_TARGET: &str = "smollm2-135m-instruct";

/// Writes the tiny target into `dir`: SmolLM2's config.json with small widths, its tokenizer files,
/// and model.safetensors of uniform random weights (norms 1) from a fixed seed.
fn tiny_target(dir: &Path) {
    let real = sharpdraft_store::registry::resolve(REAL_TARGET).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(real.join(file), dir.join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(real.join("config.json")).unwrap()).unwrap();
    let (hidden, intermediate, heads, kv_heads, head_dim, layers) =
        (64usize, 128usize, 2usize, 1usize, 32usize, 2usize);
    for (key, value) in [
        ("hidden_size", hidden),
        ("intermediate_size", intermediate),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv_heads),
        ("head_dim", head_dim),
        ("num_hidden_layers", layers),
    ] {
        config[key] = value.into();
    }
    assert_eq!(
        config["tie_word_embeddings"], true,
        "the tiny model ties its embeddings as SmolLM2 does"
    );
    let vocab = config["vocab_size"].as_u64().unwrap() as usize;
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![vocab, hidden]),
        ("model.norm.weight".into(), vec![hidden]),
    ];
    for layer in 0..layers {
        let p = format!("model.layers.{layer}");
        shapes.extend([
            (format!("{p}.input_layernorm.weight"), vec![hidden]),
            (format!("{p}.post_attention_layernorm.weight"), vec![hidden]),
            (
                format!("{p}.self_attn.q_proj.weight"),
                vec![heads * head_dim, hidden],
            ),
            (
                format!("{p}.self_attn.k_proj.weight"),
                vec![kv_heads * head_dim, hidden],
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                vec![kv_heads * head_dim, hidden],
            ),
            (
                format!("{p}.self_attn.o_proj.weight"),
                vec![hidden, heads * head_dim],
            ),
            (
                format!("{p}.mlp.gate_proj.weight"),
                vec![intermediate, hidden],
            ),
            (
                format!("{p}.mlp.up_proj.weight"),
                vec![intermediate, hidden],
            ),
            (
                format!("{p}.mlp.down_proj.weight"),
                vec![hidden, intermediate],
            ),
        ]);
    }
    // safetensors: an 8-byte header length, the JSON header, then the tensors' bytes in order.
    let mut header = serde_json::Map::new();
    let mut body: Vec<u8> = Vec::new();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for (name, shape) in &shapes {
        let count: usize = shape.iter().product();
        let start = body.len();
        for _ in 0..count {
            let value = if name.ends_with("norm.weight") {
                1.0f32
            } else {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
            };
            body.extend_from_slice(&value.to_le_bytes());
        }
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, body.len()]}),
        );
    }
    let mut text = serde_json::Value::Object(header).to_string().into_bytes();
    text.resize(text.len().div_ceil(8) * 8, b' ');
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend(text);
    file.extend(body);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
}

/// The edge values: (text, whether no run may accept it and start working).
const EDGES: &[(&str, bool)] = &[
    ("0", false),
    ("1", false),
    ("NaN", false),
    // SmolLM2's positions (the bound of every length) and one past them.
    ("8192", false),
    ("8193", false),
    ("4294967296", true),
    ("9223372036854775808", true),
    ("18446744073709551615", true),
];

/// Flags for which any large value is fair: a seed is an identity (any u64 names one), and a gradient
/// clip is a ceiling that a huge value simply never reaches (no clipping), not a size anything is built to.
fn any_magnitude_is_fair(flag: &str) -> bool {
    flag.ends_with("seed") || flag == "--adapt-clip"
}

/// A run still working after this long is taken as having accepted its value (and is stopped). On the
/// tiny target a run loads and starts its work in about a second even on a busy 2-core machine; the
/// runs that reach the deadline are benches told to repeat 8192 times, which is fair.
const DEADLINE: Duration = Duration::from_secs(8);

/// The deadline of a run told a large value it may take (8192 or more, below 2^32, or a seed of any
/// size): a run still working after this long is past its checks and doing what it was told, 8192
/// repeats of a bench say. The runs that reached [`DEADLINE`] were all of this kind (15 of 576), a
/// minute of the suite's wall time spent waiting; small values keep the long deadline, so a normal
/// run is still seen to its end, and so do the values that must be refused, where a slow start must
/// not pass for a refusal.
const LARGE_FAIR_VALUE_DEADLINE: Duration = Duration::from_secs(3);

/// Whether `flag` must refuse a value of the edge's magnitude (`refuse` from [`EDGES`]) before work starts.
fn must_be_refused(flag: &str, refuse: bool) -> bool {
    refuse && !any_magnitude_is_fair(flag)
}

/// How long the run of `value` for `flag` may work before it is taken as having accepted it.
fn deadline(flag: &str, value: &str, refuse: bool) -> Duration {
    let large = value.parse::<f64>().is_ok_and(|v| v >= 8192.0);
    if large && !must_be_refused(flag, refuse) {
        LARGE_FAIR_VALUE_DEADLINE
    } else {
        DEADLINE
    }
}

/// What a numeric value parser parses to (clap keeps the element type for lists).
fn is_numeric(arg: &clap::Arg) -> bool {
    let id = arg.get_value_parser().type_id();
    [
        TypeId::of::<usize>(),
        TypeId::of::<u64>(),
        TypeId::of::<u32>(),
        TypeId::of::<i64>(),
        TypeId::of::<i32>(),
        TypeId::of::<f64>(),
        TypeId::of::<f32>(),
    ]
    .iter()
    .any(|t| id == *t)
}

/// (subcommand path, long flag) for every numeric flag of the command tree. A flag that several commands
/// share through one flattened group (the drafting, adaptation and prompt-set options: the same name,
/// help and default) is one flag, checked by one code path, and is taken once, in the first command
/// that has it.
fn numeric_flags() -> Vec<(Vec<String>, String)> {
    type Seen = std::collections::BTreeSet<(String, String, String)>;
    fn walk(
        command: &clap::Command,
        path: &mut Vec<String>,
        seen: &mut Seen,
        out: &mut Vec<(Vec<String>, String)>,
    ) {
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long() {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                let default: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let shared = !seen.insert((long.to_string(), help, default.join(",")));
                if is_numeric(arg) && !arg.is_hide_set() && !(shared && is_flattened(long)) {
                    out.push((path.clone(), format!("--{long}")));
                }
            }
        }
        for sub in command.get_subcommands() {
            path.push(sub.get_name().to_string());
            walk(sub, path, seen, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(
        &sharpdraft::Cli::command(),
        &mut Vec::new(),
        &mut Seen::new(),
        &mut out,
    );
    out
}

/// The groups of flags commands share (`DrafterSpec` with its tree, scaling, retrieval and adaptation,
/// `PromptSetArgs`): one definition, one validation, whatever command flattens them.
fn is_flattened(long: &str) -> bool {
    const SHARED: &[&str] = &[
        "draft-len",
        "draft-stop-below",
        "tree-depth",
        "tree-topk",
        "tree-tokens",
        "beta",
        "n0",
        "drafter-window",
        "retrieval-chunk",
        "retrieval-top-chunks",
        "retrieval-recent",
        "retrieval-every",
        "adapt-every",
        "adapt-lr",
        "adapt-steps",
        "adapt-buffer",
        "adapt-top-k",
        "adapt-clip",
        "adapt-seed",
        "lora-rank",
        "lora-alpha",
        "skip",
        "count",
        "contexts",
        "filler-offset",
    ];
    SHARED.contains(&long)
}

/// The folder every case runs in: a user's own files, a prompt file, an EAGLE-3 head and a filler text.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("thesis.tex"), "years of work").unwrap();
        std::fs::write(
            root.join("prompts.jsonl"),
            "{\"prompt\": \"Hi\"}\n{\"prompt\": \"Why?\"}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("filler.txt"),
            "The quick brown fox jumps over the lazy dog. ".repeat(400),
        )
        .unwrap();
        tiny_target(&root.join(TARGET));
        let eagle = run(
            root,
            &["init", "eagle3", "--target", TARGET, "--out", "eagle"],
            DEADLINE,
        );
        assert!(eagle.status == Some(0), "init eagle3: {}", eagle.stderr);
        Workspace { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A cheap command line for subcommand `path` that reaches the flag: the drafting flags get the drafter
/// (and mode) they apply to, so the value is not ignored but checked.
fn base_command(path: &[String], flag: &str) -> Option<Vec<String>> {
    let drafter: &[&str] = if flag.starts_with("--tree-") {
        &["--drafter", "eagle", "--kind", "eagle3"]
    } else {
        &["--drafter", TARGET, "--kind", "vanilla", "--draft-len", "2"]
    };
    let mode: &[&str] = if flag.starts_with("--lora-") {
        &["--adapt", "lora"]
    } else if flag.starts_with("--adapt-") {
        &["--adapt", "full"]
    } else if flag.starts_with("--retrieval-") {
        &["--retrieval"]
    } else if flag == "--beta" {
        &["--scaling", "fixed", "--n0", "256"]
    } else if flag == "--n0" && path.first().is_some_and(|c| c != "derive") {
        &["--scaling", "logn"]
    } else if flag == "--filler-offset" {
        &["--contexts", "64", "--filler", "filler.txt"]
    } else {
        &[]
    };
    // A command that drafts: its base, the drafter and the mode the flag applies to.
    let drafting = |base: &[&'static str]| [base, drafter, mode].concat();
    let generate = [
        "generate",
        "--target",
        TARGET,
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "2",
    ];
    let words: Vec<&str> = match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["derive"] => vec!["derive", "--json"],
        ["init", "eagle3"] => vec!["init", "eagle3", "--target", TARGET, "--out", "out"],
        ["init", "dflash"] => vec![
            "init",
            "dflash",
            "--target",
            TARGET,
            "--out",
            "out",
            "--mask-token",
            "0",
        ],
        // The drafting flags with the drafter they apply to; the rest without one (half the loading).
        ["generate"] if flag == "--rounds" => {
            drafting(&[&generate[..], &["--compare-ar"]].concat())
        }
        ["generate"] if !is_flattened(&flag[2..]) => generate.to_vec(),
        ["generate"] => drafting(&generate),
        ["logits"] => vec!["logits", "--model", TARGET, "--prompt", "Hi"],
        ["tau"] => drafting(&[
            "tau",
            "--target",
            TARGET,
            "--prompts",
            "prompts.jsonl",
            "--count",
            "1",
            "--max-new-tokens",
            "2",
        ]),
        ["bench", "decode"] => vec![
            "bench",
            "decode",
            "--target",
            TARGET,
            "--contexts",
            "8",
            "--dtypes",
            "f32",
            "--decode-tokens",
            "2",
            "--json",
        ],
        ["bench", "scaling"] => drafting(&[
            "bench",
            "scaling",
            "--target",
            TARGET,
            "--contexts",
            "64",
            "--new-tokens",
            "2",
            "--repeats",
            "1",
            "--json",
        ]),
        ["bench", "continuations"] => vec![
            "bench",
            "continuations",
            "--target",
            TARGET,
            "--prompts",
            "2",
            "--max-new-tokens",
            "2",
            "--batch",
            "2",
        ],
        ["bench", "load"] => vec![
            "bench",
            "load",
            "--target",
            TARGET,
            "--repeats",
            "1",
            "--json",
        ],
        ["bench", "draft-time"] => drafting(&[
            "bench",
            "draft-time",
            "--target",
            TARGET,
            "--contexts",
            "64",
            "--new-tokens",
            "2",
            "--repeats",
            "2",
            "--json",
        ]),
        ["bench", "rows"] => vec![
            "bench",
            "rows",
            "--target",
            TARGET,
            "--rows",
            "1,2",
            "--context",
            "16",
            "--repeats",
            "1",
            "--json",
        ],
        ["bench", "speculative"] => drafting(&[
            "bench",
            "speculative",
            "--target",
            TARGET,
            "--prompts",
            "prompts.jsonl",
            "--count",
            "1",
            "--max-new-tokens",
            "2",
            "--json",
        ]),
        ["bench", "attention-stats"] => vec![
            "bench",
            "attention-stats",
            "--keys",
            "64",
            "--rows",
            "2",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--head-dim",
            "8",
            "--ks",
            "1",
            "--repeats",
            "1",
            "--json",
        ],
        _ => return None,
    };
    Some(words.into_iter().map(str::to_string).collect())
}

/// `args` with `flag value` in place of any `flag` the base already gives.
fn with_flag(base: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut args = Vec::with_capacity(base.len() + 2);
    let mut i = 0;
    while i < base.len() {
        if base[i] == flag {
            i += 2;
            continue;
        }
        args.push(base[i].clone());
        i += 1;
    }
    args.push(flag.to_string());
    args.push(value.to_string());
    args
}

struct Ended {
    /// The exit code; None when a signal ended it or the deadline did.
    status: Option<i32>,
    timed_out: bool,
    stderr: String,
}

/// Runs the binary in `cwd` under a memory limit, stopped at `deadline`.
fn run(cwd: &Path, args: &[&str], deadline: Duration) -> Ended {
    let err_path = cwd.join(format!(
        ".stderr-{}",
        std::thread::current()
            .name()
            .unwrap_or("main")
            .replace("::", "-")
    ));
    let err_file = std::fs::File::create(&err_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sharpdraft"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .expect("run sharpdraft");
    let started = Instant::now();
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (status.code(), false);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    Ended {
        status,
        timed_out,
        stderr,
    }
}

/// Every file under `dir` but `out/` and the runs' stderr captures: relative path -> contents.
fn user_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if relative.starts_with("out") || relative.to_string_lossy().starts_with(".stderr-") {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                files.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// What was wrong with one run, if anything.
fn judge(flag: &str, value: &str, must_refuse: bool, ended: &Ended) -> Option<String> {
    let text = ended.stderr.trim();
    if text.contains("panicked") {
        return Some(format!("panicked: {text}"));
    }
    if ended.timed_out {
        return must_be_refused(flag, must_refuse)
            .then(|| format!("still working after {DEADLINE:?}: a value this large must be refused before work starts"));
    }
    match ended.status {
        Some(0) => None,
        // Clap's own refusals name the flag; the workbench's must name the flag or the value.
        Some(2) => None,
        Some(1)
            if text.contains(flag)
                || text.contains(value)
                || text.contains(&flag[2..].replace('-', "_")) =>
        {
            None
        }
        Some(1) => Some(format!(
            "an error naming neither {flag} nor {value}: {text}"
        )),
        other => Some(format!("ended by {other:?} (a signal or an abort): {text}")),
    }
}

#[test]
fn every_numeric_flag_at_every_edge_succeeds_or_names_itself_and_touches_no_users_file() {
    if sharpdraft_store::registry::resolve(REAL_TARGET).is_err() {
        sharpdraft_testing::skip(format!(
            "{REAL_TARGET} is not fetched (make test fetches it)"
        ));
        return;
    }
    let flags = numeric_flags();
    let unreachable: Vec<String> = flags
        .iter()
        .filter(|(path, flag)| base_command(path, flag).is_none())
        .map(|(path, flag)| format!("{} {flag}", path.join(" ")))
        .collect();
    assert!(
        unreachable.is_empty(),
        "numeric flags with no base command line here: {unreachable:?}"
    );
    let workspace = Workspace::new();
    let before = user_files(workspace.path());
    let cases: Vec<(Vec<String>, String, &str, bool)> = flags
        .iter()
        .flat_map(|(path, flag)| {
            EDGES
                .iter()
                .map(move |&(value, refuse)| (path.clone(), flag.clone(), value, refuse))
        })
        .collect();
    eprintln!(
        "{} flags x {} edges = {} runs",
        flags.len(),
        EDGES.len(),
        cases.len()
    );
    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    // Two cases at a time: most end in clap's refusal or a model load.
    std::thread::scope(|scope| {
        for worker in 0..2 {
            let (cases, failures, next, workspace) = (&cases, &failures, &next, &workspace);
            std::thread::Builder::new()
                .name(format!("edge-{worker}"))
                .spawn_scoped(scope, move || loop {
                    let i = {
                        let mut next = next.lock().unwrap();
                        *next += 1;
                        *next - 1
                    };
                    let Some((path, flag, value, refuse)) = cases.get(i) else {
                        break;
                    };
                    let base = base_command(path, flag).unwrap();
                    let args = with_flag(&base, flag, value);
                    // Each worker writes its own output folder name, so the two never share one.
                    let out = format!("out/{worker}");
                    let args: Vec<String> = args
                        .into_iter()
                        .map(|a| if a == "out" { out.clone() } else { a })
                        .collect();
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    let started = Instant::now();
                    let ended = run(workspace.path(), &refs, deadline(flag, value, *refuse));
                    if std::env::var_os("SHARPDRAFT_EDGE_LOG").is_some() {
                        eprintln!(
                            "{:>5.1} s {:?} {}",
                            started.elapsed().as_secs_f64(),
                            ended.status,
                            args.join(" ")
                        );
                    }
                    if let Some(problem) = judge(flag, value, *refuse, &ended) {
                        let line = format!("sharpdraft {}: {problem}", args.join(" "));
                        eprintln!("{line}");
                        failures.lock().unwrap().push(line);
                    }
                    let _ = std::fs::remove_dir_all(workspace.path().join(&out));
                })
                .unwrap();
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} runs:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert_eq!(
        user_files(workspace.path()),
        before,
        "a run changed a file outside its output folder"
    );
}

#[test]
fn the_drafter_kind_is_given_by_kind_and_still_by_its_old_spelling_method() {
    use clap::Parser;
    let kind_of = |flag: &str| {
        let args = [
            "sharpdraft",
            "generate",
            "--target",
            "t",
            "--prompt",
            "p",
            "--drafter",
            "d",
            flag,
            "dflash",
        ];
        match sharpdraft::Cli::try_parse_from(args).unwrap().command {
            sharpdraft::Command::Generate(generate) => generate.drafter.unwrap().kind,
            _ => unreachable!("generate parses as generate"),
        }
    };
    assert_eq!(kind_of("--kind"), sharpdraft_draft::DrafterKind::Dflash);
    assert_eq!(kind_of("--method"), kind_of("--kind"));
}

#[test]
fn the_drafting_flags_and_a_drafter_block_are_one_declaration_and_make_one_specification() {
    use clap::Parser;
    use sharpdraft_decode::drafter_spec::DrafterSpec;
    use sharpdraft_decode::scaling::ScalingMode;
    let args = [
        "sharpdraft",
        "generate",
        "--target",
        "t",
        "--prompt",
        "p",
        "--drafter",
        "head",
        "--kind",
        "eagle3",
        "--draft-len",
        "3",
        "--tree-depth",
        "3",
        "--scaling",
        "fixed",
        "--beta",
        "0.25",
        "--n0",
        "512",
        "--drafter-window",
        "64",
        "--drafter-dtype",
        "bf16",
        "--adapt",
        "lora",
        "--lora-rank",
        "4",
    ];
    let from_flags = match sharpdraft::Cli::try_parse_from(args).unwrap().command {
        sharpdraft::Command::Generate(generate) => generate
            .drafter
            .expect("--drafter makes a drafter specification")
            .with_scaling_mode(generate.scaling_modes.single().unwrap()),
        _ => unreachable!("generate parses as generate"),
    };
    let block = "kind: eagle3\ncheckpoint: head\ndraft_len: 3\ntree: {depth: 3}\n\
                 scaling: {mode: fixed, beta: 0.25, n0: 512}\nwindow: 64\ndtype: bf16\n\
                 adapt: {mode: lora, rank: 4}\n";
    let from_yaml: DrafterSpec =
        sharpdraft_lab::experiment::config::parse_yaml(block, Path::new("drafter.yaml")).unwrap();
    assert_eq!(from_flags, from_yaml);
    // No tree flag is no tree, as no `tree:` key is; a given one fills the others with EAGLE's.
    assert_eq!(
        from_flags.tree.map(|t| t.top_k),
        Some(sharpdraft_draft::TreeShape::EAGLE.top_k)
    );
    assert_eq!(from_flags.scaling.mode, ScalingMode::Fixed);
}

/// `generate`'s drafting flags parsed into its optional drafter specification, or the parser's refusal.
fn generate_drafter(
    flags: &[&str],
) -> Result<Option<sharpdraft_decode::drafter_spec::DrafterSpec>, String> {
    use clap::Parser;
    let args = [
        &["sharpdraft", "generate", "--target", "t", "--prompt", "p"],
        flags,
    ]
    .concat();
    match sharpdraft::Cli::try_parse_from(args) {
        Ok(cli) => match cli.command {
            sharpdraft::Command::Generate(generate) => Ok(generate.drafter),
            _ => unreachable!("generate parses as generate"),
        },
        Err(refusal) => Err(refusal.to_string()),
    }
}

#[test]
fn generate_drafts_exactly_when_given_a_drafter_and_its_optional_blocks_exactly_when_switched_on() {
    use sharpdraft_draft::retrieval::RetrievalOptions;
    assert_eq!(generate_drafter(&[]).unwrap(), None);
    let plain = generate_drafter(&["--drafter", "d"]).unwrap().unwrap();
    assert_eq!(
        (plain.checkpoint.as_str(), plain.retrieval, plain.adapt),
        ("d", None, None)
    );
    assert_eq!(plain.tree, None);
    let retrieving = generate_drafter(&["--drafter", "d", "--retrieval"])
        .unwrap()
        .unwrap();
    assert_eq!(retrieving.retrieval, Some(RetrievalOptions::default()));
    let chunked = generate_drafter(&["--drafter", "d", "--retrieval", "--retrieval-chunk", "16"]);
    assert_eq!(chunked.unwrap().unwrap().retrieval.unwrap().chunk, 16);
    let adapting = generate_drafter(&["--drafter", "d", "--adapt", "lora", "--lora-rank", "2"]);
    let adapt = adapting.unwrap().unwrap().adapt.unwrap();
    assert_eq!(
        (adapt.mode, adapt.rank),
        (sharpdraft_draft::adaptation::AdaptMode::Lora, 2)
    );
}

#[test]
fn a_drafting_flag_without_what_it_applies_to_is_refused_by_name_not_ignored() {
    for (flags, missing) in [
        (&["--kind", "pard"][..], "--drafter"),
        (&["--draft-len", "3"], "--drafter"),
        (&["--draft-stop-below", "0.5"], "--drafter"),
        (&["--tree-depth", "2"], "--drafter"),
        (&["--beta", "0.1"], "--drafter"),
        (&["--scaling", "fixed"], "--drafter"),
        (&["--lora-rank", "2"], "--drafter"),
        (&["--retrieval"], "--drafter"),
        (&["--adapt", "full"], "--drafter"),
        (
            &["--drafter", "d", "--retrieval-chunk", "16"],
            "--retrieval",
        ),
        (&["--drafter", "d", "--lora-rank", "2"], "--adapt"),
    ] {
        let refusal = generate_drafter(flags).expect_err(&format!("{flags:?} must be refused"));
        assert!(
            refusal.contains("required arguments were not provided") && refusal.contains(missing),
            "{flags:?}: {refusal}"
        );
    }
    let both = generate_drafter(&["--drafter", "d", "--retrieval", "--drafter-window", "8"]);
    assert!(both.unwrap_err().contains("cannot be used with"));
}

/// A value `arg` parses (its first possible value, a name its YAML value parser reads, or 1), so a
/// refusal is for what is missing, not for the value; `None` for a switch.
fn a_value_it_parses(arg: &clap::Arg) -> Option<String> {
    if !arg.get_action().takes_values() {
        return None;
    }
    let by_yaml = match arg.get_long()? {
        "kind" => "pard",
        "adapt" => "lora",
        "adapt-unit" => "cycles",
        "adapt-learn-from" => "all",
        "adapt-loss" => "forward_kl",
        "lora-on" => "attention",
        "lora-form" => "merged",
        "drafter-dtype" => "bf16",
        _ => "1",
    };
    let first_possible = arg
        .get_possible_values()
        .first()
        .map(|v| v.get_name().to_string());
    Some(first_possible.unwrap_or_else(|| by_yaml.to_string()))
}

#[test]
fn every_flag_of_a_drafter_specification_is_refused_without_a_drafter_and_taken_with_one() {
    use clap::Args;
    let spec_flags =
        sharpdraft_decode::drafter_spec::DrafterSpec::augment_args(clap::Command::new("spec"));
    let mut checked = Vec::new();
    for arg in spec_flags.get_arguments() {
        let long = arg.get_long().expect("every drafting flag is long");
        if long == "drafter" {
            continue;
        }
        let flag = format!("--{long}");
        let value = a_value_it_parses(arg);
        let given: Vec<&str> = std::iter::once(flag.as_str())
            .chain(value.as_deref())
            .collect();
        let refusal = generate_drafter(&given).expect_err(&format!("{given:?} without --drafter"));
        assert!(refusal.contains("--drafter"), "{given:?}: {refusal}");
        // With the drafter, and the switch of the block the flag belongs to, the same value is taken.
        let switch: &[&str] = if long.starts_with("adapt-") || long.starts_with("lora-") {
            &["--adapt", "lora"]
        } else if long.starts_with("retrieval-") {
            &["--retrieval"]
        } else if long.starts_with("drafter-window-") {
            // A window's shape needs the window.
            &["--drafter-window", "8"]
        } else {
            &[]
        };
        let with_drafter = [&["--drafter", "d"][..], switch, &given].concat();
        let spec =
            generate_drafter(&with_drafter).unwrap_or_else(|e| panic!("{with_drafter:?}: {e}"));
        assert!(spec.is_some(), "{with_drafter:?}");
        checked.push(long);
    }
    for block in [
        "kind",
        "draft-len",
        "tree-depth",
        "beta",
        "drafter-window",
        "retrieval",
        "retrieval-chunk",
        "adapt",
        "lora-rank",
        "drafter-dtype",
    ] {
        assert!(checked.contains(&block), "{block} not among {checked:?}");
    }
}
