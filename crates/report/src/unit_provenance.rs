//! Where each unit's rows come from, as the report prints it: the revision and whether its tree was
//! clean, the kernel form and threads, the target's dtype, and per drafter the digest of the weights
//! it ran and their dtype, per method the digest of its schedule. A unit run from a checkout with
//! uncommitted changes, or under a drafter digest the run's other units did not use, is flagged: its
//! rows are not what the revision and the shipped files say.

use crate::grid::Unit;
use crate::records::Provenance;
use crate::samples::RequestSample;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One unit's provenance, gathered from its requests.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitProvenance {
    pub unit: Unit,
    pub provenance: Provenance,
    /// Drafter name -> the (weights digest, dtype) its arms ran (empty digests: not recorded).
    pub drafters: BTreeMap<String, BTreeSet<(String, String)>>,
    /// Method -> its schedule's digest (methods that read none are left out).
    pub schedules: BTreeMap<String, String>,
}

/// Each unit of `samples` once, in unit order.
pub fn of_samples(samples: &[RequestSample]) -> Vec<UnitProvenance> {
    let mut units: BTreeMap<Unit, UnitProvenance> = BTreeMap::new();
    for s in samples {
        let entry = units
            .entry(s.unit.clone())
            .or_insert_with(|| UnitProvenance {
                unit: s.unit.clone(),
                provenance: s.provenance.clone(),
                drafters: BTreeMap::new(),
                schedules: BTreeMap::new(),
            });
        if let Some(drafter) = &s.arm.drafter {
            entry.drafters.entry(drafter.clone()).or_default().insert((
                s.inputs.drafter_digest.clone(),
                s.inputs.drafter_dtype.clone(),
            ));
            if !s.inputs.schedule_digest.is_empty() {
                entry
                    .schedules
                    .insert(s.arm.method.clone(), s.inputs.schedule_digest.clone());
            }
        }
    }
    units.into_values().collect()
}

/// What is wrong with a unit's provenance, as words for the table (empty: nothing).
pub fn flags(unit: &UnitProvenance, usual_digests: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    if unit.provenance.dirty_tree() {
        out.push("run on a tree with uncommitted changes".to_string());
    }
    for (drafter, runs) in &unit.drafters {
        let usual = usual_digests.get(drafter);
        for (digest, _) in runs {
            if !digest.is_empty() && usual.is_some_and(|u| u != digest) {
                out.push(format!(
                    "drafter {drafter} ran weights {} where the run's other units ran {}",
                    short(digest),
                    short(usual.map_or("", String::as_str))
                ));
            }
        }
    }
    out
}

/// Each drafter's most common recorded weights digest over `units` (ties: the smallest digest).
pub fn usual_digests(units: &[UnitProvenance]) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for u in units {
        for (drafter, runs) in &u.drafters {
            for (digest, _) in runs.iter().filter(|(d, _)| !d.is_empty()) {
                *counts
                    .entry(drafter)
                    .or_default()
                    .entry(digest)
                    .or_default() += 1;
            }
        }
    }
    counts
        .into_iter()
        .filter_map(|(drafter, digests)| {
            let most = digests.values().copied().max()?;
            let digest = digests.into_iter().find(|(_, n)| *n == most)?.0;
            Some((drafter.to_string(), digest.to_string()))
        })
        .collect()
}

/// The first 12 hex digits of a digest, `-` when none was recorded.
fn short(digest: &str) -> String {
    if digest.is_empty() {
        "-".into()
    } else {
        digest.chars().take(12).collect()
    }
}

/// The report's provenance table, one line per unit, with its flags; `None` without units.
pub fn table(units: &[UnitProvenance]) -> Option<String> {
    if units.is_empty() {
        return None;
    }
    let usual = usual_digests(units);
    let mut out = String::from(
        "Each unit's revision (`+dirty`: its checkout had uncommitted changes), kernel form and \
         threads, the target's dtype, the digest of each drafter's weights as the run sealed them \
         with the dtype they ran in, and each method's schedule by the sha256 of its file (first 12 \
         hex digits; `-`: not recorded by the version that ran the unit).\n\n\
         | unit | revision | kernel, threads | dtype | drafter weights (dtype) | schedules | flags |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for u in units {
        let p = &u.provenance;
        let drafters = u
            .drafters
            .iter()
            .flat_map(|(name, runs)| {
                runs.iter().map(move |(digest, dtype)| {
                    let dtype = if dtype.is_empty() { "-" } else { dtype };
                    format!("{name}: {} ({dtype})", short(digest))
                })
            })
            .collect::<Vec<_>>()
            .join("; ");
        let schedules = u
            .schedules
            .iter()
            .map(|(method, digest)| format!("{method}: {}", short(digest)))
            .collect::<Vec<_>>()
            .join("; ");
        let setting = match p.timing_setting() {
            Some((kernel, threads, _)) => format!("{kernel}, {threads}"),
            None => "-".into(),
        };
        let flags = flags(u, &usual);
        let _ = writeln!(
            out,
            "| {} | {} | {setting} | {} | {} | {} | {} |",
            u.unit.id(),
            p.git_revision,
            p.dtype,
            if drafters.is_empty() {
                "-".into()
            } else {
                drafters
            },
            if schedules.is_empty() {
                "-".into()
            } else {
                schedules
            },
            if flags.is_empty() {
                String::new()
            } else {
                format!("**{}**", flags.join("; "))
            },
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(context: usize, revision: &str, digest: &str) -> UnitProvenance {
        UnitProvenance {
            unit: Unit {
                workload: "w".into(),
                context,
                seed: 0,
                repeat: 0,
            },
            provenance: Provenance {
                config_hash: "h".into(),
                git_revision: revision.into(),
                machine: "m".into(),
                device: "cpu".into(),
                dtype: "f32".into(),
                sharpdraft_version: "0".into(),
                started_unix: 0,
                kernel: "avx2".into(),
                threads: 2,
            },
            drafters: BTreeMap::from([(
                "d".to_string(),
                BTreeSet::from([(digest.to_string(), "bf16".to_string())]),
            )]),
            schedules: BTreeMap::new(),
        }
    }

    #[test]
    fn a_unit_run_on_a_dirty_tree_is_flagged() {
        let units = [unit(256, "abc", "d1"), unit(512, "abc+dirty", "d1")];
        let usual = usual_digests(&units);
        assert!(flags(&units[0], &usual).is_empty());
        assert_eq!(
            flags(&units[1], &usual),
            vec!["run on a tree with uncommitted changes".to_string()]
        );
        let table = table(&units).unwrap();
        assert!(
            table.contains("**run on a tree with uncommitted changes**"),
            "{table}"
        );
    }

    #[test]
    fn a_unit_resumed_after_a_dirty_piece_is_flagged_too() {
        let units = [unit(256, "abc+dirty, then def", "d1")];
        assert!(!flags(&units[0], &usual_digests(&units)).is_empty());
    }

    #[test]
    fn a_unit_under_another_drafter_digest_than_the_rest_is_flagged() {
        let units = [
            unit(256, "abc", "aaaa"),
            unit(512, "abc", "aaaa"),
            unit(8100, "abc", "bbbb"),
        ];
        let usual = usual_digests(&units);
        assert!(flags(&units[0], &usual).is_empty());
        let odd = flags(&units[2], &usual);
        assert_eq!(odd.len(), 1);
        assert!(
            odd[0].contains("bbbb") && odd[0].contains("aaaa"),
            "{odd:?}"
        );
    }

    #[test]
    fn units_of_an_older_version_print_dashes_and_no_flag() {
        let units = [unit(256, "abc", ""), unit(512, "abc", "")];
        let usual = usual_digests(&units);
        assert!(usual.is_empty());
        assert!(flags(&units[1], &usual).is_empty());
        assert!(table(&units).unwrap().contains("d: - (bf16)"));
    }
}
