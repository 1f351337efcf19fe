//! `scripts/kernel-ab.sh` (attention's bench at a revision and at the tree, alternated) refuses what it
//! cannot run before it builds anything, naming the argument.

use std::path::PathBuf;
use std::process::Command;

fn kernel_ab(args: &[&str]) -> (i32, String) {
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(project.join("scripts/kernel-ab.sh"))
        .args(args)
        .output()
        .expect("bash runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kernel_ab_refuses_a_round_count_that_is_not_a_positive_integer() {
    for rounds in ["0", "00", "four", "-1"] {
        let (code, stderr) = kernel_ab(&["HEAD", rounds]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(&format!("not '{rounds}'")), "{stderr}");
    }
}

#[test]
fn kernel_ab_refuses_a_revision_this_repository_does_not_hold() {
    let (code, stderr) = kernel_ab(&["no-such-revision-anywhere"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no commit 'no-such-revision-anywhere'"),
        "{stderr}"
    );
    // An option, or the name the working tree's own binaries take.
    for not_a_revision in ["--help", "tree"] {
        let (code, stderr) = kernel_ab(&[not_a_revision]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(&format!("'{not_a_revision}' is not a revision name")),
            "{stderr}"
        );
    }
}

#[test]
fn kernel_ab_without_a_revision_says_how_to_call_it() {
    let (code, stderr) = kernel_ab(&[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("usage: scripts/kernel-ab.sh REVISION [ROUNDS]"),
        "{stderr}"
    );
}
