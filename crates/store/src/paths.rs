//! Paths as configs name them and as commands print them. A config's relative path resolves against
//! the folder of the file that wrote it, without `.` and `..` parts (`experiments/../configs/x.yaml`
//! is `configs/x.yaml`, and a `..` after a symbolic link goes where the OS goes), so that what a run
//! records and prints names each file one way; printed paths are relative to where the command runs
//! when they lie under it.

use std::path::{Component, Path, PathBuf};

/// `path` named without `.` and `..` parts, meaning what the OS means by it: a `..` takes away the
/// part before it, unless that part is a symbolic link, which is resolved first (the OS goes to the
/// link's target and then up, so `link/..` is the folder above the target). A leading `..` of a
/// relative path stays.
pub fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                let last = out.components().next_back();
                match last {
                    Some(Component::Normal(_)) => {
                        let is_link = std::fs::symlink_metadata(&out)
                            .map(|m| m.file_type().is_symlink())
                            .unwrap_or(false);
                        if is_link {
                            if let Ok(target) = out.canonicalize() {
                                out = target;
                            }
                        }
                        out.pop();
                    }
                    // `/..` is `/`.
                    Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                    _ => out.push(".."),
                }
            }
            _ => out.push(part),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// `path` as written inside the folder `dir`: itself when absolute, else `dir/path`, normalised.
pub fn under(dir: &Path, path: &Path) -> PathBuf {
    normalized(&dir.join(path))
}

/// `path` as written in the file `file`: relative paths resolve against the file's folder.
pub fn beside(file: &Path, path: &Path) -> PathBuf {
    under(file.parent().unwrap_or(Path::new(".")), path)
}

/// `path` as a command prints it: the file or folder the OS means by it, read as every check, lock
/// and write reads it ([`crate::output_folder::absolute`]: links first, then `..`), and relative to
/// the working folder when it lies under it.
pub fn shown(path: &Path) -> String {
    let physical = crate::output_folder::absolute(path);
    let cwd = crate::output_folder::absolute(Path::new("."));
    match (physical, cwd) {
        (Ok(path), Ok(cwd)) => match path.strip_prefix(&cwd) {
            Ok(inside) if inside.as_os_str().is_empty() => ".".into(),
            Ok(inside) => inside.display().to_string(),
            Err(_) => path.display().to_string(),
        },
        _ => normalized(path).display().to_string(),
    }
}

/// `path` as a report names it on any machine: from its last `experiments` folder on (the
/// repository's layout), else its file name, so a report rebuilt elsewhere says the same.
pub fn in_repository(path: &Path) -> String {
    let path = normalized(path);
    let parts: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    match parts.iter().rposition(|p| *p == "experiments") {
        Some(at) => parts[at..]
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        None => parts
            .last()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_through_parent_folders_is_named_without_them() {
        assert_eq!(
            beside(
                Path::new("/r/experiments/q.yaml"),
                Path::new("../configs/drafters/../train/t.yaml")
            ),
            PathBuf::from("/r/configs/train/t.yaml")
        );
        assert_eq!(normalized(Path::new("./a/./b/..")), PathBuf::from("a"));
        assert_eq!(
            normalized(Path::new("../a/../../b")),
            PathBuf::from("../../b")
        );
        assert_eq!(normalized(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(normalized(Path::new("a/..")), PathBuf::from("."));
    }

    #[cfg(unix)]
    #[test]
    fn a_parent_folder_after_a_link_is_the_one_the_os_goes_to() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("far/inner")).unwrap();
        std::fs::create_dir_all(root.join("near")).unwrap();
        std::os::unix::fs::symlink(root.join("far/inner"), root.join("near/link")).unwrap();
        std::fs::write(root.join("far/x.yaml"), "x").unwrap();
        let through_link = root.join("near/link/../x.yaml");
        assert_eq!(normalized(&through_link), root.join("far/x.yaml"));
        assert_eq!(
            std::fs::read_to_string(normalized(&through_link)).unwrap(),
            std::fs::read_to_string(&through_link).unwrap()
        );
    }

    #[test]
    fn an_absolute_path_stays_absolute_beside_any_file() {
        assert_eq!(
            beside(Path::new("x/e.yaml"), Path::new("/data/p.jsonl")),
            PathBuf::from("/data/p.jsonl")
        );
        assert_eq!(
            beside(Path::new("e.yaml"), Path::new("p.jsonl")),
            PathBuf::from("p.jsonl")
        );
    }

    #[test]
    fn a_path_under_the_working_folder_prints_relative_to_it() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(shown(&cwd.join("runs/../runs/q")), "runs/q");
        assert_eq!(shown(&cwd), ".");
        assert_eq!(shown(Path::new("/elsewhere/x")), "/elsewhere/x");
    }

    #[test]
    fn a_report_names_its_experiment_from_the_experiments_folder_on() {
        assert_eq!(
            in_repository(Path::new("/work/main/experiments/quickstart.yaml")),
            "experiments/quickstart.yaml"
        );
        assert_eq!(
            in_repository(Path::new("/home/u/sd/experiments/../experiments/x/y.yaml")),
            "experiments/x/y.yaml"
        );
        assert_eq!(in_repository(Path::new("/tmp/mine.yaml")), "mine.yaml");
    }
}
